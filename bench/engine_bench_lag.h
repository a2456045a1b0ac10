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
#include "bench/engine_bench_lag_types.h"
#include "bench/engine_bench_util.h"
#include "config/config.h"
#include "core/status.h"

namespace sluice::bench {


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
