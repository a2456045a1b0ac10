// SinkRunner's applier thread (sink_runner.h, "applier thread"): takes the
// read batches, applies them through connectors::ApplyLoop (or keeps a
// pipelining sink's chunks in flight), files dead letters, moves the
// offsets past what the sink acknowledged, flushes the sink and saves them.
#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>

#include "core/backoff.h"
#include "core/failpoint.h"
#include "core/log.h"
#include "engine/sink_runner.h"

namespace sluice::engine {

using connectors::Outcome;

Result<std::set<std::pair<uint32_t, uint64_t>>> SinkRunner::DeadLettersAmong(
    const std::vector<std::pair<uint32_t, uint64_t>>& events) {
  return dead_letters_->Among(options_.dead_letter_sink.empty() ? options_.sink.name : options_.dead_letter_sink,
                              options_.sink.entity, events);
}

Status SinkRunner::DeadLetter(const connectors::ChangeEvent& e, const std::string& reason) {
  sql::DeadLetter d;
  d.sink = options_.dead_letter_sink.empty() ? options_.sink.name : options_.dead_letter_sink;
  d.entity_type = e.entity_type;
  d.partition = e.partition;
  d.event_id = e.event_id;
  d.entity_id = e.entity_id;
  d.version = e.version;
  d.error = reason;
  return dead_letters_->Add(d);
}

Status SinkRunner::FlushSink() {
  if (!unflushed_) return Status::Ok();
  unflushed_ = false;
  const Status st = sink_->Flush();
  if (st.ok()) {
    {
      std::lock_guard lock(mu_);
      flushed_ = progress_;
    }
    if (std::exchange(flush_failing_, false) && state_ == SinkState::kBackoff) SetState(SinkState::kRunning, "");
    return st;
  }
  // Until a flush succeeds the sink is in backoff (a paused one stays
  // paused), also in the offsets saved meanwhile.
  flush_failing_ = true;
  if (state_ == SinkState::kRunning || state_ == SinkState::kBackoff) {
    SetState(SinkState::kBackoff, "flushing the sink failed: " + st.message());
  }
  LogRateLimited(LogLevel::kWarn, "engine.flush." + options_.sink.name,
                 "engine: sink " + options_.sink.name + ": flushing the sink failed; its events since the last "
                 "flush are applied again: " + st.message());
  // What it buffered since its last flush may be gone with the close: its
  // offsets and counters go back there and those events are read again.
  loop_->Close();
  {
    std::lock_guard lock(mu_);
    std::map<uint32_t, uint64_t> back;
    for (auto& [p, pp] : progress_) {
      const offsets::PartitionProgress& f = flushed_[p];
      if (pp.event_id != f.event_id) back[p] = f.event_id;
      pp.applied = f.applied;
      pp.stale = f.stale;
      pp.dead_lettered = f.dead_lettered;
    }
    MoveOffsetsLocked(back);
  }
  queue_cv_.notify_all();  // room for the reader
  wake_cv_.notify_all();
  return st.WithContext("flushing the sink");
}

void SinkRunner::CloseSink() {
  // A failed flush has closed the sink and gone back to the last flush.
  if (!FlushSink().ok()) return;
  loop_->Close();
}

Status SinkRunner::SaveOffsets() {
  const Status flushed = FlushSink();
  std::map<uint32_t, offsets::PartitionProgress> snapshot;
  sql::Fence fence{scope(), options_.owner, {}};
  {
    std::lock_guard lock(mu_);
    snapshot = progress_;
    fence.tokens = owned_;
    dirty_ = false;
  }
  Status st;
  if (options_.owner.empty()) {
    st = store_->Save(options_.sink.name, options_.sink.entity, snapshot);
  } else {
    // Only where this engine still holds the lease with its token.
    auto refused = store_->SaveFenced(options_.sink.name, options_.sink.entity, snapshot, fence);
    st = refused.status();
    if (refused.ok() && !refused->empty()) {
      std::string which;
      for (const uint32_t p : *refused) which += (which.empty() ? "" : ",") + std::to_string(p);
      Log(LogLevel::kWarn, "engine: sink " + options_.sink.name + ": partition" + (refused->size() > 1 ? "s " : " ") +
                               which + " went to another engine (lease lost); its offsets were not saved here and "
                               "it is no longer applied here");
      {
        std::lock_guard lock(mu_);
        DropOwnedLocked(*refused);
      }
      ReleaseFromSink(*refused);
    }
  }
  metrics_->OffsetFlush(st.ok());
  if (!st.ok()) {
    std::lock_guard lock(mu_);
    dirty_ = true;  // try again at the next flush
    LogRateLimited(LogLevel::kWarn, "engine.offsets." + options_.sink.name,
                   "engine: sink " + options_.sink.name + ": saving offsets failed: " + st.message());
  }
  last_flush_ = std::chrono::steady_clock::now();
  return flushed;
}

bool SinkRunner::ApplyWork(Work& work) {
  for (;;) {
    bool stopping = false, outdated = false;
    loop_->Run(
        work.events,
        [&](size_t) {
          if (!Checkpoint()) {
            stopping = true;
            return connectors::ApplyLoop::Next::kStop;
          }
          std::lock_guard lock(mu_);
          const auto old = [this](const Work::Segment& g) { return Outdated(g.partition, g.epoch); };
          outdated = std::any_of(work.segments.begin(), work.segments.end(), old);
          return outdated ? connectors::ApplyLoop::Next::kStop : connectors::ApplyLoop::Next::kContinue;
        },
        [&](connectors::ChunkResult& chunk) {
          const auto next = AfterChunk(work, chunk);
          stopping = next == connectors::ApplyLoop::Next::kStop;
          return next;
        });
    if (stopping) return false;
    if (!outdated) return true;
    // SetOffsets moved a partition meanwhile: its events go. Work of
    // several segments fits in one chunk, so none of it is applied yet.
    std::lock_guard lock(mu_);
    if (work.segments.size() == 1) return true;
    DropOutdatedLocked(work);
    if (work.events.empty()) return true;
  }
}

void SinkRunner::DropOutdatedLocked(Work& work) const {
  const auto old = [this](const Work::Segment& g) { return Outdated(g.partition, g.epoch); };
  if (std::none_of(work.segments.begin(), work.segments.end(), old)) return;
  Work kept;
  for (const auto& g : work.segments) {
    if (!Outdated(g.partition, g.epoch)) kept.Add(work.Take(g, g.begin, g.end));
  }
  work = std::move(kept);
}

bool SinkRunner::CheckpointDue() const {
  std::lock_guard lock(mu_);
  return stopping_ || paused_ || !controls_.empty() || LeasesLapsed();
}

bool SinkRunner::SendWork(Work&& work) {
  // A batch longer than a chunk (one partition's) goes as several works of
  // one chunk each, so that each is acknowledged on its own.
  std::vector<Work> chunks;
  const size_t chunk_max = loop_->chunk_max();
  if (work.events.size() <= chunk_max) {
    chunks.push_back(std::move(work));
  } else {
    const Work::Segment g = work.segments.front();  // one segment: TakeWork joins only what fits
    for (size_t begin = 0; begin < work.events.size(); begin += chunk_max) {
      chunks.emplace_back().Add(work.Take(g, begin, std::min(work.events.size(), begin + chunk_max)));
    }
  }
  for (Work& chunk : chunks) {
    // Room first: receiving may fail, and a failure (a failed flush, a
    // refused offset save, controls run before the retry) can move offsets.
    if (!Settle(pipeline_ - 1)) return false;
    // As ApplyWork's hook before each chunk: controls, a pause and lapsed
    // leases wait for the chunks in flight, then run.
    if (CheckpointDue() && (!Settle(0) || !Checkpoint())) return false;
    {
      // Nothing between this check and the send moves an offset.
      std::lock_guard lock(mu_);
      DropOutdatedLocked(chunk);
    }
    if (chunk.events.empty()) continue;
    sent_.push_back(std::make_unique<Work>(std::move(chunk)));
    loop_->Send(sent_.back()->events);
  }
  return true;
}

std::deque<std::unique_ptr<SinkRunner::Work>> SinkRunner::TakeBackSent() {
  std::deque<std::unique_ptr<Work>> taken;
  taken.swap(sent_);
  for (size_t i = 0; i < taken.size(); ++i) (void)loop_->ReceiveChunk();  // moot: sent again
  return taken;
}

bool SinkRunner::Settle(size_t keep) {
  while (sent_.size() > keep) {
    std::unique_ptr<Work> work = std::move(sent_.front());
    sent_.pop_front();
    const auto next = loop_->Receive([&](connectors::ChunkResult& chunk) { return AfterChunk(*work, chunk); });
    // A failure took back the chunks sent after it (AfterChunk): they go
    // again after it, in order.
    std::deque<std::unique_ptr<Work>> again;
    again.swap(taken_back_);
    if (next == connectors::ApplyLoop::Next::kStop) {
      TakeBackSent();  // applied or not, nothing after this chunk moves an offset
      return false;
    }
    if (next == connectors::ApplyLoop::Next::kRetry) {
      // One at a time until they are through, as after any failure.
      if (!ApplyWork(*work)) return false;
      for (auto& w : again) {
        if (!ApplyWork(*w)) return false;
      }
    }
  }
  return true;
}

connectors::ApplyLoop::Next SinkRunner::AfterChunk(const Work& work, connectors::ChunkResult& chunk) {
  using Next = connectors::ApplyLoop::Next;
  using connectors::FailureClass;
  if (chunk.applied) metrics_->ApplyCall(chunk.events.size(), chunk.seconds);
  Status st = chunk.status;
  FailureClass failure = chunk.failure;
  // Dead letters are written before the offset may pass them.
  size_t stop_at = chunk.events.size();
  bool dead_letter_failed = false;
  for (size_t i = 0; failure == FailureClass::kNone && i < chunk.events.size(); ++i) {
    if (chunk.results[i].outcome != Outcome::kRejected) continue;
    if (options_.sink.on_error == config::OnError::kStop) {
      stop_at = i;
      break;
    }
    if (Status filed = DeadLetter(chunk.events[i], chunk.results[i].reason); !filed.ok()) {
      st = Unavailable("cannot write the dead letter: " + filed.message());
      failure = FailureClass::kUnavailable;
      dead_letter_failed = true;
    }
  }
  if (failure == FailureClass::kFatal) {
    SetState(SinkState::kStopped, st.message());
    Log(LogLevel::kError, "engine: sink " + options_.sink.name + " stopped: " + st.message() +
                              " (fix the sink's configuration or server, then restart)");
    return Next::kStop;
  }
  if (failure != FailureClass::kNone) {
    // The sink is closed next: the chunks in flight come back first, to be
    // applied again after this one (Settle), also when the sink took this
    // one and the dead letter could not be written.
    if (!sent_.empty()) taken_back_ = TakeBackSent();
    {
      std::lock_guard lock(mu_);
      ++retries_;
      metrics_->Retry(dead_letter_failed                      ? metrics::RetryClass::kStorageUnavailable
                      : failure == FailureClass::kAborted ? metrics::RetryClass::kSinkAborted
                                                          : metrics::RetryClass::kSinkUnavailable);
    }
    SetState(SinkState::kBackoff, st.message());
    LogRateLimited(LogLevel::kWarn, "engine.apply." + options_.sink.name,
                   "engine: sink " + options_.sink.name + " is unavailable, retrying with backoff: " + st.message());
    CloseSink();
    if (std::chrono::steady_clock::now() - last_flush_ >= options_.engine.offset_flush_interval) {
      SaveOffsets().IgnoreError();  // CloseSink flushed, or went back to the last flush
    }
    // The same chunk again; the version check makes a partial apply harmless.
    return ApplierSleep(loop_->NextBackoff()) ? Next::kRetry : Next::kStop;
  }
  {
    std::lock_guard lock(mu_);
    // Per segment, the events of this chunk up to stop_at are acknowledged.
    const size_t done = chunk.offset;
    uint64_t applied = 0, stale = 0, dead = 0;
    for (const auto& g : work.segments) {
      const size_t from = std::max(g.begin, done), to = std::min(g.end, done + stop_at);
      // A partition moved (or dropped) since the chunk went out keeps its new offset.
      if (from >= to || Outdated(g.partition, g.epoch)) continue;
      auto& pp = progress_[g.partition];
      for (size_t i = from; i < to; ++i) {
        switch (chunk.results[i - done].outcome) {
          case Outcome::kApplied: ++pp.applied, ++applied; break;
          case Outcome::kStale: ++pp.stale, ++stale; break;
          case Outcome::kRejected: ++pp.dead_lettered, ++dead; break;
        }
      }
      pp.event_id = work.events[to - 1].event_id;
    }
    metrics_->Applied(applied, stale, dead);
    dirty_ = true;
    unflushed_ = true;
    // A failing flush keeps it in backoff.
    if (state_ != SinkState::kRunning && !flush_failing_) SetStateLocked(SinkState::kRunning, "");
  }
  if (stop_at < chunk.events.size()) {
    const auto& e = chunk.events[stop_at];
    SetState(SinkState::kStopped, "event " + std::to_string(e.event_id) + " of partition " +
                                      std::to_string(e.partition) + " (entity " + e.entity_id +
                                      ") was rejected and on_error is stop: " + chunk.results[stop_at].reason);
    Log(LogLevel::kError, "engine: sink " + options_.sink.name + " stopped: " + last_error_);
    return Next::kStop;
  }
  (void)SLUICE_FAILPOINT("engine.after_apply");  // `crash`: applied but offset not saved
  return Next::kContinue;
}

bool SinkRunner::TakeWork(Work& work, bool wait) {
  std::vector<Batch> taken;
  size_t events = 0;
  {
    std::unique_lock lock(mu_);
    queue_cv_.wait_for(lock, wait ? options_.engine.offset_flush_interval : std::chrono::milliseconds(0),
                       [this] { return stopping_ || !queue_.empty() || !controls_.empty(); });
    if (stopping_) return false;
    // The first batch, then the next ones while everything fits in one
    // chunk; none while controls wait (the next Checkpoint runs them). The
    // applier's flush runs either way: controls that come often (the
    // anti-entropy's) must not hold back the offsets.
    const size_t chunk_max = loop_->chunk_max();
    while (controls_.empty() && !queue_.empty()) {
      Batch& next = queue_.front();
      if (events > 0 && events + next.events.size() > chunk_max) break;
      if (!Outdated(next)) {
        events += next.events.size();
        taken.push_back(std::move(next));
      }
      queue_.pop_front();
      if (events >= chunk_max) break;
    }
  }
  // Joined outside the lock (the reader goes on meanwhile), each event moved
  // once into room made for all of them.
  if (taken.size() > 1) work.events.reserve(events);
  for (Batch& b : taken) work.Add(std::move(b));
  return true;
}

void SinkRunner::ApplyLoop() {
  Backoff flush_backoff(std::chrono::milliseconds(50), options_.engine.retry_backoff_max);
  auto last_idle_tick = std::chrono::steady_clock::now();
  for (;;) {
    // With chunks in flight (a pipelining sink) the checkpoint waits for
    // them, and only when it has something to do.
    if (!sent_.empty() && CheckpointDue() && !Settle(0)) break;
    if (sent_.empty() && !Checkpoint()) break;
    Work work;
    // Nothing to send next: the oldest chunk's result is taken instead of waiting.
    if (!TakeWork(work, /*wait=*/sent_.empty())) break;
    if (!work.events.empty()) {
      queue_cv_.notify_all();  // room for the reader
      if (!(pipeline_ > 1 ? SendWork(std::move(work)) : ApplyWork(work))) break;
    } else if (!sent_.empty() && !Settle(sent_.size() - 1)) {
      break;
    }
    // Every flush interval, busy or not: a sink lets go of what it holds for
    // partitions that stopped sending (Sink::Idle), also while others send;
    // told with each flush too, so that both wait once for the chunks in flight.
    const auto now = std::chrono::steady_clock::now();
    bool dirty;
    {
      std::lock_guard lock(mu_);
      dirty = dirty_;
    }
    const bool flush_due = dirty && now - last_flush_ >= options_.engine.offset_flush_interval;
    if (flush_due || now - last_idle_tick >= options_.engine.offset_flush_interval) {
      if (!Settle(0)) break;
      loop_->Idle();
      last_idle_tick = now;
    }
    if (flush_due) {
      // A failed flush is handled like a failed Apply(): the sink is closed
      // and its events since the last flush are applied again.
      const Status st = SaveOffsets();
      if (st.ok()) {
        flush_backoff.Reset();
      } else if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kAborted) {
        {
          std::lock_guard lock(mu_);
          ++retries_;
          metrics_->Retry(metrics::RetryClass::kSinkUnavailable);
        }
        if (!ApplierSleep(flush_backoff.Next())) break;
      } else {
        SetState(SinkState::kStopped, st.message());
        Log(LogLevel::kError, "engine: sink " + options_.sink.name + " stopped: " + st.message() +
                                  " (fix the sink's configuration or server, then restart)");
        break;
      }
    }
  }
  // What is in flight: acknowledged where it went through (a stop), dropped
  // after a chunk the runner stopped at (Settle took it back then).
  Settle(0);
  // A failed flush here is logged, and the saved offsets stay at the last one.
  SaveOffsets().IgnoreError();
  loop_->Close();
  // A stopped sink stops its reader too, and refuses controls.
  std::deque<std::shared_ptr<Control>> refused;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    applier_done_ = true;
    refused.swap(controls_);
    owned_.clear();  // applies nothing more: the keeper lets the leases go
  }
  for (auto& c : refused) c->done.set_value(FailedPrecondition("sink " + name() + " stopped before the request ran"));
  queue_cv_.notify_all();
  wake_cv_.notify_all();
}

}  // namespace sluice::engine
