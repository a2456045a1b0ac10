#include "core/failpoint.h"
#include "writer/partition_worker_batch.h"

namespace sluice::writer {

Status PartitionWorker::Insert(Attempt& a) {
  Status st;
  if (SLUICE_FAILPOINT("writer.before_commit")) {
    st = Unavailable("failpoint writer.before_commit");
  } else {
    st = log_->Append(*a.insert);  // one transaction
  }
  if (!st.ok()) return st;
  (void)SLUICE_FAILPOINT("writer.after_commit");  // `crash` here: committed but unanswered
  *head_ += a.writes.size();
  ++stats_.batches;
  if (options_.metrics) options_.metrics->BatchCommitted(a.writes.size());
  stats_.events += a.writes.size();
  if (options_.on_commit) options_.on_commit(options_.type, options_.partition, *head_);
  for (auto& [id, entity] : a.overlay) entities_.Put(id, std::move(entity));
  return Status::Ok();
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
  for (auto& pusher : options_.pushers) tickets.push_back(pusher->Submit(events, now + pusher->timeout()));
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
