#include "core/json_delta.h"
#include "writer/command_request.h"
#include "writer/partition_worker_batch.h"

namespace sluice::writer {

// Whether the event of `p` stores a delta from `entity` (the state before,
// which exists) to `after` instead of the whole state (options_.snapshot_*):
// true with p.delta_text set.
bool PartitionWorker::DeltaFits(const EntityState& entity, uint64_t delta_bytes, uint64_t state_bytes) const {
  if (options_.snapshot_every <= 1 || entity.deltas + 1 >= options_.snapshot_every) return false;
  // Within the share of the state's size that the deltas since the last
  // whole state may take (bytes * 100 <= percent * size, in integers).
  return (entity.delta_bytes + delta_bytes) * 100 <= uint64_t{options_.snapshot_percent} * state_bytes;
}

bool PartitionWorker::DeltaInstead(const EntityState& entity, const Json& after, Planned& p) const {
  if (options_.snapshot_every <= 1 || entity.deltas + 1 >= options_.snapshot_every) return false;
  std::optional<Json> delta = JsonDelta(entity.state, after);
  if (!delta) return false;  // not objects
  std::string text = CanonicalJson(*delta);
  if (!DeltaFits(entity, text.size(), p.state_text.size())) return false;
  p.delta_text = std::move(text);
  return true;
}

bool PartitionWorker::AddRow(BatchState& b, Attempt& a, size_t i) {
  const Command& c = b.batch[i];
  Planned& p = b.plan[i];
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
  row.delta = p.delta_text;
  row.deleted = p.deleted;
  if (a.insert->TryAdd(row, options_.max_statement_bytes)) return true;
  // Cut the batch here; commands from i on go back to the queue (RequeueCut).
  p = Planned{};
  b.n = i;
  return false;
}

bool PartitionWorker::PlanPatchDelta(BatchState& b, Attempt& a, size_t i, uint64_t head, EntityState& entity) {
  const Command& c = b.batch[i];
  // Push sinks take each event's whole state, so they need its text.
  if (c.name != "patch" || !entity.exists || !entity.state.is_object() || !c.request.is_object() ||
      !options_.pushers.empty()) {
    return false;
  }
  std::optional<Json> ops = MergePatchDelta(entity.state, c.request);
  std::string delta_text = CanonicalJson(*ops);
  if (!DeltaFits(entity, delta_text.size(), entity.state_bytes)) return false;
  Planned& p = b.plan[i];
  p.kind = Planned::Kind::kWrite;
  p.version = entity.version + 1;
  p.event_id = head + a.writes.size() + 1;
  p.response_text = "{}";  // the built-in commands' response
  p.delta_text = std::move(delta_text);
  if (!AddRow(b, a, i)) return true;  // cut
  a.writes.push_back(i);
  ApplyMergePatch(entity.state, c.request);  // in place: the row is in the batch
  entity.version = p.version;
  entity.deltas += 1;
  entity.delta_bytes += p.delta_text.size();
  return true;
}

// Runs every pending command from `from` on against the state the earlier
// ones leave and adds a row to a new append for each that writes. A row
// that would make the statement too large cuts the batch there (b.n).
void PartitionWorker::Plan(BatchState& b, Attempt& a, size_t from) {
  std::unordered_map<std::string, size_t>& first_with_key = a.first_with_key;
  a.insert = log_->NewAppend(options_.type, options_.partition);
  // The batch in flight is planned on as if committed: this one follows
  // its rows and the states it leaves, and commits only after it.
  const uint64_t head = inflight_ ? inflight_->b->plan[inflight_->a.writes.back()].event_id : *head_;
  for (size_t i = from; i < b.n; ++i) {
    if (b.done[i]) continue;
    Command& c = b.batch[i];
    Planned& p = b.plan[i];
    p = Planned{};
    const std::string key = CommandKey(c.entity_id, c.command_id);
    const std::string fingerprint = Fingerprint(c.name, c.expected_version, c.request_text);
    if (auto it = first_with_key.find(key); it != first_with_key.end()) {
      const Command& first = b.batch[it->second];
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
    auto ov = a.overlay.find(c.entity_id);
    if (ov == a.overlay.end()) {
      const EntityState* cached = nullptr;
      if (inflight_) {
        if (auto it = inflight_->a.overlay.find(c.entity_id); it != inflight_->a.overlay.end()) cached = &it->second;
      }
      if (cached == nullptr) cached = entities_.Find(c.entity_id);
      ov = a.overlay.emplace(c.entity_id, cached ? *cached : EntityState{}).first;
      a.base_version.emplace(c.entity_id, ov->second.version);
    }
    EntityState& entity = ov->second;
    if (std::optional<Reply> mismatch = CheckExpectedVersion(c.expected_version, entity.version)) {
      p.reply = std::move(*mismatch);
      p.check_storage = true;
      a.rejected.push_back(i);
      continue;
    }
    if (PlanPatchDelta(b, a, i, head, entity)) {
      if (b.n == i) break;  // cut
      first_with_key.emplace(key, i);
      continue;
    }
    const bool was = entity.exists;
    std::string before_text = push_full_events_ && was ? CanonicalJson(entity.state) : std::string();
    CommandOutcome out =
        commands_.Run(c.name, EntityView{entity.exists, entity.version, &entity.state}, c.request, c.command_id);
    if (!out.applied) {
      p.reply = ErrorReply(out.http_status, out.error_code, out.message);
      p.check_storage = true;
      a.rejected.push_back(i);
      continue;
    }
    p.kind = Planned::Kind::kWrite;
    p.before_text = std::move(before_text);
    p.version = entity.version + 1;
    p.event_id = head + a.writes.size() + 1;
    p.response_text = CanonicalJson(out.response);
    p.deleted = out.deleted;
    if (!out.deleted) p.state_text = CanonicalJson(out.new_state);
    const bool delta = was && !out.deleted && DeltaInstead(entity, out.new_state, p);
    if (!AddRow(b, a, i)) break;  // cut
    a.writes.push_back(i);
    first_with_key.emplace(key, i);
    entity.version = p.version;
    entity.exists = !out.deleted;
    entity.state = std::move(out.new_state);
    entity.deltas = delta ? entity.deltas + 1 : 0;
    entity.delta_bytes = delta ? entity.delta_bytes + p.delta_text.size() : 0;
    entity.state_bytes = p.state_text.size();
  }
  std::erase_if(a.rejected, [&](size_t i) { return i >= b.n; });
}

}  // namespace sluice::writer
