#include "engine/sync_engine.h"

#include "archive/from_config.h"
#include "core/log.h"
#include "core/names.h"
#include "sql/layout.h"
#include "sql/params.h"
#include "sql/routed_tables.h"

namespace sluice::engine {

SyncEngine::SyncEngine(config::Config config, metrics::Registry* registry)
    : config_(std::move(config)),
      registry_(registry ? *registry : metrics::UnexportedRegistry()),
      member_(config_.engine.id.empty() ? MemberHostName("engine") : config_.engine.id) {}

SyncEngine::~SyncEngine() { Stop(); }

Status SyncEngine::Start() {
  // One barrier per storage server for every sink: their reads share its rounds.
  const sql::StorageLayout layout = sql::LayoutFrom(config_);
  const ServerBarriers barriers(layout, config_.engine.durability_barrier,
                                std::make_shared<metrics::DurabilityBarrierMetrics>(registry_));
  const std::shared_ptr<sql::Storage> hot = sql::OpenStorage(layout);
  // A sink that starts from the first event, or is rewound, reads archived events too.
  ASSIGN_OR_RETURN(const std::shared_ptr<sql::Storage> storage, archive::WithArchive(config_, hot));
  if (config_.archive.enabled) {
    ASSIGN_OR_RETURN(auto store, archive::OpenStore(config_));
    archiver_ = std::make_unique<archive::ArchiveLoop>(config_, hot, std::move(store), &registry_);
  }
  for (const auto& sink_cfg : config_.sinks) {
    ASSIGN_OR_RETURN(auto sink, connectors::MakeSink(sink_cfg, config_));
    SinkRunnerOptions o;
    o.sink = sink_cfg;
    o.partitions = config_.entities.at(sink_cfg.entity).partitions;
    o.mysql = sql::ParamsFrom(config_.mysql);
    o.engine = config_.engine;
    o.barrier = barriers.ForType(sink_cfg.entity, o.partitions);
    o.storage = storage;
    o.owner = member_;
    o.metrics = std::make_shared<metrics::SinkMetrics>(registry_, sink_cfg.name, o.partitions);
    o.woken_per_partition = true;  // by heads_
    runners_.push_back(std::make_unique<SinkRunner>(std::move(o), std::move(sink)));
  }
  HeadWatcher::Options watch{.storage = hot,
                             .partitions = {},
                             .slowest = config_.engine.idle_poll_max,
                             .metrics = std::make_shared<metrics::HeadWatcherMetrics>(registry_)};
  std::vector<SinkRunner*> woken;
  for (auto& r : runners_) {
    watch.partitions[r->entity()] = r->partitions();
    woken.push_back(r.get());
  }
  heads_ = std::make_unique<HeadWatcher>(std::move(watch), std::move(woken));
  for (auto& r : runners_) RETURN_IF_ERROR(r->Start().WithContext("sink " + r->name()));
  heads_->Start();
  if (config_.engine.notices.enabled && !runners_.empty()) {
    notices_ = std::make_unique<NoticeListener>(
        config_.engine.notices.listen_host, config_.engine.notices.listen_port,
        [this](const CommitNotice& n) { heads_->Announce(n.type, n.partition, n.head, /*trusted=*/false); });
    RETURN_IF_ERROR(notices_->Start());
    const std::string& host = config_.engine.notices.listen_host;
    const bool local = config_.engine.notices.advertise_host.empty() &&
                       (host == "127.0.0.1" || host == "::1" || host == "localhost" || host == "0.0.0.0" || host == "::");
    Log(LogLevel::kInfo, "engine: commit notices on " + notice_address() +
                             (local ? " (writers on other hosts cannot send there: set engine.notices.listen and "
                                      "advertise; their commits are found by the head looks meanwhile)"
                                    : ""));
  }
  std::vector<SinkRunner*> leased;
  for (auto& r : runners_) leased.push_back(r.get());
  keeper_ = std::make_unique<LeaseKeeper>(
      LeaseKeeper::Options{.member = member_,
                           .address = notice_address(),
                           .ttl = config_.engine.lease_ttl,
                           .storage = storage,
                           .on_failure = on_failure_},
      std::move(leased));
  keeper_->Start();  // the first round gives the runners their partitions
  if (archiver_) archiver_->Start();
  started_ = true;
  return Status::Ok();
}

void SyncEngine::Stop() {
  if (!started_) return;
  started_ = false;
  if (archiver_) archiver_->Stop();
  keeper_->Stop();
  if (notices_) notices_->Stop();
  heads_->Stop();
  for (auto& r : runners_) r->Stop();  // each saves its offsets (fenced)
  keeper_->Leave();  // the others take over at their next round
  for (auto& r : runners_) {
    const auto t = r->totals();
    Log(LogLevel::kInfo, "engine: sink " + r->name() + " stopped: read " + std::to_string(t.read) + ", applied " +
                             std::to_string(t.applied) + ", stale " + std::to_string(t.stale) + ", dead-lettered " +
                             std::to_string(t.dead_lettered) + " (cumulative), gaps " + std::to_string(t.gaps) +
                             ", retries " + std::to_string(t.retries) + ", state " + std::string(SinkStateName(t.state)));
  }
}

std::string SyncEngine::notice_address() const {
  if (!notices_) return "";
  const config::NoticesConfig& n = config_.engine.notices;
  if (n.advertise_host.empty()) return notices_->address();
  return "udp:" + config::FormatListenAddress(n.advertise_host, n.advertise_port);
}

void SyncEngine::Announce(const std::string& type, uint32_t partition, uint64_t head) {
  if (heads_) heads_->Announce(type, partition, head);
}

std::map<uint32_t, uint64_t> SyncEngine::Heads(const std::string& type) const {
  return heads_ ? heads_->heads(type) : std::map<uint32_t, uint64_t>{};
}

}  // namespace sluice::engine
