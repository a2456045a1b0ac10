#include "connectors/kafka/topic_verify.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/json.h"

namespace sluice::connectors::kafka {
namespace {

// The same JSON value. The sink copies storage's text into its records,
// so the bytes are almost always equal and nothing is parsed; a record's
// state that is not JSON differs from any state.
bool SameJson(const std::string& a, const std::string& b) {
  if (a == b) return true;
  auto ja = ParseJson(a);
  auto jb = ParseJson(b);
  return ja.ok() && jb.ok() && *ja == *jb;
}

}  // namespace

Status CompareLatest(const std::string& topic, const ReadRecords& read, const std::vector<EntitySnapshot>& truth,
                     std::vector<Difference>& differences) {
  struct Latest {
    uint64_t version = 0;
    bool deleted = false;
    std::string state;
    uint32_t repeated = 0;  // records whose version was not above the previous one
  };
  std::map<std::string, Latest> latest;  // per entity
  RETURN_IF_ERROR(read([&](ChangeEvent&& e, int32_t, int64_t) {
    Latest& l = latest[e.entity_id];
    if (e.version <= l.version) {
      ++l.repeated;
      return;
    }
    l.version = e.version;
    l.deleted = e.deleted;
    l.state = std::move(e.state);
  }));
  for (const EntitySnapshot& s : truth) {
    const auto it = latest.find(s.entity_id);
    if (it == latest.end()) {
      if (!s.deleted) differences.push_back({Difference::Kind::kMissing, s.entity_id, "no record in " + topic});
      continue;
    }
    const Latest& l = it->second;
    if (l.repeated > 0) {
      differences.push_back({Difference::Kind::kExtra, s.entity_id,
                             std::to_string(l.repeated) + " record(s) repeat or go back in version"});
    }
    if (l.version != s.version || l.deleted != s.deleted) {
      differences.push_back({Difference::Kind::kVersionMismatch, s.entity_id,
                             "topic has version " + std::to_string(l.version) + (l.deleted ? " (deleted)" : "") +
                                 ", storage has " + std::to_string(s.version) + (s.deleted ? " (deleted)" : "")});
    } else if (!s.deleted && !SameJson(l.state, s.state)) {
      differences.push_back({Difference::Kind::kContentMismatch, s.entity_id,
                             "the state of version " + std::to_string(s.version) + " differs"});
    }
    latest.erase(it);
  }
  for (const auto& [id, l] : latest) {
    differences.push_back({Difference::Kind::kExtra, id, "in " + topic + " but not in storage"});
  }
  return Status::Ok();
}

namespace {

// Events of a source partition held at once, shared by the source
// partitions of one topic partition (at least kMinPage each).
constexpr uint32_t kPage = 10000;
constexpr uint32_t kMinPage = 100;
// Event ids per lookup of records behind their place.
constexpr size_t kLookup = 1000;

std::string Describe(const ChangeEvent& e) {
  return "version " + std::to_string(e.version) + ", partition " + std::to_string(e.partition) + " event " +
         std::to_string(e.event_id) + ", command " + e.command_name + " id " + e.command_id +
         (e.deleted ? ", deleted" : "");
}

// A record of the topic, where it is.
struct Record {
  ChangeEvent event;
  int32_t topic_partition = 0;
  int64_t offset = 0;
};

// One source partition's side of the merge: its events a page at a time.
class Cursor {
 public:
  Cursor(HistoryPages& history, uint32_t partition, uint32_t page)
      : history_(history), partition_(partition), page_(page) {}

  // The next event not yet matched or passed; nullptr at the end.
  Result<const ChangeEvent*> Head() {
    if (at_ == events_.size() && !done_) {
      ASSIGN_OR_RETURN(events_, history_.Next(partition_, page_));
      at_ = 0;
      done_ = events_.empty();
    }
    return at_ < events_.size() ? &events_[at_] : nullptr;
  }
  // The head had its record.
  void Matched() { last_ = events_[at_++].event_id; }
  // The head has no record before a later event's: missing, unless its
  // record comes later (out of order).
  void Pass() {
    const ChangeEvent& e = events_[at_++];
    last_ = e.event_id;
    passed_.emplace(e.event_id, Difference{Difference::Kind::kMissing, e.entity_id, "no record of " + Describe(e)});
  }
  // The highest event id matched or passed: a record at or below it is
  // behind its place.
  uint64_t last() const { return last_; }
  std::map<uint64_t, Difference>& passed() { return passed_; }

 private:
  HistoryPages& history_;
  const uint32_t partition_;
  const uint32_t page_;
  std::vector<ChangeEvent> events_;
  size_t at_ = 0;
  bool done_ = false;
  uint64_t last_ = 0;
  std::map<uint64_t, Difference> passed_;  // event_id -> its missing difference, each a difference
};

class HistoryMerge {
 public:
  HistoryMerge(const std::string& topic, HistoryPages& history, std::vector<Difference>& differences)
      : topic_(topic), history_(history), differences_(differences) {}

  std::string Where(const Record& r) const {
    return topic_ + "[" + std::to_string(r.topic_partition) + "]@" + std::to_string(r.offset);
  }

  void Phantom(const Record& r, const std::string& why = "") {
    differences_.push_back({Difference::Kind::kPhantom, r.event.entity_id,
                            Where(r) + " is no event of storage: " + Describe(r.event) + why});
  }

  // Whether `r` is the record of `e` (same event_id): false when it holds
  // another entity or version (then it is a phantom, and e still has no
  // record).
  bool OfEvent(const Record& r, const ChangeEvent& e) {
    if (r.event.entity_id != e.entity_id || r.event.version != e.version) {
      Phantom(r, "; storage's event " + std::to_string(e.event_id) + " is " + e.entity_id + " " + Describe(e));
      return false;
    }
    return true;
  }

  // What differs between the record of `e` and `e` (command or state),
  // empty when nothing does.
  static std::string ContentDiffers(const Record& r, const ChangeEvent& e) {
    const ChangeEvent& got = r.event;
    const bool same_state = e.deleted || SameJson(got.state, e.state);
    if (got.command_id == e.command_id && got.command_name == e.command_name && got.deleted == e.deleted &&
        same_state) {
      return "";
    }
    return Describe(got) + (same_state ? "" : " with another state") + "; storage has " + Describe(e);
  }

  // The record of `e` in its place: a content mismatch when its command or
  // state differ.
  bool Match(const Record& r, const ChangeEvent& e) {
    if (!OfEvent(r, e)) return false;
    if (std::string differs = ContentDiffers(r, e); !differs.empty()) {
      differences_.push_back({Difference::Kind::kContentMismatch, e.entity_id, Where(r) + " holds " + differs});
    }
    return true;
  }

  // A record of source partition p, in topic order. In place, it is the
  // head's record. Ahead of the head, it is looked up: its event, and the
  // events before it have no record (yet); none (or another entity or
  // version there), a phantom. Behind (at or below the last event matched
  // or passed), it is a difference whatever it is, kept in `behind` for
  // lookups of kLookup at a time.
  Status Add(Record&& r, Cursor& cursor, std::vector<Record>& behind) {
    const uint64_t id = r.event.event_id;
    const uint32_t p = r.event.partition;
    if (id <= cursor.last()) {
      behind.push_back(std::move(r));
      // Settled by what is behind the cursor, which no later record changes.
      if (behind.size() >= kLookup) return Resolve(p, cursor, behind);
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(const ChangeEvent* head, cursor.Head());
    if (head != nullptr && head->event_id < id) {
      ASSIGN_OR_RETURN(std::vector<ChangeEvent> found, history_.Of(p, {id}));
      if (found.empty() || found[0].entity_id != r.event.entity_id || found[0].version != r.event.version) {
        Phantom(r);  // not that event: the events before it keep their chance
        return Status::Ok();
      }
      while (head != nullptr && head->event_id < id) {
        cursor.Pass();
        ASSIGN_OR_RETURN(head, cursor.Head());
      }
    }
    if (head == nullptr || head->event_id != id) {
      Phantom(r);  // between two events, or past the last
    } else if (Match(r, *head)) {
      cursor.Matched();
    }
    return Status::Ok();
  }

  // Records behind their place, in topic order: each a passed event's, out
  // of order; a repeat of its event's record (duplicate); or of no event
  // (phantom). Settled, they go.
  Status Resolve(uint32_t p, Cursor& cursor, std::vector<Record>& behind) {
    for (size_t from = 0; from < behind.size(); from += kLookup) {
      const size_t to = std::min(behind.size(), from + kLookup);
      std::vector<uint64_t> ids;
      for (size_t i = from; i < to; ++i) ids.push_back(behind[i].event.event_id);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      ASSIGN_OR_RETURN(std::vector<ChangeEvent> found, history_.Of(p, ids));
      std::map<uint64_t, const ChangeEvent*> by_id;
      for (const ChangeEvent& e : found) by_id[e.event_id] = &e;
      for (size_t i = from; i < to; ++i) {
        const Record& r = behind[i];
        const auto it = by_id.find(r.event.event_id);
        if (it == by_id.end()) {
          Phantom(r);
        } else if (cursor.passed().count(r.event.event_id) != 0) {
          // One difference for the record: out of order, and what else
          // differs in it.
          if (OfEvent(r, *it->second)) {
            cursor.passed().erase(r.event.event_id);
            const std::string differs = ContentDiffers(r, *it->second);
            differences_.push_back({Difference::Kind::kOutOfOrder, r.event.entity_id,
                                    Where(r) + " holds " + Describe(r.event) +
                                        " after the record of a later event of its partition" +
                                        (differs.empty() ? "" : "; it also differs: " + differs)});
          }
        } else if (r.event.entity_id == it->second->entity_id && r.event.version == it->second->version &&
                   r.event.command_id == it->second->command_id) {
          differences_.push_back({Difference::Kind::kDuplicate, r.event.entity_id,
                                  Where(r) + " repeats " + Describe(r.event)});
        } else {
          Phantom(r);
        }
      }
    }
    behind.clear();
    return Status::Ok();
  }

  void Missing(Cursor& cursor) {
    for (auto& [id, d] : cursor.passed()) differences_.push_back(std::move(d));
    cursor.passed().clear();
  }

 private:
  const std::string& topic_;
  HistoryPages& history_;
  std::vector<Difference>& differences_;
};

}  // namespace

Status CompareHistory(const std::string& topic, int32_t topic_partitions,
                      const std::function<int32_t(uint32_t)>& topic_partition_of, const ReadTopicPartition& read,
                      HistoryPages& history, std::vector<Difference>& differences) {
  HistoryMerge merge(topic, history, differences);
  for (int32_t t = 0; t < topic_partitions; ++t) {
    std::vector<uint32_t> sources;
    for (uint32_t p = 0; p < history.partitions(); ++p) {
      if (topic_partition_of(p) == t) sources.push_back(p);
    }
    const uint32_t page =
        std::max(kMinPage, kPage / static_cast<uint32_t>(std::max<size_t>(1, sources.size())));
    std::map<uint32_t, Cursor> cursors;
    for (const uint32_t p : sources) cursors.try_emplace(p, history, p, page);
    std::map<uint32_t, std::vector<Record>> behind;  // per source partition, in topic order
    Status failed = Status::Ok();
    RETURN_IF_ERROR(read(t, [&](ChangeEvent&& e, int32_t topic_partition, int64_t offset) {
      if (!failed.ok()) return;  // the rest of the partition is read, and ignored
      Record r{std::move(e), topic_partition, offset};
      const auto c = cursors.find(r.event.partition);
      if (c == cursors.end()) {
        merge.Phantom(r, r.event.partition < history.partitions()
                             ? " (its partition's records are in topic partition " +
                                   std::to_string(topic_partition_of(r.event.partition)) + ")"
                             : "");
        return;
      }
      const uint32_t p = r.event.partition;
      failed = merge.Add(std::move(r), c->second, behind[p]);
    }));
    RETURN_IF_ERROR(failed);
    for (auto& [p, cursor] : cursors) {
      for (;;) {
        ASSIGN_OR_RETURN(const ChangeEvent* next, cursor.Head());
        if (next == nullptr) break;
        cursor.Pass();
      }
      if (const auto b = behind.find(p); b != behind.end()) RETURN_IF_ERROR(merge.Resolve(p, cursor, b->second));
      merge.Missing(cursor);
    }
  }
  return Status::Ok();
}

}  // namespace sluice::connectors::kafka
