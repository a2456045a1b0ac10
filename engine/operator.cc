#include "engine/operator.h"

#include <cstdio>
#include <map>

#include "connectors/sink.h"
#include "core/json.h"
#include "engine/event_reader.h"
#include "offsets/offset_store.h"
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

std::string Pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

}  // namespace

Status PrintStatus(const config::Config& config, bool json, std::ostream& out) {
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));
  offsets::OffsetStore store(sql::ParamsFrom(config.mysql));
  Json doc = Json::object();
  doc["sinks"] = Json::array();
  if (!json) {
    out << Pad("SINK", 20) << Pad("TYPE", 7) << Pad("PART", 5) << Pad("OFFSET", 10) << Pad("HEAD", 10)
        << Pad("LAG", 9) << Pad("LAG_S", 9) << Pad("STATE", 9) << Pad("APPLIED", 10) << Pad("STALE", 10) << "DEAD\n";
  }
  for (const auto& s : config.sinks) {
    const uint32_t partitions = config.entities.at(s.entity).partitions;
    ASSIGN_OR_RETURN(auto progress, store.Load(s.name, s.entity));
    Json js = {{"name", s.name}, {"type", s.type}, {"entity", s.entity}, {"partitions", Json::array()}};
    std::string last_error;
    for (uint32_t p = 0; p < partitions; ++p) {
      const offsets::PartitionProgress pp = progress.count(p) ? progress[p] : offsets::PartitionProgress{};
      const std::string t = sql::QuoteIdent(sql::EventTableName(s.entity, p));
      ASSIGN_OR_RETURN(auto rows,
                       conn->Query("SELECT COALESCE(MAX(event_id),0), TIMESTAMPDIFF(MICROSECOND, (SELECT committed_at FROM " +
                                   t + " WHERE event_id=" + std::to_string(pp.event_id + 1) + "), NOW(6)) FROM " + t));
      const uint64_t head = std::stoull(rows.at(0).at(0).value_or("0"));
      const uint64_t lag = head > pp.event_id ? head - pp.event_id : 0;
      const double lag_s = lag > 0 && rows[0][1] ? std::max(0.0, std::stod(*rows[0][1]) / 1e6) : 0.0;
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
      if (!json) {
        char lag_text[32];
        std::snprintf(lag_text, sizeof lag_text, "%.3f", lag_s);
        out << Pad(s.name, 20) << Pad(s.type, 7) << Pad(std::to_string(p), 5) << Pad(std::to_string(pp.event_id), 10)
            << Pad(std::to_string(head), 10) << Pad(std::to_string(lag), 9) << Pad(lag_text, 9) << Pad(state, 9)
            << Pad(std::to_string(pp.applied), 10) << Pad(std::to_string(pp.stale), 10) << pp.dead_lettered << "\n";
      }
    }
    // An operator's pause (sluice pause) is kept per partition; the sink is
    // paused when every partition says so.
    bool paused = partitions > 0;
    for (const auto& part : js["partitions"]) paused = paused && part["state"] == "paused";
    js["paused"] = paused;
    if (!json && !last_error.empty()) out << "  " << s.name << " last error: " << last_error << "\n";
    doc["sinks"].push_back(std::move(js));
  }
  if (json) out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  return Status::Ok();
}

Result<uint64_t> Verify(const config::Config& config, const std::optional<std::string>& sink, std::ostream& out) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));
  std::map<std::string, std::vector<connectors::EntitySnapshot>> truth_by_type;
  uint64_t total = 0;
  for (const auto& s : config.sinks) {
    if (sink && s.name != *sink) continue;
    auto& truth = truth_by_type[s.entity];
    if (truth.empty()) {
      ASSIGN_OR_RETURN(truth, ReadTruth(*conn, s.entity, config.entities.at(s.entity).partitions));
    }
    ASSIGN_OR_RETURN(auto view, connectors::MakeSink(s, config));
    RETURN_IF_ERROR(view->Open().WithContext("sink " + s.name));
    std::vector<connectors::Difference> diffs;
    Status st = view->Verify(truth, diffs);
    view->Close();
    RETURN_IF_ERROR(st.WithContext("sink " + s.name));
    std::map<std::string_view, uint64_t> by_kind;
    for (const auto& d : diffs) ++by_kind[connectors::DifferenceKindName(d.kind)];
    out << s.name << ": " << truth.size() << " entities checked, " << diffs.size() << " differences";
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

Status ListDeadLetters(const config::Config& config, const std::optional<std::string>& sink, bool all,
                       std::ostream& out) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));
  std::string q =
      "SELECT id, sink, entity_type, partition_id, event_id, entity_id, version, created_at, "
      "COALESCE(resolution,''), error FROM sluice_dead_letters WHERE 1=1";
  if (sink) {
    q += " AND sink=";
    conn->AppendQuoted(q, *sink);
  }
  if (!all) q += " AND resolved_at IS NULL";
  ASSIGN_OR_RETURN(auto rows, conn->Query(q + " ORDER BY id"));
  out << Pad("ID", 8) << Pad("SINK", 20) << Pad("TYPE", 12) << Pad("PART", 5) << Pad("EVENT", 10) << Pad("ENTITY", 20)
      << Pad("VERSION", 8) << Pad("CREATED", 28) << Pad("RESOLVED", 10) << "ERROR\n";
  for (const auto& r : rows) {
    out << Pad(r[0].value_or(""), 8) << Pad(r[1].value_or(""), 20) << Pad(r[2].value_or(""), 12)
        << Pad(r[3].value_or(""), 5) << Pad(r[4].value_or(""), 10) << Pad(r[5].value_or(""), 20)
        << Pad(r[6].value_or(""), 8) << Pad(r[7].value_or(""), 28) << Pad(r[8].value_or(""), 10)
        << r[9].value_or("") << "\n";
  }
  out << rows.size() << " dead letter(s)\n";
  return Status::Ok();
}

Result<uint64_t> RetryDeadLetters(const config::Config& config, const std::optional<std::string>& sink,
                                  std::ostream& out) {
  RETURN_IF_ERROR(CheckSinkName(config, sink));
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));
  uint64_t unresolved = 0;
  for (const auto& s : config.sinks) {
    if (sink && s.name != *sink) continue;
    std::string q = "SELECT id, partition_id, event_id FROM sluice_dead_letters WHERE resolved_at IS NULL AND sink=";
    conn->AppendQuoted(q, s.name);
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

}  // namespace sluice::engine
