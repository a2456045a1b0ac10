// The archive as a sluice configuration sets it up (the `archive` section
// and each entity type's `archive` key; docs/archive.md): the store, the
// access layer with the archive's reads, the policies, the periodic
// archiving of serve and sync, and what `sluice archive status` reports.
//
// Threads: the functions may be called from any thread. An ArchiveLoop is
// started and stopped by one thread; it archives on its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "archive/archiver.h"
#include "config/config.h"
#include "core/status.h"
#include "metrics/metrics.h"
#include "objectstore/object_store.h"
#include "sql/tables.h"

namespace sluice::archive {

objectstore::ObjectStoreOptions StoreOptionsFrom(const config::ArchiveConfig& archive);
ArchivePolicy PolicyFrom(const config::ArchivePolicyConfig& policy);
ArchiverOptions ArchiverOptionsFrom(const config::ArchiveConfig& archive);
// The sinks that read `type`: every one of them must have applied an event before it is archived.
std::vector<std::string> SinksOf(const config::Config& config, const std::string& type);

// The configured store; kFailedPrecondition when the config has no archive.
Result<std::shared_ptr<objectstore::ObjectStore>> OpenStore(const config::Config& config);

// `hot` with the archive's reads (archive_reader.h) when the config has an
// archive, else `hot` itself. Does not touch the store.
Result<std::shared_ptr<sql::Storage>> WithArchive(const config::Config& config, std::shared_ptr<sql::Storage> hot);

// One partition as `sluice archive status` shows it.
struct PartitionArchiveStatus {
  std::string type;
  uint32_t partition = 0;
  uint64_t watermark = 0;          // the last archived event_id
  uint64_t segments = 0;
  uint64_t archived_events = 0;    // in segments
  uint64_t archive_bytes = 0;      // the segments' objects
  uint64_t archived_state_bytes = 0;  // what they held in the hot table
  sql::HotTableSize hot;           // the event table now
  double oldest_hot_age_seconds = 0;  // of hot.oldest_event_id (0: none)
  uint64_t applied = 0;            // the slowest sink's offset
  std::string slowest;             // that sink
};
Result<std::vector<PartitionArchiveStatus>> ReadArchiveStatus(const config::Config& config,
                                                              std::shared_ptr<sql::Storage> hot);

// Archives every entity type with a policy every `archive.interval`, in a
// thread of its own, as long as it runs. Errors are logged and retried at
// the next round; several processes may run one (each partition's step
// takes its lock).
class ArchiveLoop {
 public:
  // registry: where the archive's metrics go (metrics/metrics.h ArchiveMetrics); null: none.
  ArchiveLoop(config::Config config, std::shared_ptr<sql::Storage> hot, std::shared_ptr<objectstore::ObjectStore> store,
              metrics::Registry* registry = nullptr);
  ~ArchiveLoop();  // Stop()
  void Start();
  void Stop();
  uint64_t rounds() const { return rounds_; }

 private:
  void Run();
  // Sets the gauges of every partition of `type` after a round.
  void Measure(const std::string& type, uint32_t partitions, metrics::ArchiveMetrics& m);
  const config::Config config_;
  metrics::Registry* const registry_;
  const std::shared_ptr<sql::Storage> hot_;
  const std::shared_ptr<objectstore::ObjectStore> store_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<uint64_t> rounds_{0};
  std::thread thread_;
};

}  // namespace sluice::archive
