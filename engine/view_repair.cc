#include "engine/view_repair.h"

#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/partitioner.h"
#include "engine/event_reader.h"

namespace sluice::engine {
namespace {

using connectors::ChangeEvent;
using connectors::Difference;
using connectors::EntitySnapshot;
using connectors::Outcome;
using connectors::RepairGuard;

// The latest event of each id that has events, by id.
Result<std::unordered_map<std::string, ChangeEvent>> LatestOf(sql::EventLog& log, const std::string& type,
                                                              uint32_t partitions, const std::set<std::string>& ids) {
  std::map<uint32_t, std::vector<std::string>> by_partition;
  for (const std::string& id : ids) by_partition[PartitionOf(id, partitions)].push_back(id);
  std::unordered_map<std::string, ChangeEvent> out;
  for (const auto& [partition, list] : by_partition) {
    // Bounded statements: an IN list of at most 1000 ids each.
    for (size_t begin = 0; begin < list.size(); begin += 1000) {
      const std::vector<std::string> part(list.begin() + static_cast<std::ptrdiff_t>(begin),
                                          list.begin() + static_cast<std::ptrdiff_t>(std::min(list.size(), begin + 1000)));
      ASSIGN_OR_RETURN(auto events, ReadLatestEventsOf(log, type, partition, part));
      for (ChangeEvent& e : events) {
        std::string id = e.entity_id;
        out.emplace(std::move(id), std::move(e));
      }
    }
  }
  return out;
}

// What storage says about each id: its latest event, or (no events) a
// deleted snapshot of version 0, which the view must not hold at all.
std::vector<EntitySnapshot> SnapshotsOf(const std::set<std::string>& ids,
                                        const std::unordered_map<std::string, ChangeEvent>& latest) {
  std::vector<EntitySnapshot> out;
  out.reserve(ids.size());
  for (const std::string& id : ids) {
    const auto it = latest.find(id);
    if (it == latest.end()) {
      out.push_back(EntitySnapshot{id, 0, true, ""});
    } else {
      out.push_back(EntitySnapshot{id, it->second.version, it->second.deleted, it->second.state});
    }
  }
  return out;
}

// The event that removes an entity storage has no events for (Repair kAny).
ChangeEvent Removal(const std::string& type, uint32_t partitions, const std::string& id) {
  ChangeEvent e;
  e.entity_type = type;
  e.partition = PartitionOf(id, partitions);
  e.entity_id = id;
  e.version = 0;
  e.deleted = true;
  return e;
}

// Steps 2 to 4 of the repair (view_repair.h) for the entities of one page
// that differ; adds to `summary`.
Status RepairEntities(sql::EventLog& storage, connectors::Sink& view, const config::SinkConfig& sink,
                      uint32_t partitions, const std::function<Status()>& barrier, const std::set<std::string>& ids,
                      RepairReport& summary) {
  if (ids.empty()) return Status::Ok();
  const std::string& type = sink.entity;
  // Step 2: the differing entities again, as they are now.
  ASSIGN_OR_RETURN(auto latest, LatestOf(storage, type, partitions, ids));
  RETURN_IF_ERROR(barrier().WithContext("durability barrier"));
  std::vector<Difference> now;
  RETURN_IF_ERROR(view.VerifyEntities(SnapshotsOf(ids, latest), now));

  // Step 3: what each needs.
  const connectors::Capabilities caps = view.capabilities();
  std::vector<ChangeEvent> not_older, overwrite;
  std::map<std::string, std::string> why;  // id -> what stands in the way, for the report
  std::set<std::string> planned;
  for (const Difference& d : now) {
    if (!planned.insert(d.entity_id).second) continue;
    const auto it = latest.find(d.entity_id);
    if (it == latest.end()) {
      if (caps.overwrite) {
        overwrite.push_back(Removal(type, partitions, d.entity_id));
      } else {
        why[d.entity_id] = "storage has no events for this entity and the sink cannot remove rows by itself: "
                           "`sluice rebuild --sink " + sink.name + "` builds the view afresh without it";
      }
    } else if (d.view_version && *d.view_version > it->second.version) {
      if (caps.overwrite) {
        overwrite.push_back(it->second);
      } else {
        why[d.entity_id] = "the view holds version " + std::to_string(*d.view_version) + ", newer than storage's " +
                           std::to_string(it->second.version) +
                           ", and the sink cannot write an older version: `sluice rebuild --sink " + sink.name +
                           "` builds the view afresh";
      }
    } else {
      not_older.push_back(it->second);
    }
  }
  const auto tally = [&](const std::vector<ChangeEvent>& events, const connectors::ApplyResult& r,
                         const char* kept) -> Status {
    if (!r.status.ok()) return r.status;
    if (r.results.size() != events.size()) return Internal("the sink returned a result count that does not match");
    for (size_t i = 0; i < events.size(); ++i) {
      switch (r.results[i].outcome) {
        case Outcome::kApplied: ++summary.rewritten; break;
        case Outcome::kStale: why[events[i].entity_id] = kept; break;
        case Outcome::kRejected:
          why[events[i].entity_id] = "the sink refused the entity's latest event: " + r.results[i].reason;
          break;
      }
    }
    return Status::Ok();
  };
  if (!not_older.empty()) {
    RETURN_IF_ERROR(tally(not_older, view.Repair(not_older, RepairGuard::kNotOlder),
                          "the view kept a version at least as new as storage's (an Elasticsearch/OpenSearch index "
                          "remembers a document deleted by hand at a newer version for index.gc_deletes, 60 s by "
                          "default: run `sluice verify --repair` again after that)")
                        .WithContext("repairing"));
  }
  if (!overwrite.empty()) {
    RETURN_IF_ERROR(tally(overwrite, view.Repair(overwrite, RepairGuard::kAny), "the sink kept its row")
                        .WithContext("overwriting"));
    // An event committed while the rows were overwritten (or just before,
    // and applied by an engine before the overwrite) must not be lost:
    // whatever changed since the read is applied again, versioned.
    std::set<std::string> overwritten;
    for (const ChangeEvent& e : overwrite) overwritten.insert(e.entity_id);
    ASSIGN_OR_RETURN(auto after, LatestOf(storage, type, partitions, overwritten));
    std::vector<ChangeEvent> changed;
    for (const ChangeEvent& e : overwrite) {
      const auto it = after.find(e.entity_id);
      if (it != after.end() && (e.version == 0 || it->second.version != e.version)) changed.push_back(it->second);
    }
    if (!changed.empty()) {
      RETURN_IF_ERROR(barrier().WithContext("durability barrier"));
      const connectors::ApplyResult r = view.Apply(changed);
      if (!r.status.ok()) return r.status.WithContext("re-applying events committed during the repair");
    }
  }

  // Step 4: what remains.
  ASSIGN_OR_RETURN(auto final_latest, LatestOf(storage, type, partitions, ids));
  std::vector<Difference> remaining;
  RETURN_IF_ERROR(view.VerifyEntities(SnapshotsOf(ids, final_latest), remaining));
  std::set<std::string> remaining_ids;
  for (const Difference& d : remaining) remaining_ids.insert(d.entity_id);
  summary.differing += ids.size();
  summary.remaining += remaining_ids.size();
  std::set<std::string> reported;
  for (const Difference& d : remaining) {
    if (!reported.insert(d.entity_id).second) continue;
    if (summary.left.size() == RepairReport::kMaxListed) break;
    const auto w = why.find(d.entity_id);
    summary.left.push_back({std::string(connectors::DifferenceKindName(d.kind)), d.entity_id, d.detail,
                            w != why.end() ? w->second
                                           : "it changed while it was repaired (is an engine applying events to this "
                                             "view?): run `sluice verify --repair` again"});
  }
  return Status::Ok();
}

}  // namespace

Status RepairView(sql::EventLog& storage, connectors::Sink& view, const config::SinkConfig& sink,
                  uint32_t partitions, const std::function<Status()>& barrier, RepairReport& summary,
                  const CompareOptions& options) {
  summary.sink = sink.name;
  CompareOptions paged = options;
  paged.progress = [&summary, &options](const CompareProgress& p) {
    summary.checked = p.entities;
    if (options.progress) options.progress(p);
  };
  // Each page's differences are repaired before the page after the next is
  // read: the memory held is two pages', however large the view.
  ASSIGN_OR_RETURN(summary.checked,
                   CompareByPages(storage, view, sink.entity, partitions, paged,
                                  [&](std::vector<Difference>& found) -> Status {
                                    summary.compared = true;
                                    summary.found += found.size();
                                    for (const auto& d : found) {
                                      ++summary.found_by_kind[std::string(connectors::DifferenceKindName(d.kind))];
                                    }
                                    std::set<std::string> ids;
                                    for (const auto& d : found) ids.insert(d.entity_id);
                                    return RepairEntities(storage, view, sink, partitions, barrier, ids, summary);
                                  }));
  summary.compared = true;
  summary.finished = true;
  return Status::Ok();
}

}  // namespace sluice::engine
