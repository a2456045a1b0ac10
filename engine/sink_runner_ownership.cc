// SinkRunner's share of a sink run by several engines (sink_runner.h,
// "ownership"): the partitions a LeaseKeeper gave it, taken between two
// chunks on the applier thread.
#include <set>
#include <vector>

#include "core/log.h"
#include "engine/sink_runner.h"

namespace sluice::engine {

uint64_t SinkRunner::SetOwned(std::map<uint32_t, uint64_t> tokens,
                              std::chrono::steady_clock::time_point valid_until) {
  auto control = std::make_shared<Control>();
  std::lock_guard lock(mu_);
  const uint64_t generation = ++set_generation_;
  control->fn = [this, tokens = std::move(tokens), valid_until, generation](connectors::Sink&) {
    ApplyOwnership(tokens);
    valid_until_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(valid_until.time_since_epoch()).count();
    std::lock_guard lock(mu_);
    owned_generation_ = generation;
    return Status::Ok();
  };
  if (applier_done_ || stopping_) return generation;
  controls_.push_back(std::move(control));
  queue_cv_.notify_all();
  wake_cv_.notify_all();
  return generation;
}

SinkRunner::Ownership SinkRunner::ownership() const {
  std::lock_guard lock(mu_);
  return {owned_generation_, owned_};
}

bool SinkRunner::stopped() const {
  std::lock_guard lock(mu_);
  return applier_done_;
}

bool SinkRunner::LeasesLapsed() const {
  if (options_.owner.empty() || owned_.empty()) return false;
  return std::chrono::steady_clock::now().time_since_epoch() > std::chrono::nanoseconds(valid_until_ns_.load());
}

void SinkRunner::ApplyOwnership(const std::map<uint32_t, uint64_t>& tokens) {
  std::set<uint32_t> gone;
  std::map<uint32_t, uint64_t> added;
  {
    std::lock_guard lock(mu_);
    for (const auto& [p, token] : owned_) {
      const auto it = tokens.find(p);
      if (it == tokens.end() || it->second != token) gone.insert(p);
    }
    for (const auto& [p, token] : tokens) {
      const auto it = owned_.find(p);
      if (p < options_.partitions && (it == owned_.end() || it->second != token)) added[p] = token;
    }
  }
  if (!gone.empty()) {
    // What the sink acknowledged for them is flushed and saved (fenced:
    // refused where the lease went to another engine) before they go. If
    // that fails they stay (the keeper keeps their leases): the next owner
    // must start from what this one applied, and the next call tries again.
    const Status saved = SaveOffsets();
    {
      std::lock_guard lock(mu_);
      if (!saved.ok() || dirty_) {
        for (const uint32_t p : gone) {
          if (owned_.count(p)) added.erase(p);  // its token stays as it was
        }
        gone.clear();
      }
      // Those the save was refused for are dropped and released already.
      std::erase_if(gone, [this](uint32_t p) { return owned_.count(p) == 0; });
      DropOwnedLocked(gone);
    }
    ReleaseFromSink(gone);
  }
  if (added.empty()) {
    StoredPauseStands().status().IgnoreError();  // unreadable: asked again next round
    SettleTakenOver({});
    return;
  }
  // A sink that learns at Open() what is already written is opened again
  // before their first event, so that it learns what their last owner wrote
  // past its saved offsets; the others learn it at SettleTakenOver() below
  // (Sink::TakeOver: the Kafka sink reads the topic back there) and keep
  // what they hold for the partitions they had.
  if (!stays_open_at_takeover_) CloseSink();
  // Taken over from where their last owner saved them.
  auto stored = store_->Load(options_.sink.name, options_.sink.entity);
  if (!stored.ok()) {
    // Not owned yet: the keeper gives them again at its next round.
    LogRateLimited(LogLevel::kWarn, "engine.offsets." + options_.sink.name,
                   "engine: sink " + options_.sink.name + ": cannot load the offsets of the partitions it was given: " +
                       stored.status().message());
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (paused_stored_) {
      // The pause read at Start() stood in for these partitions' own states.
      paused_ = paused_stored_ = false;
      SetStateLocked(SinkState::kRunning, "");
    }
    std::map<uint32_t, uint64_t> from;
    for (const auto& [p, token] : added) {
      offsets::PartitionProgress pp = stored->count(p) ? stored->at(p) : offsets::PartitionProgress{};
      if (SinkStateFromName(pp.state) == SinkState::kPaused) paused_ = true;  // an operator's pause holds
      pp.state = SinkStateName(paused_ ? SinkState::kPaused : state_);
      pp.last_error.clear();
      progress_[p] = pp;
      flushed_[p] = pp;
      owned_[p] = token;
      from[p] = pp.event_id;
    }
    if (paused_) state_ = SinkState::kPaused;
    MoveOffsetsLocked(from);
  }
  queue_cv_.notify_all();
  wake_cv_.notify_all();
  SettleTakenOver(added);
}

Result<bool> SinkRunner::StoredPauseStands() {
  {
    std::lock_guard lock(mu_);
    if (!paused_stored_) return false;
  }
  // Holding none of the sink's partitions, it says what storage says: a
  // resume where they are held shows here at the next lease round.
  ASSIGN_OR_RETURN(const bool all, StoredAsPaused());
  if (all) return true;
  std::lock_guard lock(mu_);
  paused_ = paused_stored_ = false;
  SetStateLocked(SinkState::kRunning, "");
  return false;
}

void SinkRunner::SettleTakenOver(const std::map<uint32_t, uint64_t>& taken) {
  // Settled now rather than at their next event: what their former owner
  // left unfinished (an open Kafka transaction) ends at the takeover. What
  // fails is tried again at the next call (every lease round).
  connectors::TakenOver settle{scope(), options_.owner, {}};
  {
    std::lock_guard lock(mu_);
    for (const auto& [p, token] : taken) unsettled_[p] = token;
    std::erase_if(unsettled_, [this](const auto& held) {
      const auto it = owned_.find(held.first);
      return it == owned_.end() || it->second != held.second;
    });
    settle.tokens = unsettled_;
  }
  if (settle.tokens.empty()) return;
  const Status st = loop_->TakeOver(settle);
  std::lock_guard lock(mu_);
  if (st.ok()) {
    for (const auto& [p, token] : settle.tokens) unsettled_.erase(p);
    return;
  }
  LogRateLimited(LogLevel::kWarn, "engine.takeover." + options_.sink.name,
                 "engine: sink " + options_.sink.name +
                     ": settling the partitions it took over failed (tried again at the next lease round): " +
                     st.message());
}

void SinkRunner::ReleaseFromSink(const std::set<uint32_t>& partitions) {
  if (partitions.empty()) return;
  const std::vector<uint32_t> released(partitions.begin(), partitions.end());
  loop_->Released(released);
}

void SinkRunner::DropOwnedLocked(const std::set<uint32_t>& partitions) {
  for (const uint32_t p : partitions) {
    owned_.erase(p);
    progress_.erase(p);
    flushed_.erase(p);
    ++epoch_[p];
  }
  std::erase_if(queue_, [this](const Batch& b) { return Outdated(b); });
  std::erase_if(unprepared_, [this](const Batch& b) { return Outdated(b); });
}

}  // namespace sluice::engine
