#include "archive/archive_reader.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "sql/schema.h"

namespace sluice::archive {

// ---- SegmentSource ----

uint64_t DecodedRowBytes(const sql::EventRow& row) {
  static const size_t kInline = std::string().capacity();  // held in the string itself
  constexpr uint64_t kAllocatorHeader = 16;
  uint64_t bytes = sizeof(sql::EventRow);
  for (const std::string* s :
       {&row.entity_id, &row.command_id, &row.command_name, &row.request, &row.response, &row.state, &row.delta}) {
    if (s->capacity() > kInline) bytes += s->capacity() + 1 + kAllocatorHeader;
  }
  return bytes;
}

SegmentSource::SegmentSource(std::shared_ptr<objectstore::ObjectStore> store, uint64_t cache_bytes)
    : store_(std::move(store)), cache_bytes_(cache_bytes) {}

uint64_t SegmentSource::fetches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetches_;
}

uint64_t SegmentSource::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

Result<std::shared_ptr<const Segment>> SegmentSource::Get(const sql::SegmentRecord& record) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(record.key); it != cache_.end()) {
      order_.splice(order_.begin(), order_, it->second.used);
      return it->second.segment;
    }
  }
  const std::string where = "segment " + record.key + " of " + store_->Describe();
  auto bytes = store_->Get(record.key);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kNotFound) {
      return Internal(where + " is missing, though the manifest (sluice_archive_segments) names it");
    }
    return bytes.status().WithContext(where);
  }
  if (bytes->size() != record.bytes || Sha256Hex(*bytes) != record.sha256) {
    return Internal(where + " does not match the manifest (" + std::to_string(bytes->size()) + " bytes, manifest " +
                    std::to_string(record.bytes) + "; or its SHA-256 differs): the archive is damaged");
  }
  ASSIGN_OR_RETURN(Segment decoded, DecodeSegment(*bytes));
  if (decoded.header.entity_type != record.entity_type || decoded.header.partition != record.partition ||
      decoded.header.first_event_id != record.first_event_id || decoded.header.last_event_id != record.last_event_id) {
    return Internal(where + " holds another range than the manifest says");
  }
  uint64_t cost = sizeof(Segment);
  for (const auto& r : decoded.rows) cost += DecodedRowBytes(r);
  auto segment = std::make_shared<const Segment>(std::move(decoded));
  std::lock_guard<std::mutex> lock(mu_);
  ++fetches_;
  if (cost > cache_bytes_ || cache_.count(record.key)) return std::shared_ptr<const Segment>(segment);
  while (cached_bytes_ + cost > cache_bytes_ && !order_.empty()) {
    const auto victim = cache_.find(order_.back());
    cached_bytes_ -= victim->second.bytes;
    cache_.erase(victim);
    order_.pop_back();
  }
  order_.push_front(record.key);
  cache_[record.key] = Cached{segment, cost, order_.begin()};
  cached_bytes_ += cost;
  return std::shared_ptr<const Segment>(segment);
}

namespace {

using sql::EventLog;
using sql::EventRow;
using Key = std::pair<std::string, uint32_t>;

class ArchivedEventLog : public EventLog {
 public:
  ArchivedEventLog(std::unique_ptr<EventLog> hot, std::unique_ptr<sql::ArchiveTable> archive,
                   std::shared_ptr<SegmentSource> segments, std::shared_ptr<const std::set<std::string>> types)
      : hot_(std::move(hot)), archive_(std::move(archive)), segments_(std::move(segments)), types_(std::move(types)) {}

  bool healthy() const override { return hot_->healthy(); }
  Status Open() override { return hot_->Open(); }

  Result<uint64_t> Head(const std::string& type, uint32_t partition) override { return hot_->Head(type, partition); }
  Result<std::map<uint32_t, uint64_t>> Heads(const std::string& type,
                                             const std::vector<uint32_t>& partitions) override {
    return hot_->Heads(type, partitions);
  }
  Result<std::map<uint32_t, double>> SecondsSinceCommit(
      const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& events) override {
    return hot_->SecondsSinceCommit(type, events);  // a stub keeps committed_at
  }

  Result<std::map<uint32_t, std::vector<EventRow>>> ReadAfter(const std::string& type,
                                                              const std::vector<std::pair<uint32_t, uint64_t>>& from,
                                                              uint32_t limit, Columns columns) override {
    if (!Archived(type)) return hot_->ReadAfter(type, from, limit, columns);
    RETURN_IF_ERROR(KnowWatermarks(type, from));
    std::map<uint32_t, std::vector<EventRow>> out;
    std::vector<std::pair<uint32_t, uint64_t>> plain;
    for (const auto& [p, after] : from) {
      const uint64_t wm = watermarks_[{type, p}];
      if (after >= wm) {
        plain.emplace_back(p, after);
        continue;
      }
      // Below the watermark every event is in a segment: no need to read its stub.
      ASSIGN_OR_RETURN(auto list, Range(type, p, after, wm, limit));
      if (list.size() < limit) {
        ASSIGN_OR_RETURN(auto more, hot_->ReadAfter(type, {{p, wm}}, limit - static_cast<uint32_t>(list.size()),
                                                    columns));
        RETURN_IF_ERROR(Fill(type, p, more[p]));
        for (auto& r : more[p]) list.push_back(std::move(r));
      }
      out[p] = std::move(list);
    }
    if (!plain.empty()) {
      ASSIGN_OR_RETURN(auto hot, hot_->ReadAfter(type, plain, limit, columns));
      for (auto& [p, list] : hot) {
        RETURN_IF_ERROR(Fill(type, p, list));
        out[p] = std::move(list);
      }
    }
    for (auto& [p, list] : out) {
      for (auto& r : list) {
        r.expected_version.reset();
        if (columns == Columns::kView) r.request.clear(), r.response.clear();
      }
    }
    return out;
  }

  Result<std::vector<EventRow>> AtVersions(const std::string& type, uint32_t partition,
                                           const std::vector<std::pair<std::string, uint64_t>>& keys) override {
    ASSIGN_OR_RETURN(auto rows, hot_->AtVersions(type, partition, keys));
    RETURN_IF_ERROR(Fill(type, partition, rows));
    for (auto& r : rows) {  // the columns AtVersions promises
      r.request.clear(), r.response.clear(), r.command_id.clear(), r.command_name.clear(), r.delta.clear();
    }
    return rows;
  }
  Result<std::vector<EventRow>> LatestOf(const std::string& type, uint32_t partition,
                                         const std::vector<std::string>& ids) override {
    return hot_->LatestOf(type, partition, ids);
  }
  Result<std::vector<EventRow>> LatestAfter(const std::string& type, uint32_t partition, const std::string& after_id,
                                            uint32_t limit) override {
    return hot_->LatestAfter(type, partition, after_id, limit);
  }
  Result<std::map<std::string, uint64_t>> LatestVersions(const std::string& type, uint32_t partition,
                                                         const std::vector<std::string>& ids) override {
    return hot_->LatestVersions(type, partition, ids);
  }
  Result<std::vector<EventRow>> ByIds(const std::string& type, uint32_t partition,
                                      const std::vector<uint64_t>& event_ids) override {
    ASSIGN_OR_RETURN(auto rows, hot_->ByIds(type, partition, event_ids));
    RETURN_IF_ERROR(Fill(type, partition, rows));
    for (auto& r : rows) r.expected_version.reset();
    return rows;
  }
  Result<std::vector<EventRow>> History(const std::string& type, uint32_t partition, const std::string& entity_id,
                                        uint64_t after_version, uint32_t limit) override {
    ASSIGN_OR_RETURN(auto rows, hot_->History(type, partition, entity_id, after_version, limit));
    RETURN_IF_ERROR(Fill(type, partition, rows));
    for (auto& r : rows) r.expected_version.reset();
    return rows;
  }
  Result<std::vector<EventRow>> FindCommands(const std::string& type, uint32_t partition,
                                             const std::vector<std::pair<std::string, std::string>>& commands) override {
    ASSIGN_OR_RETURN(auto rows, hot_->FindCommands(type, partition, commands));
    RETURN_IF_ERROR(Fill(type, partition, rows));
    for (auto& r : rows) r.state.clear(), r.delta.clear();  // the columns FindCommands promises
    return rows;
  }
  std::unique_ptr<sql::EventAppend> NewAppend(const std::string& type, uint32_t partition) override {
    return hot_->NewAppend(type, partition);
  }
  Status Append(sql::EventAppend& append) override { return hot_->Append(append); }
  Status Stage(sql::EventAppend& append) override { return hot_->Stage(append); }
  Status Commit() override { return hot_->Commit(); }
  void Rollback() override { hot_->Rollback(); }

 private:
  bool Archived(const std::string& type) const { return types_->count(type) != 0; }

  // Learns the watermarks of the partitions not known yet (one query, once:
  // afterwards a stub met in a read moves them on).
  Status KnowWatermarks(const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& from) {
    std::vector<uint32_t> unknown;
    for (const auto& [p, after] : from) {
      if (!watermarks_.count({type, p})) unknown.push_back(p);
    }
    if (unknown.empty()) return Status::Ok();
    ASSIGN_OR_RETURN(auto got, archive_->Watermarks(type, unknown));
    for (const auto& [p, wm] : got) watermarks_[{type, p}] = wm;
    return Status::Ok();
  }

  // Replaces each stub of `rows` by its event from the archive (a stub
  // below an old watermark makes this log read the manifest again).
  Status Fill(const std::string& type, uint32_t partition, std::vector<EventRow>& rows) {
    std::vector<uint64_t> ids;
    for (const auto& r : rows) {
      if (r.archived) ids.push_back(r.event_id);
    }
    if (ids.empty()) return Status::Ok();
    ASSIGN_OR_RETURN(auto archived, FromSegments(type, partition, ids));
    std::map<uint64_t, EventRow*> by_id;
    for (auto& r : archived) by_id[r.event_id] = &r;
    for (auto& r : rows) {
      if (!r.archived) continue;
      const auto it = by_id.find(r.event_id);
      if (it == by_id.end()) {
        return Internal("event " + std::to_string(r.event_id) + " of " + sql::EventTableName(type, partition) +
                        " is archived, but no segment of the manifest holds it");
      }
      r = std::move(*it->second);
    }
    return Status::Ok();
  }

  // The manifest of (type, partition), read again when it may lack `event_id`.
  Result<const std::vector<sql::SegmentRecord>*> SegmentsCovering(const std::string& type, uint32_t partition,
                                                                   uint64_t event_id) {
    auto& list = manifests_[{type, partition}];
    if (list.empty() || list.back().last_event_id < event_id) {
      ASSIGN_OR_RETURN(list, archive_->Segments(type, partition));
      if (!list.empty()) {
        auto& wm = watermarks_[{type, partition}];
        wm = std::max(wm, list.back().last_event_id);
      }
    }
    return &list;
  }

  // The archived events after `after`, at most `upto`, at most `limit`.
  Result<std::vector<EventRow>> Range(const std::string& type, uint32_t partition, uint64_t after, uint64_t upto,
                                      uint32_t limit) {
    ASSIGN_OR_RETURN(auto* list, SegmentsCovering(type, partition, upto));
    std::vector<EventRow> out;
    auto it = std::upper_bound(list->begin(), list->end(), after,
                               [](uint64_t id, const sql::SegmentRecord& s) { return id < s.last_event_id; });
    for (; it != list->end() && it->first_event_id <= upto && out.size() < limit; ++it) {
      ASSIGN_OR_RETURN(auto segment, segments_->Get(*it));
      for (const auto& r : segment->rows) {
        if (r.event_id <= after) continue;
        if (r.event_id > upto || out.size() >= limit) break;
        out.push_back(r);
      }
    }
    return out;
  }

  // The archived events with these event_ids, in event_id order.
  Result<std::vector<EventRow>> FromSegments(const std::string& type, uint32_t partition, std::vector<uint64_t> ids) {
    std::vector<EventRow> out;
    if (ids.empty()) return out;
    std::sort(ids.begin(), ids.end());
    ASSIGN_OR_RETURN(auto* list, SegmentsCovering(type, partition, ids.back()));
    for (auto id = ids.begin(); id != ids.end();) {
      auto seg = std::upper_bound(list->begin(), list->end(), *id,
                                  [](uint64_t v, const sql::SegmentRecord& s) { return v < s.first_event_id; });
      if (seg == list->begin() || std::prev(seg)->last_event_id < *id) {
        ++id;  // in no segment
        continue;
      }
      const sql::SegmentRecord& record = *std::prev(seg);
      ASSIGN_OR_RETURN(auto segment, segments_->Get(record));
      for (; id != ids.end() && *id <= record.last_event_id; ++id) {
        const auto row = std::lower_bound(segment->rows.begin(), segment->rows.end(), *id,
                                          [](const EventRow& r, uint64_t v) { return r.event_id < v; });
        if (row != segment->rows.end() && row->event_id == *id) out.push_back(*row);
      }
    }
    return out;
  }

  const std::unique_ptr<EventLog> hot_;
  const std::unique_ptr<sql::ArchiveTable> archive_;
  const std::shared_ptr<SegmentSource> segments_;
  const std::shared_ptr<const std::set<std::string>> types_;
  std::map<Key, uint64_t> watermarks_;
  std::map<Key, std::vector<sql::SegmentRecord>> manifests_;
};

}  // namespace

ArchivedStorage::ArchivedStorage(std::shared_ptr<sql::Storage> hot, std::shared_ptr<SegmentSource> segments,
                                 std::set<std::string> archived_types)
    : hot_(std::move(hot)), segments_(std::move(segments)), archived_types_(std::make_shared<const std::set<std::string>>(std::move(archived_types))) {}

std::unique_ptr<sql::EventLog> ArchivedStorage::OpenEventLog() {
  return std::make_unique<ArchivedEventLog>(hot_->OpenEventLog(), hot_->OpenArchive(), segments_, archived_types_);
}

}  // namespace sluice::archive
