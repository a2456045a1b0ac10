#include "engine/health_monitor.h"

#include <set>

#include "core/json.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "engine/sync_engine.h"
#include "sql/layout_schema.h"
#include "sql/mariadb_tables.h"
#include "sql/params.h"
#include "sql/schema.h"

namespace sluice::engine {

HealthMonitor::HealthMonitor(config::Config config, const SyncEngine* engine, bool writer,
                             metrics::Registry& registry, std::chrono::milliseconds interval)
    : config_(std::move(config)),
      engine_(engine),
      writer_(writer),
      interval_(interval),
      storage_metrics_(registry),
      layout_(sql::LayoutFrom(config_)),
      conns_(layout_.servers.size()) {}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::Start() {
  Check();
  thread_ = StartNamedThread("sluice-health", [this] { Run(); });
}

void HealthMonitor::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

metrics::Readiness HealthMonitor::Report(bool ready) const {
  // report_ is a JSON object: "ready" goes first.
  std::string json = ready ? R"({"ready":true,)" : R"({"ready":false,)";
  std::lock_guard lock(mu_);
  json.append(report_, 1);
  return metrics::Readiness{ready, std::move(json)};
}

metrics::Readiness HealthMonitor::WriterReadiness() const {
  bool ready;
  {
    std::lock_guard lock(mu_);
    ready = writer_ && writer_ready_;
  }
  return Report(ready);
}

metrics::Readiness HealthMonitor::SinksReadiness() const {
  bool ready;
  {
    std::lock_guard lock(mu_);
    ready = engine_ != nullptr && sinks_ready_;
  }
  return Report(ready);
}

metrics::Readiness HealthMonitor::Readiness() const { return writer_ ? WriterReadiness() : SinksReadiness(); }

metrics::ReadinessRoutes HealthMonitor::Routes() const {
  metrics::ReadinessRoutes routes;
  routes.process = [this] { return Readiness(); };
  if (writer_) routes.checks.emplace_back("writer", [this] { return WriterReadiness(); });
  if (engine_ != nullptr) routes.checks.emplace_back("sinks", [this] { return SinksReadiness(); });
  return routes;
}

void HealthMonitor::Run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, interval_, [this] { return stopping_; })) return;
    }
    Check();
  }
}

std::vector<Status> HealthMonitor::Ping() {
  std::vector<Status> up(conns_.size(), Status::Ok());
  for (size_t i = 0; i < conns_.size(); ++i) {
    if (!conns_[i] || !conns_[i]->healthy()) {
      conns_[i].reset();
      auto opened = sql::ConnectServer(layout_, i);
      if (!opened.ok()) {
        up[i] = opened.status();
        continue;
      }
      conns_[i] = std::move(opened).value();
    }
    up[i] = conns_[i]->Query("SELECT 1").status();
  }
  return up;
}

void HealthMonitor::Check() {
  // Storage first: every server answers, then heads of every entity type a sink reads.
  const std::vector<Status> up = Ping();
  Status storage = Status::Ok();
  for (const Status& st : up) {
    if (storage.ok() && !st.ok()) storage = st;
  }
  // The heads the engine knows (its writers' commit notices and its own
  // looks, engine/head_watcher.h): no statement per partition here.
  std::map<std::string, std::map<uint32_t, uint64_t>> heads;
  if (storage.ok() && engine_ != nullptr) {
    for (const auto& sink : config_.sinks) {
      if (heads.count(sink.entity)) continue;
      auto h = engine_->Heads(sink.entity);
      if (!h.empty()) heads[sink.entity] = std::move(h);
    }
  }
  storage_metrics_.SetUp(storage.ok());
  if (!storage.ok()) {
    LogRateLimited(LogLevel::kWarn, "engine.health.storage", "health: main storage is unreachable: " + storage.message());
  }

  Json doc = Json::object();
  doc["storage"] = {{"reachable", storage.ok()}};
  if (!storage.ok()) doc["storage"]["error"] = storage.message();
  if (!layout_.single()) {
    for (size_t i = 0; i < up.size(); ++i) doc["storage"]["servers"][layout_.servers[i].name] = up[i].ok();
  }
  Json checks = Json::object();
  bool writer_ready = false;
  if (writer_) {
    // A writer serves while main answers: a command for a partition of
    // another server that is down gets its own 503, the others go on.
    const Status schema = up[0].ok() ? CheckEventTables(up) : Unavailable("main storage is unreachable");
    writer_ready = up[0].ok() && schema.ok();
    doc["schema"] = {{"ok", schema.ok()}};
    if (!schema.ok()) {
      doc["schema"]["error"] = schema.message();
      if (up[0].ok()) LogRateLimited(LogLevel::kWarn, "engine.health.schema", "health: " + schema.message());
    }
    checks["writer"] = writer_ready;
  }
  bool ready = storage.ok();
  if (engine_ != nullptr) {
    doc["sinks"] = Json::array();
    const auto& sinks = config_.sinks;
    for (const auto& runner : engine_->runners()) {
      const SinkRunner::Totals t = runner->totals();
      runner->metrics().SetState(t.state);
      runner->metrics().SetPartitionsOwned(t.offsets.size());
      const bool healthy = SinkStateHealthy(t.state);
      ready = ready && healthy;
      Json js = {{"name", runner->name()},
                 {"state", SinkStateName(t.state)},
                 {"healthy", healthy},
                 {"partitions_owned", t.offsets.size()}};
      if (!t.last_error.empty()) js["last_error"] = t.last_error;
      // Lag only from fresh heads: with storage down the gauges keep their last values.
      const config::SinkConfig* cfg = nullptr;
      for (const auto& s : sinks) {
        if (s.name == runner->name()) cfg = &s;
      }
      if (storage.ok() && cfg != nullptr && heads.count(cfg->entity)) {
        const std::map<uint32_t, uint64_t>& h = heads[cfg->entity];
        uint64_t total_lag = 0;
        // Per server, the first unapplied event of each lagging partition:
        // its age is the lag in seconds, one statement per server.
        std::map<size_t, std::vector<std::pair<uint32_t, uint64_t>>> behind;
        std::map<uint32_t, uint64_t> lags;
        for (const auto& [p, head] : h) {
          const auto it = t.offsets.find(p);
          if (it == t.offsets.end() && runner->leased()) {
            // Another engine's: it reports the lag (a sum over engines adds up).
            runner->metrics().SetLag(p, 0, 0);
            continue;
          }
          const uint64_t offset = it == t.offsets.end() ? 0 : it->second;
          const uint64_t lag = head > offset ? head - offset : 0;
          lags[p] = lag;
          total_lag += lag;
          if (lag > 0) behind[layout_.ServerOf(cfg->entity, p)].emplace_back(p, offset + 1);
        }
        std::map<uint32_t, double> since;
        for (const auto& [server, events] : behind) {
          auto s = sql::EventLogOn(*conns_[server])->SecondsSinceCommit(cfg->entity, events);
          if (s.ok()) {
            since.merge(*s);
          } else {
            LogRateLimited(LogLevel::kWarn, "engine.health.lag",
                           "health: reading the lag in seconds of sink " + runner->name() +
                               " failed (the gauges show 0 s until it works): " + s.status().message());
          }
        }
        for (const auto& [p, lag] : lags) runner->metrics().SetLag(p, lag, since.count(p) ? since[p] : 0.0);
        js["lag_events"] = total_lag;
      }
      doc["sinks"].push_back(std::move(js));
    }
    checks["sinks"] = ready;
  }
  doc["checks"] = std::move(checks);
  std::lock_guard lock(mu_);
  writer_ready_ = writer_ready;
  sinks_ready_ = ready;
  report_ = CanonicalJson(doc);  // never throws, whatever bytes an error message holds
}

Status HealthMonitor::CheckEventTables(const std::vector<Status>& up) {
  std::vector<std::set<std::string>> tables(conns_.size());  // per server that answers
  for (size_t i = 0; i < conns_.size(); ++i) {
    if (!up[i].ok()) continue;
    ASSIGN_OR_RETURN(auto rows,
                     conns_[i]->Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA=DATABASE()"));
    for (const auto& row : rows) tables[i].insert(row.at(0).value_or(""));
  }
  for (const auto& [type, entity] : config_.entities) {
    for (uint32_t p = 0; p < entity.partitions; ++p) {
      const std::string table = sql::EventTableName(type, p);
      const size_t server = layout_.ServerOf(type, p);
      if (up[server].ok() && !tables[server].count(table)) {
        return FailedPrecondition("event table " + table + " is missing: commands on " + type +
                                  " cannot be stored; run `sluice init --config FILE`");
      }
    }
  }
  return Status::Ok();
}

}  // namespace sluice::engine
