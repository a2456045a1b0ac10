#include "engine/operator.h"

#include <map>
#include <utility>

#include "connectors/sink.h"
#include "engine/durability_barrier.h"
#include "engine/event_reader.h"
#include "engine/view_repair.h"
#include "offsets/offset_store.h"
#include "sql/mariadb_tables.h"
#include "sql/params.h"
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

// A connection to the configured database once it holds sluice's tables;
// otherwise why not, saying to run `sluice init` when that is the fix.
Result<std::unique_ptr<sql::Connection>> OpenStorage(const config::Config& config) {
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
  std::vector<sql::EntityTypeSpec> specs;
  for (const auto& [name, e] : config.entities) specs.push_back({name, e.partitions});
  if (Status st = sql::CheckSchema(**conn, specs); !st.ok()) {
    if (st.code() != StatusCode::kFailedPrecondition) return st;
    std::string why = st.message();
    // CheckSchema's own advice names no file; ours names this one.
    if (const size_t at = why.find("; run `sluice init"); at != std::string::npos) why.erase(at);
    return NotInitialised(config, "the database " + config.mysql.database + " is not set up for this config (" +
                                      why + ")");
  }
  return conn;
}

// The dead letter `id`: its sink, whether it is resolved, and how.
struct DeadLetterRow {
  std::string sink;
  std::string entity_id;
  std::string version;
  bool resolved = false;
  std::string resolution;
};

Result<DeadLetterRow> FindDeadLetter(sql::Connection& conn, uint64_t id) {
  ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT sink, entity_id, version, resolved_at IS NOT NULL, "
                                         "COALESCE(resolution,'') FROM sluice_dead_letters WHERE id=" +
                                         std::to_string(id)));
  if (rows.empty()) return NotFound("there is no dead letter " + std::to_string(id));
  const auto& r = rows[0];
  return DeadLetterRow{r[0].value_or(""), r[1].value_or(""), r[2].value_or(""), r[3].value_or("0") == "1",
                       r[4].value_or("")};
}

// The dead letter `id` that a retry or a discard is asked for: an error
// when it belongs to another sink than `sink`, nullopt (recorded in
// `report`) when it is resolved already.
Result<std::optional<DeadLetterRow>> DeadLetterToAct(sql::Connection& conn, uint64_t id,
                                                     const std::optional<std::string>& sink,
                                                     DeadLetterReport& report) {
  ASSIGN_OR_RETURN(DeadLetterRow row, FindDeadLetter(conn, id));
  if (sink && row.sink != *sink) {
    return InvalidArgument("dead letter " + std::to_string(id) + " belongs to sink '" + row.sink + "', not '" +
                           *sink + "'");
  }
  if (row.resolved) {
    report.actions.push_back(
        {DeadLetterAction::Kind::kAlreadyResolved, id, row.sink, row.entity_id, row.version, row.resolution});
    return std::optional<DeadLetterRow>();
  }
  return std::optional<DeadLetterRow>(std::move(row));
}

}  // namespace

Result<std::vector<SinkStatus>> ReadStatus(const config::Config& config) {
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  offsets::OffsetStore store(sql::ParamsFrom(config.mysql));
  const auto events = sql::EventLogOn(*conn);
  std::vector<SinkStatus> sinks;
  for (const auto& s : config.sinks) {
    const uint32_t partitions = config.entities.at(s.entity).partitions;
    ASSIGN_OR_RETURN(auto progress, store.Load(s.name, s.entity));
    SinkStatus sink{s.name, s.type, s.entity, {}, false, {}};
    for (uint32_t p = 0; p < partitions; ++p) {
      const offsets::PartitionProgress pp = progress.count(p) ? progress[p] : offsets::PartitionProgress{};
      ASSIGN_OR_RETURN(const uint64_t head, events->Head(s.entity, p));
      const uint64_t lag = head > pp.event_id ? head - pp.event_id : 0;
      double lag_s = 0.0;
      if (lag > 0) {
        ASSIGN_OR_RETURN(const auto since, events->SecondsSinceCommit(s.entity, p, pp.event_id + 1));
        lag_s = since.value_or(0.0);
      }
      if (!pp.last_error.empty()) sink.last_error = pp.last_error;
      const std::string state = progress.count(p) ? pp.state : "new";
      sink.partitions.push_back(
          {p, pp.event_id, head, lag, lag_s, state, pp.applied, pp.stale, pp.dead_lettered, pp.last_error});
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
                        std::vector<ViewCheck>& checks) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  std::map<std::string, std::vector<connectors::EntitySnapshot>> truth_by_type;
  uint64_t total = 0;
  for (const auto& s : config.sinks) {
    if (sink && s.name != *sink) continue;
    ASSIGN_OR_RETURN(auto view, connectors::MakeSink(s, config));
    const bool log = view->capabilities().verifies_history;
    auto& truth = truth_by_type[s.entity];
    std::vector<connectors::ChangeEvent> history;
    if (log) {
      ASSIGN_OR_RETURN(history, ReadHistory(*conn, s.entity, config.entities.at(s.entity).partitions));
    } else if (truth.empty()) {
      ASSIGN_OR_RETURN(truth, ReadTruth(*conn, s.entity, config.entities.at(s.entity).partitions));
    }
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    std::vector<connectors::Difference> diffs;
    Status st = log ? view->VerifyHistory(history, diffs) : view->Verify(truth, diffs);
    view->Close();
    RETURN_IF_ERROR(st.WithContext("sink " + s.name));
    total += diffs.size();
    checks.push_back({s.name, s.type, log, log ? history.size() : truth.size(), std::move(diffs)});
  }
  return total;
}

Result<std::vector<DeadLetter>> ListDeadLetters(const config::Config& config, const std::optional<std::string>& sink,
                                                bool all) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  std::string q =
      "SELECT id, sink, entity_type, partition_id, event_id, entity_id, version, created_at, "
      "COALESCE(resolution,''), error, resolved_at FROM sluice_dead_letters WHERE 1=1";
  if (sink) {
    q += " AND sink=";
    conn->AppendQuoted(q, *sink);
  }
  if (!all) q += " AND resolved_at IS NULL";
  ASSIGN_OR_RETURN(auto rows, conn->Query(q + " ORDER BY id"));
  const auto number = [](const std::optional<std::string>& v) { return std::stoull(v.value_or("0")); };
  std::vector<DeadLetter> letters;
  for (const auto& r : rows) {
    letters.push_back({number(r[0]), r[1].value_or(""), r[2].value_or(""), number(r[3]), number(r[4]),
                       r[5].value_or(""), number(r[6]), r[7].value_or(""), r[10], r[8].value_or(""),
                       r[9].value_or("")});
  }
  return letters;
}

Result<uint64_t> RetryDeadLetters(const config::Config& config, const DeadLetterFilter& filter,
                                  DeadLetterReport& report) {
  RETURN_IF_ERROR(CheckSinkName(config, filter.sink));
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  std::optional<std::string> only_sink = filter.sink;
  if (filter.id) {
    ASSIGN_OR_RETURN(const auto found, DeadLetterToAct(*conn, *filter.id, filter.sink, report));
    if (!found) return 0;
    const DeadLetterRow& row = *found;
    if (!FindSink(config, row.sink)) {
      return FailedPrecondition("dead letter " + std::to_string(*filter.id) + " belongs to sink '" + row.sink +
                                "', which " + config.path + " does not declare");
    }
    only_sink = row.sink;
  }
  uint64_t unresolved = 0;
  for (const auto& s : config.sinks) {
    if (only_sink && s.name != *only_sink) continue;
    std::string q = "SELECT id, partition_id, event_id FROM sluice_dead_letters WHERE resolved_at IS NULL AND sink=";
    conn->AppendQuoted(q, s.name);
    if (filter.id) q += " AND id=" + std::to_string(*filter.id);
    ASSIGN_OR_RETURN(auto rows, conn->Query(q + " ORDER BY partition_id, event_id"));
    if (rows.empty()) continue;
    ASSIGN_OR_RETURN(auto view, connectors::MakeSink(s, config));
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    for (const auto& r : rows) {
      const std::string id = r[0].value_or("0");
      const uint64_t id_number = std::stoull(id);
      ASSIGN_OR_RETURN(auto events, ReadEventsById(*conn, s.entity, static_cast<uint32_t>(std::stoul(r[1].value_or("0"))),
                                                   {std::stoull(r[2].value_or("0"))}));
      if (events.empty()) {
        report.actions.push_back({DeadLetterAction::Kind::kEventGone, id_number, s.name, {}, {}, {}});
        ++unresolved;
        continue;
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
        std::string u = "UPDATE sluice_dead_letters SET error=";
        conn->AppendQuoted(u, er.reason.substr(0, 4000));
        RETURN_IF_ERROR(conn->Execute(u + " WHERE id=" + id).status());
        report.actions.push_back(
            {DeadLetterAction::Kind::kRejectedAgain, id_number, s.name, events[0].entity_id, {}, er.reason});
        ++unresolved;
        continue;
      }
      const bool applied = er.outcome == connectors::Outcome::kApplied;
      const char* how = applied ? "applied" : "stale";
      RETURN_IF_ERROR(conn->Execute(std::string("UPDATE sluice_dead_letters SET resolved_at=NOW(6), resolution='") +
                                    how + "' WHERE id=" + id)
                          .status());
      report.actions.push_back({applied ? DeadLetterAction::Kind::kApplied : DeadLetterAction::Kind::kStale, id_number,
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
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  constexpr std::string_view kDiscard =
      "UPDATE sluice_dead_letters SET resolved_at=NOW(6), resolution='discarded' WHERE resolved_at IS NULL AND ";
  if (filter.id) {
    ASSIGN_OR_RETURN(const auto found, DeadLetterToAct(*conn, *filter.id, filter.sink, report));
    if (!found) return 0;
    const DeadLetterRow& row = *found;
    ASSIGN_OR_RETURN(const uint64_t changed,
                     conn->Execute(std::string(kDiscard) + "id=" + std::to_string(*filter.id)));
    report.actions.push_back(
        {DeadLetterAction::Kind::kDiscarded, *filter.id, row.sink, row.entity_id, row.version, {}});
    return changed;
  }
  // A sink the config no longer declares may still have dead letters to clear.
  std::string count = "SELECT COUNT(*) FROM sluice_dead_letters WHERE sink=";
  conn->AppendQuoted(count, *filter.sink);
  ASSIGN_OR_RETURN(auto rows, conn->Query(count));
  if (!FindSink(config, *filter.sink) && rows.at(0).at(0).value_or("0") == "0") {
    return CheckSinkName(config, filter.sink);
  }
  std::string q(kDiscard);
  q += "sink=";
  conn->AppendQuoted(q, *filter.sink);
  ASSIGN_OR_RETURN(const uint64_t changed, conn->Execute(q));
  report.discarded_sink = *filter.sink;
  return changed;
}

Result<uint64_t> VerifyAndRepair(const config::Config& config, const std::optional<std::string>& sink,
                                 const std::function<void(const ViewCheck&)>& not_repairable,
                                 const std::function<void(const RepairReport&)>& repaired) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  // What goes from storage to a view passes the barrier, as in the engine.
  DurabilityBarrier barrier(sql::ParamsFrom(config.mysql), config.engine.durability_barrier);
  uint64_t remaining = 0;
  for (const auto& s : config.sinks) {
    if (sink && s.name != *sink) continue;
    ASSIGN_OR_RETURN(auto view, connectors::MakeSink(s, config));
    if (!view->capabilities().entity_checks) {
      std::vector<ViewCheck> checks;
      ASSIGN_OR_RETURN(const uint64_t diffs, Verify(config, s.name, checks));
      for (const ViewCheck& check : checks) not_repairable(check);
      remaining += diffs;
      continue;
    }
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    RepairReport report;
    const Status st = RepairView(*conn, *view, s, config.entities.at(s.entity).partitions,
                                 [&barrier] { return barrier.Wait(); }, report);
    view->Close();
    repaired(report);
    RETURN_IF_ERROR(st.WithContext("sink " + s.name));
    remaining += report.remaining;
  }
  return remaining;
}

}  // namespace sluice::engine
