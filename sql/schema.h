// The main-storage schema: one event table per (entity type, partition), a
// table recording each entity type's partition count, and the schema version.
//
//   ev_<type>_p<NNN>      events of one partition (NNN zero-padded to 3+ digits)
//   sluice_entity_types   entity_type -> partitions, fixed at creation
//   sluice_schema         the schema version of this database
//   sluice_offsets        per (sink, type, partition): the last applied event_id,
//                         cumulative counters, and the sink's state
//   sluice_dead_letters   events a sink rejected for good
//   sluice_leases, sluice_lease_holders, sluice_lease_log, sluice_members: below
//   sluice_server, sluice_placement: the storage layout (sql/layout_schema.h)
//
// All functions run statements on the given connection from the calling
// thread; they are safe to run from several processes at once (DDL is
// IF NOT EXISTS, metadata rows are INSERT IGNORE and then compared).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sql/connection.h"

namespace sluice::sql {

// 1: every event row holds its whole state. 2: a row may hold a delta
// instead (docs/delta.md), which a binary of version 1 would misread; the
// tables are the same (the delta column was there from the start), so
// `sluice init` upgrades a database of version 1 by recording 2.
// 3: the archive (docs/archive.md): sluice_archive_segments, which every
// server's init creates, and the event tables' `archived` column (added by
// init to the tables of version 2, instantly); a row may be an archived
// event's stub, which a binary of version 2 would misread.
// 4: a lease's expiry is its owner's row in sluice_lease_holders (made by
// init and at the lease table's first use); a binary of version 3 would
// read leases still held as expired and take them.
inline constexpr int kSchemaVersion = 4;

// The archive's manifest (tables.h ArchiveTable), beside the partitions' event tables.
inline constexpr const char* kArchiveSegmentsDdl =
    "CREATE TABLE IF NOT EXISTS sluice_archive_segments ("
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "partition_id INT UNSIGNED NOT NULL,"
    "first_event_id BIGINT UNSIGNED NOT NULL,"
    "last_event_id BIGINT UNSIGNED NOT NULL,"
    "events BIGINT UNSIGNED NOT NULL,"
    "bytes BIGINT UNSIGNED NOT NULL,"
    "state_bytes BIGINT UNSIGNED NOT NULL,"
    "sha256 CHAR(64) CHARACTER SET ascii NOT NULL,"
    "object_key VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
    "created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "PRIMARY KEY (entity_type, partition_id, first_event_id),"
    "UNIQUE KEY uk_last (entity_type, partition_id, last_event_id)"
    ") ENGINE=InnoDB";

// sluice_leases, sluice_lease_holders, sluice_lease_log and sluice_members
// (tables.h LeaseTable): made by init, and by the lease table at its first
// use in a database made before them.
// A lease's own expires_at is the validity it got when taken (a database
// written by an older sluice renewed it per lease); afterwards its owner's
// row in sluice_lease_holders carries it, renewed once per round for all of
// the owner's leases of (scope, entity type).
inline constexpr const char* kLeasesDdl =
    "CREATE TABLE IF NOT EXISTS sluice_leases ("
    "scope VARCHAR(96) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "partition_id INT UNSIGNED NOT NULL,"
    "owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',"
    "token BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    "expires_at TIMESTAMP(6) NOT NULL DEFAULT '1970-01-01 00:00:01.000000',"
    "taken_at TIMESTAMP(6) NULL,"
    "PRIMARY KEY (scope, entity_type, partition_id)"
    ") ENGINE=InnoDB";
// One row per owner of leases of (scope, entity type): until when they are
// all valid (by the server's clock), and `takeovers`, which a member that
// takes an expired lease of this owner raises in the same transaction (it
// locks the row first): the owner's renewal waits for the takeover, and on
// Galera the two conflict at commit (both write this row) instead of
// passing each other.
inline constexpr const char* kLeaseHoldersDdl =
    "CREATE TABLE IF NOT EXISTS sluice_lease_holders ("
    "scope VARCHAR(96) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "expires_at TIMESTAMP(6) NOT NULL DEFAULT '1970-01-01 00:00:01.000000',"
    "takeovers BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    "PRIMARY KEY (scope, entity_type, owner)"
    ") ENGINE=InnoDB";
// One row per (lease, token): who held it from when to when. ended_at is
// when it was released, cut (a restarted process of its owner took it) or
// expired before another owner took it; kLeaseOpen while it is held (its
// end is then its owner's expiry in sluice_lease_holders). A check that no
// partition had two owners at once reads it (tests, `sluice status`).
inline constexpr const char* kLeaseOpen = "2038-01-19 03:14:07.000000";
inline constexpr const char* kLeaseLogDdl =
    "CREATE TABLE IF NOT EXISTS sluice_lease_log ("
    "scope VARCHAR(96) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "partition_id INT UNSIGNED NOT NULL,"
    "token BIGINT UNSIGNED NOT NULL,"
    "owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "taken_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "ended_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "PRIMARY KEY (scope, entity_type, partition_id, token)"
    ") ENGINE=InnoDB";
inline constexpr const char* kMembersDdl =
    "CREATE TABLE IF NOT EXISTS sluice_members ("
    "member_group VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "member VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "address VARCHAR(255) NOT NULL DEFAULT '',"
    "started_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "heartbeat_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "PRIMARY KEY (member_group, member)"
    ") ENGINE=InnoDB";

struct EntityTypeSpec {
  EntityTypeSpec() = default;
  EntityTypeSpec(std::string name_, uint32_t partitions_, std::vector<uint32_t> here_ = {})
      : name(std::move(name_)), partitions(partitions_), here(std::move(here_)) {}
  std::string name;
  uint32_t partitions = 0;
  // The partitions whose event tables this database holds (storage across
  // several servers, sql/layout.h); empty: every partition.
  std::vector<uint32_t> here;
};

// Whether the connection's database has `table`.
Result<bool> TableExists(Connection& conn, const std::string& table);

// "ev_account_p003".
std::string EventTableName(const std::string& type, uint32_t partition);

// CREATE TABLE IF NOT EXISTS for one partition's event table.
std::string EventTableDdl(const std::string& type, uint32_t partition);

// The columns of an event row in the order EventTableDdl declares them and
// every INSERT lists them (event_id, entity_id, version, command_id,
// command_name, expected_version, request, response, state, delta, deleted;
// committed_at and archived take their defaults).
inline constexpr const char* kEventInsertColumns =
    "(event_id,entity_id,version,command_id,command_name,expected_version,request,response,state,delta,deleted)";

// The refusal of a partition count that differs from the recorded one.
Status PartitionCountMismatch(const EntityTypeSpec& t, uint32_t recorded);

// What InitSchema did, for the operator.
struct InitReport {
  int tables_created = 0;     // event tables that did not exist before
  int types_registered = 0;   // entity types recorded for the first time
  int upgraded_from = 0;      // the schema version it had before, when init upgraded it; else 0
};

// Creates the database when missing (the connection must not have selected
// one, or may have selected it already), the metadata tables and the event
// tables of every type's partitions `here`. Refuses with FailedPrecondition when a recorded partition count
// differs from the spec. Running it twice changes nothing.
Result<InitReport> InitSchema(Connection& conn, const std::string& database,
                              const std::vector<EntityTypeSpec>& types);

// Checks, without changing anything, that every type is recorded with the
// same partition count and the tables of its partitions `here` exist.
Status CheckSchema(Connection& conn, const std::vector<EntityTypeSpec>& types);

// MySQL's durability settings as the server reports them.
struct Durability {
  int innodb_flush_log_at_trx_commit = -1;
  int64_t sync_binlog = -1;
  bool log_bin = false;
  // True when a committed transaction survives a power cut: flush=1 and,
  // when a binlog is on, sync_binlog=1.
  // A Galera node (wsrep_on): its cluster status, which must be "Primary"
  // (the node is in the component that may commit), and the cluster's size.
  bool galera = false;
  std::string cluster_status;
  int64_t cluster_size = 0;
  bool durable() const {
    return innodb_flush_log_at_trx_commit == 1 && (!log_bin || sync_binlog == 1) &&
           (!galera || cluster_status == "Primary");
  }
  std::string Describe() const;
};
Result<Durability> ReadDurability(Connection& conn);

}  // namespace sluice::sql
