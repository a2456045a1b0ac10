// The archiver (docs/archive.md): moves old events of the hot event tables
// into segments of an object store, one step per partition at a time.
//
// A step on (type, partition), under the partition's archiving lock (a
// named lock of the server: a second archiver skips the partition, and a
// killed one holds nothing):
//   1. objects of the partition beyond the watermark (left by a step killed
//      between its upload and its commit) are deleted;
//   2. the range (watermark, b] is chosen: b is at most what every sink of
//      the type has applied (their saved offsets), at most the last event
//      older than both the policy's `after` and the idempotency window, and
//      within the segment's size limits;
//   3. the range's events are read whole and written as one segment;
//   4. one transaction records the segment in the manifest and turns into
//      stubs the rows at or below b that the hot table need not keep. It
//      keeps each entity's last `keep_versions` versions, every row younger
//      than the idempotency window (commit times need not follow event_ids
//      exactly), and, for each row it keeps, the rows
//      back to the snapshot its state is rebuilt from (so the latest state
//      of every entity is read from hot rows, as the writer needs);
//   5. the manifest's copy in the store (manifest/<type>/p<NNN>.json) is
//      written again.
// A kill at any point loses nothing: before 4 the hot table is unchanged and
// the next step deletes the orphan object; 4 is one transaction; 5 is
// rewritten by every step.
//
// Threads: an Archiver is used by one thread at a time; several archivers
// (processes) may run at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "objectstore/object_store.h"
#include "sql/tables.h"

namespace sluice::archive {

// An entity type's retention policy (entities.<type>.archive).
struct ArchivePolicy {
  // Archive only events older than this; nullopt: as soon as every sink applied them.
  std::optional<std::chrono::seconds> after;
  // Each entity's last K versions stay whole in the hot table (at least 1).
  uint64_t keep_versions = 1;
};

struct ArchiverOptions {
  // Rows younger than this stay whole in the hot table, whatever the policy.
  std::chrono::seconds idempotency_window{std::chrono::hours(24)};
  uint64_t segment_events = 10000;           // at most this many events per segment
  uint64_t segment_bytes = 16ull << 20;      // and about this many bytes of bodies
};

// What one step did on one partition.
struct StepReport {
  std::string type;
  uint32_t partition = 0;
  bool busy = false;            // another archiver holds the partition
  uint64_t first_event_id = 0;  // the segment made; 0: none
  uint64_t last_event_id = 0;
  uint64_t events = 0;          // in the segment
  uint64_t stubbed = 0;         // hot rows turned into stubs
  uint64_t bytes = 0;           // the segment object's size
  uint64_t state_bytes = 0;     // the bodies it holds, as the hot table stored them
  uint64_t orphans_deleted = 0;
  std::string held_back;        // when nothing was archived: why
};

class Archiver {
 public:
  Archiver(std::shared_ptr<sql::Storage> storage, std::shared_ptr<objectstore::ObjectStore> store,
           ArchiverOptions options);

  // One step on (type, partition): at most one segment. `applied` is the
  // lowest offset of the type's sinks on this partition and `slowest` the
  // sink that has it (for the report).
  Result<StepReport> Step(const std::string& type, uint32_t partition, const ArchivePolicy& policy, uint64_t applied,
                          const std::string& slowest);

  // What every sink of `sinks` has applied on each partition of `type`:
  // partition -> (lowest offset, the sink at it); a sink with no offset for
  // a partition has applied nothing there.
  Result<std::map<uint32_t, std::pair<uint64_t, std::string>>> Applied(const std::string& type, uint32_t partitions,
                                                                       const std::vector<std::string>& sinks);

  // Steps every partition of `type` until none has more to archive now (or
  // `max_steps` steps); `progress` hears each step.
  Result<std::vector<StepReport>> Run(const std::string& type, uint32_t partitions, const ArchivePolicy& policy,
                                      const std::vector<std::string>& sinks, uint64_t max_steps,
                                      const std::function<void(const StepReport&)>& progress);

 private:
  const std::shared_ptr<sql::Storage> storage_;
  const std::shared_ptr<objectstore::ObjectStore> store_;
  const ArchiverOptions options_;
  std::unique_ptr<sql::ArchiveTable> archive_;
  std::unique_ptr<sql::OffsetTable> offsets_;
  std::unique_ptr<sql::EventLog> log_;
};

// "manifest/<type>/p<NNN>.json": the copy of a partition's manifest in the store.
std::string ManifestKey(const std::string& type, uint32_t partition);
// "segments/<type>/p<NNN>/": where a partition's segments are.
std::string SegmentPrefix(const std::string& type, uint32_t partition);

}  // namespace sluice::archive
