#include "engine/health_monitor.h"

#include "core/json.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "engine/sync_engine.h"
#include "sql/params.h"
#include "sql/schema.h"

namespace sluice::engine {

HealthMonitor::HealthMonitor(config::Config config, const SyncEngine* engine, metrics::Registry& registry,
                             std::chrono::milliseconds interval)
    : config_(std::move(config)), engine_(engine), interval_(interval), storage_metrics_(registry) {}

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

metrics::Readiness HealthMonitor::Readiness() const {
  std::lock_guard lock(mu_);
  return report_;
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

Result<std::vector<uint64_t>> HealthMonitor::Heads(const std::string& type, uint32_t partitions) {
  std::vector<uint64_t> heads;
  for (uint32_t p = 0; p < partitions; ++p) {
    const std::string t = sql::QuoteIdent(sql::EventTableName(type, p));
    ASSIGN_OR_RETURN(auto rows, conn_->Query("SELECT COALESCE(MAX(event_id),0) FROM " + t));
    heads.push_back(std::stoull(rows.at(0).at(0).value_or("0")));
  }
  return heads;
}

void HealthMonitor::Check() {
  // Storage first: heads of every entity type a sink reads (or a plain ping).
  Status storage = Status::Ok();
  if (!conn_ || !conn_->healthy()) {
    conn_.reset();
    auto opened = sql::Connection::Open(sql::ParamsFrom(config_.mysql));
    if (opened.ok()) {
      conn_ = std::move(opened).value();
    } else {
      storage = opened.status();
    }
  }
  std::map<std::string, std::vector<uint64_t>> heads;
  if (storage.ok()) {
    if (engine_ == nullptr || engine_->runners().empty()) {
      storage = conn_->Query("SELECT 1").status();
    } else {
      for (const auto& sink : config_.sinks) {
        if (heads.count(sink.entity)) continue;
        auto h = Heads(sink.entity, config_.entities.at(sink.entity).partitions);
        if (!h.ok()) {
          storage = h.status();
          break;
        }
        heads[sink.entity] = std::move(h).value();
      }
    }
  }
  storage_metrics_.SetUp(storage.ok());
  if (!storage.ok()) {
    LogRateLimited(LogLevel::kWarn, "engine.health.storage", "health: main storage is unreachable: " + storage.message());
  }

  Json doc = Json::object();
  bool ready = storage.ok();
  doc["storage"] = {{"reachable", storage.ok()}};
  if (!storage.ok()) doc["storage"]["error"] = storage.message();
  doc["sinks"] = Json::array();
  if (engine_ != nullptr) {
    const auto& sinks = config_.sinks;
    for (const auto& runner : engine_->runners()) {
      const SinkRunner::Totals t = runner->totals();
      const metrics::SinkState state = metrics::SinkStateOf(t.state);
      runner->metrics().SetState(state);
      const bool healthy = state == metrics::SinkState::kRunning || state == metrics::SinkState::kPaused;
      ready = ready && healthy;
      Json js = {{"name", runner->name()}, {"state", t.state}, {"healthy", healthy}};
      if (!t.last_error.empty()) js["last_error"] = t.last_error;
      // Lag only from fresh heads: with storage down the gauges keep their last values.
      const config::SinkConfig* cfg = nullptr;
      for (const auto& s : sinks) {
        if (s.name == runner->name()) cfg = &s;
      }
      if (storage.ok() && cfg != nullptr && heads.count(cfg->entity)) {
        const std::vector<uint64_t>& h = heads[cfg->entity];
        uint64_t total_lag = 0;
        for (uint32_t p = 0; p < h.size(); ++p) {
          const auto it = t.offsets.find(p);
          const uint64_t offset = it == t.offsets.end() ? 0 : it->second;
          const uint64_t lag = h[p] > offset ? h[p] - offset : 0;
          double lag_seconds = 0;
          if (lag > 0) {
            const std::string table = sql::QuoteIdent(sql::EventTableName(cfg->entity, p));
            auto rows = conn_->Query("SELECT TIMESTAMPDIFF(MICROSECOND, committed_at, NOW(6)) FROM " + table +
                                     " WHERE event_id=" + std::to_string(offset + 1));
            if (rows.ok() && !rows->empty() && rows->front().at(0)) {
              lag_seconds = std::max(0.0, std::stod(*rows->front()[0]) / 1e6);
            }
          }
          runner->metrics().SetLag(p, lag, lag_seconds);
          total_lag += lag;
        }
        js["lag_events"] = total_lag;
      }
      doc["sinks"].push_back(std::move(js));
    }
  }
  doc["ready"] = ready;
  std::lock_guard lock(mu_);
  report_ = metrics::Readiness{ready, CanonicalJson(doc)};
}

}  // namespace sluice::engine
