// HealthMonitor: lag accounting and readiness (DESIGN 7).
//
// Every `interval` its thread asks main storage, on its own connection, for
// the head of each partition that a sink reads, and for the commit time of
// the oldest event each sink has not applied yet. From that and the runners'
// in-memory offsets it sets, per sink and partition,
//   sluice_engine_lag_events   head - offset
//   sluice_engine_lag_seconds  now - committed_at of event offset+1 (MySQL's clock)
// and per sink sluice_engine_sink_state/_healthy, and sluice_storage_up.
// Without an engine (`sluice writer`) it only checks that storage answers.
//
// The readiness report (/readyz) is built from the last check, so serving it
// costs no query: ready when storage answered and every sink is running (or
// paused by an operator); otherwise 503 with the reason per sink.
//
// Lifecycle: construct, Start() (runs the first check before returning),
// Stop() (or destroy). Readiness() from any thread. The engine must outlive
// the monitor.
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

namespace sluice::engine {

class SyncEngine;

class HealthMonitor {
 public:
  // engine: null for a writer-only process.
  HealthMonitor(config::Config config, const SyncEngine* engine, metrics::Registry& registry,
                std::chrono::milliseconds interval = std::chrono::seconds(1));
  ~HealthMonitor();  // calls Stop()
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  void Start();
  void Stop();

  // The last check's verdict and JSON body, e.g.
  // {"ready":false,"storage":{"reachable":true},
  //  "sinks":[{"name":"cache","state":"backoff","healthy":false,"lag_events":12,
  //            "last_error":"connection refused"}]}
  metrics::Readiness Readiness() const;

 private:
  void Run();
  void Check();
  // Heads of every partition of `type`, or the failure.
  Result<std::vector<uint64_t>> Heads(const std::string& type, uint32_t partitions);

  const config::Config config_;
  const SyncEngine* const engine_;
  const std::chrono::milliseconds interval_;
  metrics::StorageMetrics storage_metrics_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  metrics::Readiness report_{false, R"({"ready":false,"reason":"starting"})"};
  std::thread thread_;

  std::unique_ptr<sql::Connection> conn_;  // monitor thread (and Start) only
};

}  // namespace sluice::engine
