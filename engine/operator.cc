#include "engine/operator.h"

#include <cstdio>
#include <map>

#include "connectors/sink.h"
#include "core/json.h"
#include "core/text_table.h"
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

// The dead letter `id` that `action` (retry, discard) is asked for: an error
// when it belongs to another sink than `sink`, nullopt (said on `out`) when
// it is resolved already.
Result<std::optional<DeadLetterRow>> DeadLetterToAct(sql::Connection& conn, uint64_t id,
                                                     const std::optional<std::string>& sink,
                                                     std::string_view action, std::ostream& out) {
  ASSIGN_OR_RETURN(DeadLetterRow row, FindDeadLetter(conn, id));
  if (sink && row.sink != *sink) {
    return InvalidArgument("dead letter " + std::to_string(id) + " belongs to sink '" + row.sink + "', not '" +
                           *sink + "'");
  }
  if (row.resolved) {
    out << "dead letter " << id << " (" << row.sink << ", entity " << row.entity_id << ") is already resolved ("
        << row.resolution << "); nothing to " << action << "\n";
    return std::optional<DeadLetterRow>();
  }
  return std::optional<DeadLetterRow>(std::move(row));
}

}  // namespace

Status PrintStatus(const config::Config& config, bool json, std::ostream& out) {
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  offsets::OffsetStore store(sql::ParamsFrom(config.mysql));
  const auto events = sql::EventLogOn(*conn);
  Json doc = Json::object();
  doc["sinks"] = Json::array();
  TextTable table({"SINK", "TYPE", "PART", "OFFSET", "HEAD", "LAG", "LAG_S", "STATE", "APPLIED", "STALE", "DEAD"});
  for (const auto& s : config.sinks) {
    const uint32_t partitions = config.entities.at(s.entity).partitions;
    ASSIGN_OR_RETURN(auto progress, store.Load(s.name, s.entity));
    Json js = {{"name", s.name}, {"type", s.type}, {"entity", s.entity}, {"partitions", Json::array()}};
    std::string last_error;
    for (uint32_t p = 0; p < partitions; ++p) {
      const offsets::PartitionProgress pp = progress.count(p) ? progress[p] : offsets::PartitionProgress{};
      ASSIGN_OR_RETURN(const uint64_t head, events->Head(s.entity, p));
      const uint64_t lag = head > pp.event_id ? head - pp.event_id : 0;
      double lag_s = 0.0;
      if (lag > 0) {
        ASSIGN_OR_RETURN(const auto since, events->SecondsSinceCommit(s.entity, p, pp.event_id + 1));
        lag_s = since.value_or(0.0);
      }
      if (!pp.last_error.empty()) last_error = pp.last_error;
      const std::string state = progress.count(p) ? pp.state : "new";
      js["partitions"].push_back({{"partition", p},
                                  {"offset", pp.event_id},
                                  {"head", head},
                                  {"lag_events", lag},
                                  {"lag_seconds", lag_s},
                                  {"state", state},
                                  {"applied", pp.applied},
                                  {"stale", pp.stale},
                                  {"dead_lettered", pp.dead_lettered},
                                  {"last_error", pp.last_error}});
      char lag_text[32];
      std::snprintf(lag_text, sizeof lag_text, "%.3f", lag_s);
      table.AddRow({s.name, s.type, std::to_string(p), std::to_string(pp.event_id), std::to_string(head),
                    std::to_string(lag), lag_text, state, std::to_string(pp.applied), std::to_string(pp.stale),
                    std::to_string(pp.dead_lettered)});
    }
    // An operator's pause (sluice pause) is kept per partition; the sink is
    // paused when every partition says so.
    bool paused = partitions > 0;
    for (const auto& part : js["partitions"]) paused = paused && part["state"] == "paused";
    js["paused"] = paused;
    if (!last_error.empty()) table.AddNote("  " + s.name + " last error: " + last_error);
    doc["sinks"].push_back(std::move(js));
  }
  if (json) {
    // Error texts come from servers and may hold bytes that are not UTF-8.
    out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  } else {
    table.Print(out);
  }
  return Status::Ok();
}

Result<uint64_t> Verify(const config::Config& config, const std::optional<std::string>& sink, std::ostream& out) {
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
    std::map<std::string_view, uint64_t> by_kind;
    for (const auto& d : diffs) ++by_kind[connectors::DifferenceKindName(d.kind)];
    out << s.name << ": "
        << (log ? std::to_string(history.size()) + " events checked, " : std::to_string(truth.size()) + " entities checked, ")
        << diffs.size() << " differences";
    for (const auto& [k, n] : by_kind) out << ", " << k << "=" << n;
    out << "\n";
    size_t shown = 0;
    for (const auto& d : diffs) {
      if (++shown > 50) {
        out << "  ... and " << diffs.size() - 50 << " more\n";
        break;
      }
      out << "  " << connectors::DifferenceKindName(d.kind) << " " << d.entity_id << ": " << d.detail << "\n";
    }
    total += diffs.size();
  }
  return total;
}

Status ListDeadLetters(const config::Config& config, const std::optional<std::string>& sink, bool all, bool json,
                       std::ostream& out) {
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
  if (json) {
    const auto number = [](const std::optional<std::string>& v) { return std::stoull(v.value_or("0")); };
    Json list = Json::array();
    for (const auto& r : rows) {
      list.push_back({{"id", number(r[0])},
                      {"sink", r[1].value_or("")},
                      {"entity_type", r[2].value_or("")},
                      {"partition", number(r[3])},
                      {"event_id", number(r[4])},
                      {"entity_id", r[5].value_or("")},
                      {"version", number(r[6])},
                      {"created_at", r[7].value_or("")},
                      {"resolved_at", r[10] ? Json(*r[10]) : Json(nullptr)},
                      {"resolution", r[8] && !r[8]->empty() ? Json(*r[8]) : Json(nullptr)},
                      {"error", r[9].value_or("")}});
    }
    out << Json{{"dead_letters", list}, {"count", rows.size()}}.dump(2, ' ', false, Json::error_handler_t::replace)
        << "\n";
    return Status::Ok();
  }
  TextTable table({"ID", "SINK", "TYPE", "PART", "EVENT", "ENTITY", "VERSION", "CREATED", "RESOLVED", "ERROR"});
  for (const auto& r : rows) {
    table.AddRow({r[0].value_or(""), r[1].value_or(""), r[2].value_or(""), r[3].value_or(""), r[4].value_or(""),
                  r[5].value_or(""), r[6].value_or(""), r[7].value_or(""), r[8].value_or(""), r[9].value_or("")});
  }
  table.Print(out);
  out << rows.size() << " dead letter(s)\n";
  return Status::Ok();
}

Result<uint64_t> RetryDeadLetters(const config::Config& config, const DeadLetterFilter& filter, std::ostream& out) {
  RETURN_IF_ERROR(CheckSinkName(config, filter.sink));
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  std::optional<std::string> only_sink = filter.sink;
  if (filter.id) {
    ASSIGN_OR_RETURN(const auto found, DeadLetterToAct(*conn, *filter.id, filter.sink, "retry", out));
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
      ASSIGN_OR_RETURN(auto events, ReadEventsById(*conn, s.entity, static_cast<uint32_t>(std::stoul(r[1].value_or("0"))),
                                                   {std::stoull(r[2].value_or("0"))}));
      if (events.empty()) {
        out << "dead letter " << id << ": its event no longer exists in main storage; left as is\n";
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
        out << "dead letter " << id << " (" << s.name << ", entity " << events[0].entity_id
            << "): rejected again: " << er.reason << "\n";
        ++unresolved;
        continue;
      }
      const char* how = er.outcome == connectors::Outcome::kApplied ? "applied" : "stale";
      RETURN_IF_ERROR(conn->Execute(std::string("UPDATE sluice_dead_letters SET resolved_at=NOW(6), resolution='") +
                                    how + "' WHERE id=" + id)
                          .status());
      out << "dead letter " << id << " (" << s.name << ", entity " << events[0].entity_id << "): " << how << "\n";
    }
    view->Close();
  }
  out << unresolved << " dead letter(s) still unresolved\n";
  return unresolved;
}

Result<uint64_t> DiscardDeadLetters(const config::Config& config, const DeadLetterFilter& filter, std::ostream& out) {
  if (!filter.id && !filter.sink) return InvalidArgument("discard needs a dead letter id or a sink");
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  constexpr std::string_view kDiscard =
      "UPDATE sluice_dead_letters SET resolved_at=NOW(6), resolution='discarded' WHERE resolved_at IS NULL AND ";
  if (filter.id) {
    ASSIGN_OR_RETURN(const auto found, DeadLetterToAct(*conn, *filter.id, filter.sink, "discard", out));
    if (!found) return 0;
    const DeadLetterRow& row = *found;
    ASSIGN_OR_RETURN(const uint64_t changed,
                     conn->Execute(std::string(kDiscard) + "id=" + std::to_string(*filter.id)));
    out << "dead letter " << *filter.id << " (" << row.sink << ", entity " << row.entity_id << ", version "
        << row.version << "): discarded\n";
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
  out << changed << " dead letter(s) of sink " << *filter.sink << " discarded\n";
  return changed;
}

Result<uint64_t> VerifyAndRepair(const config::Config& config, const std::optional<std::string>& sink,
                                 std::ostream& out) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto conn, OpenStorage(config));
  // What goes from storage to a view passes the barrier, as in the engine.
  DurabilityBarrier barrier(sql::ParamsFrom(config.mysql), config.engine.durability_barrier);
  uint64_t remaining = 0;
  for (const auto& s : config.sinks) {
    if (sink && s.name != *sink) continue;
    ASSIGN_OR_RETURN(auto view, connectors::MakeSink(s, config));
    if (!view->capabilities().entity_checks) {
      ASSIGN_OR_RETURN(const uint64_t diffs, Verify(config, s.name, out));
      out << s.name << ": not repaired: a " << s.type
          << " sink cannot rewrite single entities (sluice verify reports its differences only)\n";
      remaining += diffs;
      continue;
    }
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    auto summary = RepairView(*conn, *view, s, config.entities.at(s.entity).partitions,
                              [&barrier] { return barrier.Wait(); }, out);
    view->Close();
    RETURN_IF_ERROR(summary.status().WithContext("sink " + s.name));
    remaining += summary->remaining;
  }
  return remaining;
}

}  // namespace sluice::engine
