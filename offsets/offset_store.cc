#include "offsets/offset_store.h"

namespace sluice::offsets {

OffsetStore::OffsetStore(sql::ConnectParams params) : params_(std::move(params)) {}

Result<sql::Connection*> OffsetStore::Conn() {
  if (!conn_ || !conn_->healthy()) {
    conn_.reset();
    ASSIGN_OR_RETURN(conn_, sql::Connection::Open(params_));
  }
  return conn_.get();
}

Result<std::map<uint32_t, PartitionProgress>> OffsetStore::Load(const std::string& sink, const std::string& type) {
  ASSIGN_OR_RETURN(sql::Connection * c, Conn());
  std::string q =
      "SELECT partition_id, event_id, applied, stale, dead_lettered, state, last_error FROM sluice_offsets WHERE sink=";
  c->AppendQuoted(q, sink);
  q += " AND entity_type=";
  c->AppendQuoted(q, type);
  ASSIGN_OR_RETURN(auto rows, c->Query(q));
  std::map<uint32_t, PartitionProgress> out;
  for (const auto& r : rows) {
    PartitionProgress p;
    p.event_id = std::stoull(r.at(1).value_or("0"));
    p.applied = std::stoull(r.at(2).value_or("0"));
    p.stale = std::stoull(r.at(3).value_or("0"));
    p.dead_lettered = std::stoull(r.at(4).value_or("0"));
    p.state = r.at(5).value_or("running");
    p.last_error = r.at(6).value_or("");
    out[static_cast<uint32_t>(std::stoul(r.at(0).value_or("0")))] = std::move(p);
  }
  return out;
}

Status OffsetStore::Save(const std::string& sink, const std::string& type,
                         const std::map<uint32_t, PartitionProgress>& progress) {
  if (progress.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(sql::Connection * c, Conn());
  std::string q =
      "INSERT INTO sluice_offsets (sink, entity_type, partition_id, event_id, applied, stale, dead_lettered, state, "
      "last_error) VALUES ";
  bool first = true;
  for (const auto& [partition, p] : progress) {
    q += first ? "(" : ",(";
    first = false;
    c->AppendQuoted(q, sink);
    q += ',';
    c->AppendQuoted(q, type);
    q += ',' + std::to_string(partition) + ',' + std::to_string(p.event_id) + ',' + std::to_string(p.applied) + ',' +
         std::to_string(p.stale) + ',' + std::to_string(p.dead_lettered) + ',';
    c->AppendQuoted(q, p.state);
    q += ',';
    if (p.last_error.empty()) {
      q += "NULL";
    } else {
      c->AppendQuoted(q, p.last_error.substr(0, 2000));
    }
    q += ')';
  }
  q += " ON DUPLICATE KEY UPDATE event_id=VALUES(event_id), applied=VALUES(applied), stale=VALUES(stale),"
       " dead_lettered=VALUES(dead_lettered), state=VALUES(state), last_error=VALUES(last_error),"
       " updated_at=CURRENT_TIMESTAMP(6)";
  return c->Execute(q).status();
}

Status OffsetStore::Rewind(const std::string& sink, const std::string& type, std::optional<uint32_t> partition,
                           uint64_t event_id, uint32_t partitions) {
  ASSIGN_OR_RETURN(auto current, Load(sink, type));
  std::map<uint32_t, PartitionProgress> changed;
  for (uint32_t p = 0; p < partitions; ++p) {
    if (partition && *partition != p) continue;
    PartitionProgress progress = current.count(p) ? current[p] : PartitionProgress{};
    progress.event_id = event_id;
    changed[p] = progress;
  }
  return Save(sink, type, changed);
}

Status OffsetStore::Delete(const std::string& sink, const std::string& type) {
  ASSIGN_OR_RETURN(sql::Connection * c, Conn());
  std::string q = "DELETE FROM sluice_offsets WHERE sink=";
  c->AppendQuoted(q, sink);
  q += " AND entity_type=";
  c->AppendQuoted(q, type);
  return c->Execute(q).status();
}

}  // namespace sluice::offsets
