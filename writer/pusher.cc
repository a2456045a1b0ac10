#include "writer/pusher.h"

#include <span>

#include "core/failpoint.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "core/thread_slice.h"

namespace sluice::writer {

using connectors::ChangeEvent;
using connectors::Outcome;

std::string_view PushOutcomeName(PushOutcome outcome) {
  switch (outcome) {
    case PushOutcome::kPending: return "timeout";
    case PushOutcome::kUpdated: return "updated";
    case PushOutcome::kRejected: return "rejected";
    case PushOutcome::kFailed: return "failed";
  }
  return "unknown";
}

Pusher::Pusher(Options options, SinkFactory factory)
    : options_(std::move(options)),
      loop_(std::move(factory), connectors::ApplyLoop::Options{.chunk_max = options_.sink.batch_max,
                                                               .backoff_min = options_.reopen_backoff_min,
                                                               .backoff_max = options_.reopen_backoff_max}) {}

Pusher::~Pusher() { Stop(); }

void Pusher::Start() { thread_ = StartNamedThread("sluice-push", [this] { Run(); }); }

void Pusher::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Pusher::Finish(Ticket& ticket, PushOutcome outcome) {
  for (auto& o : ticket.outcomes) o = outcome;
  ticket.finished = true;
}

std::shared_ptr<Pusher::Ticket> Pusher::Submit(std::shared_ptr<const std::vector<ChangeEvent>> events,
                                               Clock::time_point deadline) {
  auto ticket = std::make_shared<Ticket>();
  const size_t n = events->size();
  ticket->events = std::move(events);
  ticket->deadline = deadline;
  ticket->submitted = Clock::now();
  ticket->outcomes.assign(n, PushOutcome::kPending);
  counters_.batches.fetch_add(1, std::memory_order_relaxed);
  counters_.events.fetch_add(n, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    const bool down = ticket->submitted < reopen_at_;
    const bool full = !queue_.empty() && queued_events_ + n > options_.max_pending_events;
    if (stopping_ || down || full) {
      Finish(*ticket, PushOutcome::kFailed);
      counters_.failed.fetch_add(n, std::memory_order_relaxed);
      Observe(*ticket, ticket->submitted, false);
      return ticket;
    }
    queue_.push_back(ticket);
    queued_events_ += n;
  }
  work_cv_.notify_one();
  return ticket;
}

void Pusher::Observe(const Ticket& ticket, Clock::time_point now, bool late) {
  if (options_.metrics == nullptr) return;
  const double seconds = std::chrono::duration<double>(now - ticket.submitted).count();
  if (late) {  // a sync reply no longer waited for it, whatever came of it
    options_.metrics->Failed(metrics::PushFailure::kTimeout, seconds);
    return;
  }
  size_t updated = 0, rejected = 0, failed = 0;
  for (PushOutcome o : ticket.outcomes) {
    updated += o == PushOutcome::kUpdated;
    rejected += o == PushOutcome::kRejected;
    failed += o == PushOutcome::kFailed;
  }
  if (updated > 0) options_.metrics->Succeeded(updated, seconds);
  if (rejected > 0) options_.metrics->Failed(metrics::PushFailure::kRejected, seconds);
  if (failed > 0) options_.metrics->Failed(metrics::PushFailure::kUnavailable, seconds);
}

std::vector<PushOutcome> Pusher::Wait(const Ticket& ticket) {
  std::unique_lock lock(mu_);
  done_cv_.wait_until(lock, ticket.deadline, [&] { return ticket.finished; });
  return ticket.outcomes;
}

void Pusher::Run() {
  if (options_.thread_slice.count() > 0) {
    // Without it a push waits longer for a CPU on a busy machine; nothing else changes.
    const Result<std::chrono::nanoseconds> slice = SetCurrentThreadSlice(options_.thread_slice);
    if (!slice.ok()) {
      LogRateLimited(LogLevel::kWarn, "writer.push.slice",
                     "writer: push to " + options_.where + ": writer.push_thread_slice not applied (" +
                         slice.status().message() + "); the pusher keeps its scheduling as it was");
    } else if (slice.value().count() == 0) {
      LogRateLimited(LogLevel::kInfo, "writer.push.slice",
                     "writer: writer.push_thread_slice has no effect on this kernel (it needs Linux 6.12 or later)");
    }
  }
  for (;;) {
    std::vector<std::shared_ptr<Ticket>> batch;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        for (auto& t : queue_) {
          Finish(*t, PushOutcome::kFailed);
          counters_.failed.fetch_add(t->outcomes.size(), std::memory_order_relaxed);
        }
        queue_.clear();
        queued_events_ = 0;
        break;
      }
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
      queued_events_ = 0;
    }
    if (options_.metrics != nullptr) {
      const Clock::time_point started = Clock::now();
      for (const auto& t : batch) options_.metrics->Started(std::chrono::duration<double>(started - t->submitted).count());
    }
    std::vector<PushOutcome> outcomes = Apply(batch);
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard lock(mu_);
      size_t k = 0;
      for (auto& t : batch) {
        for (auto& o : t->outcomes) o = outcomes[k++];
        t->finished = true;
        const bool late = now > t->deadline;
        if (late) counters_.late.fetch_add(1, std::memory_order_relaxed);
        Observe(*t, now, late);
        counters_.latency_us_sum.fetch_add(
            static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - t->submitted).count()),
            std::memory_order_relaxed);
      }
    }
    done_cv_.notify_all();
  }
  loop_.Close();
  done_cv_.notify_all();
}

std::vector<PushOutcome> Pusher::Apply(const std::vector<std::shared_ptr<Ticket>>& batch) {
  std::vector<PushOutcome> outcomes;
  // The events that go to the sink, and where their outcomes belong.
  std::vector<const ChangeEvent*> pending;
  std::vector<size_t> slot;
  for (const auto& t : batch) {
    const bool fail = SLUICE_FAILPOINT("writer.push");
    for (const ChangeEvent& e : *t->events) {
      if (!fail) {
        pending.push_back(&e);
        slot.push_back(outcomes.size());
      }
      outcomes.push_back(fail ? PushOutcome::kFailed : PushOutcome::kPending);
    }
    if (fail) counters_.failed.fetch_add(t->events->size(), std::memory_order_relaxed);
  }
  if (pending.empty()) return outcomes;

  // The sink takes a contiguous span: one ticket's events as they are, more
  // than one copied together.
  std::vector<ChangeEvent> joined;
  std::span<const ChangeEvent> all;
  if (batch.size() == 1 && pending.size() == batch[0]->events->size()) {
    all = std::span<const ChangeEvent>(*batch[0]->events);
  } else {
    joined.reserve(pending.size());
    for (const ChangeEvent* e : pending) joined.push_back(*e);
    all = std::span<const ChangeEvent>(joined);
  }
  // Push never retries: a failed chunk fails the rest (the pull path applies
  // them) and keeps the sink down for a backoff.
  loop_.Run(all, nullptr, [&](connectors::ChunkResult& chunk) {
    if (chunk.failure != connectors::FailureClass::kNone) {
      for (size_t i = chunk.offset; i < pending.size(); ++i) outcomes[slot[i]] = PushOutcome::kFailed;
      counters_.failed.fetch_add(pending.size() - chunk.offset, std::memory_order_relaxed);
      loop_.Close();
      std::lock_guard lock(mu_);
      reopen_at_ = Clock::now() + loop_.NextBackoff();
      LogRateLimited(LogLevel::kWarn, "writer.push." + options_.sink.name,
                     "writer: push to " + options_.where + " failed (the pull path will apply it): " +
                         chunk.status.message());
      return connectors::ApplyLoop::Next::kStop;
    }
    for (size_t i = 0; i < chunk.events.size(); ++i) {
      PushOutcome& o = outcomes[slot[chunk.offset + i]];
      o = chunk.results[i].outcome == Outcome::kRejected ? PushOutcome::kRejected : PushOutcome::kUpdated;
    }
    counters_.applied.fetch_add(chunk.counts.applied, std::memory_order_relaxed);
    counters_.stale.fetch_add(chunk.counts.stale, std::memory_order_relaxed);
    counters_.rejected.fetch_add(chunk.counts.rejected, std::memory_order_relaxed);
    return connectors::ApplyLoop::Next::kContinue;
  });
  return outcomes;
}

}  // namespace sluice::writer
