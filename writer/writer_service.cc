#include "writer/writer_service.h"

#include <array>
#include <random>

#include "archive/from_config.h"
#include "connectors/sink.h"
#include "core/cpus.h"
#include "core/json.h"
#include "core/log.h"
#include "core/names.h"
#include "core/partitioner.h"
#include "sql/mariadb_tables.h"
#include "sql/params.h"
#include "sql/routed_tables.h"
#include "writer/api.h"
#include "writer/command_request.h"
#include "writer/commands.h"

namespace sluice::writer {
namespace {

constexpr uint64_t kDefaultEventsLimit = 100;
constexpr uint64_t kMaxEventsLimit = 1000;
// In the order of TypeState::builtin_metrics.
constexpr std::array<std::string_view, 4> kBuiltinCommands = {"create", "put", "patch", "delete"};

http::Response ToHttp(Reply r) {
  http::Response h;
  h.status = r.status;
  h.body = std::move(r.body);
  if (r.replayed) h.headers.emplace_back("Idempotent-Replayed", "true");
  if (r.retry_after_seconds > 0) h.headers.emplace_back("Retry-After", std::to_string(r.retry_after_seconds));
  if (!r.push_report.empty()) h.headers.emplace_back("Sluice-Push", std::move(r.push_report));
  return h;
}

void SendError(const http::Responder& respond, int status, std::string_view code, std::string_view message) {
  respond(ToHttp(ErrorReply(status, code, message)));
}

// Where the other writers forward to: writer.advertise, else the listen
// address (the host name when it listens on every address).
std::string AdvertisedUrl(const config::WriterConfig& w, uint16_t port) {
  if (!w.advertise.empty()) return w.advertise;
  std::string host = w.listen_host;
  if (host == "0.0.0.0" || host == "::" || host.empty()) host = MemberHostName("localhost");
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return (w.tls.enabled() ? "https://" : "http://") + host + ":" + std::to_string(port);
}

// A command id for requests that came without Idempotency-Key.
std::string GenerateCommandId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "gen-";
  for (int i = 0; i < 2; ++i) {
    uint64_t v = rng();
    for (int j = 0; j < 16; ++j, v >>= 4) id += kHex[v & 15];
  }
  return id;
}

// Microseconds since the epoch -> "2026-11-21T12:00:00.123456Z".
std::string IsoTime(int64_t us) {
  std::string t = sql::TimestampText(us);
  if (t.size() > 10 && t[10] == ' ') t[10] = 'T';
  return t + "Z";
}

}  // namespace

WriterService::WriterService(config::Config config, CommitHook on_commit, metrics::Registry* registry)
    : config_(std::move(config)),
      metrics_(registry ? *registry : metrics::UnexportedRegistry()),
      http_metrics_(registry ? *registry : metrics::UnexportedRegistry(), "writer") {
  // GET .../events and retried commands read archived events too (docs/archive.md).
  auto storage = archive::WithArchive(config_, sql::OpenStorage(sql::LayoutFrom(config_)));
  if (storage.ok()) {
    storage_ = *storage;
  } else {
    archive_status_ = storage.status();
    storage_ = sql::OpenStorage(sql::LayoutFrom(config_));
  }
  member_ = config_.writer.id.empty() ? MemberHostName("writer") : config_.writer.id;
  // Each commit is announced to the engine in this process (on_commit) and
  // to the engines' notice addresses (engine/notice_listener.h).
  if (config_.engine.notices.enabled) {
    notices_ = std::make_unique<NoticeSender>(
        NoticeSender::Options{.storage = storage_, .member_ttl = config_.engine.lease_ttl});
  }
  const CommitHook announce = [on_commit, sender = notices_.get()](const std::string& type, uint32_t partition,
                                                                   uint64_t head) {
    if (on_commit) on_commit(type, partition, head);
    if (sender) sender->Announce(type, partition, head);
  };
  auto scripts = handlers::LoadHandlerScripts(config_);
  if (!scripts.ok()) handlers_status_ = scripts.status();
  const unsigned cpus = UsableCpus();
  const uint32_t threads = config::BatchThreadsFor(config_.writer.batch_threads, cpus);
  if (config_.writer.batch_threads == 0) {
    Log(LogLevel::kInfo, "writer: " + std::to_string(threads) + " batch threads (writer.batch_threads: auto, " +
                             std::to_string(cpus) + " CPUs)");
  }
  batch_threads_ = std::make_unique<BatchThreads>(BatchThreads::Options{.storage = storage_,
                                                                        .threads = threads,
                                                                        .overlap_commits = config_.writer.overlap_commits,
                                                                        .group_commit_max = config_.writer.group_commit_max,
                                                                        .metrics = &metrics_});
  size_t thread_key = 0;  // the partition's place among the writer's
  for (const auto& [name, entity] : config_.entities) {
    TypeState& t = types_[name];
    t.partitions = entity.partitions;
    t.metrics = &metrics_.ForType(name);
    for (size_t i = 0; i < kBuiltinCommands.size(); ++i) {
      t.builtin_metrics[i] = &metrics_.ForCommand(name, std::string(kBuiltinCommands[i]));
    }
    if (scripts.ok() && scripts->count(name)) t.handlers = scripts->at(name);
    // Per push sink: its pushers, the first of them and how many.
    std::vector<std::pair<size_t, size_t>> push_sinks;
    for (const config::SinkConfig& sink : config_.sinks) {
      if (!sink.push.enabled || sink.entity != name) continue;
      const size_t n = std::max<size_t>(1, std::min<size_t>(sink.push.threads, entity.partitions));
      push_sinks.emplace_back(t.pushers.size(), n);
      for (size_t i = 0; i < n; ++i) {
        Pusher::Options po;
        po.sink = sink;
        po.thread_slice = config_.writer.push_thread_slice;
        po.where = "sink '" + sink.name + "' (" + name + ", pusher " + std::to_string(i + 1) + " of " +
                   std::to_string(n) + ")";
        po.metrics = &metrics_.ForPush(sink.name);
        t.pushers.push_back(std::make_unique<Pusher>(
            std::move(po), [this, sink] { return connectors::MakeSink(sink, config_); }));
      }
    }
    for (uint32_t p = 0; p < entity.partitions; ++p) {
      PartitionWorkerOptions o;
      o.type = name;
      o.partition = p;
      o.batch_max = config_.writer.batch_max;
      o.cache_entries = config_.writer.entity_cache_entries;
      o.conflict_retries = config_.writer.conflict_retries;
      o.overlap_commits = config_.writer.overlap_commits;
      o.snapshot_every = entity.deltas.snapshot_every;
      o.snapshot_percent = entity.deltas.snapshot_percent;
      o.on_commit = announce;
      o.threads = batch_threads_.get();
      o.thread_key = thread_key++;
      o.metrics = t.metrics;
      o.handlers = t.handlers;
      for (const auto& [first, n] : push_sinks) o.pushers.push_back(t.pushers[first + p % n].get());
      t.workers.push_back(std::make_unique<PartitionWorker>(std::move(o)));
    }
  }
  readers_ = std::make_unique<ReaderPool>(storage_, config_.writer.read_threads, 100000);
  http::ServerOptions h;
  h.host = config_.writer.listen_host;
  h.port = config_.writer.listen_port;
  h.io_threads = config_.writer.io_threads;
  h.thread_name = "sluice-http";
  h.max_body_bytes = config_.writer.max_body_bytes;
  h.max_header_bytes = 16 * 1024;
  const config::ListenerLimits& l = config_.writer.limits;
  h.limits = {l.max_connections, l.header_timeout, l.body_timeout, l.idle_timeout, l.write_timeout};
  if (config_.writer.tls.enabled()) {
    h.tls = http::ServerTls{config_.writer.tls.cert, config_.writer.tls.key, config_.writer.tls.client_ca};
  }
  http_metrics_.Attach(h);
  http_ = std::make_unique<http::Server>(h, [this](http::Request&& req, http::Responder respond) {
    Handle(std::move(req), std::move(respond));
  });
}

WriterService::~WriterService() { Stop(); }

Status WriterService::Start() {
  if (!handlers_status_.ok()) return handlers_status_;
  if (!archive_status_.ok()) return archive_status_;
  if (notices_) notices_->Start();
  for (auto& [name, t] : types_) {
    for (auto& pusher : t.pushers) pusher->Start();
    for (auto& w : t.workers) w->Start();
  }
  readers_->Start();
  started_ = true;
  // Made before the listener starts (the HTTP threads read routes_ and
  // forwarder_ without a lock); the keeper's rounds start once the port,
  // and with it the URL the others forward to, is known. Until its first
  // round it knows no owner: every command is handled here.
  if (config_.writer.routing) {
    http::ForwarderOptions fo;
    fo.tls_ca = config_.writer.tls.ca;
    if (!config_.writer.tls.client_ca.empty()) {  // the other writers want a client certificate: this one's
      fo.tls_cert = config_.writer.tls.cert;
      fo.tls_key = config_.writer.tls.key;
    }
    forwarder_ = std::make_unique<http::Forwarder>(std::move(fo));
    RETURN_IF_ERROR(forwarder_->Start());
    RouteKeeper::Options o;
    o.member = member_;
    o.ttl = config_.writer.lease_ttl;
    o.storage = storage_;
    for (const auto& [name, t] : types_) o.types[name] = t.partitions;
    routes_ = std::make_unique<RouteKeeper>(std::move(o));
  }
  RETURN_IF_ERROR(http_->Start());
  if (routes_) routes_->Start(AdvertisedUrl(config_.writer, http_->port()));
  return Status::Ok();
}

void WriterService::Stop() {
  if (!started_) return;
  started_ = false;
  // Routing first: the others stop forwarding here at their next round, and
  // what is still being forwarded from here comes back (handled here).
  if (routes_) {
    routes_->Stop();
    routes_->Leave();
  }
  if (forwarder_) forwarder_->Stop();
  // Workers and readers first: their last replies still need the event loops.
  PartitionWorker::Stats total;
  for (auto& [name, t] : types_) {
    for (auto& w : t.workers) {
      w->Stop();
      const auto& s = w->stats();
      total.batches += s.batches;
      total.events += s.events;
      total.conflicts_primary += s.conflicts_primary;
      total.conflicts_version += s.conflicts_version;
      total.conflicts_command += s.conflicts_command;
      total.stale_refusals += s.stale_refusals;
      total.unavailable += s.unavailable;
    }
  }
  batch_threads_->Stop();
  if (notices_) notices_->Stop();  // after the workers' last commits
  Log(LogLevel::kInfo, "writer stopped: " + std::to_string(total.events) + " events in " +
                           std::to_string(total.batches) + " batches; duplicate-key conflicts: PRIMARY=" +
                           std::to_string(total.conflicts_primary) + " uk_entity_version=" +
                           std::to_string(total.conflicts_version) + " uk_entity_command=" +
                           std::to_string(total.conflicts_command) + "; refusals re-planned on a stale cache: " +
                           std::to_string(total.stale_refusals) + "; batches refused as unavailable: " +
                           std::to_string(total.unavailable));
  // Per push sink, over every partition: its pushers stop after the workers
  // that submit to them.
  std::map<std::string, std::array<uint64_t, 6>> push;
  for (auto& [name, t] : types_) {
    for (auto& pusher : t.pushers) {
      pusher->Stop();
      const Pusher::Counters& c = pusher->counters();
      auto& a = push[pusher->sink_name()];
      a[0] += c.events;
      a[1] += c.applied;
      a[2] += c.stale;
      a[3] += c.rejected;
      a[4] += c.failed;
      a[5] += c.late;
    }
  }
  for (const auto& [sink, a] : push) {
    Log(LogLevel::kInfo, "writer push to sink " + sink + ": " + std::to_string(a[0]) + " events, applied=" +
                             std::to_string(a[1]) + " stale=" + std::to_string(a[2]) + " rejected=" +
                             std::to_string(a[3]) + " failed=" + std::to_string(a[4]) +
                             "; batches late=" + std::to_string(a[5]));
  }
  readers_->Stop();
  http_->Stop();
}

uint16_t WriterService::port() const { return http_->port(); }

void WriterService::Handle(http::Request&& req, http::Responder respond) {
  auto route = ParseRoute(req.method, req.target);
  if (!route.ok()) {
    const bool not_found = route.status().code() == StatusCode::kNotFound;
    if (const std::string_view allow = AllowedMethod(req.target); not_found && !allow.empty()) {
      http::Response r = ToHttp(ErrorReply(405, "method_not_allowed",
                                         "use " + std::string(allow) + " on this path, not " + req.method));
      r.headers.emplace_back("Allow", std::string(allow));
      return respond(std::move(r));
    }
    return SendError(respond, not_found ? 404 : 400, not_found ? "not_found" : "invalid_request",
                     route.status().message());
  }
  switch (route->kind) {
    case Route::Kind::kHealth: {
      http::Response ok;
      ok.body = R"({"status":"ok"})";
      return respond(std::move(ok));
    }
    case Route::Kind::kCommand: return HandleCommand(*route, req, std::move(respond));
    case Route::Kind::kGetEntity: return HandleGetEntity(*route, std::move(respond));
    case Route::Kind::kGetEvents: return HandleGetEvents(*route, std::move(respond));
    case Route::Kind::kReady: return HandleReady(respond);
  }
}

const WriterService::TypeState* WriterService::CheckEntity(const Route& route, const http::Responder& respond) const {
  auto it = types_.find(route.type);
  if (it == types_.end()) {
    SendError(respond, 404, "unknown_entity_type", "no entity type '" + route.type + "' is configured");
    return nullptr;
  }
  if (std::optional<Reply> invalid = CheckEntityId(route.entity_id)) {
    respond(ToHttp(std::move(*invalid)));
    return nullptr;
  }
  return &it->second;
}

void WriterService::HandleCommand(Route& route, http::Request& req, http::Responder respond) {
  const TypeState* type = CheckEntity(route, respond);
  if (type == nullptr) return;
  auto checked = ValidateCommandRequest(route.type, route.command, type->handlers.get(), req.Header("Idempotency-Key"),
                                        req.Header("If-Match"), req.body, config_.writer.max_json_depth);
  if (Reply* refused = std::get_if<Reply>(&checked)) return respond(ToHttp(std::move(*refused)));
  CommandRequest& valid = std::get<CommandRequest>(checked);
  Command cmd;
  cmd.command_id = valid.command_id.empty() ? GenerateCommandId() : std::move(valid.command_id);
  cmd.expected_version = valid.expected_version;
  cmd.request = std::move(valid.request);
  cmd.request_text = std::move(valid.request_text);
  metrics::CommandMetrics& command_metrics = CommandMetricsOf(*type, route.type, route.command);
  const auto received = std::chrono::steady_clock::now();
  cmd.entity_id = std::move(route.entity_id);
  cmd.name = std::move(route.command);
  const uint32_t partition = PartitionOf(cmd.entity_id, type->partitions);
  if (routes_ && !req.Header(kForwardedByHeader)) {
    if (const std::string owner = routes_->OwnerUrl(route.type, partition); !owner.empty()) {
      return Forward(owner, req, std::move(cmd), *type, partition, command_metrics, received, std::move(respond));
    }
  }
  Submit(std::move(cmd), *type, partition, command_metrics, received, std::move(respond));
}

void WriterService::Submit(Command cmd, const TypeState& type, uint32_t partition,
                           metrics::CommandMetrics& command_metrics, std::chrono::steady_clock::time_point received,
                           http::Responder respond) {
  cmd.reply = [respond = std::move(respond), &command_metrics, received, this](Reply r) {
    command_metrics.Record(metrics::OutcomeOfStatus(r.status, r.replayed),
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - received).count());
    http::Response out = ToHttp(std::move(r));
    if (routes_) out.headers.emplace_back(kWriterHeader, member_);
    respond(std::move(out));
  };
  type.workers[partition]->Submit(std::move(cmd));
}

void WriterService::Forward(const std::string& owner_url, http::Request& req, Command cmd, const TypeState& type,
                            uint32_t partition, metrics::CommandMetrics& command_metrics,
                            std::chrono::steady_clock::time_point received, http::Responder respond) {
  std::vector<std::pair<std::string, std::string>> headers = {
      {"Content-Type", "application/json"},
      {"Idempotency-Key", cmd.command_id},  // so that handling it here after all cannot apply it twice
      {kForwardedByHeader, member_},
  };
  if (const auto if_match = req.Header("If-Match")) headers.emplace_back("If-Match", std::string(*if_match));
  forwarder_->Send(
      owner_url + req.target, "POST", std::move(headers), std::move(req.body),
      [this, cmd = std::move(cmd), &type, partition, &command_metrics, received, respond = std::move(respond),
       owner_url](Result<http::Response> answer) mutable {
        // A 503 (the owner stopping, or overloaded) is handled here too: the
        // Idempotency-Key keeps a command the owner did commit from being
        // applied twice.
        const bool answered = answer.ok() && answer->status != 503;
        type.metrics->Forwarded(answered);
        if (answered) return respond(std::move(answer).value());
        LogRateLimited(LogLevel::kWarn, "writer.forward",
                       "writer: the writer that owns " + cmd.entity_id + "'s partition did not answer (" +
                           (answer.ok() ? std::string("it answered 503") : answer.status().message()) +
                           "); handled here");
        Submit(std::move(cmd), type, partition, command_metrics, received, std::move(respond));
      });
}

metrics::CommandMetrics& WriterService::CommandMetricsOf(const TypeState& type, const std::string& type_name,
                                                         const std::string& command) {
  for (size_t i = 0; i < kBuiltinCommands.size(); ++i) {
    if (kBuiltinCommands[i] == command) return *type.builtin_metrics[i];
  }
  // A handler's own command: its name was checked against the type's
  // handlers, so the label stays bounded.
  return metrics_.ForCommand(type_name, command);
}

void WriterService::HandleReady(const http::Responder& respond) const {
  http::Response r;
  if (!readiness_) {
    r.status = 503;
    r.body = R"({"ready":false,"reason":"no readiness check is configured"})";
    return respond(std::move(r));
  }
  metrics::Readiness ready = readiness_();
  r.status = ready.ready ? 200 : 503;
  r.body = std::move(ready.json);
  respond(std::move(r));
}

void WriterService::HandleGetEntity(const Route& route, http::Responder respond) {
  const TypeState* type = CheckEntity(route, respond);
  if (type == nullptr) return;
  const uint32_t partition = PartitionOf(route.entity_id, type->partitions);
  auto job = [respond, partition, type_name = route.type, id = route.entity_id](Result<sql::EventLog*> log) {
    if (!log.ok()) return respond(ToHttp(UnavailableReply("main storage is unavailable")));
    auto rows = (*log)->LatestOf(type_name, partition, {id});
    if (!rows.ok()) {
      if (rows.status().code() == StatusCode::kUnavailable) {
        return respond(ToHttp(UnavailableReply("main storage is unavailable")));
      }
      return SendError(respond, 500, "internal", rows.status().message());
    }
    if (rows->empty()) return SendError(respond, 404, "not_found", "no entity '" + id + "' of type '" + type_name + "'");
    const sql::EventRow& row = rows->front();
    const std::string version = std::to_string(row.version);
    if (row.deleted) return SendError(respond, 404, "not_found", "the entity was deleted at version " + version);
    http::Response ok;
    ok.body = R"({"type":)";
    AppendJsonString(ok.body, type_name);
    ok.body += R"(,"id":)";
    AppendJsonString(ok.body, id);
    ok.body += R"(,"version":)" + version + R"(,"state":)" + row.state + "}";
    ok.headers.emplace_back("ETag", "\"" + version + "\"");
    respond(std::move(ok));
  };
  if (!readers_->Submit(std::move(job))) {
    SendError(respond, 503, "overloaded", "too many reads are queued; retry");
  }
}

void WriterService::HandleGetEvents(const Route& route, http::Responder respond) {
  const TypeState* type = CheckEntity(route, respond);
  if (type == nullptr) return;
  auto after = QueryUint(route, "after_version", 0);
  if (!after.ok()) return SendError(respond, 400, "invalid_request", after.status().message());
  auto limit = QueryUint(route, "limit", kDefaultEventsLimit);
  if (!limit.ok() || *limit == 0 || *limit > kMaxEventsLimit) {
    return SendError(respond, 400, "invalid_request",
                     "query parameter limit must be between 1 and " + std::to_string(kMaxEventsLimit));
  }
  const uint32_t partition = PartitionOf(route.entity_id, type->partitions);
  auto job = [respond, partition, type_name = route.type, id = route.entity_id, after = *after,
              limit = static_cast<uint32_t>(*limit)](Result<sql::EventLog*> log) {
    if (!log.ok()) return respond(ToHttp(UnavailableReply("main storage is unavailable")));
    auto rows = (*log)->History(type_name, partition, id, after, limit);
    if (rows.ok() && rows->empty()) {
      // No events past after_version: an entity without any is not found.
      auto any = (*log)->LatestVersions(type_name, partition, {id});
      if (any.ok() && any->empty()) {
        return SendError(respond, 404, "not_found", "no entity '" + id + "' of type '" + type_name + "'");
      }
      if (!any.ok()) rows = any.status();
    }
    if (!rows.ok()) {
      if (rows.status().code() == StatusCode::kUnavailable) {
        return respond(ToHttp(UnavailableReply("main storage is unavailable")));
      }
      return SendError(respond, 500, "internal", rows.status().message());
    }
    http::Response ok;
    std::string& b = ok.body;
    b = R"({"type":)";
    AppendJsonString(b, type_name);
    b += R"(,"id":)";
    AppendJsonString(b, id);
    b += R"(,"events":[)";
    bool first = true;
    for (const sql::EventRow& r : *rows) {
      if (!first) b += ',';
      first = false;
      b += R"({"version":)" + std::to_string(r.version) + R"(,"event_id":)" + std::to_string(r.event_id) +
           R"(,"command":)";
      AppendJsonString(b, r.command_name);
      b += R"(,"command_id":)";
      AppendJsonString(b, r.command_id);
      b += R"(,"request":)" + r.request + R"(,"response":)" + r.response + R"(,"state":)" +
           (r.deleted ? std::string("null") : r.state) + R"(,"deleted":)" + (r.deleted ? "true" : "false") +
           R"(,"committed_at":)";
      AppendJsonString(b, IsoTime(r.committed_at_us));
      b += '}';
    }
    b += "]}";
    respond(std::move(ok));
  };
  if (!readers_->Submit(std::move(job))) {
    SendError(respond, 503, "overloaded", "too many reads are queued; retry");
  }
}

}  // namespace sluice::writer
