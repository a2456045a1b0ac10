#include "connectors/apply_loop.h"

#include <algorithm>
#include <string>

namespace sluice::connectors {

FailureClass ClassifyFailure(const Status& status) {
  if (status.ok()) return FailureClass::kNone;
  switch (status.code()) {
    case StatusCode::kUnavailable: return FailureClass::kUnavailable;
    case StatusCode::kAborted: return FailureClass::kAborted;
    default: return FailureClass::kFatal;
  }
}

ApplyLoop::ApplyLoop(Sink& sink, Options options)
    : sink_(&sink), chunk_max_(std::max<size_t>(1, options.chunk_max)), backoff_(options.backoff_min, options.backoff_max) {}

ApplyLoop::ApplyLoop(SinkFactory make, Options options)
    : make_(std::move(make)),
      chunk_max_(std::max<size_t>(1, options.chunk_max)),
      backoff_(options.backoff_min, options.backoff_max) {}

Status ApplyLoop::OpenSink() {
  if (sink_ == nullptr) {
    ASSIGN_OR_RETURN(owned_, make_());
    sink_ = owned_.get();
  }
  RETURN_IF_ERROR(sink_->Open());
  open_ = true;
  return Status::Ok();
}

ChunkResult ApplyLoop::ApplyChunk(std::span<const ChangeEvent> chunk) {
  ChunkResult r;
  r.events = chunk;
  if (!open_) r.status = OpenSink();
  if (!r.status.ok()) {
    Tally(r, ApplyResult{r.status, {}});
    return r;
  }
  const auto start = std::chrono::steady_clock::now();
  ApplyResult applied = sink_->Apply(chunk);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.applied = true;
  Tally(r, std::move(applied));
  return r;
}

void ApplyLoop::Send(std::span<const ChangeEvent> chunk) {
  Flight f{chunk, Status::Ok(), std::chrono::steady_clock::now()};
  if (!open_) f.open = OpenSink();
  if (f.open.ok()) sink_->Send(chunk);
  flight_.push_back(std::move(f));
}

ChunkResult ApplyLoop::ReceiveChunk() {
  ChunkResult r;
  if (flight_.empty()) {
    Tally(r, ApplyResult{Internal("nothing was sent to receive"), {}});
    return r;
  }
  Flight f = std::move(flight_.front());
  flight_.pop_front();
  r.events = f.events;
  if (!f.open.ok()) {
    Tally(r, ApplyResult{std::move(f.open), {}});
    return r;
  }
  ApplyResult applied = sink_->Receive();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - f.sent_at).count();
  r.applied = true;
  Tally(r, std::move(applied));
  return r;
}

ApplyLoop::Next ApplyLoop::Receive(const AfterChunk& after) {
  ChunkResult r = ReceiveChunk();
  return Follow(after(r));
}

ApplyLoop::Next ApplyLoop::Follow(Next next) {
  if (next == Next::kContinue) {
    state_ = SinkState::kRunning;
    backoff_.Reset();
  } else if (next == Next::kRetry) {
    state_ = SinkState::kBackoff;
  }
  return next;
}

void ApplyLoop::Tally(ChunkResult& r, ApplyResult applied) {
  r.status = std::move(applied.status);
  r.results = std::move(applied.results);
  if (r.status.ok() && r.results.size() != r.events.size()) {
    r.status = Internal("the sink returned " + std::to_string(r.results.size()) + " results for " +
                        std::to_string(r.events.size()) + " events");
  }
  r.failure = ClassifyFailure(r.status);
  if (r.failure != FailureClass::kNone) {
    r.results.clear();
    state_ = SinkState::kBackoff;
    return;
  }
  for (const EventResult& e : r.results) {
    switch (e.outcome) {
      case Outcome::kApplied: ++r.counts.applied; break;
      case Outcome::kStale: ++r.counts.stale; break;
      case Outcome::kRejected: ++r.counts.rejected; break;
    }
  }
}

size_t ApplyLoop::Run(std::span<const ChangeEvent> events, const BeforeChunk& before, const AfterChunk& after) {
  size_t done = 0;
  while (done < events.size()) {
    if (before && before(done) == Next::kStop) return done;
    const auto chunk = events.subspan(done, std::min(chunk_max_, events.size() - done));
    ChunkResult r = ApplyChunk(chunk);
    r.offset = done;
    switch (Follow(after(r))) {
      case Next::kContinue: done += chunk.size(); break;
      case Next::kRetry: break;
      case Next::kStop: return done;
    }
  }
  return done;
}

Status ApplyLoop::TakeOver(const TakenOver& taken) {
  if (!open_) RETURN_IF_ERROR(OpenSink());
  return sink_->TakeOver(taken);
}

void ApplyLoop::Idle() {
  if (open_) sink_->Idle();
}

void ApplyLoop::Released(std::span<const uint32_t> partitions) {
  if (open_ && !partitions.empty()) sink_->Released(partitions);
}

void ApplyLoop::Close() {
  // Also after a failed Open(), which may have left a connection behind.
  open_ = false;
  if (sink_ != nullptr) sink_->Close();
}

}  // namespace sluice::connectors
