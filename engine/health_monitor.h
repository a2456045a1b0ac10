// HealthMonitor: lag accounting and readiness (DESIGN 7).
//
// Every `interval` its thread asks main storage, on its own session to each
// storage server, for
// the head of each partition that a sink reads, and for the commit time of
// the oldest event each sink has not applied yet. From that and the runners'
// in-memory offsets it sets, per sink and partition,
//   sluice_engine_lag_events   head - offset
//   sluice_engine_lag_seconds  now - committed_at of event offset+1 (MySQL's clock)
// and per sink sluice_engine_sink_state/_healthy, and sluice_storage_up.
// In a process with a writer it also checks that every event table the
// writer's commands need exists.
//
// Readiness is built from the last check, so serving it costs no query.
// There are two checks, each about one job:
//   writer  main storage answered and every event table is there: the
//           process can serve commands, whatever state its views are in.
//           With several storage servers, main must answer; another
//           server that is down is reported ("storage":{"servers":{..}})
//           but keeps the writer ready: only its partitions' commands fail
//   sinks   every storage server answered and every sink is running (or paused by
//           an operator): the sync engine is doing its job
// A process is ready when the check of its own job passes: the writer's for
// `serve` and `writer` (a view down must not take the write API out of a
// load balancer: the engine catches the view up later, and nothing is lost),
// the sinks' for `sync`. Every report carries both checks' verdicts and
// what they saw, e.g.
//   {"ready":true,"checks":{"sinks":false,"writer":true},
//    "schema":{"ok":true},"storage":{"reachable":true},
//    "sinks":[{"name":"cache","state":"backoff","healthy":false,"lag_events":12,
//              "last_error":"connection refused"}]}
//
// Lifecycle: construct, Start() (runs the first check before returning),
// Stop() (or destroy). The readiness calls from any thread. The engine must
// outlive the monitor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "metrics/metrics.h"
#include "metrics/metrics_server.h"
#include "sql/connection.h"
#include "sql/layout.h"

namespace sluice::engine {

class SyncEngine;

class HealthMonitor {
 public:
  // engine: null without a sync engine (`sluice writer`). writer: the
  // process serves commands (`serve`, `writer`).
  HealthMonitor(config::Config config, const SyncEngine* engine, bool writer, metrics::Registry& registry,
                std::chrono::milliseconds interval = std::chrono::seconds(1));
  ~HealthMonitor();  // calls Stop()
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  void Start();
  void Stop();

  // The process's readiness: the writer check with a writer, else the sinks check.
  metrics::Readiness Readiness() const;
  // One check alone (the writer's is not ready without a writer, the
  // sinks' not without an engine).
  metrics::Readiness WriterReadiness() const;
  metrics::Readiness SinksReadiness() const;
  // The metrics listener's readiness routes: /readyz and a /readyz/<check>
  // per check this process runs ("writer", "sinks"). The monitor must
  // outlive them.
  metrics::ReadinessRoutes Routes() const;

 private:
  void Run();
  void Check();
  // FailedPrecondition naming the first event table the configured types
  // need that its server lacks, among the servers that are `up`.
  Status CheckEventTables(const std::vector<Status>& up);

  // The last report with `ready` set to `ready`.
  metrics::Readiness Report(bool ready) const;

  const config::Config config_;
  const SyncEngine* const engine_;
  const bool writer_;
  const std::chrono::milliseconds interval_;
  metrics::StorageMetrics storage_metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  // The last check: each check's verdict, and the report without "ready".
  bool writer_ready_ = false;
  bool sinks_ready_ = false;
  std::string report_ = R"({"reason":"starting"})";
  std::thread thread_;

  // Connects to every storage server not connected and pings it: each one's status.
  std::vector<Status> Ping();

  const sql::StorageLayout layout_;
  // A session per storage server: monitor thread (and Start) only.
  std::vector<std::unique_ptr<sql::Connection>> conns_;
};

}  // namespace sluice::engine
