#include "archive/archiver.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "archive/segment.h"
#include "core/failpoint.h"
#include "sql/schema.h"

namespace sluice::archive {
namespace {

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How far below an entity's first version in a step's range its rows are
// read to find the snapshot its chain starts from (a row below that stays
// whole: keeping more is always safe).
constexpr uint64_t kLookback = 10000;

// The rows at or below `last` that may become stubs. `plan` holds, by entity
// and version, the rows that are not stubs of each entity of the step's
// range (PlanRows); `latest` each one's latest version.
std::vector<uint64_t> Leaving(const std::vector<sql::HotRow>& plan, const std::map<std::string, uint64_t>& latest_of,
                              uint64_t last, uint64_t keep_versions, int64_t young_after_us) {
  std::vector<uint64_t> leaving;
  for (size_t begin = 0; begin < plan.size();) {
    size_t end = begin;
    while (end < plan.size() && plan[end].entity_id == plan[begin].entity_id) ++end;
    const auto found = latest_of.find(plan[begin].entity_id);
    const uint64_t latest = std::max(plan[end - 1].version, found == latest_of.end() ? 0 : found->second);
    // The first version that stays whole (a row above the plan when none of
    // its rows does), and the snapshot its state is rebuilt from.
    uint64_t first_kept = plan[end - 1].version + 1;
    for (size_t i = begin; i < end; ++i) {
      const sql::HotRow& r = plan[i];
      if (r.event_id > last || r.version + keep_versions > latest || r.committed_at_us > young_after_us) {
        first_kept = r.version;
        break;
      }
    }
    uint64_t from = plan[begin].version;  // no snapshot at or below it in the plan: keep every row of it
    for (size_t i = begin; i < end && plan[i].version <= first_kept; ++i) {
      if (plan[i].snapshot) from = plan[i].version;
    }
    for (size_t i = begin; i < end; ++i) {
      if (plan[i].version < from && plan[i].event_id <= last) leaving.push_back(plan[i].event_id);
    }
    begin = end;
  }
  std::sort(leaving.begin(), leaving.end());
  return leaving;
}

}  // namespace

std::string SegmentPrefix(const std::string& type, uint32_t partition) {
  const std::string key = SegmentKey(type, partition, 1, 1);
  return key.substr(0, key.rfind('/') + 1);
}

std::string ManifestKey(const std::string& type, uint32_t partition) {
  // "ev_<type>_p<NNN>" names the partition as the event table does.
  const std::string table = sql::EventTableName(type, partition);
  return "manifest/" + type + "/" + table.substr(table.rfind('_') + 1) + ".json";
}

Archiver::Archiver(std::shared_ptr<sql::Storage> storage, std::shared_ptr<objectstore::ObjectStore> store,
                   ArchiverOptions options)
    : storage_(std::move(storage)), store_(std::move(store)), options_(options) {}

Result<std::map<uint32_t, std::pair<uint64_t, std::string>>> Archiver::Applied(
    const std::string& type, uint32_t partitions, const std::vector<std::string>& sinks) {
  std::map<uint32_t, std::pair<uint64_t, std::string>> out;
  if (sinks.empty()) {
    // No sink reads the type: everything committed counts as applied.
    auto log = storage_->OpenEventLog();
    for (uint32_t p = 0; p < partitions; ++p) {
      ASSIGN_OR_RETURN(uint64_t head, log->Head(type, p));
      out[p] = {head, ""};
    }
    return out;
  }
  if (!offsets_) offsets_ = storage_->OpenOffsets();
  for (uint32_t p = 0; p < partitions; ++p) out[p] = {std::numeric_limits<uint64_t>::max(), ""};
  for (const auto& sink : sinks) {
    ASSIGN_OR_RETURN(auto rows, offsets_->Load(sink, type));
    for (uint32_t p = 0; p < partitions; ++p) {
      const auto it = rows.find(p);
      const uint64_t at = it == rows.end() ? 0 : it->second.event_id;
      if (at < out[p].first) out[p] = {at, sink};
    }
  }
  return out;
}

Result<StepReport> Archiver::Step(const std::string& type, uint32_t partition, const ArchivePolicy& policy,
                                  uint64_t applied, const std::string& slowest) {
  StepReport report;
  report.type = type;
  report.partition = partition;
  if (!archive_) archive_ = storage_->OpenArchive();
  ASSIGN_OR_RETURN(bool locked, archive_->Lock(type, partition));
  if (!locked) {
    report.busy = true;
    report.held_back = "another archiver is at work on it";
    return report;
  }
  struct Unlock {
    sql::ArchiveTable& t;
    const std::string& type;
    uint32_t p;
    ~Unlock() { (void)t.Unlock(type, p); }
  } unlock{*archive_, type, partition};

  ASSIGN_OR_RETURN(auto marks, archive_->Watermarks(type, {partition}));
  const uint64_t watermark = marks[partition];
  // 1. What a step killed between its upload and its commit left behind.
  ASSIGN_OR_RETURN(auto objects, store_->List(SegmentPrefix(type, partition)));
  for (const auto& o : objects) {
    const auto parsed = ParseSegmentKey(o.key);
    if (parsed && parsed->first_event_id > watermark) {
      RETURN_IF_ERROR(store_->Delete(o.key));
      ++report.orphans_deleted;
    }
  }
  // 2. The range.
  if (applied <= watermark) {
    report.held_back = slowest.empty() ? "nothing new is committed"
                                       : "sink " + slowest + " has applied events up to " + std::to_string(applied);
    return report;
  }
  const uint64_t upto = std::min(applied, watermark + options_.segment_events);
  ASSIGN_OR_RETURN(auto plan, archive_->PlanRows(type, partition, watermark, upto, kLookback));
  const int64_t now = NowUs();
  const auto micros = [](std::chrono::seconds d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  };
  // Only events older than the policy's `after` and the idempotency window.
  const int64_t window_start = now - micros(options_.idempotency_window);
  const int64_t old_before = std::min(window_start, policy.after ? now - micros(*policy.after) : now);
  std::vector<const sql::HotRow*> range;
  for (const auto& r : plan) {
    if (r.event_id > watermark && r.event_id <= upto) range.push_back(&r);
  }
  std::sort(range.begin(), range.end(), [](const auto* a, const auto* b) { return a->event_id < b->event_id; });
  uint64_t last = watermark;
  for (const auto* r : range) {
    if (r->committed_at_us > old_before) break;
    last = r->event_id;
  }
  if (last == watermark) {
    report.held_back = range.empty() ? "no event after " + std::to_string(watermark) + " yet"
                                     : "no event after " + std::to_string(watermark) +
                                           " is older than the policy's `after` and the idempotency window";
    return report;
  }
  // 3. The segment: at most about segment_bytes of bodies.
  ASSIGN_OR_RETURN(auto rows, archive_->RowsBetween(type, partition, watermark, last, options_.segment_bytes));
  if (rows.empty()) return Internal("no event of " + sql::EventTableName(type, partition) + " in its range to archive");
  last = rows.back().event_id;
  uint64_t body_bytes = 0;
  for (const auto& r : rows) {
    body_bytes += r.request.size() + r.response.size() + (r.delta.empty() ? r.state.size() : r.delta.size());
  }
  Segment segment;
  segment.header = SegmentHeader{type, partition, watermark + 1, last, rows.size()};
  segment.rows = std::move(rows);
  ASSIGN_OR_RETURN(std::string bytes, EncodeSegment(segment));
  sql::SegmentRecord record;
  record.entity_type = type;
  record.partition = partition;
  record.first_event_id = watermark + 1;
  record.last_event_id = last;
  record.events = segment.rows.size();
  record.bytes = bytes.size();
  record.state_bytes = body_bytes;
  record.sha256 = Sha256Hex(bytes);
  record.key = SegmentKey(type, partition, record.first_event_id, last);
  if (SLUICE_FAILPOINT("archive.before_put")) return Unavailable("failpoint archive.before_put");
  RETURN_IF_ERROR(store_->Put(record.key, bytes).WithContext("archiving " + sql::EventTableName(type, partition)));
  if (SLUICE_FAILPOINT("archive.after_put")) return Unavailable("failpoint archive.after_put");
  // 4. The manifest and the stubs, in one transaction.
  std::vector<std::string> ids;
  for (const auto& r : plan) {
    if (ids.empty() || ids.back() != r.entity_id) ids.push_back(r.entity_id);
  }
  if (!log_) log_ = storage_->OpenEventLog();
  std::map<std::string, uint64_t> latest;
  for (size_t i = 0; i < ids.size(); i += 1000) {
    ASSIGN_OR_RETURN(auto part, log_->LatestVersions(type, partition,
                                                     {ids.begin() + static_cast<std::ptrdiff_t>(i),
                                                      ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + 1000))}));
    latest.merge(part);
  }
  const std::vector<uint64_t> leaving =
      Leaving(plan, latest, last, std::max<uint64_t>(1, policy.keep_versions), window_start);
  if (Status st = archive_->Commit(record, leaving); !st.ok()) {
    if (st.code() == StatusCode::kAborted) (void)store_->Delete(record.key);  // never recorded: ours alone
    return st.WithContext("archiving " + sql::EventTableName(type, partition));
  }
  if (SLUICE_FAILPOINT("archive.after_commit")) return Unavailable("failpoint archive.after_commit");
  report.first_event_id = record.first_event_id;
  report.last_event_id = last;
  report.events = record.events;
  report.stubbed = leaving.size();
  report.bytes = record.bytes;
  report.state_bytes = body_bytes;
  // 5. The manifest's copy beside the segments.
  ASSIGN_OR_RETURN(auto segments, archive_->Segments(type, partition));
  nlohmann::json manifest = nlohmann::json::array();
  for (const auto& s : segments) {
    manifest.push_back({{"key", s.key},
                        {"first_event_id", s.first_event_id},
                        {"last_event_id", s.last_event_id},
                        {"events", s.events},
                        {"bytes", s.bytes},
                        {"sha256", s.sha256}});
  }
  RETURN_IF_ERROR(store_->Put(ManifestKey(type, partition),
                              nlohmann::json{{"entity_type", type}, {"partition", partition}, {"segments", manifest}}
                                  .dump()));
  return report;
}

Result<std::vector<StepReport>> Archiver::Run(const std::string& type, uint32_t partitions,
                                              const ArchivePolicy& policy, const std::vector<std::string>& sinks,
                                              uint64_t max_steps,
                                              const std::function<void(const StepReport&)>& progress) {
  std::vector<StepReport> reports;
  ASSIGN_OR_RETURN(auto applied, Applied(type, partitions, sinks));
  uint64_t steps = 0;
  for (uint32_t p = 0; p < partitions; ++p) {
    while (steps < max_steps) {
      ++steps;
      ASSIGN_OR_RETURN(StepReport r, Step(type, p, policy, applied[p].first, applied[p].second));
      if (progress) progress(r);
      const bool made = r.last_event_id != 0;
      reports.push_back(std::move(r));
      if (!made) break;
    }
  }
  return reports;
}

}  // namespace sluice::archive
