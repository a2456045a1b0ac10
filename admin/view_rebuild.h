// ViewRebuild: replays a sink's whole history into a fresh shadow view while
// the live view keeps being served and updated, then swaps the shadow in
// (DESIGN 4.4). Only sinks whose Sink::MakeRebuildShadow() offers a shadow
// can be rebuilt: mysql (RENAME TABLE), elasticsearch (one POST /_aliases),
// redis (RENAME per key, while the live runner is paused) and plugin types
// with the ABI 1.1 rebuild hooks. kafka and other plugins are refused.
//
// Steps, on the rebuild's own thread:
//   1. replay   a second SinkRunner (offset rows "<sink>__rebuild", dead
//               letters filed under the live sink) applies every event from
//               offset 0 to the shadow, until it reaches the heads seen at
//               the start;
//   2. switch   the live runner is paused (between two chunks), the shadow
//               catches up with the live offsets, is paused too, and on its
//               applier thread swaps itself in atomically;
//   3. carry on the live runner's offsets move to the shadow's (never
//               behind the live ones, so nothing is skipped) and it resumes
//               on the new view; the shadow's offset rows are deleted.
// A failure before the swap leaves the live view as it was and resumes it
// (a redis switch-over that fails part way leaves some keys rebuilt; they
// only hold newer versions, and the live runner carries on from its own
// offsets). Failpoints (core/failpoint.h): admin.rebuild.before_switch
// between the replay and the switch, admin.rebuild.promote just before the
// swap, with both runners paused.
//
// Threads: construct, Start() and progress() from any thread; the destructor
// abandons an unfinished rebuild (the live sink is resumed) and joins.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "config/config.h"
#include "core/status.h"
#include "engine/sink_runner.h"

namespace sluice::admin {

struct RebuildProgress {
  std::string sink;
  std::string phase;        // replaying | switching | done | failed | abandoned
  uint64_t replayed = 0;    // events the shadow has acknowledged (sum over partitions)
  uint64_t total = 0;       // events in the sink's partitions (sum of the heads; grows with new commands)
  double seconds = 0;       // since the start
  double rate = 0;          // events per second so far
  std::string error;        // phase failed: why
  bool finished() const { return phase == "done" || phase == "failed" || phase == "abandoned"; }
};

class ViewRebuild {
 public:
  // `live` must outlive this object. `sink` is the live sink's config.
  ViewRebuild(const config::Config& config, const config::SinkConfig& sink, engine::SinkRunner& live);
  ~ViewRebuild();
  ViewRebuild(const ViewRebuild&) = delete;
  ViewRebuild& operator=(const ViewRebuild&) = delete;

  // Makes the shadow (FailedPrecondition when the sink type cannot be
  // rebuilt), clears its old progress, starts it and the rebuild thread.
  Status Start();
  RebuildProgress progress() const;

 private:
  void Run();
  Status Replay();
  Status SwitchOver();
  // The last event_id of every partition of the sink's entity type.
  Result<std::map<uint32_t, uint64_t>> Heads();
  // Waits until the shadow's offsets reach `target` in every partition; false
  // when abandoned or the shadow stopped (error set).
  Status WaitShadowReaches(const std::map<uint32_t, uint64_t>& target, bool count_progress);
  void SetPhase(const std::string& phase, const std::string& error = "");

  const config::Config& config_;
  const config::SinkConfig sink_;
  engine::SinkRunner& live_;
  const std::string shadow_name_;
  std::unique_ptr<engine::SinkRunner> shadow_;
  std::shared_ptr<sql::Storage> storage_;   // made by Start()
  std::unique_ptr<sql::EventLog> log_;      // Start(), then the rebuild thread: heads
  std::map<uint32_t, uint64_t> start_heads_;  // set by Start(): what the replay must reach
  bool paused_live_ = false;               // rebuild thread: it paused the live runner

  mutable std::mutex mu_;
  RebuildProgress progress_;
  std::chrono::steady_clock::time_point started_;
  std::atomic<bool> abandon_{false};
  std::thread thread_;
};

}  // namespace sluice::admin
