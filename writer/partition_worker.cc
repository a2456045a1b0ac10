#include "writer/partition_worker.h"

#include <algorithm>
#include <unordered_set>

#include "core/failpoint.h"
#include "core/log.h"
#include "sql/schema.h"
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
  // kWrite:
  uint64_t version = 0;
  uint64_t event_id = 0;
  bool deleted = false;
  std::string response_text;
  std::string state_text;  // canonical JSON of the new state; empty when deleted
};

// One planned batch. The planner fills it; from SubmitToCommitter() until
// WaitForCommitter() returns it belongs to the committer.
struct PartitionWorker::Batch {
  std::deque<Command> commands;
  std::vector<Planned> plan;  // one per command
  std::vector<char> done;     // answered already (from storage)
  std::vector<size_t> writes;  // the kWrite commands, in event_id order
  // The state of every entity the batch touches, once it is committed.
  std::unordered_map<std::string, EntityState> overlay;
  // Command keys of the writes (entity_id '\0' command_id), with their index.
  std::unordered_map<std::string, size_t> keys;
  std::string insert;
  uint64_t head_after = 0;  // the partition head once committed
};

PartitionWorker::PartitionWorker(PartitionWorkerOptions options)
    : options_(std::move(options)),
      table_(sql::EventTableName(options_.type, options_.partition)),
      // The cache must hold every entity of a batch at once.
      entities_(std::max<size_t>(options_.cache_entries, 2 * size_t{options_.batch_max} + 16)),
      recent_(options_.cache_entries),
      commands_(options_.handlers) {}

PartitionWorker::~PartitionWorker() { Stop(); }

void PartitionWorker::Start() {
  for (auto& pusher : options_.pushers) pusher->Start();
  committer_ = std::thread([this] { CommitLoop(); });
  thread_ = std::thread([this] { Run(); });
}

void PartitionWorker::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(commit_mu_);
    commit_stopping_ = true;
  }
  commit_cv_.notify_all();
  if (committer_.joinable()) committer_.join();
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
  std::deque<Command> pending;      // taken from queue_ (or requeued), not planned yet
  std::unique_ptr<Batch> inflight;  // with the committer
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (!inflight) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !pending.empty(); });
        if (queue_.empty() && pending.empty()) return;  // stopping and drained
      }
      while (!queue_.empty() && pending.size() < options_.batch_max) {
        pending.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // Plan the next batch while the one in flight commits.
    std::unique_ptr<Batch> next;
    if (!pending.empty()) {
      next = std::make_unique<Batch>();
      if (Status st = Plan(pending, inflight.get(), *next); !st.ok()) {
        FailBatch(*next, st);
        next.reset();
      } else if (next->commands.empty()) {
        next.reset();  // its first command waits for the batch in flight
      }
    }
    if (inflight) {
      const Status st = WaitForCommitter();
      if (!st.ok() && next) {
        // `next` was planned on a state that was never committed: it is
        // planned again, after the failed batch's own commands (which
        // Absorb puts in front of it).
        Requeue(*next, pending);
        next.reset();
      }
      Absorb(*inflight, st, pending);
      inflight.reset();
    }
    if (!next) continue;
    if (next->writes.empty()) {
      SendReplies(*next);  // nothing to commit: rejections and replays
      continue;
    }
    SubmitToCommitter(next.get());
    inflight = std::move(next);
  }
}

void PartitionWorker::SubmitToCommitter(Batch* batch) {
  {
    std::lock_guard lock(commit_mu_);
    commit_job_ = batch;
    commit_done_ = false;
  }
  commit_cv_.notify_all();
}

Status PartitionWorker::WaitForCommitter() {
  std::unique_lock lock(commit_mu_);
  commit_cv_.wait(lock, [this] { return commit_done_; });
  commit_done_ = false;
  return commit_status_;
}

void PartitionWorker::CommitLoop() {
  for (;;) {
    Batch* batch = nullptr;
    {
      std::unique_lock lock(commit_mu_);
      commit_cv_.wait(lock, [this] { return commit_stopping_ || commit_job_ != nullptr; });
      if (commit_job_ == nullptr) return;  // the planner stopped with nothing in flight
      batch = commit_job_;
      commit_job_ = nullptr;
    }
    Status st = Commit(*batch);
    {
      std::lock_guard lock(commit_mu_);
      commit_status_ = std::move(st);
      commit_done_ = true;
    }
    commit_cv_.notify_all();
  }
}

Status PartitionWorker::Commit(Batch& batch) {
  if (!commit_conn_ || !commit_conn_->healthy()) {
    commit_conn_.reset();
    ASSIGN_OR_RETURN(commit_conn_, sql::Connection::Open(options_.mysql));
  }
  if (SLUICE_FAILPOINT("writer.before_commit")) return Unavailable("failpoint writer.before_commit");
  RETURN_IF_ERROR(commit_conn_->Execute(batch.insert).status());  // one statement, autocommit: one transaction
  (void)SLUICE_FAILPOINT("writer.after_commit");  // `crash` here: committed but unanswered
  if (options_.on_commit) options_.on_commit();
  if (options_.metrics) options_.metrics->BatchCommitted(batch.writes.size());
  if (!options_.pushers.empty()) Push(batch);
  SendReplies(batch);
  return Status::Ok();
}

void PartitionWorker::Absorb(Batch& batch, const Status& status, std::deque<Command>& pending) {
  if (status.ok()) {
    conflict_streak_ = 0;
    head_ = batch.head_after;  // a commit that did not conflict: nobody else appended in between
    ++stats_.batches;
    stats_.events += batch.writes.size();
    for (auto& [id, entity] : batch.overlay) entities_.Put(id, std::move(entity));
    for (const auto& [key, i] : batch.keys) {
      const Command& c = batch.commands[i];
      recent_.Put(key, RecentCommand{Fingerprint(c.name, c.expected_version, c.request_text), batch.plan[i].reply.body});
    }
    return;
  }
  DropCaches(batch);
  if (status.code() != StatusCode::kAborted) {
    FailBatch(batch, status);
    return;
  }
  const std::string key = sql::DuplicateKeyName(status);
  if (key == "PRIMARY") ++stats_.conflicts_primary;
  else if (key == "uk_entity_version") ++stats_.conflicts_version;
  else if (key == "uk_entity_command") ++stats_.conflicts_command;
  if (options_.metrics) options_.metrics->Conflict(metrics::ConflictKeyOf(key));
  if (++conflict_streak_ > options_.conflict_retries) {
    // No progress for conflict_retries rounds: another writer keeps winning.
    conflict_streak_ = 0;
    FailBatch(batch, Unavailable("gave up after " + std::to_string(options_.conflict_retries) +
                                 " conflicting writes by other writers"));
    return;
  }
  if (key == "uk_entity_command") {
    // A retry raced its original (or came after a restart): the stored
    // event answers it. That is progress, not a lost race.
    std::vector<size_t> unanswered;
    for (size_t i = 0; i < batch.commands.size(); ++i) {
      if (!batch.done[i]) unanswered.push_back(i);
    }
    Status st = EnsureConnected();
    if (st.ok()) st = AnswerFromStorage(batch, unanswered);
    if (!st.ok()) {
      FailBatch(batch, st);
      return;
    }
    if (std::any_of(unanswered.begin(), unanswered.end(), [&](size_t i) { return batch.done[i] != 0; })) {
      conflict_streak_ = 0;
    }
  }
  Requeue(batch, pending);  // planned again against reloaded state
  return;
}

void PartitionWorker::Requeue(Batch& batch, std::deque<Command>& pending) {
  for (size_t i = batch.commands.size(); i-- > 0;) {
    if (!batch.done[i]) pending.push_front(std::move(batch.commands[i]));
    batch.done[i] = 1;
  }
}

void PartitionWorker::FailBatch(Batch& batch, const Status& st) {
  DropCaches(batch);
  Reply r;
  if (st.code() == StatusCode::kUnavailable) {
    ++stats_.unavailable;
    LogRateLimited(LogLevel::kWarn, "writer.mysql_unavailable", "writer: " + table_ + ": " + st.message());
    r = UnavailableReply("main storage is unavailable; retry with the same Idempotency-Key");
  } else {
    LogRateLimited(LogLevel::kError, "writer.batch_failed", "writer: " + table_ + ": " + st.ToString());
    r = ErrorReply(500, "internal", "the command could not be stored: " + st.message());
  }
  for (size_t i = 0; i < batch.commands.size(); ++i) {
    if (batch.done[i]) continue;
    batch.done[i] = 1;
    batch.commands[i].reply(r);
  }
}

void PartitionWorker::SendReplies(Batch& batch) {
  for (size_t i : batch.writes) {
    Command& c = batch.commands[i];
    Planned& p = batch.plan[i];
    p.reply.body =
        CommandReplyBody(options_.type, c.entity_id, p.version, p.event_id, options_.partition, p.response_text);
  }
  for (size_t i = 0; i < batch.commands.size(); ++i) {
    if (batch.done[i]) continue;
    const Planned& p = batch.plan[i];
    if (p.kind == Planned::Kind::kDuplicateOf) {
      Reply r = batch.plan[p.duplicate_of].reply;
      if (r.status == 200) r.replayed = true;
      batch.commands[i].reply(std::move(r));
    } else {
      batch.commands[i].reply(p.reply);
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
  if (conn_ && conn_->healthy()) return Status::Ok();
  conn_.reset();
  head_.reset();
  entities_.Clear();
  ASSIGN_OR_RETURN(conn_, sql::Connection::Open(options_.mysql));
  return Status::Ok();
}

Status PartitionWorker::LoadHead() {
  ASSIGN_OR_RETURN(auto rows, conn_->Query("SELECT COALESCE(MAX(event_id),0) FROM " + sql::QuoteIdent(table_)));
  head_ = std::stoull(rows.at(0).at(0).value_or("0"));
  return Status::Ok();
}

Status PartitionWorker::LoadEntities(const Batch& batch, const Batch* base) {
  std::unordered_set<std::string> missing;
  for (const auto& c : batch.commands) {
    if (base != nullptr && base->overlay.contains(c.entity_id)) continue;  // its state is the batch in flight's
    if (entities_.Find(c.entity_id) == nullptr) missing.insert(c.entity_id);
  }
  if (missing.empty()) return Status::Ok();
  std::string in;
  for (const auto& id : missing) {
    if (!in.empty()) in += ',';
    conn_->AppendQuoted(in, id);
  }
  const std::string t = sql::QuoteIdent(table_);
  const std::string q = "SELECT e.entity_id, e.version, e.state, e.deleted FROM " + t +
                        " e JOIN (SELECT entity_id, MAX(version) AS v FROM " + t + " WHERE entity_id IN (" +
                        in + ") GROUP BY entity_id) m ON e.entity_id=m.entity_id AND e.version=m.v";
  ASSIGN_OR_RETURN(auto rows, conn_->Query(q));
  for (auto& row : rows) {
    EntityState s;
    s.version = std::stoull(row.at(1).value_or("0"));
    s.exists = row.at(3).value_or("0") == "0";
    if (s.exists) {
      auto parsed = ParseJson(row.at(2).value_or("null"));
      if (!parsed.ok()) return Internal("stored state of '" + *row[0] + "' is not JSON: " + parsed.status().message());
      s.state = std::move(parsed).value();
    }
    missing.erase(*row[0]);
    entities_.Put(*row[0], std::move(s));
  }
  for (const auto& id : missing) entities_.Put(id, EntityState{});
  return Status::Ok();
}

void PartitionWorker::DropCaches(const Batch& batch) {
  head_.reset();
  for (const auto& c : batch.commands) entities_.Erase(c.entity_id);
}

Status PartitionWorker::AnswerFromStorage(Batch& batch, const std::vector<size_t>& which) {
  if (which.empty()) return Status::Ok();
  std::string q =
      "SELECT entity_id, command_id, version, event_id, command_name, expected_version, request, response FROM " +
      sql::QuoteIdent(table_) + " WHERE ";
  for (size_t k = 0; k < which.size(); ++k) {
    const Command& c = batch.commands[which[k]];
    if (k > 0) q += " OR ";
    q += "(entity_id=";
    conn_->AppendQuoted(q, c.entity_id);
    q += " AND command_id=";
    conn_->AppendQuoted(q, c.command_id);
    q += ')';
  }
  ASSIGN_OR_RETURN(auto rows, conn_->Query(q));
  std::unordered_map<std::string, const sql::Row*> stored;
  for (const auto& row : rows) stored.emplace(CommandKey(*row.at(0), *row.at(1)), &row);
  for (size_t i : which) {
    Command& c = batch.commands[i];
    const std::string key = CommandKey(c.entity_id, c.command_id);
    auto it = stored.find(key);
    if (it == stored.end()) continue;
    const sql::Row& row = *it->second;
    const std::optional<uint64_t> expected =
        row.at(5) ? std::optional<uint64_t>(std::stoull(*row[5])) : std::nullopt;
    Reply r;
    if (Fingerprint(*row.at(4), expected, row.at(6).value_or("")) == Fingerprint(c.name, c.expected_version, c.request_text)) {
      r.body = CommandReplyBody(options_.type, c.entity_id, std::stoull(*row.at(2)), std::stoull(*row.at(3)),
                                options_.partition, row.at(7).value_or("null"));
      r.replayed = true;
      recent_.Put(key, RecentCommand{Fingerprint(c.name, c.expected_version, c.request_text), r.body});
    } else {
      r = ReuseReply();
    }
    batch.plan[i].kind = Planned::Kind::kReply;
    batch.plan[i].reply = r;
    batch.done[i] = 1;
    c.reply(std::move(r));
  }
  return Status::Ok();
}

Status PartitionWorker::Plan(std::deque<Command>& pending, const Batch* base, Batch& b) {
  size_t n = std::min<size_t>(pending.size(), options_.batch_max);
  for (size_t i = 0; i < n; ++i) {
    b.commands.push_back(std::move(pending.front()));
    pending.pop_front();
  }
  b.plan.assign(n, Planned{});
  b.done.assign(n, 0);
  RETURN_IF_ERROR(EnsureConnected());
  if (base == nullptr && !head_) RETURN_IF_ERROR(LoadHead());
  RETURN_IF_ERROR(LoadEntities(b, base));
  commands_.BeginBatch();

  // Run every command against the state the earlier ones leave.
  const uint64_t head = base != nullptr ? base->head_after : *head_;
  std::vector<size_t> rejected;  // may have been applied before: storage answers those
  b.insert = "INSERT INTO " + sql::QuoteIdent(table_) + " " + sql::kEventInsertColumns + " VALUES ";
  std::string row;
  size_t cut = n;
  for (size_t i = 0; i < n; ++i) {
    Command& c = b.commands[i];
    Planned& p = b.plan[i];
    std::string key = CommandKey(c.entity_id, c.command_id);
    if (base != nullptr && base->keys.contains(key)) {
      // A retry of a command still in flight: its reply is known once that commits.
      cut = i;
      break;
    }
    const std::string fingerprint = Fingerprint(c.name, c.expected_version, c.request_text);
    if (auto it = b.keys.find(key); it != b.keys.end()) {
      const Command& first = b.commands[it->second];
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
    auto ov = b.overlay.find(c.entity_id);
    if (ov == b.overlay.end()) {
      const EntityState* earlier = nullptr;
      if (base != nullptr) {
        if (auto bo = base->overlay.find(c.entity_id); bo != base->overlay.end()) earlier = &bo->second;
      }
      if (earlier == nullptr) earlier = entities_.Find(c.entity_id);
      ov = b.overlay.emplace(c.entity_id, earlier ? *earlier : EntityState{}).first;
    }
    EntityState& entity = ov->second;
    if (c.expected_version && *c.expected_version != entity.version) {
      p.reply = ErrorReply(409, "version_mismatch",
                           "If-Match expects version " + std::to_string(*c.expected_version) +
                               " but the entity is at version " + std::to_string(entity.version),
                           R"({"current_version":)" + std::to_string(entity.version) + "}");
      rejected.push_back(i);
      continue;
    }
    CommandOutcome out =
        commands_.Run(c.name, EntityView{entity.exists, entity.version, &entity.state}, c.request, c.command_id);
    if (!out.applied) {
      p.reply = ErrorReply(out.http_status, out.error_code, out.message);
      rejected.push_back(i);
      continue;
    }
    p.kind = Planned::Kind::kWrite;
    p.version = entity.version + 1;
    p.event_id = head + b.writes.size() + 1;
    p.response_text = CanonicalJson(out.response);
    p.deleted = out.deleted;
    row.clear();
    row += b.writes.empty() ? "(" : ",(";
    row += std::to_string(p.event_id);
    row += ',';
    conn_->AppendQuoted(row, c.entity_id);
    row += ',';
    row += std::to_string(p.version);
    row += ',';
    conn_->AppendQuoted(row, c.command_id);
    row += ',';
    conn_->AppendQuoted(row, c.name);
    row += ',';
    row += c.expected_version ? std::to_string(*c.expected_version) : "NULL";
    row += ',';
    conn_->AppendQuoted(row, c.request_text);
    row += ',';
    conn_->AppendQuoted(row, p.response_text);
    row += ',';
    if (out.deleted) {
      row += "NULL,NULL,1)";
    } else {
      p.state_text = CanonicalJson(out.new_state);
      conn_->AppendQuoted(row, p.state_text);
      row += ",NULL,0)";
    }
    if (!b.writes.empty() && b.insert.size() + row.size() > options_.max_statement_bytes) {
      // Cut the batch here: the rest goes first next time.
      p = Planned{};
      cut = i;
      break;
    }
    b.insert += row;
    b.writes.push_back(i);
    b.keys.emplace(std::move(key), i);
    entity.version = p.version;
    entity.exists = !out.deleted;
    entity.state = std::move(out.new_state);
  }
  if (cut < n) {
    for (size_t i = n; i-- > cut;) pending.push_front(std::move(b.commands[i]));
    b.commands.resize(cut);
    b.plan.resize(cut);
    b.done.resize(cut);
    std::erase_if(rejected, [&](size_t i) { return i >= cut; });
  }
  b.head_after = head + b.writes.size();
  // Rejections of commands that may have been applied before (a retry whose
  // first reply was lost): the stored event answers those instead.
  return AnswerFromStorage(b, rejected);
}

void PartitionWorker::Push(Batch& b) {
  const std::deque<Command>& batch = b.commands;
  std::vector<Planned>& plan = b.plan;
  const std::vector<size_t>& writes = b.writes;
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
