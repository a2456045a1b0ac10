#include "sql/schema.h"

#include <cstdio>
#include <set>

namespace sluice::sql {

std::string EventTableName(const std::string& type, uint32_t partition) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%03u", partition);
  return "ev_" + type + "_p" + buf;
}

std::string EventTableDdl(const std::string& type, uint32_t partition) {
  // Text columns are LONGTEXT utf8mb4_bin, not JSON: MySQL 8's JSON type
  // re-serialises documents, and a replayed reply must be byte-identical to
  // the first one. The writer only stores JSON it has parsed and printed.
  return "CREATE TABLE IF NOT EXISTS " + QuoteIdent(EventTableName(type, partition)) +
         " ("
         "event_id BIGINT UNSIGNED NOT NULL,"
         "entity_id VARBINARY(64) NOT NULL,"
         "version BIGINT UNSIGNED NOT NULL,"
         "command_id VARBINARY(128) NOT NULL,"
         "command_name VARBINARY(64) NOT NULL,"
         "expected_version BIGINT UNSIGNED NULL,"
         "request LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
         "response LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
         "state LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,"
         "delta LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,"
         "deleted TINYINT(1) NOT NULL DEFAULT 0,"
         "committed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
         "archived TINYINT(1) NOT NULL DEFAULT 0,"
         "PRIMARY KEY (event_id),"
         "UNIQUE KEY uk_entity_version (entity_id, version),"
         "UNIQUE KEY uk_entity_command (entity_id, command_id)"
         ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";
}

namespace {

constexpr const char* kMetaDdl[] = {
    "CREATE TABLE IF NOT EXISTS sluice_schema ("
    "id TINYINT UNSIGNED NOT NULL PRIMARY KEY,"
    "version INT NOT NULL,"
    "updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    ") ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS sluice_offsets ("
    "sink VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "partition_id INT UNSIGNED NOT NULL,"
    "event_id BIGINT UNSIGNED NOT NULL,"
    "applied BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    "stale BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    "dead_lettered BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    "state VARCHAR(16) CHARACTER SET ascii NOT NULL DEFAULT 'running',"
    "last_error TEXT NULL,"
    "updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "PRIMARY KEY (sink, entity_type, partition_id)"
    ") ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS sluice_dead_letters ("
    "id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    "sink VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "partition_id INT UNSIGNED NOT NULL,"
    "event_id BIGINT UNSIGNED NOT NULL,"
    "entity_id VARBINARY(64) NOT NULL,"
    "version BIGINT UNSIGNED NOT NULL,"
    "error TEXT NOT NULL,"
    "created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "resolved_at TIMESTAMP(6) NULL,"
    "resolution VARCHAR(16) NULL,"
    "UNIQUE KEY uk_event (sink, entity_type, partition_id, event_id)"
    ") ENGINE=InnoDB",
    kLeasesDdl,
    kLeaseHoldersDdl,
    kLeaseLogDdl,
    kMembersDdl,
    kArchiveSegmentsDdl,
    "CREATE TABLE IF NOT EXISTS sluice_entity_types ("
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,"
    "partitions INT UNSIGNED NOT NULL,"
    "created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    ") ENGINE=InnoDB",
};

std::vector<uint32_t> Here(const EntityTypeSpec& t) {
  if (!t.here.empty()) return t.here;
  std::vector<uint32_t> all(t.partitions);
  for (uint32_t p = 0; p < t.partitions; ++p) all[p] = p;
  return all;
}

}  // namespace

Result<bool> TableExists(Connection& conn, const std::string& table) {
  std::string q = "SELECT 1 FROM information_schema.tables WHERE table_schema=DATABASE() AND table_name=";
  conn.AppendQuoted(q, table);
  ASSIGN_OR_RETURN(auto rows, conn.Query(q));
  return !rows.empty();
}

namespace {

// The names of the database's event tables, in one statement (not one per
// partition: a type of 1,024 partitions would cost 1,024 round trips and
// information_schema lookups at every start).
Result<std::set<std::string>> EventTables(Connection& conn) {
  ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT table_name FROM information_schema.tables WHERE "
                                         "table_schema=DATABASE() AND table_name LIKE 'ev\\_%'"));
  std::set<std::string> names;
  for (const auto& row : rows) names.insert(row.at(0).value_or(""));
  return names;
}

// The recorded partition count of a type, or 0 when it is not recorded.
Result<uint32_t> RecordedPartitions(Connection& conn, const std::string& type) {
  std::string q = "SELECT partitions FROM sluice_entity_types WHERE entity_type=";
  conn.AppendQuoted(q, type);
  ASSIGN_OR_RETURN(auto rows, conn.Query(q));
  if (rows.empty() || !rows[0][0]) return uint32_t{0};
  return static_cast<uint32_t>(std::stoul(*rows[0][0]));
}

}  // namespace

Status PartitionCountMismatch(const EntityTypeSpec& t, uint32_t recorded) {
  return FailedPrecondition(
      "entity type '" + t.name + "' was created with " + std::to_string(recorded) +
      " partitions but the config says " + std::to_string(t.partitions) +
      "; the partition count is fixed once the tables exist (changing it would move "
      "entities between partitions). Set entities." + t.name + ".partitions: " +
      std::to_string(recorded) + " or use a new database");
}

Result<InitReport> InitSchema(Connection& conn, const std::string& database,
                              const std::vector<EntityTypeSpec>& types) {
  InitReport report;
  RETURN_IF_ERROR(conn.Execute("CREATE DATABASE IF NOT EXISTS " + QuoteIdent(database) +
                               " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
                      .status());
  RETURN_IF_ERROR(conn.Execute("USE " + QuoteIdent(database)).status());
  for (const char* ddl : kMetaDdl) RETURN_IF_ERROR(conn.Execute(ddl).status());
  RETURN_IF_ERROR(conn.Execute("INSERT IGNORE INTO sluice_schema (id, version) VALUES (1, " +
                               std::to_string(kSchemaVersion) + ")")
                      .status());
  ASSIGN_OR_RETURN(auto version_rows, conn.Query("SELECT version FROM sluice_schema WHERE id=1"));
  if (version_rows.empty() || !version_rows[0][0] || std::stoi(*version_rows[0][0]) > kSchemaVersion) {
    return FailedPrecondition("database '" + database + "' has a newer sluice schema than this binary (" +
                              std::to_string(kSchemaVersion) + "); upgrade sluice");
  }
  const int found = std::stoi(*version_rows[0][0]);
  // Check every type before creating anything, so a refused config changes nothing.
  for (const auto& t : types) {
    ASSIGN_OR_RETURN(uint32_t recorded, RecordedPartitions(conn, t.name));
    if (recorded != 0 && recorded != t.partitions) return PartitionCountMismatch(t, recorded);
  }
  for (const auto& t : types) {
    std::string ins = "INSERT IGNORE INTO sluice_entity_types (entity_type, partitions) VALUES (";
    conn.AppendQuoted(ins, t.name);
    ins += "," + std::to_string(t.partitions) + ")";
    ASSIGN_OR_RETURN(uint64_t inserted, conn.Execute(ins));
    report.types_registered += static_cast<int>(inserted);
    // Another process may have registered the type with another count meanwhile.
    ASSIGN_OR_RETURN(uint32_t recorded, RecordedPartitions(conn, t.name));
    if (recorded != t.partitions) return PartitionCountMismatch(t, recorded);
    ASSIGN_OR_RETURN(const std::set<std::string> existing, EventTables(conn));
    for (const uint32_t p : Here(t)) {
      if (existing.count(EventTableName(t.name, p))) continue;
      RETURN_IF_ERROR(conn.Execute(EventTableDdl(t.name, p)).status());
      ++report.tables_created;
    }
  }
  // Upgrade steps, each safe to run again; the version is recorded after
  // all of them. 1 -> 2: nothing to change in the tables (deltas use the
  // delta column every event table has); recording 2 keeps binaries of
  // version 1 from reading rows they would misread. 2 -> 3: the archive's
  // manifest (made above with the other metadata tables) and each event
  // table's `archived` column, added in place (InnoDB adds a column with a
  // default instantly, whatever the table's size). 3 -> 4: the lease
  // holders' table (made above); recording 4 keeps binaries of version 3,
  // which renew leases row by row, from starting on it.
  ASSIGN_OR_RETURN(auto lacking,
                   conn.Query("SELECT t.table_name FROM information_schema.tables t WHERE t.table_schema=DATABASE() "
                              "AND t.table_name LIKE 'ev\\_%' AND NOT EXISTS (SELECT 1 FROM information_schema.columns c "
                              "WHERE c.table_schema=t.table_schema AND c.table_name=t.table_name AND "
                              "c.column_name='archived')"));
  for (const auto& row : lacking) {
    RETURN_IF_ERROR(conn.Execute("ALTER TABLE " + QuoteIdent(row.at(0).value_or("")) +
                                 " ADD COLUMN archived TINYINT(1) NOT NULL DEFAULT 0")
                        .status());
  }
  if (found < kSchemaVersion) {
    RETURN_IF_ERROR(conn.Execute("UPDATE sluice_schema SET version=" + std::to_string(kSchemaVersion) +
                                 " WHERE id=1 AND version < " + std::to_string(kSchemaVersion))
                        .status());
    report.upgraded_from = found;
  }
  return report;
}

Status CheckSchema(Connection& conn, const std::vector<EntityTypeSpec>& types) {
  ASSIGN_OR_RETURN(bool meta, TableExists(conn, "sluice_entity_types"));
  if (!meta) return FailedPrecondition("the database has no sluice schema; run `sluice init --config FILE`");
  ASSIGN_OR_RETURN(auto version_rows, conn.Query("SELECT version FROM sluice_schema WHERE id=1"));
  const int version = version_rows.empty() || !version_rows[0][0] ? 0 : std::stoi(*version_rows[0][0]);
  if (version > kSchemaVersion) {
    return FailedPrecondition("the database has sluice schema version " + std::to_string(version) +
                              ", newer than this binary's " + std::to_string(kSchemaVersion) + "; upgrade sluice");
  }
  if (version < kSchemaVersion) {
    return FailedPrecondition("the database has sluice schema version " + std::to_string(version) +
                              "; run `sluice init --config FILE` to upgrade it to " + std::to_string(kSchemaVersion));
  }
  for (const auto& t : types) {
    ASSIGN_OR_RETURN(uint32_t recorded, RecordedPartitions(conn, t.name));
    if (recorded == 0) {
      return FailedPrecondition("entity type '" + t.name + "' has no tables; run `sluice init --config FILE`");
    }
    if (recorded != t.partitions) return PartitionCountMismatch(t, recorded);
  }
  ASSIGN_OR_RETURN(const std::set<std::string> existing, EventTables(conn));
  for (const auto& t : types) {
    for (const uint32_t p : Here(t)) {
      if (!existing.count(EventTableName(t.name, p))) {
        return FailedPrecondition("table " + EventTableName(t.name, p) +
                                  " is missing; run `sluice init --config FILE`");
      }
    }
  }
  return Status::Ok();
}

std::string Durability::Describe() const {
  std::string d = "innodb_flush_log_at_trx_commit=" + std::to_string(innodb_flush_log_at_trx_commit) +
                  ", log_bin=" + (log_bin ? "ON" : "OFF") + ", sync_binlog=" + std::to_string(sync_binlog);
  if (galera) {
    d += ", Galera node: wsrep_cluster_status=" + (cluster_status.empty() ? std::string("?") : cluster_status) +
         ", wsrep_cluster_size=" + std::to_string(cluster_size);
  }
  return d;
}

Result<Durability> ReadDurability(Connection& conn) {
  ASSIGN_OR_RETURN(auto rows,
                   conn.Query("SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin"));
  if (rows.empty() || rows[0].size() != 3) return Internal("unexpected reply to the durability query");
  Durability d;
  d.innodb_flush_log_at_trx_commit = std::stoi(rows[0][0].value_or("-1"));
  d.sync_binlog = std::stoll(rows[0][1].value_or("-1"));
  d.log_bin = rows[0][2].value_or("0") == "1";
  if (conn.galera()) {
    // Each node must be durable as a single server is, and in the primary
    // component: a node cut off from the majority refuses writes anyway.
    d.galera = true;
    ASSIGN_OR_RETURN(auto status, conn.Query("SHOW GLOBAL STATUS WHERE Variable_name IN "
                                             "('wsrep_cluster_status', 'wsrep_cluster_size')"));
    for (const auto& r : status) {
      if (r.at(0) == "wsrep_cluster_status") d.cluster_status = r.at(1).value_or("");
      if (r.at(0) == "wsrep_cluster_size") d.cluster_size = std::stoll(r.at(1).value_or("0"));
    }
  }
  return d;
}

}  // namespace sluice::sql
