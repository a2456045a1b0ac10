#include "engine/event_reader.h"

#include <algorithm>
#include <future>
#include <system_error>
#include <iterator>

#include "engine/before_states.h"

namespace sluice::engine {
namespace {

std::vector<connectors::ChangeEvent> ToChangeEvents(std::vector<sql::EventRow>&& rows, const std::string& type,
                                                    uint32_t partition) {
  std::vector<connectors::ChangeEvent> events;
  events.reserve(rows.size());
  for (auto& r : rows) events.push_back(ToChangeEvent(std::move(r), type, partition));
  return events;
}

// Keeps the events that follow `after` without a gap (in event_id order).
ReadResult CutAtGap(std::vector<connectors::ChangeEvent> events, uint64_t after) {
  ReadResult out;
  uint64_t expect = after + 1;
  size_t n = 0;
  while (n < events.size() && events[n].event_id == expect) {
    ++n;
    ++expect;
  }
  // A gap: never skip it; wait for it to fill (or be reported).
  out.gap = n < events.size();
  events.resize(n);
  out.events = std::move(events);
  return out;
}

}  // namespace

connectors::ChangeEvent ToChangeEvent(sql::EventRow&& r, const std::string& type, uint32_t partition) {
  connectors::ChangeEvent e;
  e.entity_type = type;
  e.partition = partition;
  e.event_id = r.event_id;
  e.entity_id = std::move(r.entity_id);
  e.version = r.version;
  e.deleted = r.deleted;
  e.state = std::move(r.state);
  e.command_name = std::move(r.command_name);
  e.command_id = std::move(r.command_id);
  e.committed_at_us = r.committed_at_us;
  e.request = std::move(r.request);
  e.response = std::move(r.response);
  return e;
}

ReadResult ToReadResult(std::vector<sql::EventRow>&& rows, const std::string& type, uint32_t partition,
                        uint64_t after) {
  return CutAtGap(ToChangeEvents(std::move(rows), type, partition), after);
}

Result<ReadResult> ReadEvents(sql::EventLog& log, const std::string& type, uint32_t partition, uint64_t after,
                              uint32_t limit, sql::EventLog::Columns columns) {
  ASSIGN_OR_RETURN(auto r, ReadEventsOfPartitions(log, type, {{partition, after}}, limit, columns));
  return std::move(r[partition]);
}

Result<std::map<uint32_t, ReadResult>> ReadEventsOfPartitions(sql::EventLog& log, const std::string& type,
                                                              const std::vector<std::pair<uint32_t, uint64_t>>& from,
                                                              uint32_t limit, sql::EventLog::Columns columns) {
  ASSIGN_OR_RETURN(auto rows, log.ReadAfter(type, from, limit, columns));
  std::map<uint32_t, ReadResult> out;
  for (const auto& [partition, after] : from) out[partition] = ToReadResult(std::move(rows[partition]), type, partition, after);
  return out;
}

Result<std::vector<connectors::ChangeEvent>> ReadEventsById(sql::EventLog& log, const std::string& type,
                                                            uint32_t partition, const std::vector<uint64_t>& ids) {
  ASSIGN_OR_RETURN(auto rows, log.ByIds(type, partition, ids));
  return ToChangeEvents(std::move(rows), type, partition);
}

Result<std::vector<connectors::ChangeEvent>> ReadLatestEventsAfter(sql::EventLog& log, const std::string& type,
                                                                   uint32_t partition, const std::string& after_id,
                                                                   uint32_t limit) {
  ASSIGN_OR_RETURN(auto rows, log.LatestAfter(type, partition, after_id, limit));
  return ToChangeEvents(std::move(rows), type, partition);
}

Result<std::vector<connectors::ChangeEvent>> ReadLatestEventsOf(sql::EventLog& log, const std::string& type,
                                                                uint32_t partition, const std::vector<std::string>& ids) {
  ASSIGN_OR_RETURN(auto rows, log.LatestOf(type, partition, ids));
  return ToChangeEvents(std::move(rows), type, partition);
}

Status ForEachLatestPage(sql::EventLog& log, const std::string& type, uint32_t partitions, uint32_t page,
                         const std::function<Status(uint32_t, std::vector<connectors::EntitySnapshot>&)>& each,
                         sql::EventLog* ahead) {
  page = std::max<uint32_t>(1, page);
  using Rows = Result<std::vector<sql::EventRow>>;
  // The page after (p, after): read on `ahead` on a thread while the caller
  // has the page before; without `ahead` (or without a thread: the
  // process's limit), read when it is wanted.
  const auto read = [&](uint32_t p, std::string after) -> std::future<Rows> {
    sql::EventLog* on = ahead != nullptr ? ahead : &log;
    auto work = [on, &type, p, after = std::move(after), page] { return on->LatestAfter(type, p, after, page); };
    if (ahead != nullptr) {
      try {
        return std::async(std::launch::async, work);
      } catch (const std::system_error&) {
      }
    }
    return std::async(std::launch::deferred, std::move(work));
  };
  std::vector<connectors::EntitySnapshot> snapshots;
  uint32_t p = 0;
  std::future<Rows> next = partitions > 0 ? read(0, "") : std::future<Rows>();
  while (p < partitions) {
    ASSIGN_OR_RETURN(auto rows, next.get());
    // Where the read after this page starts: the same partition after its
    // last entity while pages are full, else the next partition.
    const bool full = rows.size() >= page;
    const uint32_t next_p = full ? p : p + 1;
    if (next_p < partitions) next = read(next_p, full ? rows.back().entity_id : "");
    snapshots.clear();
    for (auto& r : rows) {
      snapshots.push_back(connectors::EntitySnapshot{std::move(r.entity_id), r.version, r.deleted, std::move(r.state)});
    }
    // A failure leaves the read ahead to finish: `next`'s destructor waits.
    if (!snapshots.empty()) RETURN_IF_ERROR(each(p, snapshots));
    p = next_p;
  }
  return Status::Ok();
}

Result<std::vector<connectors::EntitySnapshot>> ReadTruth(sql::EventLog& log, const std::string& type,
                                                          uint32_t partitions, uint32_t page) {
  std::vector<connectors::EntitySnapshot> out;
  RETURN_IF_ERROR(ForEachLatestPage(log, type, partitions, page,
                                    [&out](uint32_t, std::vector<connectors::EntitySnapshot>& snapshots) {
                                      std::move(snapshots.begin(), snapshots.end(), std::back_inserter(out));
                                      return Status::Ok();
                                    }));
  return out;
}

// Where a partition's read stands.
struct StoredHistory::Partition {
  uint64_t after = 0;  // the last event given
  bool done = false;
  // full_events: the latest states read, for the states before of its next
  // events; as many entities as a page holds events.
  std::unique_ptr<BeforeStates> before;
};

StoredHistory::StoredHistory(sql::EventLog& log, std::string type, uint32_t partitions, bool full_events)
    : log_(log), type_(std::move(type)), partitions_(partitions), full_events_(full_events) {}

StoredHistory::~StoredHistory() = default;

Result<StoredHistory::Partition*> StoredHistory::Reading(uint32_t partition) {
  if (partition >= partitions_) return InvalidArgument("no partition " + std::to_string(partition) + " of " + type_);
  if (!heads_) {
    std::vector<uint32_t> all(partitions_);
    for (uint32_t p = 0; p < partitions_; ++p) all[p] = p;
    ASSIGN_OR_RETURN(auto heads, log_.Heads(type_, all));
    heads_ = std::move(heads);
  }
  std::unique_ptr<Partition>& part = reading_[partition];
  if (!part) part = std::make_unique<Partition>();
  return part.get();
}

Result<std::vector<connectors::ChangeEvent>> StoredHistory::Next(uint32_t partition, uint32_t limit) {
  ASSIGN_OR_RETURN(Partition * part, Reading(partition));
  const auto head = heads_->find(partition);
  if (part->done || head == heads_->end() || part->after >= head->second) {
    part->done = true;
    part->before.reset();  // nothing more to read of it
    return std::vector<connectors::ChangeEvent>();
  }
  const auto columns = full_events_ ? sql::EventLog::Columns::kFull : sql::EventLog::Columns::kView;
  // Not cut at a gap (I3 forbids one): the events past it are history too.
  ASSIGN_OR_RETURN(auto rows, log_.ReadAfter(type_, {{partition, part->after}}, std::max<uint32_t>(1, limit), columns));
  std::vector<sql::EventRow>& list = rows[partition];
  while (!list.empty() && list.back().event_id > head->second) list.pop_back();  // committed since
  if (list.empty()) {
    part->done = true;
    part->before.reset();
    return std::vector<connectors::ChangeEvent>();
  }
  part->after = list.back().event_id;
  std::vector<connectors::ChangeEvent> events = ToChangeEvents(std::move(list), type_, partition);
  if (full_events_) {
    if (!part->before) part->before = std::make_unique<BeforeStates>(std::max<uint32_t>(1, limit));
    RETURN_IF_ERROR(part->before->Fill(log_, type_, partition, events));
  }
  given_ += events.size();
  read_ += events.size();
  if (on_page) on_page(*this);
  return events;
}

Result<std::vector<connectors::ChangeEvent>> StoredHistory::Of(uint32_t partition,
                                                               const std::vector<uint64_t>& event_ids) {
  RETURN_IF_ERROR(Reading(partition).status());  // the heads
  const auto head = heads_->find(partition);
  std::vector<uint64_t> ids;
  for (const uint64_t id : event_ids) {
    if (head != heads_->end() && id <= head->second) ids.push_back(id);
  }
  if (ids.empty()) return std::vector<connectors::ChangeEvent>();
  ASSIGN_OR_RETURN(auto rows, log_.ByIds(type_, partition, ids));
  std::vector<connectors::ChangeEvent> events = ToChangeEvents(std::move(rows), type_, partition);
  if (full_events_) {
    // Out of the order the partition is read in: states before from storage.
    BeforeStates before(std::max<size_t>(1, events.size()));
    RETURN_IF_ERROR(before.Fill(log_, type_, partition, events));
  }
  return events;
}

void StoredHistory::Rewind() {
  most_given_ = std::max(most_given_, given_);
  given_ = 0;
  heads_.reset();
  reading_.clear();
}

}  // namespace sluice::engine
