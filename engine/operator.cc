#include "engine/operator.h"

#include <algorithm>
#include <map>
#include <utility>

#include "archive/from_config.h"
#include "config/sink_type.h"

#include "connectors/sink.h"
#include "engine/before_states.h"
#include "engine/durability_barrier.h"
#include "engine/event_reader.h"
#include "engine/view_repair.h"
#include "offsets/offset_store.h"
#include "sql/layout_schema.h"
#include "sql/mariadb_tables.h"
#include "sql/params.h"
#include "sql/routed_tables.h"
#include "sql/schema.h"

namespace sluice::engine {
namespace {

const config::SinkConfig* FindSink(const config::Config& config, const std::string& name) {
  for (const auto& s : config.sinks) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Status CheckSinkName(const config::Config& config, const std::optional<std::string>& sink) {
  if (sink && !FindSink(config, *sink)) return InvalidArgument("no sink named '" + *sink + "' in " + config.path);
  return Status::Ok();
}

Status NotInitialised(const config::Config& config, const std::string& what) {
  return FailedPrecondition(what + ": run `sluice init --config " + config.path +
                            "` first (`sluice serve` also does it when it starts)");
}

// The configured database once it holds sluice's tables (its hot tables
// only); otherwise why not, saying to run `sluice init` when that is the fix.
Result<std::shared_ptr<sql::Storage>> OpenHotStorage(const config::Config& config) {
  const sql::ConnectParams params = sql::ParamsFrom(config.mysql);
  auto conn = sql::Connection::Open(params);
  if (!conn.ok()) {
    // An unknown database and a refused login are both FailedPrecondition: tell them apart.
    if (conn.status().code() != StatusCode::kFailedPrecondition) return conn.status();
    sql::ConnectParams server_params = params;
    server_params.database.clear();
    auto server = sql::Connection::Open(server_params);
    if (!server.ok()) return conn.status();
    std::string q = "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME=";
    (*server)->AppendQuoted(q, config.mysql.database);
    auto rows = (*server)->Query(q);
    if (rows.ok() && !rows->empty() && rows->at(0).at(0).value_or("0") == "0") {
      return NotInitialised(config, "the database " + config.mysql.database + " does not exist yet");
    }
    return conn.status();
  }
  const sql::StorageLayout layout = sql::LayoutFrom(config);
  if (Status st = sql::CheckLayout(layout, sql::SpecsFrom(config)); !st.ok()) {
    // A moved placement is not fixed by init: its message says what is.
    if (st.code() != StatusCode::kFailedPrecondition || st.message().find("is a migration") != std::string::npos) {
      return st;
    }
    std::string why = st.message();
    // CheckSchema's own advice names no file; ours names this one.
    if (const size_t at = why.find("; run `sluice init"); at != std::string::npos) why.erase(at);
    return NotInitialised(config, "the database " + config.mysql.database + " is not set up for this config (" +
                                      why + ")");
  }
  return sql::OpenStorage(layout);
}

// OpenHotStorage, whose history reads (verify, dead-letter retries) find archived events too.
Result<std::shared_ptr<sql::Storage>> OpenStorage(const config::Config& config) {
  ASSIGN_OR_RETURN(auto hot, OpenHotStorage(config));
  return archive::WithArchive(config, std::move(hot));
}

// The dead letter `id` that a retry or a discard is asked for: an error
// when it does not exist or belongs to another sink than `sink`, nullopt
// (recorded in `report`) when it is resolved already.
Result<std::optional<sql::FiledDeadLetter>> DeadLetterToAct(sql::DeadLetterTable& letters, uint64_t id,
                                                            const std::optional<std::string>& sink,
                                                            DeadLetterReport& report) {
  ASSIGN_OR_RETURN(auto rows, letters.List({.sink = std::nullopt, .id = id, .unresolved_only = false}));
  if (rows.empty()) return NotFound("there is no dead letter " + std::to_string(id));
  sql::FiledDeadLetter& row = rows.front();
  if (sink && row.letter.sink != *sink) {
    return InvalidArgument("dead letter " + std::to_string(id) + " belongs to sink '" + row.letter.sink +
                           "', not '" + *sink + "'");
  }
  if (row.resolved_at) {
    report.actions.push_back({DeadLetterAction::Kind::kAlreadyResolved, id, row.letter.sink, row.letter.entity_id,
                              std::to_string(row.letter.version), row.resolution});
    return std::optional<sql::FiledDeadLetter>();
  }
  return std::optional<sql::FiledDeadLetter>(std::move(row));
}

}  // namespace

Result<std::vector<SinkStatus>> ReadStatus(const config::Config& config, std::vector<EngineStatus>* engines,
                                           std::vector<EngineStatus>* writers) {
  ASSIGN_OR_RETURN(auto storage, OpenStorage(config));
  offsets::OffsetStore store(storage->OpenOffsets());
  const auto events = storage->OpenEventLog();
  const auto leases = storage->OpenLeases();
  if (engines != nullptr) {
    ASSIGN_OR_RETURN(auto members, leases->Members("engine", config.engine.lease_ttl));
    for (const auto& m : members) engines->push_back({m.member, m.heartbeat_age_ms, "", 0});
  }
  if (writers != nullptr) {
    ASSIGN_OR_RETURN(auto members, leases->Members("writer", config.writer.lease_ttl));
    ASSIGN_OR_RETURN(auto held, leases->List("writer"));
    for (const auto& m : members) {
      uint32_t n = 0;
      for (const auto& l : held) n += l.owner == m.member && l.expires_in_ms > 0 ? 1 : 0;
      writers->push_back({m.member, m.heartbeat_age_ms, m.address, n});
    }
  }
  std::vector<SinkStatus> sinks;
  for (const auto& s : config.sinks) {
    const uint32_t partitions = config.entities.at(s.entity).partitions;
    ASSIGN_OR_RETURN(auto progress, store.Load(s.name, s.entity));
    ASSIGN_OR_RETURN(auto held, leases->List("sink/" + s.name));
    std::map<uint32_t, const sql::LeaseRow*> lease_of;
    for (const auto& l : held) {
      if (l.entity_type == s.entity && l.expires_in_ms > 0 && !l.owner.empty()) lease_of[l.partition] = &l;
    }
    SinkStatus sink{s.name, s.type, s.entity, {}, false, {}};
    // Heads and the ages of the first unapplied events: a statement each per server.
    std::vector<uint32_t> all(partitions);
    for (uint32_t p = 0; p < partitions; ++p) all[p] = p;
    ASSIGN_OR_RETURN(const auto heads, events->Heads(s.entity, all));
    std::vector<std::pair<uint32_t, uint64_t>> behind;
    for (uint32_t p = 0; p < partitions; ++p) {
      const uint64_t at = progress.count(p) ? progress[p].event_id : 0;
      if (heads.count(p) && heads.at(p) > at) behind.emplace_back(p, at + 1);
    }
    ASSIGN_OR_RETURN(const auto since, events->SecondsSinceCommit(s.entity, behind));
    for (uint32_t p = 0; p < partitions; ++p) {
      const offsets::PartitionProgress pp = progress.count(p) ? progress[p] : offsets::PartitionProgress{};
      const uint64_t head = heads.count(p) ? heads.at(p) : 0;
      const uint64_t lag = head > pp.event_id ? head - pp.event_id : 0;
      const double lag_s = lag > 0 && since.count(p) ? since.at(p) : 0.0;
      if (!pp.last_error.empty()) sink.last_error = pp.last_error;
      const std::string state = progress.count(p) ? pp.state : "new";
      const auto lease = lease_of.find(p);
      sink.partitions.push_back({p, pp.event_id, head, lag, lag_s, state, pp.applied, pp.stale, pp.dead_lettered,
                                 pp.last_error, lease == lease_of.end() ? "" : lease->second->owner,
                                 lease == lease_of.end() ? 0 : lease->second->token});
    }
    // An operator's pause (sluice pause) is kept per partition; the sink is
    // paused when every partition says so.
    sink.paused = partitions > 0;
    for (const auto& part : sink.partitions) sink.paused = sink.paused && part.state == "paused";
    sinks.push_back(std::move(sink));
  }
  return sinks;
}

Result<uint64_t> Verify(const config::Config& config, const std::optional<std::string>& sink,
                        std::vector<ViewCheck>& checks, const VerifyProgress& progress) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto storage, OpenStorage(config));
  const auto events = storage->OpenEventLog();
  std::map<std::string, std::vector<connectors::EntitySnapshot>> truth_by_type;
  uint64_t total = 0;
  for (const auto& s : config.sinks) {
    if (sink && s.name != *sink) continue;
    const config::SinkType* type = config.sink_types ? config.sink_types->Find(s.type) : nullptr;
    if (type != nullptr && type->exactly_once) {
      checks.push_back({s.name, s.type, false, 0, {},
                        "an aggregate view has no row per entity to compare; `sluice rebuild --sink " + s.name +
                            "` recomputes it from the events"});
      continue;
    }
    const uint32_t partitions = config.entities.at(s.entity).partitions;
    ASSIGN_OR_RETURN(auto view, connectors::MakeSink(s, config));
    const connectors::Capabilities caps = view->capabilities();
    ViewCheck check{s.name, s.type, caps.verifies_history, 0, {}, {}};
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    Status st = Status::Ok();
    if (caps.entity_checks) {
      CompareOptions options;
      if (progress) options.progress = [&](const CompareProgress& p) { progress(s.name, p); };
      const auto ahead = storage->OpenEventLog();
      options.read_ahead = ahead.get();
      Result<uint64_t> checked = CompareByPages(*events, *view, s.entity, partitions, options,
                                                [&check](std::vector<connectors::Difference>& found) {
                                                  check.differences.Add(found);
                                                  return Status::Ok();
                                                });
      if (checked.ok()) check.checked = *checked;
      st = checked.status();
    } else {
      std::vector<connectors::Difference> found;
      if (caps.verifies_history) {
        StoredHistory history(*events, s.entity, partitions, caps.full_events);
        if (progress) {
          history.on_page = [&](const StoredHistory& h) {
            CompareProgress p;
            p.events = true;
            p.entities = h.read();
            p.partitions = partitions;
            progress(s.name, p);
          };
        }
        st = view->VerifyHistory(history, found);
        check.checked = history.most_given();
      } else {
        auto& truth = truth_by_type[s.entity];
        if (truth.empty()) {
          Result<std::vector<connectors::EntitySnapshot>> read = ReadTruth(*events, s.entity, partitions);
          if (read.ok()) truth = std::move(*read);
          st = read.status();
        }
        if (st.ok()) st = view->Verify(truth, found);
        check.checked = truth.size();
      }
      check.differences.Add(found);
    }
    view->Close();
    RETURN_IF_ERROR(st.WithContext("sink " + s.name));
    total += check.differences.total;
    checks.push_back(std::move(check));
  }
  return total;
}

Result<std::vector<DeadLetter>> ListDeadLetters(const config::Config& config, const std::optional<std::string>& sink,
                                                bool all) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto storage, OpenStorage(config));
  return ListDeadLetters(*storage, config, sink, all);
}

Result<std::vector<DeadLetter>> ListDeadLetters(sql::Storage& storage, const config::Config& config,
                                                const std::optional<std::string>& sink, bool all) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto rows,
                   storage.OpenDeadLetters()->List({.sink = sink, .id = std::nullopt, .unresolved_only = !all}));
  std::vector<DeadLetter> letters;
  letters.reserve(rows.size());
  for (auto& r : rows) {
    sql::DeadLetter& d = r.letter;
    letters.push_back({r.id, std::move(d.sink), std::move(d.entity_type), d.partition, d.event_id,
                       std::move(d.entity_id), d.version, std::move(r.created_at), std::move(r.resolved_at),
                       std::move(r.resolution), std::move(d.error)});
  }
  return letters;
}

Result<uint64_t> RetryDeadLetters(const config::Config& config, const DeadLetterFilter& filter,
                                  DeadLetterReport& report) {
  RETURN_IF_ERROR(CheckSinkName(config, filter.sink));
  ASSIGN_OR_RETURN(auto storage, OpenStorage(config));
  return RetryDeadLetters(
      *storage, config, [&config](const config::SinkConfig& s) { return connectors::MakeSink(s, config); }, filter,
      report);
}

Result<uint64_t> RetryDeadLetters(sql::Storage& storage, const config::Config& config, const SinkMaker& make_sink,
                                  const DeadLetterFilter& filter, DeadLetterReport& report) {
  RETURN_IF_ERROR(CheckSinkName(config, filter.sink));
  const auto letters = storage.OpenDeadLetters();
  const auto log = storage.OpenEventLog();
  std::optional<std::string> only_sink = filter.sink;
  if (filter.id) {
    ASSIGN_OR_RETURN(const auto found, DeadLetterToAct(*letters, *filter.id, filter.sink, report));
    if (!found) return 0;
    const std::string& owner = found->letter.sink;
    if (!FindSink(config, owner)) {
      return FailedPrecondition("dead letter " + std::to_string(*filter.id) + " belongs to sink '" + owner +
                                "', which " + config.path + " does not declare");
    }
    only_sink = owner;
  }
  uint64_t unresolved = 0;
  for (const auto& s : config.sinks) {
    if (only_sink && s.name != *only_sink) continue;
    ASSIGN_OR_RETURN(auto rows, letters->List({.sink = s.name, .id = filter.id, .unresolved_only = true}));
    if (rows.empty()) continue;
    // In the order the events were written, partition by partition.
    std::stable_sort(rows.begin(), rows.end(), [](const sql::FiledDeadLetter& a, const sql::FiledDeadLetter& b) {
      return std::pair(a.letter.partition, a.letter.event_id) < std::pair(b.letter.partition, b.letter.event_id);
    });
    ASSIGN_OR_RETURN(auto view, make_sink(s));
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    BeforeStates before;
    for (const auto& r : rows) {
      ASSIGN_OR_RETURN(auto events, ReadEventsById(*log, s.entity, r.letter.partition, {r.letter.event_id}));
      if (events.empty()) {
        report.actions.push_back({DeadLetterAction::Kind::kEventGone, r.id, s.name, {}, {}, {}});
        ++unresolved;
        continue;
      }
      if (view->capabilities().full_events) {
        if (Status st = before.Fill(*log, s.entity, r.letter.partition, events); !st.ok()) {
          view->Close();
          return st.WithContext("sink " + s.name);
        }
      }
      auto result = view->Apply(events);
      if (!result.status.ok()) {
        view->Close();
        return result.status.WithContext("sink " + s.name);
      }
      const auto& er = result.results.at(0);
      // Resolved only once durable: a sink that buffers holds it until a flush.
      if (er.outcome != connectors::Outcome::kRejected) {
        if (Status flushed = view->Flush(); !flushed.ok()) {
          view->Close();
          return flushed.WithContext("sink " + s.name);
        }
      }
      if (er.outcome == connectors::Outcome::kRejected) {
        RETURN_IF_ERROR(letters->SetError(r.id, er.reason));
        report.actions.push_back(
            {DeadLetterAction::Kind::kRejectedAgain, r.id, s.name, events[0].entity_id, {}, er.reason});
        ++unresolved;
        continue;
      }
      const bool applied = er.outcome == connectors::Outcome::kApplied;
      RETURN_IF_ERROR(letters->Resolve({.sink = std::nullopt, .id = r.id, .unresolved_only = true}, applied ? "applied" : "stale").status());
      report.actions.push_back({applied ? DeadLetterAction::Kind::kApplied : DeadLetterAction::Kind::kStale, r.id,
                                s.name, events[0].entity_id, {}, {}});
    }
    view->Close();
  }
  report.finished = true;
  return unresolved;
}

Result<uint64_t> DiscardDeadLetters(const config::Config& config, const DeadLetterFilter& filter,
                                    DeadLetterReport& report) {
  if (!filter.id && !filter.sink) return InvalidArgument("discard needs a dead letter id or a sink");
  ASSIGN_OR_RETURN(auto storage, OpenStorage(config));
  return DiscardDeadLetters(*storage, config, filter, report);
}

Result<uint64_t> DiscardDeadLetters(sql::Storage& storage, const config::Config& config,
                                    const DeadLetterFilter& filter, DeadLetterReport& report) {
  if (!filter.id && !filter.sink) return InvalidArgument("discard needs a dead letter id or a sink");
  const auto letters = storage.OpenDeadLetters();
  if (filter.id) {
    ASSIGN_OR_RETURN(const auto found, DeadLetterToAct(*letters, *filter.id, filter.sink, report));
    if (!found) return 0;
    ASSIGN_OR_RETURN(const uint64_t changed,
                     letters->Resolve({.sink = std::nullopt, .id = *filter.id, .unresolved_only = true}, "discarded"));
    report.actions.push_back({DeadLetterAction::Kind::kDiscarded, *filter.id, found->letter.sink,
                              found->letter.entity_id, std::to_string(found->letter.version), {}});
    return changed;
  }
  // A sink the config no longer declares may still have dead letters to clear.
  ASSIGN_OR_RETURN(const uint64_t filed,
                   letters->Count({.sink = filter.sink, .id = std::nullopt, .unresolved_only = false}));
  if (!FindSink(config, *filter.sink) && filed == 0) return CheckSinkName(config, filter.sink);
  ASSIGN_OR_RETURN(const uint64_t changed, letters->Resolve({.sink = filter.sink, .id = std::nullopt, .unresolved_only = true}, "discarded"));
  report.discarded_sink = *filter.sink;
  return changed;
}

Result<uint64_t> VerifyAndRepair(const config::Config& config, const std::optional<std::string>& sink,
                                 const std::function<void(const ViewCheck&)>& not_repairable,
                                 const std::function<void(const RepairReport&)>& repaired,
                                 const VerifyProgress& progress) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto storage, OpenStorage(config));
  const auto events = storage->OpenEventLog();
  // What goes from storage to a view passes the barrier, as in the engine.
  const ServerBarriers barriers(sql::LayoutFrom(config), config.engine.durability_barrier);
  uint64_t remaining = 0;
  for (const auto& s : config.sinks) {
    if (sink && s.name != *sink) continue;
    ASSIGN_OR_RETURN(auto view, connectors::MakeSink(s, config));
    if (!view->capabilities().entity_checks) {
      std::vector<ViewCheck> checks;
      ASSIGN_OR_RETURN(const uint64_t diffs, Verify(config, s.name, checks, progress));
      for (const ViewCheck& check : checks) not_repairable(check);
      remaining += diffs;
      continue;
    }
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    RepairReport report;
    const uint32_t partitions = config.entities.at(s.entity).partitions;
    const auto barrier = barriers.ForType(s.entity, partitions);
    CompareOptions options;
    if (progress) options.progress = [&](const CompareProgress& p) { progress(s.name, p); };
    const auto ahead = storage->OpenEventLog();
    options.read_ahead = ahead.get();
    const Status st =
        RepairView(*events, *view, s, partitions, [&barrier] { return barrier->Wait(); }, report, options);
    view->Close();
    repaired(report);
    RETURN_IF_ERROR(st.WithContext("sink " + s.name));
    remaining += report.remaining;
  }
  return remaining;
}

Result<std::vector<archive::PartitionArchiveStatus>> ReadArchiveStatus(const config::Config& config) {
  if (!config.archive.enabled) return FailedPrecondition(config.path + " has no archive section");
  ASSIGN_OR_RETURN(auto hot, OpenHotStorage(config));
  return archive::ReadArchiveStatus(config, std::move(hot));
}

Result<std::vector<archive::StepReport>> RunArchive(const config::Config& config, const std::optional<std::string>& type,
                                                    uint64_t max_steps,
                                                    const std::function<void(const archive::StepReport&)>& progress) {
  if (!config.archive.enabled) return FailedPrecondition(config.path + " has no archive section");
  if (type) {
    const auto it = config.entities.find(*type);
    if (it == config.entities.end()) return InvalidArgument("no entity type '" + *type + "' in " + config.path);
    if (!it->second.archive.enabled) {
      return InvalidArgument("entity type '" + *type + "' has no archive policy (entities." + *type + ".archive)");
    }
  }
  ASSIGN_OR_RETURN(auto hot, OpenHotStorage(config));
  ASSIGN_OR_RETURN(auto store, archive::OpenStore(config));
  RETURN_IF_ERROR(objectstore::CheckObjectStore(*store).WithContext("the archive's store " + store->Describe()));
  archive::Archiver archiver(hot, store, archive::ArchiverOptionsFrom(config.archive));
  std::vector<archive::StepReport> all;
  for (const auto& [name, entity] : config.entities) {
    if (!entity.archive.enabled || (type && name != *type)) continue;
    ASSIGN_OR_RETURN(auto reports, archiver.Run(name, entity.partitions, archive::PolicyFrom(entity.archive),
                                                archive::SinksOf(config, name), max_steps, progress));
    for (auto& r : reports) all.push_back(std::move(r));
  }
  return all;
}

}  // namespace sluice::engine
