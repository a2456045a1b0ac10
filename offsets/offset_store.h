// OffsetStore: the sync engine's progress in the main storage database.
//
// One row per (sink, entity type, partition) in sluice_offsets holds the last
// event_id applied to the sink, cumulative counters (applied, stale,
// dead-lettered) and the sink's state with its last error, so that
// `sluice status` can report from MySQL alone, from any host.
//
// The statements are sql::OffsetTable's (sql/tables.h): MariaDB in
// production, the in-memory fake in unit tests.
//
// Threads: one OffsetStore per caller thread (its table owns one session,
// opened lazily and reopened after a failure).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/status.h"
#include "sql/connection.h"
#include "sql/tables.h"

namespace sluice::offsets {

// A sink's progress on one partition: its row of sluice_offsets.
using PartitionProgress = sql::OffsetRow;

class OffsetStore {
 public:
  // On MariaDB at `params`.
  explicit OffsetStore(sql::ConnectParams params);
  // On the given table (e.g. sql::MemoryStorage's).
  explicit OffsetStore(std::unique_ptr<sql::OffsetTable> table);

  // The stored progress of every partition of (sink, type); absent partitions
  // start at event_id 0.
  Result<std::map<uint32_t, PartitionProgress>> Load(const std::string& sink, const std::string& type);

  // Writes every given partition's progress in one statement.
  Status Save(const std::string& sink, const std::string& type,
              const std::map<uint32_t, PartitionProgress>& progress);

  // Save() of the partitions whose lease `fence` still holds (several
  // engines, DESIGN 10); returns the partitions refused, for which nothing
  // was written.
  Result<std::set<uint32_t>> SaveFenced(const std::string& sink, const std::string& type,
                                        const std::map<uint32_t, PartitionProgress>& progress, const sql::Fence& fence);

  // Sets the offset of one partition (or every partition when nullopt) of
  // (sink, type) to `event_id`, keeping the counters. For rewinds.
  Status Rewind(const std::string& sink, const std::string& type, std::optional<uint32_t> partition,
                uint64_t event_id, uint32_t partitions);

  // Removes every row of (sink, type): a rebuild's shadow progress once it
  // is done or abandoned.
  Status Delete(const std::string& sink, const std::string& type);

 private:
  std::unique_ptr<sql::OffsetTable> table_;
};

}  // namespace sluice::offsets
