#include "archive/from_config.h"

#include <algorithm>
#include <chrono>

#include "archive/archive_reader.h"
#include "core/log.h"
#include "core/thread_name.h"

namespace sluice::archive {

objectstore::ObjectStoreOptions StoreOptionsFrom(const config::ArchiveConfig& a) {
  objectstore::ObjectStoreOptions o;
  o.url = a.store;
  o.endpoint = a.endpoint;
  o.region = a.region;
  o.access_key = a.access_key;
  o.secret_key = a.secret_key;
  o.path_style = a.path_style;
  o.tls_ca = a.tls_ca;
  o.tls_verify = a.tls_verify;
  return o;
}

ArchivePolicy PolicyFrom(const config::ArchivePolicyConfig& p) {
  ArchivePolicy policy;
  if (p.after.count() > 0) policy.after = std::chrono::duration_cast<std::chrono::seconds>(p.after);
  policy.keep_versions = std::max<uint64_t>(1, p.keep_versions);
  return policy;
}

ArchiverOptions ArchiverOptionsFrom(const config::ArchiveConfig& a) {
  ArchiverOptions o;
  o.idempotency_window = std::chrono::duration_cast<std::chrono::seconds>(a.idempotency_window);
  o.segment_events = a.segment_events;
  o.segment_bytes = a.segment_bytes;
  return o;
}

std::vector<std::string> SinksOf(const config::Config& config, const std::string& type) {
  std::vector<std::string> out;
  for (const auto& s : config.sinks) {
    if (s.entity == type) out.push_back(s.name);
  }
  return out;
}

Result<std::shared_ptr<objectstore::ObjectStore>> OpenStore(const config::Config& config) {
  if (!config.archive.enabled) return FailedPrecondition("the config has no archive section");
  ASSIGN_OR_RETURN(auto store, objectstore::OpenObjectStore(StoreOptionsFrom(config.archive)));
  return std::shared_ptr<objectstore::ObjectStore>(std::move(store));
}

Result<std::shared_ptr<sql::Storage>> WithArchive(const config::Config& config, std::shared_ptr<sql::Storage> hot) {
  if (!config.archive.enabled) return hot;
  std::set<std::string> types;
  for (const auto& [name, e] : config.entities) {
    if (e.archive.enabled) types.insert(name);
  }
  ASSIGN_OR_RETURN(auto store, OpenStore(config));
  auto segments = std::make_shared<SegmentSource>(std::move(store), config.archive.cache_bytes);
  return std::shared_ptr<sql::Storage>(std::make_shared<ArchivedStorage>(std::move(hot), segments, std::move(types)));
}

Result<std::vector<PartitionArchiveStatus>> ReadArchiveStatus(const config::Config& config,
                                                              std::shared_ptr<sql::Storage> hot) {
  std::vector<PartitionArchiveStatus> out;
  auto table = hot->OpenArchive();
  Archiver archiver(hot, nullptr, ArchiverOptionsFrom(config.archive));
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  for (const auto& [type, entity] : config.entities) {
    if (!entity.archive.enabled) continue;
    ASSIGN_OR_RETURN(auto applied, archiver.Applied(type, entity.partitions, SinksOf(config, type)));
    for (uint32_t p = 0; p < entity.partitions; ++p) {
      PartitionArchiveStatus s;
      s.type = type;
      s.partition = p;
      ASSIGN_OR_RETURN(auto segments, table->Segments(type, p));
      s.segments = segments.size();
      for (const auto& seg : segments) {
        s.watermark = std::max(s.watermark, seg.last_event_id);
        s.archived_events += seg.events;
        s.archive_bytes += seg.bytes;
        s.archived_state_bytes += seg.state_bytes;
      }
      ASSIGN_OR_RETURN(s.hot, table->Size(type, p));
      if (s.hot.oldest_event_id != 0) {
        s.oldest_hot_age_seconds = std::max(0.0, static_cast<double>(now_us - s.hot.oldest_committed_at_us) / 1e6);
      }
      s.applied = applied[p].first;
      s.slowest = applied[p].second;
      out.push_back(std::move(s));
    }
  }
  return out;
}

ArchiveLoop::ArchiveLoop(config::Config config, std::shared_ptr<sql::Storage> hot,
                         std::shared_ptr<objectstore::ObjectStore> store, metrics::Registry* registry)
    : config_(std::move(config)), registry_(registry), hot_(std::move(hot)), store_(std::move(store)) {}

ArchiveLoop::~ArchiveLoop() { Stop(); }

void ArchiveLoop::Start() {
  if (thread_.joinable() || config_.archive.interval.count() == 0) return;
  thread_ = StartNamedThread("archive", [this] { Run(); });
}

void ArchiveLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ArchiveLoop::Measure(const std::string& type, uint32_t partitions, metrics::ArchiveMetrics& m) {
  auto table = hot_->OpenArchive();
  auto log = hot_->OpenEventLog();
  for (uint32_t p = 0; p < partitions; ++p) {
    auto segments = table->Segments(type, p);
    auto bytes = table->TableBytes(type, p);
    if (!segments.ok() || !bytes.ok()) return;  // storage is away: the gauges keep their last values
    uint64_t watermark = 0;
    uint64_t archive_bytes = 0;
    for (const auto& s : *segments) {
      watermark = std::max(watermark, s.last_event_id);
      archive_bytes += s.bytes;
    }
    // event_ids are dense: the oldest event above the watermark is the next one.
    auto age = log->SecondsSinceCommit(type, {{p, watermark + 1}});
    m.Partition(p, watermark, archive_bytes, age.ok() && age->count(p) ? age->at(p) : 0.0, *bytes);
  }
}

void ArchiveLoop::Run() {
  Archiver archiver(hot_, store_, ArchiverOptionsFrom(config_.archive));
  std::map<std::string, std::unique_ptr<metrics::ArchiveMetrics>> metrics;
  for (const auto& [type, entity] : config_.entities) {
    if (entity.archive.enabled && registry_ != nullptr) {
      metrics[type] = std::make_unique<metrics::ArchiveMetrics>(*registry_, type, entity.partitions);
    }
  }
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, config_.archive.interval, [this] { return stop_; })) return;
    }
    for (const auto& [type, entity] : config_.entities) {
      if (!entity.archive.enabled) continue;
      uint64_t events = 0;
      uint64_t stubbed = 0;
      auto done = archiver.Run(type, entity.partitions, PolicyFrom(entity.archive), SinksOf(config_, type),
                               /*max_steps=*/uint64_t{entity.partitions} * 4, [&](const StepReport& r) {
                                 events += r.events;
                                 stubbed += r.stubbed;
                                 if (r.last_event_id != 0 && metrics.count(type)) {
                                   metrics[type]->Segment(r.events, r.stubbed, r.bytes);
                                 }
                               });
      if (metrics.count(type)) Measure(type, entity.partitions, *metrics[type]);
      if (!done.ok()) {
        Log(LogLevel::kWarn, "archive: " + type + ": " + done.status().ToString() + " (again at the next round)");
      } else if (events > 0) {
        Log(LogLevel::kInfo, "archive: " + type + ": " + std::to_string(events) + " events archived, " +
                                 std::to_string(stubbed) + " hot rows made stubs");
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    ++rounds_;
  }
}

}  // namespace sluice::archive
