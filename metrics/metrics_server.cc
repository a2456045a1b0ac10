#include "metrics/metrics_server.h"

#include <exception>
#include <string_view>

namespace sluice::metrics {
namespace {

http::Response ReadinessReply(const ReadinessFn& fn) {
  Readiness r;
  try {
    r = fn();
  } catch (const std::exception& e) {
    return http::JsonError(503, "readiness_check_failed", e.what());
  }
  http::Response reply;
  reply.status = r.ready ? 200 : 503;
  reply.body = std::move(r.json);
  reply.headers.emplace_back("Cache-Control", "no-store");
  return reply;
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(http::ServerOptions options, const Registry& registry,
                                                            ReadinessRoutes readiness) {
  std::unique_ptr<MetricsServer> server(new MetricsServer(registry, std::move(readiness)));
  options.io_threads = 1;
  options.thread_name = "sluice-metrics";
  options.max_body_bytes = 4 << 10;
  options.max_header_bytes = 8 << 10;
  const std::string where = options.host + ":" + std::to_string(options.port);
  MetricsServer* self = server.get();
  server->server_ = std::make_unique<http::Server>(
      std::move(options), [self](http::Request&& req, http::Responder respond) { respond(self->Handle(req)); });
  if (Status st = server->server_->Start(); !st.ok()) {
    return Unavailable("metrics: " + st.message());
  }
  return server;
}

MetricsServer::~MetricsServer() { server_->Stop(); }

http::Response MetricsServer::Handle(const http::Request& req) const {
  std::string_view path = req.target;
  path = path.substr(0, path.find('?'));
  const bool known = path == "/metrics" || path == "/healthz" || path == "/readyz" || path.starts_with("/readyz/");
  if (!known) {
    return http::JsonError(404, "not_found",
                           "no route " + std::string(path) + " (routes: /metrics, /healthz, /readyz, /readyz/<check>)");
  }
  if (req.method != "GET" && req.method != "HEAD") {
    http::Response r = http::JsonError(405, "method_not_allowed", "use GET");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  if (path == "/metrics") {
    http::Response r;
    try {
      r.body = registry_.Text();
    } catch (const std::exception& e) {
      return http::JsonError(500, "internal", std::string("collecting the metrics failed: ") + e.what());
    }
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  }
  if (path == "/healthz") {
    http::Response r;
    r.body = R"({"status":"ok"})";
    r.headers.emplace_back("Cache-Control", "no-store");
    return r;
  }
  if (path == "/readyz") return ReadinessReply(readiness_.process);
  const std::string_view name = path.substr(std::string_view("/readyz/").size());
  std::string names;
  for (const auto& [check, fn] : readiness_.checks) {
    if (check == name) return ReadinessReply(fn);
    names += (names.empty() ? "" : ", ") + check;
  }
  return http::JsonError(404, "unknown_check",
                         "this process has no readiness check '" + std::string(name) + "' (checks: " + names + ")");
}

}  // namespace sluice::metrics
