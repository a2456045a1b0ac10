#include "engine/sink_runner.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>

#include "core/backoff.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "engine/before_states.h"
#include "engine/event_reader.h"
#include "engine/read_groups.h"
#include "sql/mariadb_tables.h"

namespace sluice::engine {

SinkRunner::SinkRunner(SinkRunnerOptions options, std::unique_ptr<connectors::Sink> sink)
    : options_(std::move(options)),
      sink_(std::move(sink)),
      barrier_(options_.barrier ? options_.barrier
                                : std::make_shared<DurabilityBarrier>(options_.mysql, options_.engine.durability_barrier)),
      storage_(options_.storage ? options_.storage : std::make_shared<sql::MariaDbStorage>(options_.mysql)),
      metrics_(options_.metrics ? options_.metrics
                                : std::make_shared<metrics::SinkMetrics>(metrics::UnexportedRegistry(),
                                                                         options_.sink.name, options_.partitions)),
      loop_(std::make_unique<connectors::ApplyLoop>(
          *sink_, connectors::ApplyLoop::Options{.chunk_max = options_.sink.batch_max,
                                                 .backoff_min = std::chrono::milliseconds(50),
                                                 .backoff_max = options_.engine.retry_backoff_max})) {}

SinkRunner::~SinkRunner() { Stop(); }

Status SinkRunner::Start() {
  store_ = std::make_unique<offsets::OffsetStore>(storage_->OpenOffsets());
  dead_letters_ = storage_->OpenDeadLetters();
  // With an owner the partitions come with their leases (SetOwned).
  std::map<uint32_t, offsets::PartitionProgress> stored;
  if (options_.owner.empty()) {
    ASSIGN_OR_RETURN(stored, store_->Load(options_.sink.name, options_.sink.entity));
  } else if (auto all = StoredAsPaused(); all.ok()) {
    // A sink an operator paused as a whole is paused from the start, before
    // its leases come: status does not say running meanwhile. Otherwise
    // each partition taken says so itself.
    paused_ = paused_stored_ = *all;
  } else {
    Log(LogLevel::kWarn, "engine: sink " + name() + ": cannot read whether it is paused before its partitions come: " +
                             all.status().message());
  }
  for (uint32_t p = 0; options_.owner.empty() && p < options_.partitions; ++p) {
    owned_[p] = 0;
    offsets::PartitionProgress pp = stored.count(p) ? stored[p] : offsets::PartitionProgress{};
    // An operator's pause outlives a restart.
    if (SinkStateFromName(pp.state) == SinkState::kPaused) paused_ = true;
    pp.state = SinkStateName(SinkState::kRunning);
    pp.last_error.clear();
    start_offsets_[p] = pp.event_id;
    progress_[p] = pp;
  }
  if (paused_) {
    state_ = SinkState::kPaused;
    for (auto& [p, pp] : progress_) pp.state = SinkStateName(state_);
  }
  flushed_ = progress_;
  last_flush_ = std::chrono::steady_clock::now();
  // Asked before the applier owns the sink.
  const connectors::Capabilities caps = sink_->capabilities();
  const bool entity_checks = caps.entity_checks;
  pipeline_ = std::max<uint32_t>(1, caps.pipeline);
  full_events_ = caps.full_events;
  prepares_ = caps.prepares;
  stays_open_at_takeover_ = caps.stays_open_at_takeover;
  reader_ = StartNamedThread("sluice-pull", [this] { ReadLoop(); });
  if (prepares_) preparer_ = StartNamedThread("sluice-prep", [this] { PrepareLoop(); });
  applier_ = StartNamedThread("sluice-apply", [this] { ApplyLoop(); });
  if (options_.engine.anti_entropy.enabled && options_.sink.anti_entropy && entity_checks) {
    AntiEntropy::Options o;
    o.sink = options_.sink.name;
    o.entity = options_.sink.entity;
    o.partitions = options_.partitions;
    o.mysql = options_.mysql;
    o.storage = storage_;
    o.settings = options_.engine.anti_entropy;
    o.metrics = metrics_;
    anti_entropy_ = std::make_unique<AntiEntropy>(
        std::move(o), [this](std::vector<connectors::ChangeEvent> latest) { return CompareOnApplier(std::move(latest)); });
    anti_entropy_->Start();
  }
  return Status::Ok();
}

Result<StepReport> SinkRunner::CompareOnApplier(std::vector<connectors::ChangeEvent> latest) {
  {
    std::lock_guard lock(mu_);
    if (applier_done_ || stopping_) return StepReport::Skipped();
  }
  // Shared with the control, which may outlive this call if the applier is
  // slow to reach it (RunOnApplier then gives up waiting, the step still runs).
  auto report = std::make_shared<Result<StepReport>>(StepReport{});
  Status st = RunOnApplier([this, latest = std::move(latest), report](connectors::Sink& sink) {
    std::map<uint32_t, uint64_t> offsets;
    {
      std::lock_guard lock(mu_);
      if (paused_ || state_ != SinkState::kRunning) {
        *report = StepReport::Skipped();
        return Status::Ok();
      }
      for (const auto& [p, pp] : progress_) offsets[p] = pp.event_id;
    }
    *report = CompareAndRepair(
        sink, latest, offsets, [this] { return barrier_->Wait(); },
        [this](const std::vector<std::pair<uint32_t, uint64_t>>& events) { return DeadLettersAmong(events); });
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return std::move(*report);
}

void SinkRunner::Stop() {
  if (anti_entropy_) anti_entropy_->RequestStop();
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !reader_.joinable() && !preparer_.joinable() && !applier_.joinable()) return;
    stopping_ = true;
  }
  queue_cv_.notify_all();
  wake_cv_.notify_all();
  if (reader_.joinable()) reader_.join();
  if (preparer_.joinable()) preparer_.join();
  if (applier_.joinable()) applier_.join();
  // Its step, if any, returned when the applier ran or refused it.
  if (anti_entropy_) anti_entropy_->Stop();
}

void SinkRunner::Wake() {
  {
    std::lock_guard lock(mu_);
    wake_all_ = true;
    ++wake_seq_;
  }
  wake_cv_.notify_all();
}

void SinkRunner::Wake(uint32_t partition, uint64_t head) {
  {
    std::lock_guard lock(mu_);
    const auto at = read_to_.find(partition);
    if (head != 0 && at != read_to_.end() && head <= at->second) return;  // read already
    woken_.insert(partition);
    ++wake_seq_;
  }
  wake_cv_.notify_all();
}

SinkRunner::Totals SinkRunner::totals() const {
  std::lock_guard lock(mu_);
  Totals t;
  t.read = read_;
  t.gaps = gaps_;
  t.retries = retries_;
  for (const auto& [p, pp] : progress_) {
    t.applied += pp.applied;
    t.stale += pp.stale;
    t.dead_lettered += pp.dead_lettered;
  }
  t.state = state_;
  t.last_error = last_error_;
  t.paused = paused_;
  for (const auto& [p, pp] : progress_) t.offsets[p] = pp.event_id;
  return t;
}

Status SinkRunner::RunOnApplier(std::function<Status(connectors::Sink&)> fn, LateControl late) {
  auto control = std::make_shared<Control>();
  control->fn = std::move(fn);
  std::future<Status> done = control->done.get_future();
  {
    std::lock_guard lock(mu_);
    if (applier_done_ || stopping_) {
      return FailedPrecondition("sink " + name() + " is stopped" + (last_error_.empty() ? "" : ": " + last_error_) +
                                "; fix the cause and restart the process");
    }
    controls_.push_back(control);
  }
  queue_cv_.notify_all();
  wake_cv_.notify_all();
  if (done.wait_for(options_.control_patience) != std::future_status::ready) {
    std::lock_guard lock(mu_);
    if (!control->started) {
      const std::string waited = options_.control_patience == std::chrono::minutes(1)
                                     ? "a minute"
                                     : std::to_string(options_.control_patience.count()) + " ms";
      std::string m = "sink " + name() + " did not reach a point between two batches within " + waited +
                      " (is its server hanging?); ";
      if (late == LateControl::kWithdrawn) {
        control->withdrawn = true;
        return Unavailable(m + "the request was withdrawn");
      }
      return Unavailable(m + "the request stays queued and runs when it does");
    }
  }
  // Started: it runs to its end (a rebuild's swap of millions of keys takes
  // minutes), bounded by the sink's own timeouts.
  return done.get();
}

Status SinkRunner::Pause(LateControl late) {
  return RunOnApplier([this](connectors::Sink&) {
    {
      std::lock_guard lock(mu_);
      paused_ = true;
      paused_stored_ = false;  // this process's own pause now: it holds
    }
    SetState(SinkState::kPaused, "");
    // A failed flush is logged and goes back to the last one; the pause holds.
    SaveOffsets().IgnoreError();
    return Status::Ok();
  }, late);
}

Status SinkRunner::Resume() {
  return RunOnApplier([this](connectors::Sink&) {
    {
      std::lock_guard lock(mu_);
      if (!paused_) return Status::Ok();
    }
    // A pause that lives in the offsets of partitions this engine does not
    // hold yet: cleared here, it would come back with them.
    ASSIGN_OR_RETURN(const bool stands, StoredPauseStands());
    if (stands) {
      return Unavailable("sink " + name() +
                         " holds no partitions yet and every partition is stored as paused; resume it where they "
                         "are held, or here once it holds them");
    }
    {
      std::lock_guard lock(mu_);
      paused_ = paused_stored_ = false;
    }
    SetState(SinkState::kRunning, "");
    SaveOffsets().IgnoreError();  // paused: nothing was acknowledged since the pause's flush
    return Status::Ok();
  });
}

Result<bool> SinkRunner::StoredAsPaused() {
  ASSIGN_OR_RETURN(const auto saved, store_->Load(options_.sink.name, options_.sink.entity));
  for (uint32_t p = 0; p < options_.partitions; ++p) {
    const auto it = saved.find(p);
    if (it == saved.end() || SinkStateFromName(it->second.state) != SinkState::kPaused) return false;
  }
  return options_.partitions > 0;
}

Status SinkRunner::SetOffsets(const std::map<uint32_t, uint64_t>& offsets) {
  for (const auto& [p, off] : offsets) {
    if (p >= options_.partitions) {
      return InvalidArgument("sink " + name() + " has partitions 0.." + std::to_string(options_.partitions - 1) +
                             ", not " + std::to_string(p));
    }
  }
  Status st = RunOnApplier([this, offsets](connectors::Sink&) {
    {
      std::lock_guard lock(mu_);
      for (const auto& [p, off] : offsets) {
        if (!owned_.count(p)) {
          return FailedPrecondition("partition " + std::to_string(p) + " of sink " + name() +
                                    " is applied by another engine (sluice status shows which)");
        }
      }
    }
    // Every partition's offset is saved below: the others' must not pass
    // what the sink holds only in a buffer. A failed flush (logged) goes
    // back to the last one, and the move applies on top of that.
    FlushSink().IgnoreError();
    {
      std::lock_guard lock(mu_);
      MoveOffsetsLocked(offsets);
      for (const auto& [p, off] : offsets) flushed_[p] = progress_[p];  // where the operator put it
    }
    SaveOffsets().IgnoreError();  // nothing is left to flush
    return Status::Ok();
  });
  queue_cv_.notify_all();  // room for the reader
  wake_cv_.notify_all();
  return st;
}

void SinkRunner::MoveOffsetsLocked(const std::map<uint32_t, uint64_t>& offsets) {
  for (const auto& [p, off] : offsets) {
    progress_[p].event_id = off;
    ++epoch_[p];
    reread_from_[p] = off;
    read_to_.erase(p);
    woken_.insert(p);  // the reader reads it from there, woken per partition or not
  }
  ++wake_seq_;
  std::erase_if(queue_, [this](const Batch& b) { return Outdated(b); });
  std::erase_if(unprepared_, [this](const Batch& b) { return Outdated(b); });
  dirty_ = true;
}

size_t SinkRunner::InFlightLocked() const {
  size_t n = preparing_;
  for (const Batch& b : queue_) n += b.events.size();
  for (const Batch& b : unprepared_) n += b.events.size();
  return n;
}

bool SinkRunner::Outdated(uint32_t partition, uint64_t epoch) const {
  const auto it = epoch_.find(partition);
  return epoch != (it == epoch_.end() ? 0 : it->second);
}

void SinkRunner::Work::Add(Batch&& batch) {
  const size_t begin = events.size();
  if (events.capacity() == 0) {  // the first batch, nothing reserved: take its vector as it is
    events = std::move(batch.events);
  } else {
    events.insert(events.end(), std::make_move_iterator(batch.events.begin()),
                  std::make_move_iterator(batch.events.end()));
  }
  segments.push_back(Segment{batch.partition, batch.epoch, begin, events.size()});
}

SinkRunner::Batch SinkRunner::Work::Take(const Segment& g, size_t begin, size_t end) {
  Batch b{g.partition, g.epoch, {}};
  b.events.assign(std::make_move_iterator(events.begin() + static_cast<ptrdiff_t>(begin)),
                  std::make_move_iterator(events.begin() + static_cast<ptrdiff_t>(end)));
  return b;
}

void SinkRunner::RunControls() {
  for (;;) {
    std::shared_ptr<Control> control;
    {
      std::lock_guard lock(mu_);
      if (controls_.empty()) return;
      control = std::move(controls_.front());
      controls_.pop_front();
      if (control->withdrawn) {
        control->done.set_value(Aborted("withdrawn by its caller"));
        continue;
      }
      control->started = true;
    }
    control->done.set_value(control->fn(*sink_));
  }
}

bool SinkRunner::Checkpoint() {
  for (;;) {
    RunControls();
    std::unique_lock lock(mu_);
    if (stopping_) return false;
    if (!controls_.empty()) continue;
    if (!paused_ && !LeasesLapsed()) return true;
    if (paused_) {
      queue_cv_.wait(lock, [this] { return stopping_ || !controls_.empty(); });
    } else {
      // Past the leases' validity nothing is applied until the keeper
      // renews them (a control) or gives them up.
      queue_cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return stopping_ || !controls_.empty(); });
    }
  }
}

bool SinkRunner::ApplierSleep(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  wake_cv_.wait_for(lock, d, [this] { return stopping_ || !controls_.empty(); });
  return !stopping_;
}

bool SinkRunner::SleepUnlessStopping(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !wake_cv_.wait_for(lock, d, [this] { return stopping_; });
}

void SinkRunner::ReadLoop() {
  std::map<uint32_t, uint64_t> position = start_offsets_;
  std::map<uint32_t, uint64_t> seen_epoch;  // per partition: epoch_ that `position` belongs to
  std::unique_ptr<sql::EventLog> log = storage_->OpenEventLog();
  const sql::EventLog::Columns columns = full_events_ ? sql::EventLog::Columns::kFull : sql::EventLog::Columns::kView;
  BeforeStates before;  // used when full_events_
  Backoff backoff(std::chrono::milliseconds(50), options_.engine.retry_backoff_max);
  auto idle = std::chrono::milliseconds(1);
  // Per partition: its last read filled its limit (at the start every
  // partition may hold a backlog, until a read of it comes back short).
  std::map<uint32_t, bool> backlogged;
  // Which partitions that keep up a pass reads: all of them (the first pass,
  // after a failed read, after Wake(), and every pass of a runner not woken
  // per partition), else those woken since the last pass and those to look
  // at again after an idle sleep (`retry`: their read was cut at a gap).
  bool read_all = true;
  std::set<uint32_t> retry;
  for (;;) {
    bool any = false;
    uint64_t seen_wake = 0;
    std::vector<uint32_t> owned;
    std::set<uint32_t> woken;
    {
      std::lock_guard lock(mu_);
      seen_wake = wake_seq_;
      for (const auto& [p, token] : owned_) owned.push_back(p);
      if (wake_all_ || !options_.woken_per_partition) read_all = true;
      wake_all_ = false;
      woken.swap(woken_);
    }
    // A partition given again may hold a backlog.
    std::erase_if(backlogged, [&](const auto& b) { return !std::binary_search(owned.begin(), owned.end(), b.first); });
    for (const uint32_t p : owned) backlogged.try_emplace(p, true);
    // Partitions that may hold a backlog share statements of at most
    // batch_max events (engine/read_groups.h), read when the queue has room
    // for a batch. The others are read together in one statement, one round
    // trip per pass, which is what a pass costs once the engine keeps up.
    std::vector<uint32_t> backlog, together;
    for (const uint32_t p : owned) {
      if (backlogged[p]) {
        backlog.push_back(p);
      } else if (read_all || woken.count(p) || retry.count(p)) {
        together.push_back(p);
      }
    }
    const uint32_t batch_max = options_.engine.batch_max;
    std::vector<ReadGroup> groups = BacklogReadGroups(backlog, batch_max);
    if (!together.empty()) groups.push_back(ReadGroup{std::move(together), batch_max});
    read_all = false;
    retry.clear();
    const size_t read_ahead = size_t{options_.engine.inflight_batches - 1} * batch_max;
    for (const ReadGroup& group : groups) {
      std::vector<std::pair<uint32_t, uint64_t>> from;
      {
        std::unique_lock lock(mu_);
        queue_cv_.wait(lock, [&] { return stopping_ || InFlightLocked() <= read_ahead; });
        if (stopping_) return;
        for (const uint32_t p : group.partitions) {
          if (!owned_.count(p)) continue;  // taken away since the pass began
          if (epoch_[p] != seen_epoch[p]) {  // SetOffsets moved this partition, or it was given again
            seen_epoch[p] = epoch_[p];
            position[p] = reread_from_[p];
            read_to_[p] = position[p];
          }
          from.emplace_back(p, position[p]);
        }
      }
      if (from.empty()) continue;
      if (!log->healthy()) {
        if (Status opened = log->Open(); !opened.ok()) {
          LogRateLimited(LogLevel::kWarn, "engine.read." + options_.sink.name,
                         "engine: sink " + options_.sink.name + ": cannot read events: " + opened.message());
          metrics_->Retry(metrics::RetryClass::kStorageUnavailable);
          if (!SleepUnlessStopping(backoff.Next())) return;
          read_all = true;
          break;
        }
      }
      auto rows = log->ReadAfter(options_.sink.entity, from, group.limit, columns);
      Result<std::map<uint32_t, ReadResult>> r = rows.status();
      if (rows.ok()) {
        std::map<uint32_t, ReadResult> cut;
        for (const auto& [p, after] : from) {
          cut[p] = ToReadResult(std::move((*rows)[p]), options_.sink.entity, p, after);
          if (!full_events_) continue;
          if (Status st = before.Fill(*log, options_.sink.entity, p, cut[p].events); !st.ok()) {
            r = st;
            break;
          }
        }
        if (r.status().ok()) r = std::move(cut);
      }
      if (!r.ok()) {
        std::string which;
        for (const uint32_t p : group.partitions) which += (which.empty() ? "" : ",") + std::to_string(p);
        LogRateLimited(LogLevel::kWarn, "engine.read." + options_.sink.name,
                       "engine: sink " + options_.sink.name + ": reading partition" +
                           (group.partitions.size() > 1 ? "s " : " ") +
                           which + " failed: " + r.status().message());
        metrics_->Retry(metrics::RetryClass::kStorageUnavailable);
        if (!SleepUnlessStopping(backoff.Next())) return;
        read_all = true;
        break;
      }
      // Nothing read goes on before the log is durable past it (DESIGN I5):
      // a crash of the server could still roll it back.
      const bool read_any = std::any_of(r->begin(), r->end(), [](const auto& pr) { return !pr.second.events.empty(); });
      if (read_any) {
        if (Status st = barrier_->Wait(); !st.ok()) {
          // A crash of the server could still roll back what was read: no
          // state of it may serve as a later event's state before.
          before.Clear();
          LogRateLimited(LogLevel::kWarn, "engine.barrier." + options_.sink.name,
                         "engine: sink " + options_.sink.name + ": events read are held back: " + st.message());
          metrics_->Retry(metrics::RetryClass::kStorageUnavailable);
          if (!SleepUnlessStopping(backoff.Next())) return;
          read_all = true;
          break;  // read again from the same positions
        }
      }
      backoff.Reset();
      for (auto& [p, read] : *r) {
        if (read.gap) {
          retry.insert(p);
          std::lock_guard lock(mu_);
          ++gaps_;
          metrics_->Gap();
        }
        backlogged[p] = read.events.size() >= group.limit;
        if (read.events.empty()) continue;
        any = true;
        std::lock_guard lock(mu_);
        if (epoch_[p] != seen_epoch[p]) continue;  // read from an old position: drop it
        position[p] = read.events.back().event_id;
        read_to_[p] = position[p];
        read_ += read.events.size();
        metrics_->Read(read.events.size());
        (prepares_ ? unprepared_ : queue_).push_back(Batch{p, seen_epoch[p], std::move(read.events)});
      }
      queue_cv_.notify_all();
    }
    if (any) {
      idle = std::chrono::milliseconds(1);
      continue;
    }
    std::unique_lock lock(mu_);
    const auto woken_up = [&] { return stopping_ || wake_seq_ != seen_wake; };
    if (options_.woken_per_partition && retry.empty() && !read_all) {
      wake_cv_.wait(lock, woken_up);  // nothing to look at until a wake-up names it
    } else {
      // A partition cut at a gap, or every partition after a failed read
      // (woken per partition: both at most 50 ms apart, the gap is filled by
      // a commit already announced).
      wake_cv_.wait_for(lock, idle, woken_up);
    }
    if (stopping_) return;
    idle = std::min(idle * 2, options_.woken_per_partition
                                  ? std::min(options_.engine.idle_poll_max, std::chrono::milliseconds(50))
                                  : options_.engine.idle_poll_max);
  }
}

void SinkRunner::PrepareLoop() {
  for (;;) {
    Batch batch;
    {
      std::unique_lock lock(mu_);
      queue_cv_.wait(lock, [this] { return stopping_ || !unprepared_.empty(); });
      if (stopping_) return;
      batch = std::move(unprepared_.front());
      unprepared_.pop_front();
      preparing_ = batch.events.size();
    }
    // Beside the applier's writes of earlier batches and the reader's next read.
    sink_->Prepare(batch.events);
    {
      std::lock_guard lock(mu_);
      preparing_ = 0;
      // An offset move while it was prepared drops it, as it drops the queued ones.
      if (!Outdated(batch)) queue_.push_back(std::move(batch));
    }
    queue_cv_.notify_all();
  }
}

void SinkRunner::SetState(SinkState state, const std::string& error) {
  std::lock_guard lock(mu_);
  SetStateLocked(state, error);
}

void SinkRunner::SetStateLocked(SinkState state, const std::string& error) {
  state_ = state;
  last_error_ = error;
  for (auto& [p, pp] : progress_) {
    pp.state = SinkStateName(state);
    pp.last_error = error;
  }
  dirty_ = true;
}

}  // namespace sluice::engine
