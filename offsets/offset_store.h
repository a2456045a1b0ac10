// OffsetStore: the sync engine's progress in the main storage database.
//
// One row per (sink, entity type, partition) in sluice_offsets holds the last
// event_id applied to the sink, cumulative counters (applied, stale,
// dead-lettered) and the sink's state with its last error, so that
// `sluice status` can report from MySQL alone, from any host.
//
// Threads: one OffsetStore per caller thread (it owns one connection, opened
// lazily and reopened after a failure).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "sql/connection.h"

namespace sluice::offsets {

struct PartitionProgress {
  uint64_t event_id = 0;       // last applied event_id (0: nothing yet)
  uint64_t applied = 0;        // cumulative counters
  uint64_t stale = 0;
  uint64_t dead_lettered = 0;
  std::string state = "running";  // running | backoff | stopped
  std::string last_error;
};

class OffsetStore {
 public:
  explicit OffsetStore(sql::ConnectParams params);

  // The stored progress of every partition of (sink, type); absent partitions
  // start at event_id 0.
  Result<std::map<uint32_t, PartitionProgress>> Load(const std::string& sink, const std::string& type);

  // Writes every given partition's progress in one statement.
  Status Save(const std::string& sink, const std::string& type,
              const std::map<uint32_t, PartitionProgress>& progress);

  // Sets the offset of one partition (or every partition when nullopt) of
  // (sink, type) to `event_id`, keeping the counters. For rewinds.
  Status Rewind(const std::string& sink, const std::string& type, std::optional<uint32_t> partition,
                uint64_t event_id, uint32_t partitions);

  // Removes every row of (sink, type): a rebuild's shadow progress once it
  // is done or abandoned.
  Status Delete(const std::string& sink, const std::string& type);

 private:
  Result<sql::Connection*> Conn();

  sql::ConnectParams params_;
  std::unique_ptr<sql::Connection> conn_;
};

}  // namespace sluice::offsets
