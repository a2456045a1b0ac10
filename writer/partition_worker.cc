#include "writer/partition_worker.h"

#include <algorithm>

#include "core/failpoint.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "sql/mariadb_tables.h"
#include "sql/schema.h"
#include "writer/partition_worker_batch.h"

namespace sluice::writer {

std::string CommandKey(const std::string& entity_id, const std::string& command_id) {
  std::string k;
  k.reserve(entity_id.size() + command_id.size() + 1);
  k += entity_id;
  k += '\0';
  k += command_id;
  return k;
}

Reply ReuseReply() {
  return ErrorReply(409, "idempotency_key_reused",
                    "this Idempotency-Key was already used with a different command or request");
}

namespace {

std::unique_ptr<BatchThreads> OwnThreads(const PartitionWorkerOptions& o) {
  if (o.threads != nullptr) return nullptr;
  return std::make_unique<BatchThreads>(
      BatchThreads::Options{.storage = o.storage ? o.storage : std::make_shared<sql::MariaDbStorage>(o.mysql),
                            .threads = 1,
                            .overlap_commits = o.overlap_commits,
                            .idle_exit = o.idle_exit});
}

}  // namespace

PartitionWorker::PartitionWorker(PartitionWorkerOptions options)
    : options_(std::move(options)),
      table_(sql::EventTableName(options_.type, options_.partition)),
      own_threads_(OwnThreads(options_)),
      threads_(own_threads_ ? own_threads_.get() : options_.threads),
      // The cache must hold every entity of a batch at once.
      entities_(std::max<size_t>(options_.cache_entries, 2 * size_t{options_.batch_max} + 16)),
      recent_(options_.cache_entries),
      commands_(options_.handlers),
      push_full_events_(std::any_of(options_.pushers.begin(), options_.pushers.end(),
                                    [](const Pusher* p) { return p->full_events(); })) {
  threads_->Add(options_.thread_key, this);
}

PartitionWorker::~PartitionWorker() {
  Stop();
  threads_->Remove(options_.thread_key, this);
}

void PartitionWorker::Start() {
  {
    std::lock_guard lock(mu_);
    started_ = true;
    if (queue_.empty() || handed_out_) return;
    handed_out_ = true;
  }
  threads_->Ready(options_.thread_key, this);
}

void PartitionWorker::Stop() {
  {
    std::unique_lock lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !handed_out_; });
  }
  if (own_threads_) own_threads_->Stop();
}

void PartitionWorker::Submit(Command command) {
  {
    std::unique_lock lock(mu_);
    if (!stopping_ && queue_.size() < options_.max_queue) {
      queue_.push_back(std::move(command));
      if (started_ && !handed_out_) {
        handed_out_ = true;
        lock.unlock();
        threads_->Ready(options_.thread_key, this);
      } else if (queue_.size() == 1) {
        cv_.notify_all();  // a batch growing while the one before commits (Grow)
      }
      return;
    }
  }
  Reply r = ErrorReply(503, "overloaded", "the partition's queue is full or the writer is stopping; retry");
  r.retry_after_seconds = 1;
  command.reply(std::move(r));
}

void PartitionWorker::Borrow(BatchThreads::Lane& lane) {
  log_ = std::move(lane.log);
  spare_ = std::move(lane.spare);
  stage_ = std::move(lane.stage);
  lane_sessions_ = &lane.sessions;
  if (lane.sessions != cached_under_) {
    // Another worker opened the lane's sessions again since this one read
    // its head and entities (after an outage that may have lost commits).
    head_.reset();
    entities_.Clear();
    cached_under_ = lane.sessions;
  }
}

void PartitionWorker::Lend(BatchThreads::Lane& lane) {
  lane.log = std::move(log_);
  lane.spare = std::move(spare_);
  lane.stage = std::move(stage_);
  lane_sessions_ = nullptr;
}

std::deque<Command> PartitionWorker::TakeBatch() {
  std::deque<Command> batch;
  const size_t n = std::min<size_t>(queue_.size(), options_.batch_max);
  for (size_t i = 0; i < n; ++i) {
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return batch;
}

bool PartitionWorker::Serve(BatchThreads::Lane& lane) {
  Borrow(lane);
  bool served = false;
  for (;;) {
    // After a batch, the thread goes to a worker waiting for one.
    if (served && threads_->AfterBatch(options_.thread_key)) break;
    std::deque<Command> batch;
    bool land = false;
    {
      std::unique_lock lock(mu_);
      // With a COMMIT in flight: what comes first, its outcome or more commands.
      if (inflight_) cv_.wait(lock, [this] { return stopping_ || commit_done_ || !queue_.empty(); });
      if (inflight_ && (commit_done_ || queue_.empty())) {
        // Its replies first; with nothing queued, nothing to overlap it with.
        land = true;
      } else if (queue_.empty()) {
        break;
      } else {
        batch = TakeBatch();
      }
    }
    if (land) {
      (void)Land();
      continue;
    }
    ProcessBatch(std::make_unique<BatchState>(std::move(batch)));
    served = true;
  }
  // The lane goes back with nothing in flight (a conflict at its COMMIT
  // puts commands back in the queue).
  if (inflight_) (void)Land();
  Lend(lane);
  return EndTurn();
}

sql::EventAppend* PartitionWorker::PlanBatch(BatchThreads::Lane& lane) {
  std::deque<Command> batch;
  {
    std::lock_guard lock(mu_);
    batch = TakeBatch();
  }
  if (batch.empty()) return nullptr;
  Borrow(lane);
  ProcessBatch(std::make_unique<BatchState>(std::move(batch)), /*keep=*/true);
  Lend(lane);
  return kept_ ? kept_->a.insert.get() : nullptr;
}

void PartitionWorker::Resume(BatchThreads::Lane& lane, Stored stored, const Status& status) {
  std::unique_ptr<Kept> k = std::move(kept_);
  // The turn met an outage after this batch was planned (Borrow drops the
  // caches read before it).
  const bool outage_since_plan = lane.sessions != cached_under_;
  Borrow(lane);
  switch (stored) {
    case Stored::kCommitted:
      Committed(*k->b, k->a);
      Finish(*k->b, k->a);
      // The head and states it leaves are not trusted under the new
      // sessions either (the outage may have lost this commit too): the
      // next batch reads them.
      if (outage_since_plan) DropCaches(k->b->batch);
      break;
    case Stored::kConflict:
      // As after a conflict of a single INSERT: what was stale is dropped,
      // a raced retry answered from storage, the rest planned again.
      if (Status st = ResolveConflict(*k->b, status); !st.ok() && st.code() != StatusCode::kAborted) {
        FailAll(*k->b, st);
      } else {
        ProcessBatch(std::move(k->b), false, k->attempt + 1);
      }
      break;
    case Stored::kNotStored:
      // The transaction was refused at its COMMIT, nothing landed: planned
      // again (what was stale is found by the INSERT of its own), as one
      // more attempt, as after a conflict.
      ProcessBatch(std::move(k->b), false, k->attempt + 1);
      break;
    case Stored::kLeftOut:
      // The turn kept it out (an outage since it was planned or at the
      // group's INSERT, or other batches' conflicts): planned again and
      // stored alone at once, the same attempt (the next one alone counts
      // its own).
      ProcessBatch(std::move(k->b), false, k->attempt);
      break;
    case Stored::kUnknown:
      FailAll(*k->b, status);
      break;
  }
  Lend(lane);
}

bool PartitionWorker::EndTurn() {
  std::lock_guard lock(mu_);
  last_active_ = std::chrono::steady_clock::now();
  if (!queue_.empty()) return true;
  handed_out_ = false;
  cv_.notify_all();  // Stop() waits for this
  return false;
}

std::shared_ptr<void> PartitionWorker::DropIfIdleSince(std::chrono::steady_clock::time_point idle_since) {
  std::lock_guard lock(mu_);
  if (handed_out_ || last_active_ > idle_since) return nullptr;
  // The next command reads the head and its entities again.
  head_.reset();
  if (entities_.size() == 0) return nullptr;
  return std::make_shared<decltype(entities_)>(entities_.TakeAll());
}

void PartitionWorker::CommitReturned() {
  {
    std::lock_guard lock(mu_);
    commit_done_ = true;
  }
  cv_.notify_all();
}

PartitionWorker::Growth PartitionWorker::Grow(BatchState& b, Attempt& a) {
  std::deque<Command> more;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return stopping_ || commit_done_ || !queue_.empty(); });
    if (stopping_ || commit_done_ || b.n >= options_.batch_max) return Growth::kStop;
    const size_t n = std::min<size_t>(queue_.size(), options_.batch_max - b.n);
    for (size_t i = 0; i < n; ++i) {
      more.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  const size_t from = b.n;
  const size_t rejected = a.rejected.size();
  std::unordered_set<std::string> loaded;
  const Status st = LoadEntities(more, &loaded, &a);
  b.Add(more);
  if (!st.ok()) return Growth::kReplan;
  a.loaded.insert(loaded.begin(), loaded.end());
  Plan(b, a, from);
  RequeueCut(b);
  if (a.rejected.size() > rejected) return Growth::kReplan;
  if (a.insert->rows() == 0) return Growth::kGrew;
  return log_->Stage(*a.insert).ok() ? Growth::kGrew : Growth::kReplan;
}

bool PartitionWorker::SettleBefore(BatchState& b) {
  if (inflight_) (void)Land(&b);
  return b.batch.empty();
}

void PartitionWorker::Requeue(std::deque<Command>& commands) {
  std::lock_guard lock(mu_);
  while (!commands.empty()) {
    queue_.push_front(std::move(commands.back()));
    commands.pop_back();
  }
}

void PartitionWorker::RequeueCut(BatchState& b) {
  if (b.batch.size() <= b.n) return;
  std::deque<Command> cut;
  for (size_t i = b.n; i < b.batch.size(); ++i) {
    // One answered from storage in an earlier attempt is done with.
    if (i >= b.done.size() || !b.done[i]) cut.push_back(std::move(b.batch[i]));
  }
  b.batch.resize(b.n);
  b.plan.resize(b.n);  // commands that join later start afresh
  b.done.resize(b.n);
  Requeue(cut);
}

std::string PartitionWorker::Fingerprint(const std::string& name, std::optional<uint64_t> expected,
                                         const std::string& request_text) {
  std::string f = name;
  f += '\n';
  f += expected ? std::to_string(*expected) : "-";
  f += '\n';
  f += request_text;
  return f;
}

Status PartitionWorker::EnsureConnected() {
  if (log_->healthy()) return Status::Ok();
  // A new session: what the caches say may have changed meanwhile. The
  // spare opens with it, so that taking it later drops nothing.
  head_.reset();
  entities_.Clear();
  // The other workers of the thread drop theirs when they next get it.
  cached_under_ = *lane_sessions_ = BatchThreads::NewSessions();
  RETURN_IF_ERROR(log_->Open());
  return spare_ ? spare_->Open() : Status::Ok();
}

Status PartitionWorker::LoadHead() {
  ASSIGN_OR_RETURN(head_, log_->Head(options_.type, options_.partition));
  return Status::Ok();
}

Status PartitionWorker::LoadEntities(const std::deque<Command>& batch, std::unordered_set<std::string>* loaded,
                                     const Attempt* growing) {
  std::unordered_set<std::string> missing;
  for (const auto& c : batch) {
    if (entities_.Find(c.entity_id) != nullptr) continue;
    // As the batch in flight, or the staged part of the growing batch, leaves it.
    if (inflight_ && inflight_->a.overlay.count(c.entity_id)) continue;
    if (growing != nullptr && growing->overlay.count(c.entity_id)) continue;
    missing.insert(c.entity_id);
  }
  *loaded = missing;
  if (missing.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(auto rows, log_->LatestOf(options_.type, options_.partition,
                                              std::vector<std::string>(missing.begin(), missing.end())));
  for (auto& row : rows) {
    EntityState s;
    s.version = row.version;
    s.exists = !row.deleted;
    s.deltas = row.deltas_since_snapshot;
    s.delta_bytes = row.delta_bytes_since_snapshot;
    if (s.exists) {
      s.state_bytes = row.state.size();
      auto parsed = ParseJson(row.state);
      if (!parsed.ok()) return Internal("stored state of '" + row.entity_id + "' is not JSON: " + parsed.status().message());
      s.state = std::move(parsed).value();
    }
    missing.erase(row.entity_id);
    entities_.Put(row.entity_id, std::move(s));
  }
  for (const auto& id : missing) entities_.Put(id, EntityState{});
  return Status::Ok();
}

void PartitionWorker::DropCaches(const std::deque<Command>& batch) {
  head_.reset();
  for (const auto& c : batch) entities_.Erase(c.entity_id);
}

void PartitionWorker::ReplyRest(BatchState& b, const std::function<Reply(size_t)>& reply_for) {
  for (size_t i = 0; i < b.n; ++i) {
    if (!b.done[i]) b.batch[i].reply(reply_for(i));
  }
  b.batch.erase(b.batch.begin(), b.batch.begin() + static_cast<std::ptrdiff_t>(b.n));
}

void PartitionWorker::FailAll(BatchState& b, const Status& st) {
  DropCaches(b.batch);
  if (st.code() == StatusCode::kUnavailable) {
    // With two sessions both are opened again by the next batch: the one
    // that did not fail may have broken in the same outage without knowing it.
    if (spare_) {
      log_ = threads_->storage()->OpenEventLog();
      spare_ = threads_->storage()->OpenEventLog();
    }
    // An outage may have lost commits, and a session that reconnects by
    // itself (one per server, with several storage servers) says nothing:
    // this worker and the others of its thread read everything again.
    head_.reset();
    entities_.Clear();
    cached_under_ = *lane_sessions_ = BatchThreads::NewSessions();
    ++stats_.unavailable;
    LogRateLimited(LogLevel::kWarn, "writer.mysql_unavailable", "writer: " + table_ + ": " + st.message());
    ReplyRest(b, [&](size_t) { return UnavailableReply("main storage is unavailable; retry with the same Idempotency-Key"); });
  } else {
    LogRateLimited(LogLevel::kError, "writer.batch_failed", "writer: " + table_ + ": " + st.ToString());
    ReplyRest(b, [&](size_t) { return ErrorReply(500, "internal", "the command could not be stored: " + st.message()); });
  }
}

bool PartitionWorker::AppendAlone(BatchState& b, Attempt& a) {
  // One autocommit INSERT: one round trip, answered before the next batch.
  Status st = SLUICE_FAILPOINT("writer.before_commit") ? Unavailable("failpoint writer.before_commit")
                                                       : log_->Append(*a.insert);
  if (st.ok()) {
    Committed(b, a);
    Finish(b, a);
    return true;
  }
  if (st.code() != StatusCode::kAborted) {
    FailAll(b, st);
    return true;
  }
  st = ResolveConflict(b, st);
  if (!st.ok() && st.code() != StatusCode::kAborted) {
    FailAll(b, st);
    return true;
  }
  return false;  // re-plan against reloaded state
}

void PartitionWorker::ProcessBatch(std::unique_ptr<BatchState> owned, bool keep, uint32_t attempt) {
  BatchState& b = *owned;
  commands_.BeginBatch();
  while (attempt <= options_.conflict_retries) {
    Attempt a;
    // A new session or an unknown head drops or reloads what the batch in
    // flight builds on: it lands first.
    if ((!log_->healthy() || !head_) && SettleBefore(b)) return;
    Status st = EnsureConnected();
    if (st.ok() && !head_) st = LoadHead();
    if (st.ok()) st = LoadEntities(b.batch, &a.loaded);
    if (!st.ok()) {
      if (SettleBefore(b)) return;
      // A deadlock reported on a read (on Galera, a replicated write can
      // abort this session's transaction and the next statement says so):
      // the attempt starts again, as after a conflicting write.
      if (st.code() != StatusCode::kAborted) return FailAll(b, st);
      DropCaches(b.batch);
      ++attempt;
      continue;
    }
    Plan(b, a);
    RequeueCut(b);
    if (!a.rejected.empty()) {
      // Refusals are confirmed against storage, which must hold the batch
      // in flight first: it lands, and the batch is planned again on it.
      if (inflight_) {
        if (SettleBefore(b)) return;
        continue;
      }
      auto confirmed = ConfirmRefusals(b, a);
      if (confirmed.status().code() == StatusCode::kAborted) {
        DropCaches(b.batch);
        ++attempt;
        continue;
      }
      if (!confirmed.ok()) return FailAll(b, confirmed.status());
      if (!*confirmed) {  // re-plan on the stored versions
        ++attempt;
        continue;
      }
      // Rejections of commands that may have been applied before (a retry
      // whose first reply was lost): the stored event answers those instead.
      st = AnswerFromStorage(b, a.rejected);
      if (st.code() == StatusCode::kAborted) {
        DropCaches(b.batch);
        ++attempt;
        continue;
      }
      if (!st.ok()) return FailAll(b, st);
    }
    if (a.writes.empty()) return Finish(b, a);
    if (!options_.overlap_commits) {
      if (keep) {
        // The batch thread stores it with other partitions' batches (Resume).
        kept_ = std::make_unique<Kept>(Kept{std::move(owned), std::move(a), attempt});
        return;
      }
      if (AppendAlone(b, a)) return;
      ++attempt;
      continue;
    }
    st = log_->Stage(*a.insert);
    if (!st.ok()) {
      // A retry of a command in flight waits for it and then finds it stored.
      if (SettleBefore(b)) return;
      if (st.code() != StatusCode::kAborted) return FailAll(b, st);
      st = ResolveConflict(b, st);
      if (!st.ok() && st.code() != StatusCode::kAborted) return FailAll(b, st);
      ++attempt;
      continue;  // re-plan against reloaded state
    }
    if (!inflight_) return BeginCommit(std::move(owned), std::move(a));
    // While the batch in flight commits, what arrives joins this one. When
    // that goes wrong (a refusal, a conflict), the batch is planned again
    // whole with nothing in flight.
    Growth growth;
    while ((growth = Grow(b, a)) == Growth::kGrew) {
    }
    if (growth == Growth::kReplan) {
      log_->Rollback();
      if (SettleBefore(b)) return;
      continue;
    }
    // This batch commits only after the one in flight did; when that one
    // did not, this one was planned on what never was: it is dropped (before
    // Land reads storage on this session) and planned again.
    if (!Await().ok()) {
      log_->Rollback();
      if (SettleBefore(b)) return;
      DropCaches(b.batch);
      continue;
    }
    std::unique_ptr<InFlight> landed = std::move(inflight_);
    Committed(*landed->b, landed->a);
    BeginCommit(std::move(owned), std::move(a));
    // Its push and replies while this batch commits.
    return Finish(*landed->b, landed->a);
  }
  if (SettleBefore(b)) return;
  FailAll(b, Unavailable("gave up after " + std::to_string(options_.conflict_retries) +
                         " conflicting writes by other writers"));
}

}  // namespace sluice::writer
