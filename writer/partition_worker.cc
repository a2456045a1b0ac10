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

PartitionWorker::PartitionWorker(PartitionWorkerOptions options)
    : options_(std::move(options)),
      table_(sql::EventTableName(options_.type, options_.partition)),
      storage_(options_.storage ? options_.storage : std::make_shared<sql::MariaDbStorage>(options_.mysql)),
      log_(storage_->OpenEventLog()),
      spare_(options_.overlap_commits ? storage_->OpenEventLog() : nullptr),
      // The cache must hold every entity of a batch at once.
      entities_(std::max<size_t>(options_.cache_entries, 2 * size_t{options_.batch_max} + 16)),
      recent_(options_.cache_entries),
      commands_(options_.handlers),
      push_full_events_(std::any_of(options_.pushers.begin(), options_.pushers.end(),
                                    [](const Pusher* p) { return p->full_events(); })) {}

PartitionWorker::~PartitionWorker() { Stop(); }

void PartitionWorker::Start() {
  std::lock_guard lock(mu_);
  started_ = true;
  if (!queue_.empty()) StartThreadLocked();
}

void PartitionWorker::StartThreadLocked() {
  // The thread that ended idle set running_ false under mu_ and only returns after.
  if (thread_.joinable()) thread_.join();
  thread_ = StartNamedThread("sluice-commit", [this] { Run(); });
  running_ = true;
}

void PartitionWorker::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PartitionWorker::Submit(Command command) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_ && queue_.size() < options_.max_queue) {
      queue_.push_back(std::move(command));
      if (started_ && !running_) {
        StartThreadLocked();
      } else if (queue_.size() == 1) {
        cv_.notify_one();
      }
      return;
    }
  }
  Reply r = ErrorReply(503, "overloaded", "the partition's queue is full or the writer is stopping; retry");
  r.retry_after_seconds = 1;
  command.reply(std::move(r));
}

void PartitionWorker::Run() {
  if (options_.overlap_commits) {
    stage_ = std::make_unique<CommitStage>([this] {
      {
        std::lock_guard lock(mu_);
        commit_done_ = true;
      }
      cv_.notify_all();
    });
  }
  for (;;) {
    std::deque<Command> batch;
    bool land = false;
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.idle_exit, [this] { return stopping_ || !queue_.empty() || commit_done_; });
      if (inflight_ && (commit_done_ || queue_.empty())) {
        // Its replies first; with nothing queued, nothing to overlap it with.
        land = true;
      } else if (queue_.empty()) {
        if (!stopping_) {
          // Idle: the sessions close with this thread; the next command opens
          // new ones, and reads the head and the entities again.
          log_ = storage_->OpenEventLog();
          if (spare_) spare_ = storage_->OpenEventLog();
          head_.reset();
          entities_.Clear();
          running_ = false;
        }
        break;  // stopping and drained, or idle
      } else {
        const size_t n = std::min<size_t>(queue_.size(), options_.batch_max);
        for (size_t i = 0; i < n; ++i) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
    }
    if (land) {
      (void)Land();
      continue;
    }
    ProcessBatch(std::make_unique<BatchState>(std::move(batch)));
  }
  stage_.reset();  // nothing is in flight
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
      log_ = storage_->OpenEventLog();
      spare_ = storage_->OpenEventLog();
    }
    ++stats_.unavailable;
    LogRateLimited(LogLevel::kWarn, "writer.mysql_unavailable", "writer: " + table_ + ": " + st.message());
    ReplyRest(b, [&](size_t) { return UnavailableReply("main storage is unavailable; retry with the same Idempotency-Key"); });
  } else {
    LogRateLimited(LogLevel::kError, "writer.batch_failed", "writer: " + table_ + ": " + st.ToString());
    ReplyRest(b, [&](size_t) { return ErrorReply(500, "internal", "the command could not be stored: " + st.message()); });
  }
}

void PartitionWorker::ProcessBatch(std::unique_ptr<BatchState> owned) {
  BatchState& b = *owned;
  commands_.BeginBatch();
  for (uint32_t attempt = 0; attempt <= options_.conflict_retries;) {
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
      // One autocommit INSERT: one round trip, answered before the next batch.
      st = SLUICE_FAILPOINT("writer.before_commit") ? Unavailable("failpoint writer.before_commit")
                                                    : log_->Append(*a.insert);
      if (st.ok()) {
        Committed(b, a);
        return Finish(b, a);
      }
      if (st.code() != StatusCode::kAborted) return FailAll(b, st);
      st = ResolveConflict(b, st);
      if (!st.ok() && st.code() != StatusCode::kAborted) return FailAll(b, st);
      ++attempt;
      continue;  // re-plan against reloaded state
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
