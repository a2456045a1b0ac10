#include "metrics/metrics_server.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/exposer.h>

#include <cstring>
#include <exception>
#include <map>
#include <mutex>

namespace sluice::metrics {
namespace {

// Readiness callbacks by listening port: civetweb's hooks are plain function
// pointers without a pointer back to our server object.
std::mutex& HooksMutex() {
  static std::mutex mu;
  return mu;
}
std::map<int, std::shared_ptr<ReadinessFn>>& Hooks() {
  static std::map<int, std::shared_ptr<ReadinessFn>> hooks;
  return hooks;
}

int Reply(mg_connection* conn, int status, const char* reason, const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            status, reason, body.size());
  mg_write(conn, body.data(), body.size());
  return status;
}

// Answers /healthz and /readyz; 0 lets the exposer handle everything else.
int BeginRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr) return 0;
  const bool health = std::strcmp(info->local_uri, "/healthz") == 0;
  const bool ready = std::strcmp(info->local_uri, "/readyz") == 0;
  if (!health && !ready) return 0;
  if (std::strcmp(info->request_method, "GET") != 0 && std::strcmp(info->request_method, "HEAD") != 0) {
    return Reply(conn, 405, "Method Not Allowed",
                 R"({"error":{"code":"method_not_allowed","message":"use GET"}})");
  }
  if (health) return Reply(conn, 200, "OK", R"({"status":"ok"})");
  std::shared_ptr<ReadinessFn> fn;
  {
    std::lock_guard lock(HooksMutex());
    auto it = Hooks().find(info->server_port);
    if (it != Hooks().end()) fn = it->second;
  }
  if (!fn) return Reply(conn, 503, "Service Unavailable", R"({"ready":false,"reason":"starting"})");
  Readiness r;
  try {
    r = (*fn)();
  } catch (...) {
    return Reply(conn, 503, "Service Unavailable", R"({"ready":false,"reason":"readiness check failed"})");
  }
  return r.ready ? Reply(conn, 200, "OK", r.json) : Reply(conn, 503, "Service Unavailable", r.json);
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, uint16_t port,
                                                            const Registry& registry, ReadinessFn readiness) {
  const std::string address =
      (host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" + std::to_string(port);
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  static const CivetCallbacks kCallbacks = [] {
    CivetCallbacks c;  // its constructor clears every callback
    c.begin_request = &BeginRequest;
    return c;
  }();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "2"}, &kCallbacks);
  } catch (const std::exception& e) {
    return Unavailable("metrics: cannot listen on " + address + ": " + e.what());
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) return Unavailable("metrics: cannot listen on " + address);
  server->port_ = static_cast<uint16_t>(ports.front());
  for (const auto& collectable : registry.collectables()) server->exposer_->RegisterCollectable(collectable);
  {
    std::lock_guard lock(HooksMutex());
    Hooks()[server->port_] = std::make_shared<ReadinessFn>(std::move(readiness));
  }
  return server;
}

MetricsServer::~MetricsServer() {
  {
    std::lock_guard lock(HooksMutex());
    Hooks().erase(port_);
  }
  exposer_.reset();  // joins civetweb's threads
}

}  // namespace sluice::metrics
