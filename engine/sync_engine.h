// SyncEngine: the views half of sluice. One SinkRunner per configured sink;
// sinks progress independently (DESIGN 4). Several engines on one database
// share the sinks' partitions through leases (engine/lease_keeper.h): each
// runner applies only the partitions its engine holds.
//
// Lifecycle: construct with a validated Config, Start(), Stop(). Announce()
// may be called from any thread (the writer of the same process calls it
// after each commit): the runners of that type read that partition.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "engine/head_watcher.h"
#include "engine/lease_keeper.h"
#include "engine/notice_listener.h"
#include "engine/sink_runner.h"
#include "metrics/metrics.h"

namespace sluice::archive {
class ArchiveLoop;
}

namespace sluice::engine {

class SyncEngine {
 public:
  // registry: where each sink's metrics go (metrics/metrics.h); null: a
  // registry nobody scrapes. It must outlive the engine.
  explicit SyncEngine(config::Config config, metrics::Registry* registry = nullptr);
  ~SyncEngine();  // calls Stop()

  // Called once if the engine stops applying for good (Failed()); before Start().
  void SetOnFailure(std::function<void(const std::string&)> fn) { on_failure_ = std::move(fn); }

  // Builds every sink and starts its runner. A sink whose server is down
  // starts in backoff; only a config the sink cannot use fails Start().
  Status Start();
  void Stop();
  // A writer committed (type, partition) up to event `head`: the runners of
  // that type read that partition (HeadWatcher::Announce).
  void Announce(const std::string& type, uint32_t partition, uint64_t head);
  // The heads the engine knows of `type`'s partitions, announced or looked
  // at; empty before the first look (the health monitor's lag gauges).
  std::map<uint32_t, uint64_t> Heads(const std::string& type) const;

  const std::vector<std::unique_ptr<SinkRunner>>& runners() const { return runners_; }
  // Where it takes commit notices ("udp:HOST:PORT"), empty without engine.notices; after Start().
  std::string notice_address() const;
  // This engine's name among engines (engine.id, or the host name).
  const std::string& member() const { return member_; }
  // Why it stopped applying for good (another process under its name).
  std::optional<std::string> Failed() const { return keeper_ ? keeper_->Failed() : std::nullopt; }

 private:
  const config::Config config_;
  metrics::Registry& registry_;
  std::string member_;
  std::vector<std::unique_ptr<SinkRunner>> runners_;
  std::unique_ptr<LeaseKeeper> keeper_;
  std::unique_ptr<HeadWatcher> heads_;  // wakes the runners per partition
  std::unique_ptr<NoticeListener> notices_;  // engine.notices: the writers' commit notices
  std::unique_ptr<archive::ArchiveLoop> archiver_;  // archive.interval's rounds, when the config has an archive
  std::function<void(const std::string&)> on_failure_;
  bool started_ = false;
};

}  // namespace sluice::engine
