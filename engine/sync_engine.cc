#include "engine/sync_engine.h"

#include "core/log.h"
#include "sql/params.h"

namespace sluice::engine {

SyncEngine::SyncEngine(config::Config config, metrics::Registry* registry)
    : config_(std::move(config)), registry_(registry ? *registry : metrics::UnexportedRegistry()) {}

SyncEngine::~SyncEngine() { Stop(); }

Status SyncEngine::Start() {
  // One barrier for every sink: their reads share its rounds.
  auto barrier = std::make_shared<DurabilityBarrier>(sql::ParamsFrom(config_.mysql), config_.engine.durability_barrier,
                                                     std::make_shared<metrics::DurabilityBarrierMetrics>(registry_));
  for (const auto& sink_cfg : config_.sinks) {
    ASSIGN_OR_RETURN(auto sink, connectors::MakeSink(sink_cfg, config_));
    SinkRunnerOptions o;
    o.sink = sink_cfg;
    o.partitions = config_.entities.at(sink_cfg.entity).partitions;
    o.mysql = sql::ParamsFrom(config_.mysql);
    o.engine = config_.engine;
    o.barrier = barrier;
    o.metrics = std::make_shared<metrics::SinkMetrics>(registry_, sink_cfg.name, o.partitions);
    runners_.push_back(std::make_unique<SinkRunner>(std::move(o), std::move(sink)));
  }
  for (auto& r : runners_) RETURN_IF_ERROR(r->Start().WithContext("sink " + r->name()));
  started_ = true;
  return Status::Ok();
}

void SyncEngine::Stop() {
  if (!started_) return;
  started_ = false;
  for (auto& r : runners_) r->Stop();
  for (auto& r : runners_) {
    const auto t = r->totals();
    Log(LogLevel::kInfo, "engine: sink " + r->name() + " stopped: read " + std::to_string(t.read) + ", applied " +
                             std::to_string(t.applied) + ", stale " + std::to_string(t.stale) + ", dead-lettered " +
                             std::to_string(t.dead_lettered) + " (cumulative), gaps " + std::to_string(t.gaps) +
                             ", retries " + std::to_string(t.retries) + ", state " + std::string(SinkStateName(t.state)));
  }
}

void SyncEngine::Wake() {
  for (auto& r : runners_) r->Wake();
}

}  // namespace sluice::engine
