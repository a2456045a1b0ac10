#include "engine/view_compare.h"

#include <algorithm>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <span>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "core/partitioner.h"
#include "engine/event_reader.h"

namespace sluice::engine {

using connectors::Difference;
using connectors::EntitySnapshot;

void DifferenceTally::Add(std::vector<Difference>& found) {
  total += found.size();
  for (Difference& d : found) {
    ++by_kind[std::string(connectors::DifferenceKindName(d.kind))];
    if (listed.size() < kListed) listed.push_back(std::move(d));
  }
}

namespace {

// Pass 1: storage's entities, partition by partition, a page at a time.
Result<uint64_t> CompareStorageSide(sql::EventLog& log, connectors::Sink& view, const std::string& type,
                                    uint32_t partitions, const CompareOptions& options, const PageDifferences& on_page,
                                    CompareProgress& progress) {
  std::vector<Difference> found;
  RETURN_IF_ERROR(ForEachLatestPage(log, type, partitions, options.page,
                                    [&](uint32_t partition, std::vector<EntitySnapshot>& snapshots) -> Status {
                                      progress.partitions_done = partition;
                                      found.clear();
                                      RETURN_IF_ERROR(view.VerifyEntities(snapshots, found));
                                      RETURN_IF_ERROR(on_page(found));
                                      progress.entities += snapshots.size();
                                      if (options.progress) options.progress(progress);
                                      return Status::Ok();
                                    },
                                    options.read_ahead));
  progress.partitions_done = partitions;
  return progress.entities;
}

// Pass 2: the view's live ids that storage has no events for. With
// options.read_ahead, a page's ids are looked up in storage on it, on a
// thread, while the view reads its next page; the page is settled (its
// unknown ids checked in the view, its differences given) when the next one
// comes, before that one's ids are filtered, or at the end.
Status CompareViewSide(sql::EventLog& log, connectors::Sink& view, const std::string& type, uint32_t partitions,
                       const CompareOptions& options, const PageDifferences& on_page, CompareProgress& progress) {
  progress.scanning_view = true;
  if (options.progress) options.progress(progress);
  // A scan that may give an id twice (Redis SCAN) reports each extra once
  // by remembering the extras: as many as the differences found.
  const bool repeats = view.capabilities().scan_repeats;
  std::unordered_set<std::string> reported;
  const size_t page = std::max<uint32_t>(1, options.page);
  std::vector<Difference> found;
  using Unknown = Result<std::vector<EntitySnapshot>>;
  // The ids of `by_partition` storage has no events for.
  const auto lookup = [&type](sql::EventLog* on, std::map<uint32_t, std::vector<std::string>> by_partition) -> Unknown {
    std::vector<EntitySnapshot> unknown;
    for (auto& [partition, list] : by_partition) {
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
      ASSIGN_OR_RETURN(const auto known, on->LatestVersions(type, partition, list));
      for (std::string& id : list) {
        if (!known.contains(id)) unknown.push_back(EntitySnapshot{std::move(id), 0, true, ""});
      }
    }
    return unknown;
  };
  std::future<Unknown> pending;
  const auto settle = [&]() -> Status {
    if (!pending.valid()) return Status::Ok();
    ASSIGN_OR_RETURN(std::vector<EntitySnapshot> unknown, pending.get());
    found.clear();
    if (!unknown.empty()) RETURN_IF_ERROR(view.VerifyEntities(unknown, found));
    if (repeats) {
      for (const Difference& d : found) reported.insert(d.entity_id);
    }
    RETURN_IF_ERROR(on_page(found));
    if (options.progress) options.progress(progress);
    return Status::Ok();
  };
  RETURN_IF_ERROR(view.ScanViewIds(page, [&](std::span<const std::string> ids) -> Status {
    RETURN_IF_ERROR(settle());
    progress.view_ids += ids.size();
    std::map<uint32_t, std::vector<std::string>> by_partition;
    for (const std::string& id : ids) {
      if (!reported.contains(id)) by_partition[PartitionOf(id, partitions)].push_back(id);
    }
    sql::EventLog* on = options.read_ahead != nullptr ? options.read_ahead : &log;
    // Shared, so that a thread that cannot start leaves the ids to the
    // lookup here.
    auto ids_of = std::make_shared<std::map<uint32_t, std::vector<std::string>>>(std::move(by_partition));
    auto work = [&lookup, on, ids_of] { return lookup(on, std::move(*ids_of)); };
    if (options.read_ahead != nullptr) {
      try {
        pending = std::async(std::launch::async, work);
        return Status::Ok();
      } catch (const std::system_error&) {
        // No thread (the process's limit): looked up here.
      }
    }
    pending = std::async(std::launch::deferred, work);
    return settle();
  }));
  return settle();
}

}  // namespace

Result<uint64_t> CompareByPages(sql::EventLog& log, connectors::Sink& view, const std::string& type,
                                uint32_t partitions, const CompareOptions& options, const PageDifferences& on_page) {
  if (!view.capabilities().entity_checks) {
    return FailedPrecondition("sink '" + view.name() + "' has no entity checks to compare it page by page");
  }
  CompareProgress progress;
  progress.partitions = partitions;
  ASSIGN_OR_RETURN(const uint64_t entities, CompareStorageSide(log, view, type, partitions, options, on_page, progress));
  RETURN_IF_ERROR(CompareViewSide(log, view, type, partitions, options, on_page, progress));
  return entities;
}

}  // namespace sluice::engine
