// Pusher: the writer's side of the push path (DESIGN 3.5). One Pusher feeds
// one push sink from several partition workers (WriterService gives each
// sink push_threads of them, partition p using p mod n): each worker hands
// it its committed batches, and the pusher's own thread applies them,
// oldest first, through the same Sink interface and per-row version check
// as the sync engine. A partition's batches thus reach the view in order;
// the queue and its bound are shared by the partitions that use it.
//
// Push is best effort. It never fails a command and never moves an offset;
// the pull path applies every event again later, and the version check
// makes that harmless. So a push that fails, that would have to wait
// behind too much earlier work, or that finishes after its deadline is
// counted and forgotten.
//
//   Submit()  queues a batch and returns a ticket at once. When the queue
//             already holds max_pending_events events, or the sink is known
//             to be down (its last Open failed and the retry delay has not
//             passed), the ticket is finished at once as failed.
//   Wait()    (push_mode: sync) blocks until the ticket is finished or its
//             deadline passes, whichever comes first.
//
// The thread takes every queued batch at once and applies them together,
// in chunks of the sink's batch_max, through connectors::ApplyLoop (the
// pull loop's way), so a slow sink sees larger batches, not a longer queue.
// A batch-level failure closes the sink; the next batch reopens it, no
// sooner than a capped backoff after the failure.
//
// Threads: Submit/Wait from any partition worker's thread (several at
// once); the counters from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "connectors/apply_loop.h"
#include "connectors/sink.h"
#include "core/status.h"
#include "metrics/metrics.h"

namespace sluice::writer {

// What a push did for one event.
enum class PushOutcome : uint8_t {
  kPending,   // not finished (yet): after Wait(), the deadline passed
  kUpdated,   // the view holds this version (applied now, or already there)
  kRejected,  // the sink refused the event (the pull path will dead-letter it)
  kFailed,    // the sink was unavailable, the push queue was full, or the failpoint fired
};
std::string_view PushOutcomeName(PushOutcome outcome);  // "pending" is sent as "timeout"

class Pusher {
 public:
  using Clock = std::chrono::steady_clock;
  using SinkFactory = connectors::ApplyLoop::SinkFactory;

  struct Options {
    config::SinkConfig sink;          // push.enabled; name, mode and timeout are used
    std::string where;                // "sink 'x' partition 3", for logs
    size_t max_pending_events = 20000;
    std::chrono::milliseconds reopen_backoff_min{20};
    std::chrono::milliseconds reopen_backoff_max{2000};
    // sluice_writer_push_* of this sink; null: not exported.
    metrics::PushMetrics* metrics = nullptr;
    // The pusher thread's time slice (core/thread_slice.h); 0: the kernel's default.
    std::chrono::microseconds thread_slice{0};
  };

  struct Ticket {
    std::shared_ptr<const std::vector<connectors::ChangeEvent>> events;
    Clock::time_point deadline;
    Clock::time_point submitted;
    // Written by the pusher thread under the pusher's mutex; read after Wait().
    bool finished = false;
    std::vector<PushOutcome> outcomes;  // one per event; kPending until finished
  };

  struct Counters {
    std::atomic<uint64_t> batches{0};        // tickets submitted
    std::atomic<uint64_t> events{0};         // events submitted
    std::atomic<uint64_t> applied{0};        // events the view took
    std::atomic<uint64_t> stale{0};          // events the view already had
    std::atomic<uint64_t> rejected{0};       // events the sink refused
    std::atomic<uint64_t> failed{0};         // events not pushed: sink down, queue full, failpoint
    std::atomic<uint64_t> late{0};           // batches finished after their deadline
    std::atomic<uint64_t> latency_us_sum{0}; // submit to finish, of batches that reached the sink
  };

  Pusher(Options options, SinkFactory factory);
  ~Pusher();  // calls Stop()
  Pusher(const Pusher&) = delete;
  Pusher& operator=(const Pusher&) = delete;

  void Start();
  // Finishes the batch being applied, fails the queued ones, joins the thread.
  void Stop();

  std::shared_ptr<Ticket> Submit(std::shared_ptr<const std::vector<connectors::ChangeEvent>> events,
                                 Clock::time_point deadline);
  // Blocks until `ticket` is finished or its deadline passes. Returns its
  // outcomes as of then (kPending for an unfinished one).
  std::vector<PushOutcome> Wait(const Ticket& ticket);

  const std::string& sink_name() const { return options_.sink.name; }
  bool sync() const { return options_.sink.push.mode == config::PushConfig::Mode::kSync; }
  // The sink runs view code: its events need request, response and the state before.
  bool full_events() const { return !options_.sink.code.empty(); }
  std::chrono::milliseconds timeout() const { return options_.sink.push.timeout; }
  const Counters& counters() const { return counters_; }

 private:
  void Run();
  // Applies `batch` (on the pusher thread, without the mutex held) and
  // returns one outcome per event of every ticket, in order.
  std::vector<PushOutcome> Apply(const std::vector<std::shared_ptr<Ticket>>& batch);
  void Finish(Ticket& ticket, PushOutcome outcome);  // mu_ held
  // Exports how one finished ticket went (counts per batch, latency).
  void Observe(const Ticket& ticket, Clock::time_point now, bool late);

  const Options options_;
  Counters counters_;

  std::mutex mu_;
  std::condition_variable work_cv_;  // the thread waits for tickets
  std::condition_variable done_cv_;  // Wait() waits for its ticket
  std::deque<std::shared_ptr<Ticket>> queue_;
  size_t queued_events_ = 0;
  bool stopping_ = false;
  Clock::time_point reopen_at_{};  // the sink is down until then: fail fast
  std::thread thread_;

  // Pusher thread only: makes, opens, chunks, applies and classifies (the
  // pull loop's way), and keeps the backoff of consecutive failures.
  connectors::ApplyLoop loop_;
};

}  // namespace sluice::writer
