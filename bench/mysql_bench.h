// The writer benchmark's same-run baselines, straight against MySQL, and its
// checks of what the writer stored.
//
//   naive       per command, on one connection: read the entity's latest
//               event, INSERT version+1 with event_id = head+1, autocommit.
//               Several threads on the same entity collide on the unique keys;
//               each collision is counted and the command retried.
//   raw_insert  multi-row INSERTs (autocommit) of rows shaped like the
//               writer's, without reading anything: what MySQL can take.
//
// Each baseline writes into its own event table (sql::EventTableDdl of type
// bench_naive / bench_raw), dropped and re-created at the start of the run,
// in a database of its own.
//
// Threads: every function runs on the calling thread and joins whatever
// threads it starts before returning; each thread opens its own connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/http_load.h"
#include "core/status.h"
#include "sql/connection.h"

namespace sluice::bench {

struct SqlBenchOptions {
  sql::ConnectParams mysql;  // database: the baselines' own (created when missing)
  std::string run_id;
  std::string note;  // see MakeNote()
  uint64_t entities = 1;
  uint64_t seed = 1;
  uint32_t threads = 1;
  uint64_t warmup = 0;       // commands (naive) or rows (raw_insert) before timing
  uint64_t count = 0;        // timed commands or rows
  double min_seconds = 0;    // naive only: keep going at least this long
  uint32_t batch_rows = 1000;  // raw_insert: rows per INSERT
};

struct SqlBenchResult {
  uint64_t ok = 0;          // timed commands (naive) or rows (raw_insert) written
  uint64_t failures = 0;
  uint64_t conflicts = 0;   // naive: INSERTs that lost a race (duplicate key / deadlock)
  uint64_t statements = 0;  // raw_insert: timed INSERT statements
  double seconds = 0;
  std::vector<uint64_t> latencies_ns;  // per command (naive) or per statement (raw_insert)
  std::vector<std::string> failure_samples;
  uint64_t table_problems = 0;  // found by CheckEventTable afterwards
  std::vector<std::string> table_samples;
};

Result<SqlBenchResult> RunNaive(const SqlBenchOptions& options);
Result<SqlBenchResult> RunRawInsert(const SqlBenchOptions& options);

// Checks an event table: event ids are exactly 1..n (I3, whole table) and the
// versions of every entity whose id starts with `entity_prefix` are exactly
// 1..k (I1). When expected_rows is set, that many rows must match the prefix.
// Returns the problems found (an error only when the check could not run).
Result<std::vector<std::string>> CheckEventTable(sql::Connection& conn, const std::string& table,
                                                 const std::string& entity_prefix,
                                                 std::optional<uint64_t> expected_rows);

// Compares every HTTP reply with the row the writer stored for its command id
// (same entity, version, event_id, partition) and finds stored rows of the
// run that no reply reported. Returns the problems found.
Result<std::vector<std::string>> CompareRepliesWithStorage(sql::Connection& conn, const std::string& type,
                                                           uint32_t partitions, const std::string& run_id,
                                                           const std::vector<HttpReply>& replies,
                                                           const std::vector<std::string>& entity_ids);

// How the writer grouped rows into commits: rows sharing a committed_at in
// one partition came from one multi-row INSERT.
struct CommitStats {
  uint64_t commits = 0;
  uint64_t rows = 0;
  uint64_t max_rows = 0;
  double mean_rows = 0;
  uint64_t median_rows_weighted = 0;  // half of the rows went in commits at least this big
};
// Only rows of the run (entity prefix) from phase `phase` on are counted.
Result<CommitStats> ReadCommitStats(sql::Connection& conn, const std::string& type, uint32_t partitions,
                                    const std::string& entity_prefix, const std::vector<HttpReply>& replies,
                                    uint32_t phase);

// What the events of a run take in storage, over a type's event tables.
// The column bytes are of the rows whose entity id starts with the prefix;
// the table bytes are InnoDB's data_length + index_length of the whole
// tables (after ANALYZE TABLE, so that they are current: pages allocated,
// off-page text included), with the rows they hold.
struct StoredBytes {
  uint64_t events = 0;        // rows of the run
  uint64_t delta_events = 0;  // of them, those that store a delta
  uint64_t state = 0, delta = 0, request = 0, response = 0;  // LENGTH() sums
  uint64_t table_rows = 0;    // COUNT(*) of the whole tables
  uint64_t table_bytes = 0;   // data_length + index_length
};
Result<StoredBytes> ReadStoredBytes(sql::Connection& conn, const std::string& type, uint32_t partitions,
                                    const std::string& entity_prefix);

// A few of MySQL's global status counters (SHOW GLOBAL STATUS): statements
// run and fsyncs done, server-wide (other clients of the server count too).
struct ServerCounters {
  uint64_t inserts = 0;  // Com_insert
  uint64_t selects = 0;  // Com_select
  uint64_t fsyncs = 0;   // Innodb_data_fsyncs (data and redo log files)
  uint64_t page_reads = 0;  // Innodb_buffer_pool_read_requests (pages looked up, cached or not)
};
Result<ServerCounters> ReadServerCounters(sql::Connection& conn);

// The partition count recorded for an entity type (sluice_entity_types).
Result<uint32_t> RecordedPartitions(sql::Connection& conn, const std::string& type);

}  // namespace sluice::bench
