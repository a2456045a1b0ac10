#include "engine/event_reader.h"

#include <algorithm>
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
                         const std::function<Status(uint32_t, std::vector<connectors::EntitySnapshot>&)>& each) {
  page = std::max<uint32_t>(1, page);
  std::vector<connectors::EntitySnapshot> snapshots;
  for (uint32_t p = 0; p < partitions; ++p) {
    std::string after;
    for (;;) {
      ASSIGN_OR_RETURN(auto rows, log.LatestAfter(type, p, after, page));
      if (rows.empty()) break;
      after = rows.back().entity_id;
      const bool full = rows.size() >= page;
      snapshots.clear();
      for (auto& r : rows) {
        snapshots.push_back(connectors::EntitySnapshot{std::move(r.entity_id), r.version, r.deleted, std::move(r.state)});
      }
      RETURN_IF_ERROR(each(p, snapshots));
      if (!full) break;
    }
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

Result<std::vector<connectors::ChangeEvent>> ReadHistory(sql::EventLog& log, const std::string& type,
                                                         uint32_t partitions, uint32_t page, bool full_events) {
  std::vector<connectors::ChangeEvent> all;
  page = std::max<uint32_t>(1, page);
  const auto columns = full_events ? sql::EventLog::Columns::kFull : sql::EventLog::Columns::kView;
  for (uint32_t p = 0; p < partitions; ++p) {
    BeforeStates before;
    uint64_t after = 0;
    for (;;) {
      // Not cut at a gap (I3 forbids one): the events past it are history too.
      ASSIGN_OR_RETURN(auto rows, log.ReadAfter(type, {{p, after}}, page, columns));
      std::vector<sql::EventRow>& list = rows[p];
      if (list.empty()) break;
      after = list.back().event_id;
      const bool full = list.size() >= page;
      std::vector<connectors::ChangeEvent> events = ToChangeEvents(std::move(list), type, p);
      if (full_events) RETURN_IF_ERROR(before.Fill(log, type, p, events));
      std::move(events.begin(), events.end(), std::back_inserter(all));
      if (!full) break;
    }
  }
  return all;
}

}  // namespace sluice::engine
