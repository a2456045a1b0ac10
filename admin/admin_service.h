// AdminService: the admin endpoint of a running `serve` or `sync` process,
// through which the operator commands reach its sync engine.
//
//   GET  /v1/status                      every sink: state, paused, counters,
//                                        offsets per partition, rebuild progress
//   POST /v1/sinks/{sink}/pause          stop applying (offsets kept)
//   POST /v1/sinks/{sink}/resume         carry on
//   POST /v1/sinks/{sink}/rewind         body {"to": N | "beginning", "partition": P?}
//   POST /v1/sinks/{sink}/rebuild        start a rebuild (202), see admin/view_rebuild.h
//   GET  /v1/sinks/{sink}/rebuild        the rebuild's progress
//
// Every request, read or change, needs "Authorization: Bearer
// <admin.token>": 401 without it, 403 with another token, and 403 for
// everyone when no token is configured (the endpoint then serves nothing). Bodies are JSON; errors are
// {"error": {"code": ..., "message": ...}} like the writer's. Another method
// on one of these paths is 405 with an Allow header naming the ones it takes.
//
// Threads: Start/Stop from the main thread. Requests run on the HTTP
// server's threads; a change waits for the sink's applier thread to carry it
// out (engine/sink_runner.h), so it answers once it has taken effect.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "admin/view_rebuild.h"
#include "config/config.h"
#include "engine/sync_engine.h"
#include "http/server.h"
#include "metrics/metrics.h"

namespace sluice::admin {

class AdminService {
 public:
  // `engine` must outlive the service and be started. registry: where the
  // endpoint's connection counts go (null: nowhere); it must outlive the service.
  AdminService(const config::Config& config, engine::SyncEngine& engine, metrics::Registry* registry = nullptr);
  ~AdminService();  // calls Stop()

  // Binds admin.listen and serves.
  Status Start();
  // Stops serving and abandons a rebuild in progress (its live sink resumes).
  void Stop();
  uint16_t port() const;

  // One request, without the network (the HTTP handler calls it; so can tests).
  http::Response Handle(const http::Request& request);

 private:
  // Why `req` may not be served (no admin.token configured, none given, a
  // wrong one); nullopt when it may.
  std::optional<http::Response> Refusal(const http::Request& req) const;
  http::Response Status_();
  http::Response Change(const std::string& sink, const std::string& action, const std::string& body);
  http::Response Rewind(engine::SinkRunner& runner, const std::string& body);
  http::Response StartRebuild(const config::SinkConfig& sink, engine::SinkRunner& runner);
  http::Response RebuildProgressReply(const std::string& sink, int status);
  // Under mu_: a rebuild of `sink` that has not finished.
  bool Rebuilding(const std::string& sink) const;

  const config::Config& config_;
  engine::SyncEngine& engine_;
  metrics::HttpListenerMetrics http_metrics_;
  std::unique_ptr<http::Server> server_;

  std::mutex change_mu_;   // one change at a time
  mutable std::mutex mu_;  // rebuilds_
  std::map<std::string, std::unique_ptr<ViewRebuild>> rebuilds_;  // by sink; the last one of each
};

}  // namespace sluice::admin
