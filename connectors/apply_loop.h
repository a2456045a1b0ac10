// ApplyLoop: the one way sluice drives a Sink, shared by the sync engine's
// pull loop (engine/sink_runner.h) and the writer's push path
// (writer/pusher.h). It owns what both do alike:
//
//   opening   the sink is made (when the loop was given a factory) and
//             opened before the first chunk, and opened again after the
//             caller closed it following a failure;
//   chunking  the events go to Sink::Apply in order, at most chunk_max at a
//             time;
//   checking  a call that returns another number of results than events is
//             a broken contract (Internal, fatal);
//   failure   every failed call is classified once (ClassifyFailure):
//             retry after a backoff (unavailable / aborted) or stop (fatal);
//   counting  per chunk, how many events were applied, stale or rejected,
//             and how long Apply took;
//   backoff   the sink's state, running or backoff, and the capped
//             exponential delay of consecutive failures: a failed call or a
//             retried chunk is a failure; a chunk the caller went on from
//             ends the backoff. (The pull loop used to start each batch's
//             backoff afresh and the push to reset it on a good Open(); both
//             now grow it until a chunk goes through, so a sink that opens but
//             keeps failing is not retried at the shortest delay.)
//
// What differs stays with the caller, in two hooks Run() calls: before each
// chunk (the pull loop runs operator controls there) and after each chunk
// (the pull loop files dead letters and moves offsets, then sleeps and
// retries the same chunk or stops; the push path gives each event its
// outcome, or fails the rest and closes the sink).
//
// Threads: one thread at a time (the pull loop's applier, or the pusher's
// thread); the Sink is only called from it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "connectors/sink.h"
#include "core/backoff.h"
#include "core/sink_state.h"
#include "core/status.h"

namespace sluice::connectors {

// What the caller of a failed Open() or Apply() does about it.
enum class FailureClass : uint8_t {
  kNone,         // it did not fail
  kUnavailable,  // the sink's server is unreachable or timed out: close, back off, apply the same events again
  kAborted,      // the sink asked for a retry (deadlock, lock wait, conflict): likewise, counted apart
  kFatal,        // misconfigured, or the sink broke its contract: stop and tell the operator
};
FailureClass ClassifyFailure(const Status& status);

// Events of one chunk by outcome.
struct OutcomeCounts {
  uint64_t applied = 0, stale = 0, rejected = 0;
};

// One chunk handed to Sink::Apply, and what came of it.
struct ChunkResult {
  std::span<const ChangeEvent> events;  // the chunk
  size_t offset = 0;                    // its first event's index in what Run() was given
  Status status;                        // of the whole call (or of the Open() before it)
  FailureClass failure = FailureClass::kNone;
  bool applied = false;                 // Apply() was called (the sink was open)
  std::vector<EventResult> results;     // one per event when status is ok
  OutcomeCounts counts;                 // of results
  double seconds = 0;                   // time in Apply()
};

class ApplyLoop {
 public:
  struct Options {
    size_t chunk_max = 1000;  // events per Apply(); 0 counts as 1
    std::chrono::milliseconds backoff_min{50};
    std::chrono::milliseconds backoff_max{30000};
  };

  // What Run() does after a hook.
  enum class Next : uint8_t {
    kContinue,  // before a chunk: apply it; after it: go on with the next one
    kRetry,     // after a chunk: apply the same chunk again
    kStop,      // return now
  };
  using BeforeChunk = std::function<Next(size_t done)>;
  using AfterChunk = std::function<Next(ChunkResult& chunk)>;

  using SinkFactory = std::function<Result<std::unique_ptr<Sink>>()>;

  // Drives `sink`, which must outlive the loop.
  ApplyLoop(Sink& sink, Options options);
  // Makes its sink with `make` when it first opens it (a failure to make it
  // is a failed open); owns it.
  ApplyLoop(SinkFactory make, Options options);

  // Applies `events` in order in chunks, calling `before` (may be empty)
  // ahead of each attempt and `after` after it. Returns how many events were
  // done: every chunk `after` continued from, in order.
  size_t Run(std::span<const ChangeEvent> events, const BeforeChunk& before, const AfterChunk& after);

  // One attempt on one chunk: opens the sink when closed, applies, checks,
  // classifies and counts. A failure moves the state to backoff; Run()
  // moves it back to running when `after` goes on from a chunk.
  ChunkResult ApplyChunk(std::span<const ChangeEvent> chunk);

  // Pipelining, for a sink whose Capabilities::pipeline is above 1 (the
  // caller keeps to that many chunks in flight and to the rest of the
  // contract of Sink::Send): Send() opens the sink when closed and sends
  // the chunk, whose events the caller keeps alive until it is received (a
  // failed open becomes the chunk's result, and the next Send() tries to
  // open again). ReceiveChunk() returns the oldest chunk's result, checked,
  // classified and counted as ApplyChunk()'s; Receive() then calls `after`
  // and moves the state as Run() does.
  void Send(std::span<const ChangeEvent> chunk);
  ChunkResult ReceiveChunk();
  Next Receive(const AfterChunk& after);
  size_t in_flight() const { return flight_.size(); }

  // Opens the sink if it is not open, then Sink::TakeOver(taken).
  Status TakeOver(const TakenOver& taken);
  // Sink::Idle() of an open sink (between chunks).
  void Idle();
  // Sink::Released() of an open sink (between chunks); a closed sink holds
  // nothing for them.
  void Released(std::span<const uint32_t> partitions);

  // Closes the sink, once made, whether or not its last Open() succeeded
  // (after a failure, or to stop); the next chunk opens it again.
  void Close();
  bool open() const { return open_; }

  // kRunning, or kBackoff since a failure until a chunk succeeds.
  SinkState state() const { return state_; }
  // The delay before the next attempt after a failure: doubles with each
  // consecutive failure up to backoff_max, jittered (core/backoff.h).
  std::chrono::milliseconds NextBackoff() { return backoff_.Next(); }
  size_t chunk_max() const { return chunk_max_; }

 private:
  Status OpenSink();
  // Checks, classifies and counts what the sink returned for r.events.
  void Tally(ChunkResult& r, ApplyResult applied);
  // The state after a hook's answer: running (backoff reset) once the
  // caller goes on from a chunk, backoff while it retries one.
  Next Follow(Next next);

  // A chunk sent and not yet received.
  struct Flight {
    std::span<const ChangeEvent> events;
    Status open;        // a failed open: never sent
    std::chrono::steady_clock::time_point sent_at;
  };

  Sink* sink_ = nullptr;          // null until made
  std::unique_ptr<Sink> owned_;   // the sink made by make_
  SinkFactory make_;
  const size_t chunk_max_;
  Backoff backoff_;
  bool open_ = false;
  SinkState state_ = SinkState::kRunning;
  std::deque<Flight> flight_;  // sent, oldest first
};

}  // namespace sluice::connectors
