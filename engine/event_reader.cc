#include "engine/event_reader.h"

#include <algorithm>
#include <iterator>

#include "sql/mariadb_tables.h"
#include "sql/schema.h"

namespace sluice::engine {
namespace {

constexpr const char* kColumnList =
    "event_id, entity_id, version, deleted, state, command_name, command_id, "
    "CAST(UNIX_TIMESTAMP(committed_at) * 1000000 AS UNSIGNED)";
const std::string kColumns = std::string("SELECT ") + kColumnList + " FROM ";
// kColumnList of the event table aliased `e`, in the same order.
constexpr const char* kColumnListOfE =
    "e.event_id, e.entity_id, e.version, e.deleted, e.state, e.command_name, e.command_id, "
    "CAST(UNIX_TIMESTAMP(e.committed_at) * 1000000 AS UNSIGNED)";

// The event in columns [first, first + 8) of r (kColumnList's order).
connectors::ChangeEvent FromRow(sql::Row& r, const std::string& type, uint32_t partition, size_t first = 0) {
  connectors::ChangeEvent e;
  e.entity_type = type;
  e.partition = partition;
  e.event_id = std::stoull(r[first].value_or("0"));
  e.entity_id = std::move(r[first + 1]).value_or("");
  e.version = std::stoull(r[first + 2].value_or("0"));
  e.deleted = r[first + 3].value_or("0") != "0";
  e.state = e.deleted ? std::string() : std::move(r[first + 4]).value_or("null");
  e.command_name = std::move(r[first + 5]).value_or("");
  e.command_id = std::move(r[first + 6]).value_or("");
  e.committed_at_us = static_cast<int64_t>(std::stoull(r[first + 7].value_or("0")));
  return e;
}

// The latest events of the entities `latest` selects (a derived table of
// entity_id and v, the highest version), in entity_id order.
Result<std::vector<connectors::ChangeEvent>> ReadLatestOf(sql::Connection& conn, const std::string& type,
                                                          uint32_t partition, const std::string& latest) {
  const std::string t = sql::QuoteIdent(sql::EventTableName(type, partition));
  ASSIGN_OR_RETURN(auto rows, conn.Query(std::string("SELECT ") + kColumnListOfE + " FROM " + t + " e JOIN (" +
                                         latest + ") m ON e.entity_id=m.entity_id AND e.version=m.v ORDER BY e.entity_id"));
  std::vector<connectors::ChangeEvent> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back(FromRow(r, type, partition));
  return out;
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
  return e;
}

ReadResult ToReadResult(std::vector<sql::EventRow>&& rows, const std::string& type, uint32_t partition,
                        uint64_t after) {
  std::vector<connectors::ChangeEvent> events;
  events.reserve(rows.size());
  for (auto& r : rows) events.push_back(ToChangeEvent(std::move(r), type, partition));
  return CutAtGap(std::move(events), after);
}

Result<ReadResult> ReadEvents(sql::Connection& conn, const std::string& type, uint32_t partition, uint64_t after,
                              uint32_t limit) {
  ASSIGN_OR_RETURN(auto r, ReadEventsOfPartitions(conn, type, {{partition, after}}, limit));
  return std::move(r[partition]);
}

Result<std::map<uint32_t, ReadResult>> ReadEventsOfPartitions(sql::Connection& conn, const std::string& type,
                                                              const std::vector<std::pair<uint32_t, uint64_t>>& from,
                                                              uint32_t limit) {
  ASSIGN_OR_RETURN(auto rows, sql::EventLogOn(conn)->ReadAfter(type, from, limit));
  std::map<uint32_t, ReadResult> out;
  for (const auto& [partition, after] : from) out[partition] = ToReadResult(std::move(rows[partition]), type, partition, after);
  return out;
}

Result<std::vector<connectors::ChangeEvent>> ReadEventsById(sql::Connection& conn, const std::string& type,
                                                            uint32_t partition, const std::vector<uint64_t>& ids) {
  std::vector<connectors::ChangeEvent> out;
  if (ids.empty()) return out;
  std::string in;
  for (uint64_t id : ids) {
    if (!in.empty()) in += ',';
    in += std::to_string(id);
  }
  const std::string q = std::string(kColumns) + sql::QuoteIdent(sql::EventTableName(type, partition)) +
                        " WHERE event_id IN (" + in + ") ORDER BY event_id";
  ASSIGN_OR_RETURN(auto rows, conn.Query(q));
  for (auto& r : rows) out.push_back(FromRow(r, type, partition));
  return out;
}

Result<std::vector<connectors::ChangeEvent>> ReadLatestEventsAfter(sql::Connection& conn, const std::string& type,
                                                                   uint32_t partition, const std::string& after_id,
                                                                   uint32_t limit) {
  std::string latest = "SELECT entity_id, MAX(version) AS v FROM " +
                       sql::QuoteIdent(sql::EventTableName(type, partition)) + " WHERE entity_id > ";
  conn.AppendQuoted(latest, after_id);
  latest += " GROUP BY entity_id ORDER BY entity_id LIMIT " + std::to_string(limit);
  return ReadLatestOf(conn, type, partition, latest);
}

Result<std::vector<connectors::ChangeEvent>> ReadLatestEventsOf(sql::Connection& conn, const std::string& type,
                                                                uint32_t partition, const std::vector<std::string>& ids) {
  if (ids.empty()) return std::vector<connectors::ChangeEvent>{};
  std::string latest = "SELECT entity_id, MAX(version) AS v FROM " +
                       sql::QuoteIdent(sql::EventTableName(type, partition)) + " WHERE entity_id IN (";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) latest += ',';
    conn.AppendQuoted(latest, ids[i]);
  }
  latest += ") GROUP BY entity_id";
  return ReadLatestOf(conn, type, partition, latest);
}

Result<std::vector<connectors::EntitySnapshot>> ReadTruth(sql::Connection& conn, const std::string& type,
                                                          uint32_t partitions) {
  std::vector<connectors::EntitySnapshot> out;
  for (uint32_t p = 0; p < partitions; ++p) {
    const std::string t = sql::QuoteIdent(sql::EventTableName(type, p));
    ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT e.entity_id, e.version, e.deleted, e.state FROM " + t +
                                           " e JOIN (SELECT entity_id, MAX(version) AS v FROM " + t +
                                           " GROUP BY entity_id) m ON e.entity_id=m.entity_id AND e.version=m.v"));
    for (auto& r : rows) {
      connectors::EntitySnapshot s;
      s.entity_id = std::move(r[0]).value_or("");
      s.version = std::stoull(r[1].value_or("0"));
      s.deleted = r[2].value_or("0") != "0";
      if (!s.deleted) s.state = std::move(r[3]).value_or("null");
      out.push_back(std::move(s));
    }
  }
  return out;
}

Result<std::vector<connectors::ChangeEvent>> ReadHistory(sql::Connection& conn, const std::string& type,
                                                         uint32_t partitions) {
  std::vector<connectors::ChangeEvent> all;
  constexpr uint32_t kPage = 10000;
  for (uint32_t p = 0; p < partitions; ++p) {
    uint64_t after = 0;
    for (;;) {
      ASSIGN_OR_RETURN(ReadResult page, ReadEvents(conn, type, p, after, kPage));
      if (page.events.empty()) break;
      after = page.events.back().event_id;
      const bool full = page.events.size() >= kPage;
      std::move(page.events.begin(), page.events.end(), std::back_inserter(all));
      // A gap (I3 forbids one) cuts the page; the events past it are still history.
      if (!full && !page.gap) break;
      if (page.gap) {
        ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT MIN(event_id) FROM " +
                                               sql::QuoteIdent(sql::EventTableName(type, p)) +
                                               " WHERE event_id > " + std::to_string(after)));
        if (rows.empty() || !rows[0][0]) break;
        after = std::stoull(*rows[0][0]) - 1;
      }
    }
  }
  return all;
}

}  // namespace sluice::engine
