#include "sql/connection.h"
#include "writer/partition_worker_batch.h"

namespace sluice::writer {

Result<bool> PartitionWorker::ConfirmRefusals(BatchState& b, const Attempt& a) {
  // A refusal decided on a cached entity stands only once storage confirms
  // that version (DESIGN I4): another writer may have moved the entity, and
  // a 409 or a handler's rejection of stale state would be a wrong answer.
  // Entities read from storage for this plan need no second look.
  std::unordered_map<std::string, uint64_t> unconfirmed;
  for (size_t i : a.rejected) {
    const std::string& id = b.batch[i].entity_id;
    if (!a.loaded.count(id)) unconfirmed.emplace(id, a.base_version.at(id));
  }
  if (unconfirmed.empty()) return true;
  ASSIGN_OR_RETURN(const size_t stale, DropStaleEntities(unconfirmed));
  if (stale == 0) return true;
  stats_.stale_refusals += stale;
  if (options_.metrics) options_.metrics->Conflict(metrics::ConflictKey::kStaleRefusal);
  return false;
}

Status PartitionWorker::ResolveConflict(BatchState& b, const Status& st) {
  // The key's name says what was stale (DESIGN 3.3 step 6).
  const std::string key = sql::DuplicateKeyName(st);
  if (key == "PRIMARY") ++stats_.conflicts_primary;
  else if (key == "uk_entity_version") ++stats_.conflicts_version;
  else if (key == "uk_entity_command") ++stats_.conflicts_command;
  if (options_.metrics) options_.metrics->Conflict(metrics::ConflictKeyOf(key));
  DropCaches(b.batch);
  // No key name: a deadlock, or on Galera a collision with another node's
  // write (error 1213 at COMMIT, which names no key). It may have been any
  // of the three keys, so it is handled like the command-id one: the
  // commands another writer stored are answered from storage, the rest are
  // planned again on reloaded state.
  if (!key.empty() && key != "uk_entity_command") return Status::Ok();
  // A retry raced its original: the stored events answer whichever were stored.
  std::vector<size_t> pending;
  for (size_t i = 0; i < b.n; ++i) {
    if (!b.done[i]) pending.push_back(i);
  }
  return AnswerFromStorage(b, pending);
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

Status PartitionWorker::AnswerFromStorage(BatchState& b, const std::vector<size_t>& which) {
  std::deque<Command>& batch = b.batch;
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
    b.plan[i].kind = Planned::Kind::kReply;
    b.plan[i].reply = r;
    b.done[i] = 1;
    c.reply(std::move(r));
  }
  return Status::Ok();
}

}  // namespace sluice::writer
