#include "sql/delta_states.h"

#include <algorithm>
#include <map>
#include <optional>

#include "core/json.h"
#include "core/json_delta.h"

namespace sluice::sql {
namespace {

// An entity's state at a version, as far as a walk has got.
struct Cursor {
  uint64_t version = 0;
  std::optional<std::string> state;  // nullopt: deleted (or never created)
  uint32_t deltas = 0;               // since the last snapshot
  uint64_t delta_bytes = 0;
};

// `base` with `delta` applied, or why not.
Result<std::string> Applied(const std::string& base, const std::string& delta, const std::string& what) {
  Result<Json> before = ParseJson(base);
  if (!before.ok()) return Internal(what + ": the state it follows is not JSON: " + before.status().message());
  Result<Json> ops = ParseJson(delta);
  if (!ops.ok()) return InvalidArgument(what + ": its delta is not JSON: " + ops.status().message());
  Result<Json> after = ApplyJsonDelta(*before, *ops);
  if (!after.ok()) return InvalidArgument(what + ": " + after.status().message());
  return CanonicalJson(*after);
}

// Moves `at` over one row of its entity (the row's version is at.version + 1
// for a delta): a snapshot sets it, a delete clears it, a delta applies.
Status Step(Cursor& at, EventRow& row, const std::string& type) {
  if (row.archived) {  // a stub: its state is in the archive, unknown here
    at = Cursor{row.version, std::nullopt};
    return Status::Ok();
  }
  if (row.deleted) {
    at = Cursor{row.version, std::nullopt};
    return Status::Ok();
  }
  if (row.delta.empty()) {
    at = Cursor{row.version, row.state};
    row.deltas_since_snapshot = 0;
    row.delta_bytes_since_snapshot = 0;
    return Status::Ok();
  }
  const std::string what = "entity '" + row.entity_id + "' of type '" + type + "' at version " +
                           std::to_string(row.version);
  if (!at.state || at.version + 1 != row.version) {
    return Internal(what + " stored a delta, but no state of version " + std::to_string(row.version - 1) +
                    " precedes it");
  }
  ASSIGN_OR_RETURN(row.state, Applied(*at.state, row.delta, what));
  at = Cursor{row.version, row.state, at.deltas + 1, at.delta_bytes + row.delta.size()};
  row.deltas_since_snapshot = at.deltas;
  row.delta_bytes_since_snapshot = at.delta_bytes;
  return Status::Ok();
}

}  // namespace

Status DeltaStates::Resolve(const std::string& type, uint32_t partition, std::vector<EventRow>& rows,
                            const ChainReader& chain) {
  bool any = false;
  for (const EventRow& r : rows) any = any || (!r.delta.empty() && !r.deleted && !r.archived);
  if (!any) return Status::Ok();  // no delta: nothing to do, and nothing to remember
  // Each entity's rows in version order.
  std::map<std::string, std::vector<EventRow*>> by_entity;
  for (EventRow& r : rows) by_entity[r.entity_id].push_back(&r);
  for (auto& [id, list] : by_entity) {
    std::sort(list.begin(), list.end(), [](const EventRow* a, const EventRow* b) { return a->version < b->version; });
  }
  std::map<std::string, Cursor> at;      // where each entity's walk stands
  std::map<std::string, size_t> next;    // its next row to step over
  // Rounds: walk every entity as far as it goes; fetch the chains of the
  // ones stuck at a delta whose previous state is unknown; again. Each
  // round unsticks every stuck entity, so rows.size() rounds always end it.
  for (size_t round = 0; round <= rows.size(); ++round) {
    std::vector<std::pair<std::string, uint64_t>> want;
    for (auto& [id, list] : by_entity) {
      size_t& i = next[id];
      Cursor& c = at[id];
      if (i == 0 && c.version == 0) {
        const Known* k = cache_.Find(type + "/" + std::to_string(partition) + "/" + id);
        if (k != nullptr) {
          c = Cursor{k->version, k->state.empty() ? std::nullopt : std::optional<std::string>(k->state), k->deltas,
                     k->delta_bytes};
        }
      }
      for (; i < list.size(); ++i) {
        EventRow& r = *list[i];
        const bool needs_previous = !r.deleted && !r.delta.empty();
        if (needs_previous && (!c.state || c.version + 1 != r.version)) {
          want.emplace_back(id, r.version - 1);
          break;
        }
        RETURN_IF_ERROR(Step(c, r, type));
      }
    }
    if (want.empty()) break;
    if (round == rows.size()) return Internal("resolving the deltas of a read did not settle");
    ASSIGN_OR_RETURN(std::vector<EventRow> found, chain(want));
    std::map<std::string, std::vector<EventRow*>> chains;
    for (EventRow& r : found) chains[r.entity_id].push_back(&r);
    for (const auto& [id, version] : want) {
      auto& links = chains[id];
      std::sort(links.begin(), links.end(), [](const EventRow* a, const EventRow* b) { return a->version < b->version; });
      Cursor c;
      for (EventRow* link : links) {
        if (link->version > version) break;
        RETURN_IF_ERROR(Step(c, *link, type));
      }
      if (c.version != version || !c.state) {
        return Internal("entity '" + id + "' of type '" + type + "' at version " + std::to_string(version + 1) +
                        " stored a delta, but storage holds no state of version " + std::to_string(version) +
                        " for it to follow");
      }
      at[id] = c;
    }
  }
  for (auto& [id, c] : at) {
    if (c.version == 0) continue;
    cache_.Put(type + "/" + std::to_string(partition) + "/" + id,
               Known{c.version, c.state.value_or(""), c.deltas, c.delta_bytes});
  }
  return Status::Ok();
}

}  // namespace sluice::sql
