#include "admin/view_rebuild.h"

#include <algorithm>

#include "archive/from_config.h"
#include "connectors/sink.h"
#include "core/failpoint.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "offsets/offset_store.h"
#include "sql/layout.h"
#include "sql/mariadb_tables.h"
#include "sql/params.h"
#include "sql/routed_tables.h"
#include "sql/schema.h"

namespace sluice::admin {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(100);

uint64_t Sum(const std::map<uint32_t, uint64_t>& m) {
  uint64_t n = 0;
  for (const auto& [p, v] : m) n += v;
  return n;
}

}  // namespace

ViewRebuild::ViewRebuild(const config::Config& config, const config::SinkConfig& sink, engine::SinkRunner& live)
    : config_(config), sink_(sink), live_(live), shadow_name_(sink.name + "__rebuild") {
  progress_.sink = sink.name;
  progress_.phase = "replaying";
}

ViewRebuild::~ViewRebuild() {
  abandon_ = true;
  if (thread_.joinable()) thread_.join();
  if (shadow_) shadow_->Stop();
}

Status ViewRebuild::Start() {
  ASSIGN_OR_RETURN(auto live_sink, connectors::MakeSink(sink_, config_));
  ASSIGN_OR_RETURN(auto shadow_sink, live_sink->MakeRebuildShadow());
  engine::SinkRunnerOptions o;
  o.sink = sink_;
  o.sink.name = shadow_name_;
  o.dead_letter_sink = sink_.name;
  o.partitions = config_.entities.at(sink_.entity).partitions;
  o.mysql = sql::ParamsFrom(config_.mysql);
  o.engine = config_.engine;
  // The live sink's anti-entropy goes on; the shadow is replaced before long.
  o.engine.anti_entropy.enabled = false;
  const sql::StorageLayout layout = sql::LayoutFrom(config_);
  ASSIGN_OR_RETURN(storage_, archive::WithArchive(config_, sql::OpenStorage(layout)));  // replays archived events too
  o.storage = storage_;
  o.barrier = engine::ServerBarriers(layout, config_.engine.durability_barrier).ForType(sink_.entity, o.partitions);
  offsets::OffsetStore store(storage_->OpenOffsets());
  RETURN_IF_ERROR(store.Delete(shadow_name_, sink_.entity).WithContext("clearing an earlier rebuild's progress"));
  // The heads to replay up to, read before the reply to the caller so that
  // its first progress already has the total.
  ASSIGN_OR_RETURN(start_heads_, Heads());
  {
    std::lock_guard lock(mu_);
    progress_.total = Sum(start_heads_);
  }
  // The shadow runner is not woken per partition: it polls, at most 50 ms
  // apart, to follow the commits made while it replays.
  o.engine.idle_poll_max = std::min(o.engine.idle_poll_max, std::chrono::milliseconds(50));
  shadow_ = std::make_unique<engine::SinkRunner>(std::move(o), std::move(shadow_sink));
  started_ = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(shadow_->Start());
  thread_ = StartNamedThread("sluice-rebuild", [this] { Run(); });
  return Status::Ok();
}

RebuildProgress ViewRebuild::progress() const {
  std::lock_guard lock(mu_);
  RebuildProgress p = progress_;
  if (!p.finished()) p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  p.rate = p.seconds > 0 ? static_cast<double>(p.replayed) / p.seconds : 0;
  return p;
}

void ViewRebuild::SetPhase(const std::string& phase, const std::string& error) {
  std::lock_guard lock(mu_);
  progress_.phase = phase;
  progress_.error = error;
  progress_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

Result<std::map<uint32_t, uint64_t>> ViewRebuild::Heads() {
  if (!log_) log_ = storage_->OpenEventLog();
  std::map<uint32_t, uint64_t> heads;
  const uint32_t partitions = config_.entities.at(sink_.entity).partitions;
  for (uint32_t p = 0; p < partitions; ++p) {
    ASSIGN_OR_RETURN(heads[p], log_->Head(sink_.entity, p));
  }
  return heads;
}

Status ViewRebuild::WaitShadowReaches(const std::map<uint32_t, uint64_t>& target, bool count_progress) {
  auto last_heads = std::chrono::steady_clock::now();
  for (;;) {
    if (abandon_) return Aborted("the process is stopping");
    const auto t = shadow_->totals();
    if (t.state == SinkState::kStopped) return FailedPrecondition("the shadow view stopped: " + t.last_error);
    bool reached = true;
    for (const auto& [p, want] : target) {
      const auto it = t.offsets.find(p);
      if (it == t.offsets.end() || it->second < want) reached = false;
    }
    if (count_progress) {
      uint64_t total = 0;
      // The heads grow while commands flow; refresh the total now and then.
      if (std::chrono::steady_clock::now() - last_heads > std::chrono::seconds(1)) {
        if (auto heads = Heads(); heads.ok()) total = Sum(*heads);
        last_heads = std::chrono::steady_clock::now();
      }
      std::lock_guard lock(mu_);
      progress_.replayed = Sum(t.offsets);
      if (total > 0) progress_.total = total;
      progress_.total = std::max(progress_.total, progress_.replayed);
    }
    if (reached) return Status::Ok();
    std::this_thread::sleep_for(kPoll);
  }
}

Status ViewRebuild::Replay() { return WaitShadowReaches(start_heads_, true); }

Status ViewRebuild::SwitchOver() {
  SetPhase("switching");
  // A step the applier does not start within its patience is withdrawn:
  // the rebuild then fails and resumes the live view, and a pause or swap
  // left queued must not run after that.
  if (!live_.totals().paused) {
    RETURN_IF_ERROR(live_.Pause(engine::LateControl::kWithdrawn).WithContext("pausing the live view"));
    paused_live_ = true;
  }
  // The live offsets no longer move: the shadow must hold at least as much.
  const auto live_offsets = live_.totals().offsets;
  RETURN_IF_ERROR(WaitShadowReaches(live_offsets, true));
  RETURN_IF_ERROR(shadow_->Pause(engine::LateControl::kWithdrawn).WithContext("pausing the shadow view"));
  const auto shadow_offsets = shadow_->totals().offsets;
  // `error` here is a swap that fails with both runners paused.
  if (SLUICE_FAILPOINT("admin.rebuild.promote")) return Internal("failpoint admin.rebuild.promote");
  RETURN_IF_ERROR(shadow_->RunOnApplier([](connectors::Sink& s) { return s.PromoteRebuildShadow(); },
                                        engine::LateControl::kWithdrawn)
                      .WithContext("swapping the rebuilt view in"));
  // From here the live runner writes the new view. Its offsets move forward
  // to the shadow's (or stay, and it re-applies a few events as stale).
  Status moved = live_.SetOffsets(shadow_offsets);
  if (!moved.ok()) {
    Log(LogLevel::kWarn, "rebuild of sink " + sink_.name + ": the view was swapped in but moving the offsets failed (" +
                             moved.message() + "); it re-applies the events since its old offsets, as stale");
  }
  return Status::Ok();
}

void ViewRebuild::Run() {
  Status st = Replay();
  // `crash` here is a process stopped between the replay and the switch: a
  // full shadow view left behind, the live one untouched.
  if (st.ok() && SLUICE_FAILPOINT("admin.rebuild.before_switch")) {
    st = Internal("failpoint admin.rebuild.before_switch");
  }
  if (st.ok()) st = SwitchOver();
  if (paused_live_) {
    Status resumed = live_.Resume();
    if (!resumed.ok()) {
      Log(LogLevel::kError, "rebuild of sink " + sink_.name + ": resuming the live view failed: " +
                                resumed.message() + "; run `sluice resume --sink " + sink_.name + "`");
    }
  }
  shadow_->Stop();
  if (st.ok()) {
    offsets::OffsetStore store(storage_->OpenOffsets());
    store.Delete(shadow_name_, sink_.entity).IgnoreError();  // only bookkeeping: the next rebuild clears it too
    const auto t = shadow_->totals();
    {
      std::lock_guard lock(mu_);
      progress_.replayed = Sum(t.offsets);
      progress_.total = std::max(progress_.total, progress_.replayed);
    }
    SetPhase("done");
    Log(LogLevel::kInfo, "rebuild of sink " + sink_.name + ": done, the rebuilt view is live");
    return;
  }
  SetPhase(abandon_ ? "abandoned" : "failed", st.message());
  Log(LogLevel::kError, "rebuild of sink " + sink_.name + " failed; the live view is still served and updated: " +
                            st.message());
}

}  // namespace sluice::admin
