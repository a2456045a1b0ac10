// Drain: the time `sluice sync` takes to apply a backlog already in the event
// tables to ONE sink, and the memory it uses meanwhile.
//
//   1. reads every partition's head and the (entity, version) of its last
//      event; refuses when the sink already has offsets (it must start at 0)
//   2. starts `sluice sync --config F` (the config must hold only this sink)
//   3. every 100 ms: VmRSS from /proc/PID/status (peak kept); every few ms:
//      whether the last event of every partition is visible in the view (a
//      pipelined GET per partition for redis, one SELECT for mysql). The
//      engine applies a partition in event_id order, so the last event
//      visible means the whole partition is; done when all are
//   4. then waits for the flushed offsets (sluice_offsets) to reach every
//      head, reads VmHWM, stops the process (SIGTERM, exit code 0 expected)
//      and checks the stored counters: applied = events, no stale, no dead
//      letters, state running
//
// Threads: RunDrain runs on the caller's thread plus a progress thread.
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

struct DrainOptions {
  std::string sluice_binary;
  std::string config_path;
  std::string log_path;
  uint32_t engines = 1;  // `sluice sync` processes sharing the sink (--id drain-1, drain-2, ...)
  std::vector<std::pair<std::string, pid_t>> watch;  // extra processes for the CPU split
  double timeout_seconds = 300;
  uint32_t probe_interval_ms = 5;
  uint32_t rss_interval_ms = 100;
  ViewServers servers;  // where the probe reads the view
};

struct DrainResult {
  uint64_t events = 0;
  double seconds = 0;              // start of the process to every last event visible
  double first_visible_seconds = 0;  // to the first probe that saw any partition advance (startup cost)
  double offsets_seconds = 0;      // to the flushed offsets reaching every head
  uint64_t rss_peak_kib = 0;       // highest VmRSS sampled
  uint64_t hwm_kib = 0;            // VmHWM just before stopping
  uint64_t rss_samples = 0;
  int exit_code = -1;              // of sluice sync after SIGTERM
  uint64_t applied = 0, stale = 0, dead_lettered = 0;
  double redis_us_per_event = -1;  // redis sinks: server time in EVALSHA per event
  // MySQL server-wide, from the start to the last event visible.
  double mysql_selects_per_s = 0, mysql_inserts_per_s = 0, mysql_fsyncs_per_s = 0;
  double mysql_page_reads_per_event = 0;  // InnoDB pages looked up per event (the probe's included)
  std::vector<std::pair<std::string, std::string>> cpu;  // CpuWatch::Compare over the drain
  std::vector<std::string> problems;
};

Result<DrainResult> RunDrain(const config::Config& config, const DrainOptions& options);

}  // namespace sluice::bench
