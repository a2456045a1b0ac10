#include "writer/partition_worker.h"

#include <algorithm>

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
      // The cache must hold every entity of a batch at once.
      entities_(std::max<size_t>(options_.cache_entries, 2 * size_t{options_.batch_max} + 16)),
      recent_(options_.cache_entries),
      commands_(options_.handlers),
      push_full_events_(std::any_of(options_.pushers.begin(), options_.pushers.end(),
                                    [](const std::unique_ptr<Pusher>& p) { return p->full_events(); })) {}

PartitionWorker::~PartitionWorker() { Stop(); }

void PartitionWorker::Start() {
  for (auto& pusher : options_.pushers) pusher->Start();
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
  for (auto& pusher : options_.pushers) pusher->Stop();
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
  std::deque<Command> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.idle_exit, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) {
        if (!stopping_) {
          // Idle: the session closes with this thread; the next command opens
          // a new one, and reads the head and the entities again.
          log_ = storage_->OpenEventLog();
          head_.reset();
          entities_.Clear();
          running_ = false;
        }
        return;  // stopping and drained, or idle
      }
      const size_t n = std::min<size_t>(queue_.size(), options_.batch_max);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    ProcessBatch(batch);
    if (!batch.empty()) {
      // The batch was cut to keep the INSERT small: the rest goes first next time.
      std::lock_guard lock(mu_);
      while (!batch.empty()) {
        queue_.push_front(std::move(batch.back()));
        batch.pop_back();
      }
    }
  }
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
  // A new session: what the caches say may have changed meanwhile.
  head_.reset();
  entities_.Clear();
  return log_->Open();
}

Status PartitionWorker::LoadHead() {
  ASSIGN_OR_RETURN(head_, log_->Head(options_.type, options_.partition));
  return Status::Ok();
}

Status PartitionWorker::LoadEntities(const std::deque<Command>& batch, std::unordered_set<std::string>* loaded) {
  std::unordered_set<std::string> missing;
  for (const auto& c : batch) {
    if (entities_.Find(c.entity_id) == nullptr) missing.insert(c.entity_id);
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
    ++stats_.unavailable;
    LogRateLimited(LogLevel::kWarn, "writer.mysql_unavailable", "writer: " + table_ + ": " + st.message());
    ReplyRest(b, [&](size_t) { return UnavailableReply("main storage is unavailable; retry with the same Idempotency-Key"); });
  } else {
    LogRateLimited(LogLevel::kError, "writer.batch_failed", "writer: " + table_ + ": " + st.ToString());
    ReplyRest(b, [&](size_t) { return ErrorReply(500, "internal", "the command could not be stored: " + st.message()); });
  }
}

void PartitionWorker::ProcessBatch(std::deque<Command>& batch) {
  commands_.BeginBatch();
  BatchState b(batch);
  for (uint32_t attempt = 0; attempt <= options_.conflict_retries; ++attempt) {
    Attempt a;
    Status st = EnsureConnected();
    if (st.ok() && !head_) st = LoadHead();
    if (st.ok()) st = LoadEntities(batch, &a.loaded);
    // A deadlock reported on a read (on Galera, a replicated write can abort
    // this session's transaction and the next statement says so): the
    // attempt starts again, as after a conflicting write.
    if (st.code() == StatusCode::kAborted) {
      DropCaches(b.batch);
      continue;
    }
    if (!st.ok()) return FailAll(b, st);
    Plan(b, a);
    auto confirmed = ConfirmRefusals(b, a);
    if (confirmed.status().code() == StatusCode::kAborted) {
      DropCaches(b.batch);
      continue;
    }
    if (!confirmed.ok()) return FailAll(b, confirmed.status());
    if (!*confirmed) continue;  // re-plan on the stored versions
    // Rejections of commands that may have been applied before (a retry whose
    // first reply was lost): the stored event answers those instead.
    st = AnswerFromStorage(b, a.rejected);
    if (st.code() == StatusCode::kAborted) {
      DropCaches(b.batch);
      continue;
    }
    if (!st.ok()) return FailAll(b, st);
    if (!a.writes.empty()) {
      st = Insert(a);
      if (!st.ok()) {
        if (st.code() != StatusCode::kAborted) return FailAll(b, st);
        st = ResolveConflict(b, st);
        if (!st.ok() && st.code() != StatusCode::kAborted) return FailAll(b, st);
        continue;  // re-plan against reloaded state
      }
    }
    Finish(b, a);
    return;
  }
  FailAll(b, Unavailable("gave up after " + std::to_string(options_.conflict_retries) +
                         " conflicting writes by other writers"));
}

}  // namespace sluice::writer
