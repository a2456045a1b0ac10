// Pull lag under a steady load: how long after its commit an event becomes
// visible in a Redis view, or readable in a Kafka topic
// (engine_bench_lag_kafka.h).
//
//   load     an open-loop HTTP client (Boost.Beast, one event-loop thread,
//            keep-alive connections): command i is due at start + i/rate,
//            whatever the replies do; a due command waits for a free
//            connection, and its latency counts from when it was due (no
//            coordinated omission); commands still waiting when the
//            schedule ends are not sent but counted (the server fell
//            behind). Commands are `patch` with a unique
//            Idempotency-Key on `entities` entities; a 503 or a broken
//            connection is retried with the same key
//   sampler  one thread that MGETs the keys of `sample` of those entities in
//            a loop and records the wall-clock time each new `_version` is
//            first seen; on a kafka sink, a consumer of the sink's topic
//            that notes when each record of those entities is first read
//   lag      afterwards, each observed (entity, version)'s committed_at comes
//            from its event table (UNIX_TIMESTAMP(committed_at), us) and
//            lag = first seen - committed_at, for versions committed inside
//            the measured window (after the warm-up). Same host, same clock.
//            The sampler sees a version up to one poll cycle late, so the
//            lags are slight over-estimates
//
// Verified: every command got a 200 with a version; no sampled key's version
// ever went backwards; every observed (entity, version) is in storage; after
// the load, every sampled entity reaches the last version a reply reported.
//
// Threads: RunLag runs on the caller's thread plus the event loop, sampler
// and progress threads, all joined before it returns.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_common.h"
#include "bench/engine_bench_util.h"
#include "config/config.h"
#include "core/status.h"

namespace sluice::bench {

// The id of the lag run's entity k.
std::string LagEntityId(const std::string& run_id, uint64_t k);

// What the lag run watches: when each new version of the sampled entities
// first shows in the view.
class LagObserver {
 public:
  struct Seen {
    uint32_t entity;  // the sampled entity's number
    uint64_t version;
    int64_t at_us;    // wall clock, us since the epoch
  };
  virtual ~LagObserver() = default;
  virtual void Start() = 0;
  // Stops and joins; the loop's error, if any.
  virtual Status Stop() = 0;
  virtual uint64_t last(size_t k) const = 0;  // the highest version seen of entity k
  virtual uint64_t polls() const = 0;
  virtual uint64_t went_back() const = 0;     // a version older than (or the same as) one seen before
  virtual size_t observations() const = 0;
  virtual double cycle_ms() const = 0;        // mean time between two polls
  // After Stop().
  virtual const std::vector<Seen>& seen() const = 0;
};

struct LagOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string run_id;
  Endpoint redis;                // where the sampler reads the view
  double rate = 10000;           // commands (one event each) per second
  double seconds = 20;           // measured window
  double warmup_seconds = 3;     // before it, same rate, not counted
  uint32_t connections = 64;
  uint64_t entities = 10000;
  uint32_t sample = 300;         // entities the sampler watches
  uint32_t poll_interval_us = 1000;  // sampler pause between two MGETs
  double catchup_timeout_seconds = 30;
  uint32_t max_attempts = 50;
  std::vector<std::pair<std::string, pid_t>> watch;  // processes for the CPU split
  std::string dump_path;  // when set: one line per lag sample, "committed_at_us lag_us entity version"
  // Where the events come from: "http", patch commands to a running writer
  // (serve or writer); "storage", rows inserted straight into the event
  // tables by `storage_writers` threads (each owning the partitions p with
  // p % storage_writers == its number, one transaction per round of due
  // events), for a running `sluice sync`: the pull path alone under a rate
  // that no writer on this machine has to sustain; "kafka_raw" (a kafka
  // sink only, no sluice): the records the sink would write for those
  // events, produced straight into its topic (KafkaRawLoad), the baseline.
  std::string source = "http";
  uint32_t storage_writers = 4;
};

struct LagResult {
  uint64_t commands = 0;          // scheduled in the measured window
  uint64_t ok = 0, failures = 0;  // replies (warm-up included)
  uint64_t retries = 0, reconnects = 0;
  uint64_t max_backlog = 0;       // most due commands waiting for a connection
  uint64_t unsent = 0;            // still waiting when the schedule ended: not sent
  double achieved_rate = 0;       // 200 replies that arrived inside the window / its length
  LatencySummary http;            // replies inside the window, from due time to reply
  uint64_t lag_samples = 0;
  LatencySummary lag;             // visible - committed_at
  double lag_min_ms = 0;
  uint64_t versions_committed = 0;  // of sampled entities in the window (observed or not)
  uint64_t polls = 0;
  double poll_cycle_ms = 0;       // mean time between two MGETs
  double catchup_seconds = 0;     // end of load to every sampled entity final
  std::vector<std::pair<std::string, std::string>> cpu;  // over the measured window
  // MySQL server-wide statements and fsyncs per second over the window.
  double mysql_selects_per_s = 0, mysql_inserts_per_s = 0, mysql_fsyncs_per_s = 0;
  std::vector<std::string> problems;
};

// `sink` is the redis sink (url, key template, format json) or the kafka
// sink that the running sluice feeds; config gives main storage and the
// partition count.
Result<LagResult> RunLag(const config::Config& config, const config::SinkConfig& sink, const LagOptions& options);

}  // namespace sluice::bench
