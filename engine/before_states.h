// BeforeStates: the state before each event, for sinks whose view code sees
// it (ChangeEvent::before, DESIGN 4.4). The pull loop reads events in
// event_id order, so the state before an event is usually one it has just
// read: the previous event of the same entity in the batch, or a state kept
// from an earlier batch (an LRU of the latest state of recently seen
// entities). Whatever is left is read in ONE indexed statement per batch
// (sql::EventLog::AtVersions over the (entity_id, version) key), never a
// query per event.
//
// Threads: one reader thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "connectors/sink.h"
#include "core/lru_cache.h"
#include "core/status.h"
#include "sql/tables.h"

namespace sluice::engine {

class BeforeStates {
 public:
  // Keeps the latest state of up to `entities` entities.
  explicit BeforeStates(size_t entities = 100000) : latest_(entities) {}

  // Fills `before` of each event of one partition (in event_id order).
  // Unavailable (or the read's error) when the read failed: nothing is
  // filled reliably, read the batch again. Internal when storage lacks the
  // event before one (which I3 forbids).
  Status Fill(sql::EventLog& log, const std::string& type, uint32_t partition,
              std::vector<connectors::ChangeEvent>& events);

  // Forgets every kept state (after the reader moved backwards: a rewind).
  void Clear() { latest_.Clear(); }

  struct Stats {
    uint64_t from_batch = 0, from_cache = 0, from_storage = 0, reads = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Kept {
    uint64_t version = 0;
    bool exists = false;
    std::string state;
  };
  // Keeps e's state as its entity's latest.
  void Keep(const connectors::ChangeEvent& e);

  LruCache<std::string, Kept> latest_;
  Stats stats_;
};

}  // namespace sluice::engine
