// DurabilityBarrier: the engine never hands a sink an event that a crash of
// the MySQL server could still roll back (DESIGN I5, docs/storage.md).
//
// InnoDB makes a commit visible to other sessions before its redo log is on
// disk; with innodb_flush_log_at_trx_commit=1 the committing client waits for
// the flush, but a reader may already have seen the rows. If mariadbd dies in
// between, recovery rolls the commit back, the writer reuses its event_ids for
// other commands, and a view that applied the lost events keeps them for ever.
// So a reader calls Wait() after its SELECT returned and before it queues what
// it read: Wait() returns once the redo log is durable past every commit that
// SELECT could have seen.
//
// Two ways, chosen by engine.durability_barrier:
//   lsn     one query reads the server's current log sequence number (LSN);
//           every commit a finished read saw has a smaller one. Then it waits
//           until Innodb_lsn_flushed passes it: the writers' own commits
//           flush the log, so this is usually one group commit away and
//           costs no write. When no writer flushes it within kPatience (a
//           backlog drain with nobody writing, while InnoDB's background
//           work moved the LSN on), the round commits a row of its own, as
//           `commit` does, and goes on waiting: InnoDB would otherwise take
//           up to its once-a-second background flush. MariaDB reports both
//           numbers; MySQL does not.
//   commit  commits a one-row UPDATE of its own (table
//           sluice_durability_barrier, created on first use). Its commit gets
//           a later LSN than anything the read saw, and returns only once the
//           log is flushed up to it. Works on every MySQL and MariaDB, for
//           the price of a write and a flush per round.
//   auto    lsn where the server reports Innodb_lsn_flushed, else commit.
//   off     Wait() returns at once.
//
// Rounds are shared (group commit): while one caller runs a round, the others
// wait, and the next round covers every caller that arrived meanwhile, so a
// process with many sinks and partitions pays about one round at a time.
//
// Storage across several servers: one barrier per server, and for a sink
// whose entity type spans servers a barrier made of those servers' barriers.
//
// Threads: Wait() from any thread; one caller at a time runs the round on the
// barrier's own connection.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/status.h"
#include "metrics/metrics.h"
#include "sql/connection.h"
#include "sql/layout.h"

namespace sluice::engine {

class DurabilityBarrier {
 public:
  // metrics: where rounds are counted; null: nowhere.
  DurabilityBarrier(sql::ConnectParams mysql, config::DurabilityBarrier mode,
                    std::shared_ptr<metrics::DurabilityBarrierMetrics> metrics = nullptr);
  // A barrier over several storage servers (sql/layout.h): Wait() waits on
  // each of `parts` in turn, so it covers every read of any of them.
  explicit DurabilityBarrier(std::vector<std::shared_ptr<DurabilityBarrier>> parts);
  ~DurabilityBarrier();
  DurabilityBarrier(const DurabilityBarrier&) = delete;
  DurabilityBarrier& operator=(const DurabilityBarrier&) = delete;

  // Blocks until every commit visible to a read that returned before this
  // call is durable. Unavailable when the server cannot be reached or the
  // log does not get there within `timeout`; the caller must then not hand
  // on what it read (read it again later).
  [[nodiscard]] Status Wait();

  // The mode rounds use: what was configured, or what auto chose once it
  // could ask the server ("auto" until then).
  std::string mode() const;

  // Rounds run and the time spent in them, for tests and benchmarks.
  struct Counters {
    uint64_t waits = 0;       // calls of Wait()
    uint64_t rounds = 0;      // rounds run (at most one per wait; fewer when waits share one)
    uint64_t lsn_polls = 0;   // lsn mode: queries of Innodb_lsn_flushed after the first
    uint64_t forced_flushes = 0;  // lsn mode: rounds that committed a row to flush the log
    std::chrono::nanoseconds round_time{0};
  };
  Counters counters() const;

  // The longest a round waits for the log to be flushed (lsn mode).
  static constexpr std::chrono::seconds kTimeout{10};
  // How long a round in lsn mode waits for a writer to flush the log before
  // it commits a row of its own to flush it.
  static constexpr std::chrono::microseconds kPatience{1000};

 private:
  Status RunRound();
  Status Connect();
  Status LsnRound();
  Status CommitRound();
  // Creates the one-row table CommitRound updates (once per connection).
  Status EnsureBarrierTable();

  const sql::ConnectParams mysql_;
  const std::vector<std::shared_ptr<DurabilityBarrier>> parts_;  // not empty: a barrier over several servers
  const std::shared_ptr<metrics::DurabilityBarrierMetrics> metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  config::DurabilityBarrier mode_;  // kAuto until resolved on the first connection
  uint64_t next_ticket_ = 0;        // last ticket handed out
  uint64_t covered_ = 0;            // every ticket up to this one is durable
  bool running_ = false;            // a caller runs a round
  Counters counters_;
  std::unique_ptr<sql::Connection> conn_;  // only the caller running a round touches it
  bool table_ready_ = false;               // conn_ has seen sluice_durability_barrier exist
  bool force_refused_ = false;             // the server refused the forced flush's commit
};

// One barrier per storage server of a layout (their rounds shared by every
// reader of that server), and the barrier a reader of an entity type waits
// on: its server's, or one over its servers when it spans several.
class ServerBarriers {
 public:
  ServerBarriers(const sql::StorageLayout& layout, config::DurabilityBarrier mode,
                 const std::shared_ptr<metrics::DurabilityBarrierMetrics>& metrics = nullptr);
  std::shared_ptr<DurabilityBarrier> ForType(const std::string& type, uint32_t partitions) const;

 private:
  const sql::StorageLayout layout_;
  std::vector<std::shared_ptr<DurabilityBarrier>> servers_;
};

}  // namespace sluice::engine
