// MetricsServer: the metrics listener (config `metrics.listen`). Serves
//
//   GET /metrics  the registry in the Prometheus text format
//   GET /healthz  200 {"status":"ok"} while the process is alive
//   GET /readyz   200 or 503 with the JSON body of the readiness callback
//                 (storage reachable, every sink healthy)
//
// Built on prometheus-cpp's Exposer (civetweb, its own small thread pool).
// The health routes are answered from civetweb's begin_request hook, so
// every server in the process registers its callback by listening port.
//
// Threads: Start/destroy from one thread; the readiness callback runs on a
// civetweb thread and must be cheap (return a cached report).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "metrics/metrics.h"

namespace prometheus {
class Exposer;
}

namespace sluice::metrics {

// A readiness report: the HTTP status follows `ready` (200 or 503).
struct Readiness {
  bool ready = false;
  std::string json;  // e.g. {"ready":false,"storage":{...},"sinks":[...]}
};
using ReadinessFn = std::function<Readiness()>;

class MetricsServer {
 public:
  // Binds host:port (port 0: any free port) and starts serving `registry`,
  // which must outlive the server. Unavailable when the port is taken.
  static Result<std::unique_ptr<MetricsServer>> Start(const std::string& host, uint16_t port,
                                                      const Registry& registry, ReadinessFn readiness);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port actually bound.
  uint16_t port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  uint16_t port_ = 0;
};

}  // namespace sluice::metrics
