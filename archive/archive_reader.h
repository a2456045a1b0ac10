// Reading the archive (docs/archive.md): the segments of a partition, fetched
// from the object store, checked against the manifest's checksum and kept
// decoded in a bounded cache; and ArchivedStorage, the access layer
// (sql/tables.h) with archived events put back in place, so that every
// reader of history (the pull loop of a new or rewound sink, `rebuild`,
// `verify`, `GET .../events`, dead-letter retries, the writer's check of a
// retried command) sees whole, ordered history whether an event is still in
// its hot table or not.
//
// An archived event leaves a stub in its hot table (its keys, command name
// and commit time; sql/tables.h EventRow::archived), so every read of the
// hot table still finds it in place; an EventLog of ArchivedStorage replaces
// each stub a read returns by the event from its segment. ReadAfter below a
// partition's watermark (the last archived event_id) reads the segments
// directly, without the stubs. The latest version of every entity never
// leaves the hot table, so the writer's loads and `verify` read hot rows
// only. Types without an archive policy read their hot tables only.
//
// Threads: ArchivedStorage and SegmentSource may be shared by any threads; an
// EventLog it opens is used by one thread at a time.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "archive/segment.h"
#include "core/status.h"
#include "objectstore/object_store.h"
#include "sql/tables.h"

namespace sluice::archive {

// What a decoded event takes in memory: the row and the heap blocks of its
// strings (what a segment in the cache costs, row by row).
uint64_t DecodedRowBytes(const sql::EventRow& row);

// Fetches segments and keeps the decoded ones most recently used, up to
// about cache_bytes of memory (DecodedRowBytes per event).
class SegmentSource {
 public:
  SegmentSource(std::shared_ptr<objectstore::ObjectStore> store, uint64_t cache_bytes);
  // The segment `record` names, checked against its size and SHA-256 (a
  // mismatch is kInternal naming the object: never a made-up event).
  Result<std::shared_ptr<const Segment>> Get(const sql::SegmentRecord& record);
  objectstore::ObjectStore& store() { return *store_; }
  uint64_t fetches() const;  // objects fetched so far (cache misses)
  uint64_t cached_bytes() const;  // of the segments kept now

 private:
  const std::shared_ptr<objectstore::ObjectStore> store_;
  const uint64_t cache_bytes_;
  mutable std::mutex mu_;
  struct Cached {
    std::shared_ptr<const Segment> segment;
    uint64_t bytes = 0;
    std::list<std::string>::iterator used;  // its place in order_
  };
  std::map<std::string, Cached> cache_;
  std::list<std::string> order_;  // keys, most recently used first
  uint64_t cached_bytes_ = 0;
  uint64_t fetches_ = 0;
};

class ArchivedStorage : public sql::Storage {
 public:
  // `archived_types`: the entity types with an archive policy.
  ArchivedStorage(std::shared_ptr<sql::Storage> hot, std::shared_ptr<SegmentSource> segments,
                  std::set<std::string> archived_types);

  std::unique_ptr<sql::EventLog> OpenEventLog() override;
  std::unique_ptr<sql::OffsetTable> OpenOffsets() override { return hot_->OpenOffsets(); }
  std::unique_ptr<sql::DeadLetterTable> OpenDeadLetters() override { return hot_->OpenDeadLetters(); }
  std::unique_ptr<sql::LeaseTable> OpenLeases() override { return hot_->OpenLeases(); }
  std::unique_ptr<sql::ArchiveTable> OpenArchive() override { return hot_->OpenArchive(); }

  const std::shared_ptr<SegmentSource>& segments() const { return segments_; }

 private:
  const std::shared_ptr<sql::Storage> hot_;
  const std::shared_ptr<SegmentSource> segments_;
  const std::shared_ptr<const std::set<std::string>> archived_types_;
};

}  // namespace sluice::archive
