// HeadWatcher: how the engine learns that partitions moved (DESIGN 4.1).
//
// Commit notices come first: a writer announces each commit it made
// (Announce: in the same process through the writer's on-commit hook, from
// another process through a datagram, engine/notice_listener.h), and the
// watcher wakes the runners of that entity type for that partition only
// (SinkRunner::Wake(partition, head), runners made with
// woken_per_partition). An idle engine so sends no statement at all.
//
// Polling is only the fallback that guarantees progress: a look reads the
// head of every partition of every entity type a runner reads (one
// statement per storage server and type, sql::EventLog::Heads) and wakes
// the runners for each partition that moved. Looks start 5 ms apart and
// double up to engine.idle_poll_max while every move they find was
// announced; a move still unannounced one look later (a writer that cannot
// reach this engine, a lost notice) is counted
// (sluice_engine_unannounced_commits_total) and brings the looks back to
// 5 ms apart: after the first commit it finds (up to idle_poll_max late),
// an engine whose writers do not announce sees commits within a few ms.
//
// Threads: one, `sluice-heads`, with its own event log (MySQL session).
// Announce() and heads() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/sink_runner.h"
#include "metrics/metrics.h"
#include "sql/tables.h"

namespace sluice::engine {

class HeadWatcher {
 public:
  struct Options {
    std::shared_ptr<sql::Storage> storage;
    // Partitions per entity type to watch.
    std::map<std::string, uint32_t> partitions;
    std::chrono::milliseconds fast{5};       // the interval after a look found an unannounced move
    std::chrono::milliseconds slowest{5000};  // engine.idle_poll_max
    std::shared_ptr<metrics::HeadWatcherMetrics> metrics;  // may be null
  };
  // runners: woken for the partitions of their entity type; they outlive the watcher.
  HeadWatcher(Options options, std::vector<SinkRunner*> runners);
  ~HeadWatcher();  // calls Stop()

  void Start();
  void Stop();

  // A writer committed (type, partition) up to event `head`. Types and
  // partitions not watched are ignored. trusted: from the writer of this
  // process; a datagram's notice (trusted false) only wakes the runners,
  // whose own read position decides whether there is anything to read: a
  // forged one costs a read, its head is never taken as known, and it counts
  // as an announcement only up to the head the next look finds.
  void Announce(const std::string& type, uint32_t partition, uint64_t head, bool trusted = true);
  // The highest head known per partition of `type` (announced by the writer
  // of this process, or looked at); empty before the type's first look.
  std::map<uint32_t, uint64_t> heads(const std::string& type) const;
  // Whether looks have read the heads of every type since Start.
  bool looked() const;

 private:
  void Run();
  // One look: reads the heads, wakes the runners, returns whether a move
  // found at the look before is still unannounced.
  Result<bool> Look(sql::EventLog& log);
  void WakeRunners(const std::string& type, uint32_t partition, uint64_t head);

  const Options options_;
  const std::vector<SinkRunner*> runners_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::set<std::string> looked_;  // the types a look has read every head of
  // Per type and partition: the highest head announced by the writer of
  // this process (or found by a look and counted), and the highest known
  // (looked at, or announced by the writer of this process).
  std::map<std::string, std::map<uint32_t, uint64_t>> announced_, known_;
  // Per type and partition: the highest head a datagram announced, cut at
  // each look to the head MySQL gave.
  std::map<std::string, std::map<uint32_t, uint64_t>> noticed_;
  // Watcher thread: per type and partition, heads a look found beyond what was announced.
  std::map<std::string, std::map<uint32_t, uint64_t>> unannounced_;
  std::thread thread_;
};

}  // namespace sluice::engine
