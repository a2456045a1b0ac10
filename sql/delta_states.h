// Full states for events that stored a delta (docs/delta.md, issue 23).
//
// An event row holds either its full state (`state`), or, when the writer
// stored only what changed, a delta from the entity's previous version
// (`delta`, with `state` NULL), or neither (a delete). Every read of the
// access layer hands its callers full states: DeltaStates turns the rows of
// a read that stored deltas into full states, from the rows of the same
// read, from the states it resolved lately (an LRU per partition's
// entities), and otherwise from each entity's chain in storage: its nearest
// snapshot (a row without a delta) at or below the version wanted and the
// deltas after it, which the implementation reads in one query for all the
// entities of a read (ChainReader). A read without deltas costs one pass
// over its rows.
//
// Threads: one per instance, as the EventLog that owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/lru_cache.h"
#include "core/status.h"
#include "sql/tables.h"

namespace sluice::sql {

// For each (entity_id, version) asked for: the entity's rows from its
// nearest snapshot at or below `version` up to `version`, in version order
// (all entities' rows in one list; entity_id, version, deleted, state and
// delta filled).
using ChainReader =
    std::function<Result<std::vector<EventRow>>(const std::vector<std::pair<std::string, uint64_t>>& want)>;

class DeltaStates {
 public:
  explicit DeltaStates(size_t cached_entities = 10000) : capacity_(cached_entities), cache_(cached_entities) {}

  // Fills `state` (and the counts since the snapshot) of every row of
  // `rows` (of one partition of `type`) that has a delta. Internal (storage is inconsistent) when an entity's chain
  // does not lead to the version wanted (a delta without its snapshot);
  // InvalidArgument when a stored delta does not apply. Messages name the
  // entity and the version.
  Status Resolve(const std::string& type, uint32_t partition, std::vector<EventRow>& rows, const ChainReader& chain);

  // Forgets what it resolved (a test that rewrites a table).
  void Clear() { cache_ = LruCache<std::string, Known>(capacity_); }

 private:
  struct Known {
    uint64_t version = 0;
    std::string state;  // canonical JSON; empty: deleted
    uint32_t deltas = 0;  // since the last snapshot
    uint64_t delta_bytes = 0;
  };
  size_t capacity_;
  LruCache<std::string, Known> cache_;  // "type/partition/entity" -> its last resolved state
};

}  // namespace sluice::sql
