#include "admin/admin_service.h"

#include <string_view>
#include <vector>

#include "config/sink_type.h"
#include "core/json.h"
#include "core/log.h"

namespace sluice::admin {
namespace {

http::Response Reply(int status, const Json& body) {
  http::Response r;
  r.status = status;
  r.body = CanonicalJson(body) + "\n";
  return r;
}

http::Response Error(int status, std::string_view code, const std::string& message) {
  return Reply(status, Json{{"error", {{"code", code}, {"message", message}}}});
}

// 405 with the Allow header that lists the methods the path takes (RFC 9110).
http::Response MethodNotAllowed(const std::string& allow, const std::string& method, const std::string& path) {
  http::Response r = Error(405, "method_not_allowed", path + " takes " + allow + ", not " + method);
  r.headers.emplace_back("Allow", allow);
  return r;
}

http::Response ErrorFrom(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return Error(400, "invalid_argument", st.message());
    case StatusCode::kNotFound: return Error(404, "not_found", st.message());
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted: return Error(409, "failed_precondition", st.message());
    case StatusCode::kUnavailable: return Error(503, "unavailable", st.message());
    case StatusCode::kPermissionDenied: return Error(403, "forbidden", st.message());
    default: return Error(500, "internal", st.message());
  }
}

// Compares without an early exit, so timing does not tell how much matched.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

std::vector<std::string> PathSegments(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string> out;
  size_t at = 0;
  while (at < target.size()) {
    if (target[at] == '/') {
      ++at;
      continue;
    }
    const size_t end = std::min(target.find('/', at), target.size());
    out.emplace_back(target.substr(at, end - at));
    at = end;
  }
  return out;
}

Json ProgressJson(const RebuildProgress& p) {
  return Json{{"sink", p.sink},   {"phase", p.phase},     {"replayed", p.replayed}, {"total", p.total},
              {"seconds", p.seconds}, {"rate", p.rate}, {"error", p.error}};
}

}  // namespace

AdminService::AdminService(const config::Config& config, engine::SyncEngine& engine, metrics::Registry* registry)
    : config_(config),
      engine_(engine),
      http_metrics_(registry ? *registry : metrics::UnexportedRegistry(), "admin") {}

AdminService::~AdminService() { Stop(); }

Status AdminService::Start() {
  http::ServerOptions o;
  o.host = config_.admin.listen_host;
  o.port = config_.admin.listen_port;
  o.io_threads = 1;
  o.thread_name = "sluice-admin";
  o.max_body_bytes = 64 << 10;
  o.max_header_bytes = 8 << 10;
  const config::ListenerLimits& l = config_.admin.limits;
  o.limits = {l.max_connections, l.header_timeout, l.body_timeout, l.idle_timeout, l.write_timeout};
  if (config_.admin.tls.enabled()) {
    o.tls = http::ServerTls{config_.admin.tls.cert, config_.admin.tls.key, config_.admin.tls.client_ca};
  }
  http_metrics_.Attach(o);
  server_ = std::make_unique<http::Server>(
      o, [this](http::Request&& req, http::Responder respond) { respond(Handle(req)); });
  return server_->Start().WithContext("admin endpoint " +
                                      config::FormatListenAddress(config_.admin.listen_host, config_.admin.listen_port));
}

void AdminService::Stop() {
  if (server_) server_->Stop();
  std::map<std::string, std::unique_ptr<ViewRebuild>> rebuilds;
  {
    std::lock_guard lock(mu_);
    rebuilds.swap(rebuilds_);
  }
  rebuilds.clear();  // abandons unfinished ones; their live sinks resume
}

uint16_t AdminService::port() const { return server_ ? server_->port() : 0; }

bool AdminService::Rebuilding(const std::string& sink) const {
  const auto it = rebuilds_.find(sink);
  return it != rebuilds_.end() && !it->second->progress().finished();
}

// Reads and changes alike need the bearer token; with none configured,
// the endpoint answers nothing but that.
std::optional<http::Response> AdminService::Refusal(const http::Request& req) const {
  if (config_.admin.token.empty()) {
    return Error(403, "admin_disabled",
                 "this process's admin endpoint refuses reads and changes because its config has no admin.token; "
                 "set admin.token (a secret such as \"${env:SLUICE_ADMIN_TOKEN}\") and restart it");
  }
  constexpr std::string_view kBearer = "Bearer ";
  const std::string_view authorization = req.Header("Authorization").value_or("");
  if (authorization.size() <= kBearer.size() || authorization.compare(0, kBearer.size(), kBearer) != 0) {
    http::Response r = Error(401, "unauthorized", "the admin endpoint needs the header Authorization: Bearer <admin.token>");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  if (!SameSecret(authorization.substr(kBearer.size()), config_.admin.token)) {
    return Error(403, "forbidden", "the bearer token is not this process's admin.token");
  }
  return std::nullopt;
}

http::Response AdminService::Handle(const http::Request& req) {
  const auto seg = PathSegments(req.target);
  if (seg.size() == 2 && seg[0] == "v1" && seg[1] == "status") {
    if (req.method != "GET") return MethodNotAllowed("GET", req.method, "/v1/status");
    if (auto refused = Refusal(req)) return std::move(*refused);
    return Status_();
  }
  if (seg.size() == 4 && seg[0] == "v1" && seg[1] == "sinks") {
    const std::string& sink = seg[2];
    const std::string& action = seg[3];
    if (action != "pause" && action != "resume" && action != "rewind" && action != "rebuild") {
      return Error(404, "not_found", "no route " + req.target + " (actions: pause, resume, rewind, rebuild)");
    }
    const bool read = action == "rebuild" && req.method == "GET";
    if (req.method != "POST" && !read) {
      return MethodNotAllowed(action == "rebuild" ? "GET, POST" : "POST", req.method,
                              "/v1/sinks/" + sink + "/" + action);
    }
    if (auto refused = Refusal(req)) return std::move(*refused);
    if (read) {
      std::lock_guard lock(mu_);
      if (!rebuilds_.count(sink)) return Error(404, "not_found", "no rebuild of sink '" + sink + "' has run in this process");
      return RebuildProgressReply(sink, 200);
    }
    return Change(sink, action, req.body);
  }
  return Error(404, "not_found", "no route " + req.target);
}

http::Response AdminService::Status_() {
  Json sinks = Json::array();
  for (const auto& runner : engine_.runners()) {
    const auto t = runner->totals();
    Json parts = Json::array();
    for (const auto& [p, off] : t.offsets) parts.push_back({{"partition", p}, {"offset", off}});
    Json s = {{"name", runner->name()}, {"state", SinkStateName(t.state)},       {"paused", t.paused},
              {"last_error", t.last_error}, {"applied", t.applied}, {"stale", t.stale},
              {"dead_lettered", t.dead_lettered}, {"partitions", parts}, {"rebuild", nullptr}};
    {
      std::lock_guard lock(mu_);
      if (auto it = rebuilds_.find(runner->name()); it != rebuilds_.end()) {
        s["rebuild"] = ProgressJson(it->second->progress());
      }
    }
    sinks.push_back(std::move(s));
  }
  return Reply(200, Json{{"sinks", sinks}});
}

http::Response AdminService::Change(const std::string& sink, const std::string& action, const std::string& body) {
  engine::SinkRunner* runner = nullptr;
  for (const auto& r : engine_.runners()) {
    if (r->name() == sink) runner = r.get();
  }
  const config::SinkConfig* sink_cfg = nullptr;
  for (const auto& s : config_.sinks) {
    if (s.name == sink) sink_cfg = &s;
  }
  if (!runner || !sink_cfg) return Error(404, "unknown_sink", "this process runs no sink named '" + sink + "'");
  std::lock_guard change(change_mu_);
  {
    std::lock_guard lock(mu_);
    if (Rebuilding(sink)) {
      return Error(409, "rebuilding", "sink '" + sink + "' is being rebuilt; wait for the rebuild to finish");
    }
  }
  if (action == "rebuild") return StartRebuild(*sink_cfg, *runner);
  if (action == "rewind") {
    const config::SinkType* type = config_.sink_types ? config_.sink_types->Find(sink_cfg->type) : nullptr;
    if (type != nullptr && type->exactly_once) {
      // Its own offsets call re-delivered events stale: a rewind would change
      // nothing, so the view is recomputed instead (202, the rebuild's progress).
      Log(LogLevel::kInfo, "admin: sink " + sink + " is an aggregate view: rewind rebuilds it");
      return StartRebuild(*sink_cfg, *runner);
    }
    return Rewind(*runner, body);
  }
  Status st = action == "pause" ? runner->Pause() : runner->Resume();
  if (!st.ok()) return ErrorFrom(st);
  Log(LogLevel::kInfo, "admin: sink " + sink + (action == "pause" ? " paused" : " resumed"));
  const auto t = runner->totals();
  return Reply(200, Json{{"sink", sink}, {"state", SinkStateName(t.state)}, {"paused", t.paused}});
}

http::Response AdminService::Rewind(engine::SinkRunner& runner, const std::string& body) {
  auto parsed = ParseJson(body.empty() ? "{}" : body);
  if (!parsed.ok() || !parsed->is_object()) {
    return Error(400, "invalid_argument", "the body must be a JSON object such as {\"to\": 0, \"partition\": 1}");
  }
  const Json& b = *parsed;
  for (const auto& [key, value] : b.items()) {
    if (key != "to" && key != "partition") return Error(400, "invalid_argument", "unknown field '" + key + "' (fields: to, partition)");
  }
  uint64_t to = 0;
  if (!b.contains("to")) return Error(400, "invalid_argument", "\"to\" is required: an event_id or \"beginning\"");
  if (b["to"].is_string() && b["to"].get<std::string>() == "beginning") {
    to = 0;
  } else if (b["to"].is_number_unsigned()) {
    to = b["to"].get<uint64_t>();
  } else {
    return Error(400, "invalid_argument", "\"to\" must be an event_id (0 or more) or \"beginning\"");
  }
  const auto t = runner.totals();
  std::map<uint32_t, uint64_t> moves;
  if (b.contains("partition")) {
    if (!b["partition"].is_number_unsigned() || !t.offsets.count(b["partition"].get<uint64_t>())) {
      return Error(400, "invalid_argument",
                   "\"partition\" must be one of 0.." + std::to_string(t.offsets.size() - 1) + " for sink '" +
                       runner.name() + "'");
    }
    moves[static_cast<uint32_t>(b["partition"].get<uint64_t>())] = to;
  } else {
    for (const auto& [p, off] : t.offsets) moves[p] = to;
  }
  Json parts = Json::array();
  for (const auto& [p, target] : moves) {
    const uint64_t from = t.offsets.at(p);
    if (target > from) {
      return Error(400, "invalid_argument",
                   "rewind only moves offsets back: partition " + std::to_string(p) + " of sink '" + runner.name() +
                       "' is at " + std::to_string(from) + ", so moving it to " + std::to_string(target) +
                       " would skip events; nothing was changed");
    }
    parts.push_back({{"partition", p}, {"from", from}, {"to", target}});
  }
  if (Status st = runner.SetOffsets(moves); !st.ok()) return ErrorFrom(st);
  Log(LogLevel::kInfo, "admin: sink " + runner.name() + " rewound: " + parts.dump());
  return Reply(200, Json{{"sink", runner.name()}, {"partitions", parts}});
}

http::Response AdminService::StartRebuild(const config::SinkConfig& sink, engine::SinkRunner& runner) {
  auto rebuild = std::make_unique<ViewRebuild>(config_, sink, runner);
  if (Status st = rebuild->Start(); !st.ok()) return ErrorFrom(st);
  Log(LogLevel::kInfo, "admin: rebuild of sink " + sink.name + " started");
  std::lock_guard lock(mu_);
  rebuilds_[sink.name] = std::move(rebuild);
  return RebuildProgressReply(sink.name, 202);
}

http::Response AdminService::RebuildProgressReply(const std::string& sink, int status) {
  return Reply(status, ProgressJson(rebuilds_.at(sink)->progress()));
}

}  // namespace sluice::admin
