// `sluice verify --repair` for one view whose sink has entity checks
// (docs/operations.md, "Repairing a view"). Works without a running engine,
// and beside one.
//
//   1. Compares the view with main storage a page at a time, as `sluice
//      verify` does (engine/view_compare.h, reading one page ahead on a
//      second session); steps 2 to 4 run on each page's differences before
//      the page after the next is read, so memory stays bounded.
//   2. For the entities that differ: reads their latest events again, waits
//      for the durability barrier, and compares them once more one by one
//      (Sink::VerifyEntities, which also says which version the view holds):
//      what a running engine caught up with meanwhile drops out here.
//   3. Rewrites each one still different from its latest event:
//        - with Repair(kNotOlder) when the view holds an older version, the
//          same version with other content, or nothing: never over a newer
//          version, so safe beside the engine and the writer's push;
//        - with Repair(kAny) when the view holds a NEWER version than
//          storage (main storage lost events the view had) or a row of an
//          entity storage has no events for (removed with its tombstone),
//          when the sink can (capabilities().overwrite: redis, mysql). Then
//          it reads those entities' latest events again and re-applies
//          (versioned) any that changed meanwhile, so that an event
//          committed during the overwrite is never lost. Sinks that cannot
//          (elasticsearch) get advice instead.
//   4. Compares the differing entities again and reports what was repaired
//      and what remains, with what to do about each.
//
// Nothing is written for an entity that does not differ.
//
// Threads: one caller; `view` must be open and is called from it alone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "connectors/sink.h"
#include "core/status.h"
#include "engine/view_compare.h"
#include "sql/tables.h"

namespace sluice::engine {

// What a repair of one view found and did, filled as it goes (so that on an
// error what was found before is there); the CLI prints it.
struct RepairReport {
  std::string sink;
  uint64_t checked = 0;  // entities of the type in storage
  uint64_t found = 0;    // differences the first comparison found
  std::map<std::string, uint64_t> found_by_kind;  // DifferenceKindName -> count
  // A page was compared: checked, found and found_by_kind count what was
  // compared so far (all of the view once finished).
  bool compared = false;
  // The repair ran to its end. Before that (an error), the fields below
  // count the pages repaired so far, rewritten also a page cut short.
  bool finished = false;
  uint64_t differing = 0;  // entities the first comparison found different
  uint64_t rewritten = 0;  // entities written by the repair (each at most once, plus re-applies)
  uint64_t remaining = 0;  // entities still different at the end
  // The entities still different, at most kMaxListed, each with what stands
  // in the way of its repair.
  struct Left {
    std::string kind;  // DifferenceKindName
    std::string entity_id;
    std::string detail;
    std::string why;
  };
  static constexpr size_t kMaxListed = 50;
  std::vector<Left> left;
};

// Repairs the view of `sink` (entity type with `partitions` partitions),
// reading main storage through `storage`; `barrier` is waited for after
// every read whose events go to the view. Fills `report` as it goes.
Status RepairView(sql::EventLog& storage, connectors::Sink& view, const config::SinkConfig& sink,
                  uint32_t partitions, const std::function<Status()>& barrier, RepairReport& report,
                  const CompareOptions& options = {});

}  // namespace sluice::engine
