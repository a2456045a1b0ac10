// Comparing one view with main storage a page at a time (`sluice verify`,
// `sluice verify --repair`; docs/operations.md, "Verifying a view"), in
// memory bounded by the page, whatever the number of entities.
//
// For a sink with entity checks (capabilities().entity_checks: redis, mysql,
// elasticsearch) CompareByPages makes two passes:
//
//   1. storage first: partition by partition, the latest event of the next
//      `page` entities in entity_id order (one statement, a keyset cursor
//      over the event table's (entity_id, version) key), compared with one
//      batched read of the view (Sink::VerifyEntities): missing rows, other
//      versions, other content, rows of deleted entities;
//   2. then the view: its live ids a page at a time (Sink::ScanViewIds);
//      those of no entity storage has events for (one LatestVersions per
//      partition and page) are checked once more (VerifyEntities with a
//      deleted snapshot of version 0, which also gives the sink's own words
//      and confirms the row is still there) and are extra.
//
// An entity whose first event commits between the two passes is in neither
// (a view that lags behind such an entity is not said to hold an extra). `on_page` hears each page's differences (maybe
// none) as they are found, so a caller can repair them before the next page.
//
// A log sink (kafka, and views with code over one) compares its records
// with the history a page at a time (Sink::VerifyHistory over
// StoredHistory, engine/event_reader.h). Other sinks (plugins, views with
// code over views) compare the whole truth at once (Sink::Verify): ReadTruth
// reads it in bounded statements, but it is all held.
//
// Memory: two pages with CompareOptions::read_ahead (else one), plus, for a
// sink whose scan may give an id twice
// (capabilities().scan_repeats: Redis SCAN), the ids of the extras found.
//
// Threads: one caller; `view` must be open and is called from it alone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "connectors/sink.h"
#include "core/status.h"
#include "sql/tables.h"

namespace sluice::engine {

// Every difference counted by kind, and the first kListed of them kept.
struct DifferenceTally {
  static constexpr size_t kListed = 50;
  uint64_t total = 0;
  std::map<std::string, uint64_t> by_kind;  // DifferenceKindName -> count
  std::vector<connectors::Difference> listed;

  void Add(std::vector<connectors::Difference>& found);
};

// Where a comparison stands, for a progress line.
struct CompareProgress {
  bool events = false;           // a log's comparison: `entities` counts events read, partitions_done unknown
  uint64_t entities = 0;         // storage entities compared so far
  uint32_t partitions_done = 0;  // of pass 1
  uint32_t partitions = 0;
  bool scanning_view = false;  // pass 2
  uint64_t view_ids = 0;       // view ids scanned so far in pass 2
};

struct CompareOptions {
  uint32_t page = 5000;  // entities per storage read and per view read
  std::function<void(const CompareProgress&)> progress;  // after each page; may be empty
  // Another session of the same storage, used by nothing else meanwhile:
  // pass 1 reads storage's next page on it while the view compares the page
  // before (ForEachLatestPage); pass 2 looks a page of the view's ids up on
  // it while the view reads its next page. May be null: one page at a time.
  sql::EventLog* read_ahead = nullptr;
};

// The differences of one page; may move from or clear `found`.
using PageDifferences = std::function<Status(std::vector<connectors::Difference>& found)>;

// Both passes above, for a sink with entity checks. Returns the number of
// storage entities compared.
Result<uint64_t> CompareByPages(sql::EventLog& log, connectors::Sink& view, const std::string& type,
                                uint32_t partitions, const CompareOptions& options, const PageDifferences& on_page);

}  // namespace sluice::engine
