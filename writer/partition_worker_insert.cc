#include "core/failpoint.h"
#include "writer/partition_worker_batch.h"

namespace sluice::writer {

void PartitionWorker::BeginCommit(std::unique_ptr<BatchState> b, Attempt a) {
  inflight_ = std::make_unique<InFlight>();
  inflight_->b = std::move(b);
  inflight_->a = std::move(a);
  inflight_->log = std::move(log_);
  log_ = std::move(spare_);  // the next batch is read and staged there
  if (SLUICE_FAILPOINT("writer.before_commit")) {
    inflight_->log->Rollback();
    inflight_->outcome = Unavailable("failpoint writer.before_commit");
    std::lock_guard lock(mu_);
    commit_done_ = true;
    return;
  }
  stage_->Begin(inflight_->log.get(), [this] { CommitReturned(); });
}

Status PartitionWorker::Await() {
  InFlight& f = *inflight_;
  if (!f.outcome) f.outcome = stage_->Take();
  {
    std::lock_guard lock(mu_);
    commit_done_ = false;
  }
  if (f.log) spare_ = std::move(f.log);
  return *f.outcome;
}

void PartitionWorker::Committed(BatchState& b, Attempt& a) {
  (void)SLUICE_FAILPOINT("writer.after_commit");  // `crash` here: committed but unanswered
  const std::vector<size_t>& writes = a.writes;
  head_ = b.plan[writes.back()].event_id;
  ++stats_.batches;
  if (options_.metrics) options_.metrics->BatchCommitted(writes.size());
  stats_.events += writes.size();
  if (options_.on_commit) options_.on_commit(options_.type, options_.partition, *head_);
  for (auto& [id, entity] : a.overlay) entities_.Put(id, std::move(entity));
}

bool PartitionWorker::Land(BatchState* behind) {
  Status st = Await();
  std::unique_ptr<InFlight> f = std::move(inflight_);
  BatchState& b = *f->b;
  Attempt& a = f->a;
  if (!st.ok()) {
    if (st.code() == StatusCode::kAborted) {
      // A conflict found at COMMIT (Galera): what another writer or an
      // earlier try stored is answered from storage, the rest is planned
      // again, up to conflict_retries times.
      st = ResolveConflict(b, st);
      if (st.ok() || st.code() == StatusCode::kAborted) {
        std::deque<Command> again;
        for (size_t i = 0; i < b.n; ++i) {
          if (b.done[i]) continue;
          Command& c = b.batch[i];
          if (++c.requeued > options_.conflict_retries) {
            c.reply(UnavailableReply("gave up after " + std::to_string(options_.conflict_retries) +
                                     " conflicting writes by other writers"));
            continue;
          }
          again.push_back(std::move(c));
        }
        // A batch being built after this one goes back behind it, so that
        // commands keep the order they arrived in.
        if (behind != nullptr) {
          for (size_t i = 0; i < behind->batch.size(); ++i) {
            if (i >= behind->done.size() || !behind->done[i]) again.push_back(std::move(behind->batch[i]));
          }
          behind->batch.clear();
          behind->n = 0;
        }
        Requeue(again);
        return false;
      }
    }
    FailAll(b, st);
    return false;
  }
  Committed(b, a);
  Finish(b, a);
  return true;
}

void PartitionWorker::Finish(BatchState& b, Attempt& a) {
  if (!a.writes.empty() && !options_.pushers.empty()) Push(b.batch, b.plan, a.writes);
  for (size_t i : a.writes) {
    Command& c = b.batch[i];
    Planned& p = b.plan[i];
    p.reply.body = CommandReplyBody(options_.type, c.entity_id, p.version, p.event_id, options_.partition,
                                    p.response_text);
    recent_.Put(CommandKey(c.entity_id, c.command_id),
                RecentCommand{Fingerprint(c.name, c.expected_version, c.request_text), p.reply.body});
  }
  ReplyRest(b, [&](size_t i) {
    if (b.plan[i].kind == Planned::Kind::kDuplicateOf) {
      Reply r = b.plan[b.plan[i].duplicate_of].reply;
      if (r.status == 200) r.replayed = true;
      return r;
    }
    return b.plan[i].reply;
  });
}

void PartitionWorker::Push(const std::deque<Command>& batch, std::vector<Planned>& plan,
                           const std::vector<size_t>& writes) {
  auto events = std::make_shared<std::vector<connectors::ChangeEvent>>();
  events->reserve(writes.size());
  const int64_t committed_at_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  for (size_t i : writes) {
    const Command& c = batch[i];
    Planned& p = plan[i];
    connectors::ChangeEvent& e = events->emplace_back();
    e.entity_type = options_.type;
    e.partition = options_.partition;
    e.event_id = p.event_id;
    e.entity_id = c.entity_id;
    e.version = p.version;
    e.deleted = p.deleted;
    e.state = std::move(p.state_text);
    e.command_name = c.name;
    e.command_id = c.command_id;
    e.committed_at_us = committed_at_us;
    if (push_full_events_) {
      e.request = c.request_text;
      e.response = p.response_text;
      e.before = std::move(p.before_text);
    }
  }
  // Every deadline counts from the commit, so a sync reply waits at most the
  // longest push_timeout of its type's sync sinks.
  const auto now = Pusher::Clock::now();
  std::vector<std::shared_ptr<Pusher::Ticket>> tickets;
  tickets.reserve(options_.pushers.size());
  for (Pusher* pusher : options_.pushers) tickets.push_back(pusher->Submit(events, now + pusher->timeout()));
  for (size_t j = 0; j < options_.pushers.size(); ++j) {
    Pusher& pusher = *options_.pushers[j];
    if (!pusher.sync()) continue;
    const std::vector<PushOutcome> outcomes = pusher.Wait(*tickets[j]);
    for (size_t k = 0; k < writes.size(); ++k) {
      std::string& report = plan[writes[k]].reply.push_report;
      if (!report.empty()) report += ", ";
      report += pusher.sink_name();
      report += '=';
      report += PushOutcomeName(outcomes[k]);
    }
  }
}

}  // namespace sluice::writer
