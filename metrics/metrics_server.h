// MetricsServer: the metrics listener of a process (config `metrics.listen`,
// `metrics.writer_listen` or `metrics.sync_listen`, docs/operations.md).
// Serves
//
//   GET /metrics        the registry in the Prometheus text format
//   GET /healthz        200 {"status":"ok"} while the process is alive
//   GET /readyz         200 or 503: the process's readiness (its own job:
//                       the writer's for serve and writer, the sinks' for sync)
//   GET /readyz/<check> 200 or 503: one check alone ("writer", "sinks"), so
//                       that view health can be watched without taking the
//                       write API out of a load balancer
//
// (HEAD too). It runs on the http module's server with one event-loop thread
// (`sluice-metrics`) and the listener limits of the metrics section, so idle
// or slow clients cannot keep the health routes from answering.
//
// Threads: Start/destroy from one thread; the readiness callbacks and the
// registry's collectors run on the listener's thread and must be cheap
// (return a cached report).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "http/server.h"
#include "metrics/metrics.h"

namespace sluice::metrics {

// A readiness report: the HTTP status follows `ready` (200 or 503).
struct Readiness {
  bool ready = false;
  std::string json;  // e.g. {"ready":false,"checks":{...},"storage":{...},"sinks":[...]}
};
using ReadinessFn = std::function<Readiness()>;

// What the readiness routes answer.
struct ReadinessRoutes {
  ReadinessFn process;                                      // GET /readyz
  std::vector<std::pair<std::string, ReadinessFn>> checks;  // GET /readyz/<name>
};

class MetricsServer {
 public:
  // Binds options.host:options.port (port 0: any free port) and starts
  // serving `registry`, which must outlive the server; the address and the
  // limits come from `options`, the thread count and name are the server's
  // own. Unavailable when the address cannot be bound.
  static Result<std::unique_ptr<MetricsServer>> Start(http::ServerOptions options, const Registry& registry,
                                                      ReadinessRoutes readiness);
  ~MetricsServer();  // stops serving
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port actually bound.
  uint16_t port() const { return server_->port(); }

  // One request without the network (the listener calls it; so can tests).
  http::Response Handle(const http::Request& request) const;

 private:
  MetricsServer(const Registry& registry, ReadinessRoutes readiness)
      : registry_(registry), readiness_(std::move(readiness)) {}

  const Registry& registry_;
  const ReadinessRoutes readiness_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace sluice::metrics
