#include "writer/partition_worker.h"

#include <unordered_set>

#include "core/failpoint.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "sql/mariadb_tables.h"
#include "sql/schema.h"
#include "writer/command_request.h"
#include "writer/commands.h"

namespace sluice::writer {

namespace {

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

}  // namespace

// What the planner decided for one command of the batch.
struct PartitionWorker::Planned {
  enum class Kind { kWrite, kReply, kDuplicateOf };
  Kind kind = Kind::kReply;
  Reply reply;                 // kReply; for kWrite filled after the commit
  size_t duplicate_of = 0;     // kDuplicateOf: index of the first command with this key
  bool check_storage = false;  // rejected: a stored event for this key would answer it instead
  // kWrite:
  uint64_t version = 0;
  uint64_t event_id = 0;
  bool deleted = false;
  std::string response_text;
  std::string state_text;  // canonical JSON of the new state; empty when deleted
};

PartitionWorker::PartitionWorker(PartitionWorkerOptions options)
    : options_(std::move(options)),
      table_(sql::EventTableName(options_.type, options_.partition)),
      log_((options_.storage ? options_.storage : std::make_shared<sql::MariaDbStorage>(options_.mysql))->OpenEventLog()),
      // The cache must hold every entity of a batch at once.
      entities_(std::max<size_t>(options_.cache_entries, 2 * size_t{options_.batch_max} + 16)),
      recent_(options_.cache_entries),
      commands_(options_.handlers) {}

PartitionWorker::~PartitionWorker() { Stop(); }

void PartitionWorker::Start() {
  for (auto& pusher : options_.pushers) pusher->Start();
  thread_ = StartNamedThread("sluice-commit", [this] { Run(); });
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
      if (queue_.size() == 1) cv_.notify_one();
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
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
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

Result<size_t> PartitionWorker::DropStaleEntities(const std::unordered_map<std::string, uint64_t>& versions) {
  if (versions.empty()) return size_t{0};
  std::vector<std::string> ids;
  ids.reserve(versions.size());
  for (const auto& [id, version] : versions) ids.push_back(id);
  ASSIGN_OR_RETURN(auto stored, log_->LatestVersions(options_.type, options_.partition, ids));
  size_t stale = 0;
  for (const auto& [id, version] : versions) {
    const auto it = stored.find(id);
    if ((it == stored.end() ? 0 : it->second) == version) continue;
    entities_.Erase(id);
    ++stale;
  }
  return stale;
}

void PartitionWorker::DropCaches(const std::deque<Command>& batch) {
  head_.reset();
  for (const auto& c : batch) entities_.Erase(c.entity_id);
}

Status PartitionWorker::AnswerFromStorage(std::deque<Command>& batch, std::vector<Planned>& plan,
                                          std::vector<char>& done, const std::vector<size_t>& which) {
  if (which.empty()) return Status::Ok();
  std::vector<std::pair<std::string, std::string>> keys;
  keys.reserve(which.size());
  for (size_t i : which) keys.emplace_back(batch[i].entity_id, batch[i].command_id);
  ASSIGN_OR_RETURN(auto rows, log_->FindCommands(options_.type, options_.partition, keys));
  std::unordered_map<std::string, const sql::EventRow*> stored;
  for (const auto& row : rows) stored.emplace(CommandKey(row.entity_id, row.command_id), &row);
  for (size_t i : which) {
    Command& c = batch[i];
    const std::string key = CommandKey(c.entity_id, c.command_id);
    auto it = stored.find(key);
    if (it == stored.end()) continue;
    const sql::EventRow& row = *it->second;
    Reply r;
    if (Fingerprint(row.command_name, row.expected_version, row.request) ==
        Fingerprint(c.name, c.expected_version, c.request_text)) {
      r.body = CommandReplyBody(options_.type, c.entity_id, row.version, row.event_id, options_.partition, row.response);
      r.replayed = true;
      recent_.Put(key, RecentCommand{Fingerprint(c.name, c.expected_version, c.request_text), r.body});
    } else {
      r = ReuseReply();
    }
    plan[i].kind = Planned::Kind::kReply;
    plan[i].reply = r;
    done[i] = 1;
    c.reply(std::move(r));
  }
  return Status::Ok();
}

void PartitionWorker::ProcessBatch(std::deque<Command>& batch) {
  commands_.BeginBatch();
  size_t n = batch.size();
  std::vector<Planned> plan(n);
  std::vector<char> done(n, 0);

  // Replies every command of [0, n) not answered yet, then drops them from the batch.
  auto finish = [&](const std::function<Reply(size_t)>& reply_for) {
    for (size_t i = 0; i < n; ++i) {
      if (!done[i]) batch[i].reply(reply_for(i));
    }
    batch.erase(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
  };
  auto fail_all = [&](const Status& st) {
    DropCaches(batch);
    if (st.code() == StatusCode::kUnavailable) {
      ++stats_.unavailable;
      LogRateLimited(LogLevel::kWarn, "writer.mysql_unavailable", "writer: " + table_ + ": " + st.message());
      finish([&](size_t) { return UnavailableReply("main storage is unavailable; retry with the same Idempotency-Key"); });
    } else {
      LogRateLimited(LogLevel::kError, "writer.batch_failed", "writer: " + table_ + ": " + st.ToString());
      finish([&](size_t) { return ErrorReply(500, "internal", "the command could not be stored: " + st.message()); });
    }
  };

  for (uint32_t attempt = 0; attempt <= options_.conflict_retries; ++attempt) {
    Status st = EnsureConnected();
    if (st.ok() && !head_) st = LoadHead();
    std::unordered_set<std::string> loaded;
    if (st.ok()) st = LoadEntities(batch, &loaded);
    if (!st.ok()) return fail_all(st);

    // Plan: run every pending command against the state the earlier ones leave.
    std::unordered_map<std::string, EntityState> overlay;
    std::unordered_map<std::string, uint64_t> base_version;  // per entity: the version the plan started from
    std::unordered_map<std::string, size_t> first_with_key;
    std::vector<size_t> writes;
    std::vector<size_t> rejected;
    std::unique_ptr<sql::EventAppend> insert = log_->NewAppend(options_.type, options_.partition);
    for (size_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      Command& c = batch[i];
      Planned& p = plan[i];
      p = Planned{};
      const std::string key = CommandKey(c.entity_id, c.command_id);
      const std::string fingerprint = Fingerprint(c.name, c.expected_version, c.request_text);
      if (auto it = first_with_key.find(key); it != first_with_key.end()) {
        const Command& first = batch[it->second];
        if (Fingerprint(first.name, first.expected_version, first.request_text) == fingerprint) {
          p.kind = Planned::Kind::kDuplicateOf;
          p.duplicate_of = it->second;
        } else {
          p.reply = ReuseReply();
        }
        continue;
      }
      if (const RecentCommand* recent = recent_.Find(key)) {
        if (recent->fingerprint == fingerprint) {
          p.reply.body = recent->body;
          p.reply.replayed = true;
        } else {
          p.reply = ReuseReply();
        }
        continue;
      }
      auto ov = overlay.find(c.entity_id);
      if (ov == overlay.end()) {
        const EntityState* cached = entities_.Find(c.entity_id);
        ov = overlay.emplace(c.entity_id, cached ? *cached : EntityState{}).first;
        base_version.emplace(c.entity_id, ov->second.version);
      }
      EntityState& entity = ov->second;
      if (std::optional<Reply> mismatch = CheckExpectedVersion(c.expected_version, entity.version)) {
        p.reply = std::move(*mismatch);
        p.check_storage = true;
        rejected.push_back(i);
        continue;
      }
      CommandOutcome out =
          commands_.Run(c.name, EntityView{entity.exists, entity.version, &entity.state}, c.request, c.command_id);
      if (!out.applied) {
        p.reply = ErrorReply(out.http_status, out.error_code, out.message);
        p.check_storage = true;
        rejected.push_back(i);
        continue;
      }
      p.kind = Planned::Kind::kWrite;
      p.version = entity.version + 1;
      p.event_id = *head_ + writes.size() + 1;
      p.response_text = CanonicalJson(out.response);
      p.deleted = out.deleted;
      if (!out.deleted) p.state_text = CanonicalJson(out.new_state);
      sql::NewEvent row;
      row.event_id = p.event_id;
      row.entity_id = c.entity_id;
      row.version = p.version;
      row.command_id = c.command_id;
      row.command_name = c.name;
      row.expected_version = c.expected_version;
      row.request = c.request_text;
      row.response = p.response_text;
      row.state = p.state_text;
      row.deleted = out.deleted;
      if (!insert->TryAdd(row, options_.max_statement_bytes)) {
        // Cut the batch here; commands from i on are requeued by Run().
        p = Planned{};
        n = i;
        break;
      }
      writes.push_back(i);
      first_with_key.emplace(key, i);
      entity.version = p.version;
      entity.exists = !out.deleted;
      entity.state = std::move(out.new_state);
    }
    std::erase_if(rejected, [&](size_t i) { return i >= n; });
    // A refusal decided on a cached entity stands only once storage confirms
    // that version (DESIGN I4): another writer may have moved the entity, and
    // a 409 or a handler's rejection of stale state would be a wrong answer.
    // Entities read from storage for this plan need no second look.
    std::unordered_map<std::string, uint64_t> unconfirmed;
    for (size_t i : rejected) {
      const std::string& id = batch[i].entity_id;
      if (!loaded.count(id)) unconfirmed.emplace(id, base_version.at(id));
    }
    if (!unconfirmed.empty()) {
      auto stale = DropStaleEntities(unconfirmed);
      if (!stale.ok()) return fail_all(stale.status());
      if (*stale > 0) {
        stats_.stale_refusals += *stale;
        if (options_.metrics) options_.metrics->Conflict(metrics::ConflictKey::kStaleRefusal);
        continue;  // re-plan on the stored versions
      }
    }
    // Rejections of commands that may have been applied before (a retry whose
    // first reply was lost): the stored event answers those instead.
    if (st = AnswerFromStorage(batch, plan, done, rejected); !st.ok()) return fail_all(st);

    if (!writes.empty()) {
      if (SLUICE_FAILPOINT("writer.before_commit")) {
        st = Unavailable("failpoint writer.before_commit");
      } else {
        st = log_->Append(*insert);  // one transaction
      }
      if (!st.ok()) {
        if (st.code() != StatusCode::kAborted) return fail_all(st);
        const std::string key = sql::DuplicateKeyName(st);
        if (key == "PRIMARY") ++stats_.conflicts_primary;
        else if (key == "uk_entity_version") ++stats_.conflicts_version;
        else if (key == "uk_entity_command") ++stats_.conflicts_command;
        if (options_.metrics) options_.metrics->Conflict(metrics::ConflictKeyOf(key));
        DropCaches(batch);
        if (key == "uk_entity_command") {
          std::vector<size_t> pending;
          for (size_t i = 0; i < n; ++i) {
            if (!done[i]) pending.push_back(i);
          }
          if (st = AnswerFromStorage(batch, plan, done, pending); !st.ok()) return fail_all(st);
        }
        continue;  // re-plan against reloaded state
      }
      (void)SLUICE_FAILPOINT("writer.after_commit");  // `crash` here: committed but unanswered
      *head_ += writes.size();
      ++stats_.batches;
      if (options_.metrics) options_.metrics->BatchCommitted(writes.size());
      stats_.events += writes.size();
      if (options_.on_commit) options_.on_commit();
      for (auto& [id, entity] : overlay) entities_.Put(id, std::move(entity));
    }
    if (!writes.empty() && !options_.pushers.empty()) Push(batch, plan, writes);
    for (size_t i : writes) {
      Command& c = batch[i];
      plan[i].reply.body = CommandReplyBody(options_.type, c.entity_id, plan[i].version, plan[i].event_id,
                                            options_.partition, plan[i].response_text);
      recent_.Put(CommandKey(c.entity_id, c.command_id),
                  RecentCommand{Fingerprint(c.name, c.expected_version, c.request_text), plan[i].reply.body});
    }
    finish([&](size_t i) {
      if (plan[i].kind == Planned::Kind::kDuplicateOf) {
        Reply r = plan[plan[i].duplicate_of].reply;
        if (r.status == 200) r.replayed = true;
        return r;
      }
      return plan[i].reply;
    });
    return;
  }
  fail_all(Unavailable("gave up after " + std::to_string(options_.conflict_retries) +
                       " conflicting writes by other writers"));
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
