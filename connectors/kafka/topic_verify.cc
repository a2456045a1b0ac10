#include "connectors/kafka/topic_verify.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/json.h"

namespace sluice::connectors::kafka {
namespace {

bool SameJson(const std::string& a, const std::string& b) {
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

Status CompareHistory(const std::string& topic, const ReadRecords& read, const std::vector<ChangeEvent>& history,
                      std::vector<Difference>& differences) {
  // Every record by (entity, version), with where it is in the topic.
  struct Record {
    ChangeEvent event;
    int32_t topic_partition = 0;
    int64_t offset = 0;
  };
  std::map<std::pair<std::string, uint64_t>, std::vector<Record>> records;
  RETURN_IF_ERROR(read([&](ChangeEvent&& e, int32_t topic_partition, int64_t offset) {
    auto key = std::make_pair(e.entity_id, e.version);
    records[std::move(key)].push_back(Record{std::move(e), topic_partition, offset});
  }));
  const auto where = [&topic](const Record& r) {
    return topic + "[" + std::to_string(r.topic_partition) + "]@" + std::to_string(r.offset);
  };
  const auto describe = [](const ChangeEvent& e) {
    return "version " + std::to_string(e.version) + ", partition " + std::to_string(e.partition) + " event " +
           std::to_string(e.event_id) + ", command " + e.command_name + " id " + e.command_id +
           (e.deleted ? ", deleted" : "");
  };
  for (const ChangeEvent& e : history) {
    auto it = records.find({e.entity_id, e.version});
    if (it == records.end() || it->second.empty()) {
      differences.push_back({Difference::Kind::kMissing, e.entity_id, "no record of " + describe(e)});
      continue;
    }
    std::vector<Record>& found = it->second;
    // The record of this event: the one with its event_id, else the first.
    auto match = std::find_if(found.begin(), found.end(), [&](const Record& r) {
      return r.event.partition == e.partition && r.event.event_id == e.event_id;
    });
    if (match == found.end()) match = found.begin();
    const ChangeEvent& r = match->event;
    if (r.partition != e.partition || r.event_id != e.event_id || r.command_id != e.command_id ||
        r.command_name != e.command_name || r.deleted != e.deleted || (!e.deleted && !SameJson(r.state, e.state))) {
      differences.push_back({Difference::Kind::kContentMismatch, e.entity_id,
                             where(*match) + " holds " + describe(r) + (SameJson(r.state, e.state) ? "" : " with another state") +
                                 "; storage has " + describe(e)});
    }
    for (const Record& extra : found) {
      if (&extra == &*match) continue;
      const bool same = extra.event.event_id == e.event_id && extra.event.command_id == e.command_id;
      differences.push_back({same ? Difference::Kind::kDuplicate : Difference::Kind::kPhantom, e.entity_id,
                             where(extra) + (same ? " repeats " : " is no event of storage: ") +
                                 describe(extra.event)});
    }
    records.erase(it);
  }
  for (const auto& [key, left] : records) {
    for (const Record& r : left) {
      differences.push_back({Difference::Kind::kPhantom, key.first,
                             where(r) + " is no event of storage: " + describe(r.event)});
    }
  }
  return Status::Ok();
}

}  // namespace sluice::connectors::kafka
