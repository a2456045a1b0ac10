// The archive's benchmarks (docs/archive.md): how fast `sluice archive run`
// moves events out of the hot event tables and what that saves, and how
// fast `sluice rebuild` replays a view's history, whether it lives in the
// hot tables or in the archive's segments.
//
// RunArchive:
//   0. a file store's directory is created when missing
//   1. ANALYZE TABLE on every event table of the config's one entity type,
//      then their size (information_schema data_length + index_length) and
//      rows: the hot tables as loaded
//   2. runs `sluice archive run --config F` to completion; its CPU is the
//      child's (getrusage RUSAGE_CHILDREN around the wait), the --watch
//      processes' (MariaDB) from CpuWatch over the same span
//   3. ANALYZE TABLE again and the sizes: what archiving left in place
//      (InnoDB keeps the pages a shrunken row freed until the table is
//      rebuilt), then OPTIMIZE TABLE and the sizes once more: what an
//      operator gets back
//   4. `sluice archive status --json`: events in segments, their bytes, the
//      stubs left in the hot tables
// RunRebuild: `sluice rebuild --config F --sink S` against the process
// already running F (its admin endpoint), timed until it exits 0; the
// events replayed are every partition's head (the backlog's event_ids are
// dense); CPU of the --watch processes (the running sluice, the servers);
// the memory of the --watch processes named "sluice" meanwhile.
//
// RunHistory: `GET /v1/entities/<type>/<id>/events?limit=1000` (pages
// followed) for `sample` entities of the backlog spread evenly over it, on
// one keep-alive connection to a running writer; every history must be the
// backlog's, whole and in order (versions 1..V, each state and command id as
// loaded), else a problem. Events/s and requests/s, CPU of --watch.
//
// Threads: all run on the caller's thread (plus a progress thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/engine_bench_backlog.h"
#include "bench/engine_bench_util.h"
#include "config/config.h"
#include "core/status.h"

namespace sluice::bench {

struct ArchiveBenchOptions {
  std::string sluice_binary;
  std::string config_path;
  std::string log_path;
  std::string sink;  // rebuild
  std::vector<std::pair<std::string, pid_t>> watch;
};

struct HotTables {
  uint64_t rows = 0;
  uint64_t bytes = 0;  // data_length + index_length after ANALYZE TABLE
};

struct ArchiveBenchResult {
  uint64_t events = 0;          // archived by this run (segments' events after - before)
  uint64_t segments = 0;
  double seconds = 0;           // `sluice archive run`, start to exit
  double sluice_cpu_seconds = 0;  // its user + system CPU
  HotTables before, after, optimized;
  uint64_t stubs = 0;           // hot rows whose bodies are in the archive
  uint64_t archive_bytes = 0;   // the segments' objects
  uint64_t archived_state_bytes = 0;  // what those events held in the hot tables
  double optimize_seconds = 0;
  std::vector<std::pair<std::string, std::string>> cpu;  // CpuWatch::Compare over the run, per event
  std::vector<std::string> problems;
};

Result<ArchiveBenchResult> RunArchive(const config::Config& config, const ArchiveBenchOptions& options);

struct RebuildBenchResult {
  uint64_t events = 0;  // every partition's head
  double seconds = 0;
  // The --watch processes named "sluice" together (the running process that
  // does the rebuild), as the drain reports its engines: the highest VmRSS
  // sampled every 100 ms over the rebuild, VmHWM at its end (since that
  // process started), samples taken (0: no "sluice" watched).
  uint64_t rss_peak_kib = 0, hwm_kib = 0, rss_samples = 0;
  std::vector<std::pair<std::string, std::string>> cpu;  // CpuWatch::Compare over the rebuild, per event
};

Result<RebuildBenchResult> RunRebuild(const config::Config& config, const ArchiveBenchOptions& options);

struct HistoryBenchResult {
  uint64_t entities = 0;
  uint64_t requests = 0;
  uint64_t events = 0;
  double seconds = 0;
  std::vector<std::pair<std::string, std::string>> cpu;  // CpuWatch::Compare over the reads, per event
  std::vector<std::string> problems;
};

Result<HistoryBenchResult> RunHistory(const Backlog& backlog, const Endpoint& writer, uint64_t sample,
                                      const ArchiveBenchOptions& options);

}  // namespace sluice::bench
