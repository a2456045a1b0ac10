#include "engine/event_reader.h"

#include "sql/schema.h"

namespace sluice::engine {
namespace {

constexpr const char* kColumns =
    "SELECT event_id, entity_id, version, deleted, state, command_name, command_id, "
    "CAST(UNIX_TIMESTAMP(committed_at) * 1000000 AS UNSIGNED) FROM ";

connectors::ChangeEvent FromRow(sql::Row& r, const std::string& type, uint32_t partition) {
  connectors::ChangeEvent e;
  e.entity_type = type;
  e.partition = partition;
  e.event_id = std::stoull(r[0].value_or("0"));
  e.entity_id = std::move(r[1]).value_or("");
  e.version = std::stoull(r[2].value_or("0"));
  e.deleted = r[3].value_or("0") != "0";
  e.state = e.deleted ? std::string() : std::move(r[4]).value_or("null");
  e.command_name = std::move(r[5]).value_or("");
  e.command_id = std::move(r[6]).value_or("");
  e.committed_at_us = static_cast<int64_t>(std::stoull(r[7].value_or("0")));
  return e;
}

}  // namespace

Result<ReadResult> ReadEvents(sql::Connection& conn, const std::string& type, uint32_t partition, uint64_t after,
                              uint32_t limit) {
  const std::string q = std::string(kColumns) + sql::QuoteIdent(sql::EventTableName(type, partition)) +
                        " WHERE event_id > " + std::to_string(after) + " ORDER BY event_id LIMIT " +
                        std::to_string(limit);
  ASSIGN_OR_RETURN(auto rows, conn.Query(q));
  ReadResult out;
  out.events.reserve(rows.size());
  uint64_t expect = after + 1;
  for (auto& r : rows) {
    auto e = FromRow(r, type, partition);
    if (e.event_id != expect) {
      // A gap: never skip it; wait for it to fill (or be reported).
      out.gap = true;
      break;
    }
    ++expect;
    out.events.push_back(std::move(e));
  }
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

}  // namespace sluice::engine
