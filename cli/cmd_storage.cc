// sluice status, sluice verify, sluice deadletters: commands that work from
// MySQL and the views alone (engine/operator.h returns what they found) and
// the tables and text they print.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/command.h"
#include "core/json.h"
#include "core/text_table.h"
#include "engine/operator.h"
#include "sql/params.h"

namespace sluice::cli {
namespace {

// ---- reports ----

// A table (or with `json` one document) per sink and partition.
void PrintStatus(const config::Config& cfg, const std::vector<engine::SinkStatus>& sinks,
                 const std::vector<engine::EngineStatus>& engines, const std::vector<engine::EngineStatus>& writers,
                 bool json, std::ostream& out) {
  const sql::StorageLayout layout = sql::LayoutFrom(cfg);
  Json doc = Json::object();
  // Which storage server holds which partitions.
  doc["storage"] = Json::object();
  std::string storage_note;
  for (const auto& [type, e] : cfg.entities) {
    const std::string where = layout.Describe(type, e.partitions);
    doc["storage"][type] = where;
    storage_note += (storage_note.empty() ? "" : "; ") + type + " " + where;
  }
  doc["sinks"] = Json::array();
  doc["engines"] = Json::array();
  doc["writers"] = Json::array();
  std::string engine_note;
  for (const auto& e : engines) {
    doc["engines"].push_back({{"id", e.member}, {"heartbeat_age_ms", e.heartbeat_age_ms}});
    engine_note += (engine_note.empty() ? "" : ", ") + e.member;
  }
  std::string writer_note;
  for (const auto& w : writers) {
    doc["writers"].push_back({{"id", w.member},
                              {"url", w.address},
                              {"partitions", w.partitions},
                              {"heartbeat_age_ms", w.heartbeat_age_ms}});
    writer_note += (writer_note.empty() ? "" : ", ") + w.member + " (" + w.address + ", " +
                   std::to_string(w.partitions) + " partitions)";
  }
  TextTable table(
      {"SINK", "TYPE", "PART", "OFFSET", "HEAD", "LAG", "LAG_S", "STATE", "APPLIED", "STALE", "DEAD", "OWNER"});
  for (const engine::SinkStatus& s : sinks) {
    Json js = {{"name", s.name}, {"type", s.type}, {"entity", s.entity}, {"partitions", Json::array()}};
    for (const engine::PartitionStatus& p : s.partitions) {
      js["partitions"].push_back({{"partition", p.partition},
                                  {"offset", p.offset},
                                  {"head", p.head},
                                  {"lag_events", p.lag_events},
                                  {"lag_seconds", p.lag_seconds},
                                  {"state", p.state},
                                  {"applied", p.applied},
                                  {"stale", p.stale},
                                  {"dead_lettered", p.dead_lettered},
                                  {"last_error", p.last_error},
                                  {"owner", p.owner},
                                  {"lease_token", p.lease_token},
                                  {"server", layout.servers.at(layout.ServerOf(s.entity, p.partition)).name}});
      char lag_text[32];
      std::snprintf(lag_text, sizeof lag_text, "%.3f", p.lag_seconds);
      table.AddRow({s.name, s.type, std::to_string(p.partition), std::to_string(p.offset), std::to_string(p.head),
                    std::to_string(p.lag_events), lag_text, p.state, std::to_string(p.applied),
                    std::to_string(p.stale), std::to_string(p.dead_lettered), p.owner.empty() ? "-" : p.owner});
    }
    js["paused"] = s.paused;
    if (!s.last_error.empty()) table.AddNote("  " + s.name + " last error: " + s.last_error);
    doc["sinks"].push_back(std::move(js));
  }
  if (json) {
    // Error texts come from servers and may hold bytes that are not UTF-8.
    out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  } else {
    table.AddNote("engines: " + (engine_note.empty() ? std::string("none running") : engine_note));
    table.AddNote("routing writers: " + (writer_note.empty() ? std::string("none running") : writer_note));
    if (!layout.single()) table.AddNote("storage servers: " + storage_note);
    table.Print(out);
  }
}

// A view's count of differences by kind, then the first ones.
void PrintViewCheck(const engine::ViewCheck& check, std::ostream& out) {
  if (!check.not_compared.empty()) {
    out << check.sink << ": not compared: " << check.not_compared << "\n";
    return;
  }
  const engine::DifferenceTally& diffs = check.differences;
  out << check.sink << ": " << check.checked << (check.history ? " events checked, " : " entities checked, ")
      << diffs.total << " differences";
  for (const auto& [k, n] : diffs.by_kind) out << ", " << k << "=" << n;
  out << "\n";
  for (const auto& d : diffs.listed) {
    out << "  " << connectors::DifferenceKindName(d.kind) << " " << d.entity_id << ": " << d.detail << "\n";
  }
  if (diffs.total > diffs.listed.size()) out << "  ... and " << diffs.total - diffs.listed.size() << " more\n";
}

// verify's progress line on stderr, once a comparison has run 2 s: rewritten
// in place on a terminal, else a line every 10 s (stdout keeps the report).
class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(STDERR_FILENO) != 0) {}
  ~ProgressLine() { Done(); }

  // Ends a line left open on the terminal, before a report is printed.
  void Done() {
    if (tty_ && shown_) std::cerr << "\n" << std::flush;
    shown_ = false;
  }

  void operator()(const std::string& sink, const engine::CompareProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (sink != sink_) {
      Done();
      sink_ = sink;
      start_ = now;
      last_ = now;
      base_ = p.entities;  // the rate counts from here
    }
    if (now - start_ < std::chrono::seconds(2) || now - last_ < (tty_ ? std::chrono::milliseconds(250) : std::chrono::seconds(10))) {
      return;
    }
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    char line[256];
    if (p.events) {
      std::snprintf(line, sizeof line, "verify %s: %llu events compared, %.0f events/s", sink.c_str(),
                    static_cast<unsigned long long>(p.entities), static_cast<double>(p.entities - base_) / seconds);
    } else if (!p.scanning_view) {
      std::snprintf(line, sizeof line, "verify %s: %llu entities compared, partition %u of %u, %.0f entities/s",
                    sink.c_str(), static_cast<unsigned long long>(p.entities),
                    std::min(p.partitions_done + 1, p.partitions), p.partitions,
                    static_cast<double>(p.entities - base_) / seconds);
    } else {
      std::snprintf(line, sizeof line, "verify %s: %llu entities compared; looking for rows storage does not know: %llu read",
                    sink.c_str(), static_cast<unsigned long long>(p.entities),
                    static_cast<unsigned long long>(p.view_ids));
    }
    // On a terminal: back to the line's start, the line, then clear what a
    // longer line before it left.
    std::cerr << (tty_ ? "\r" : "") << line << (tty_ ? "\033[K" : "\n") << std::flush;
    shown_ = true;
  }

 private:
  const bool tty_;
  bool shown_ = false;
  std::string sink_;
  std::chrono::steady_clock::time_point start_, last_;
  uint64_t base_ = 0;
};

// verify --repair's lines for one view: what the first comparison found,
// then (if the repair ran to its end) what now matches and what remains.
void PrintRepairReport(const engine::RepairReport& r, std::ostream& out) {
  if (!r.compared) return;
  out << r.sink << ": " << r.checked << " entities checked, " << r.found << " differences";
  for (const auto& [k, n] : r.found_by_kind) out << ", " << k << "=" << n;
  out << (r.finished ? "" : " (so far: the repair stopped; the error follows)") << "\n";
  if (r.differing == 0) return;
  out << r.sink << ": " << r.differing - r.remaining << " of " << r.differing << " differing entities now match ("
      << r.rewritten << " rewritten from main storage), " << r.remaining << " remain\n";
  for (const auto& left : r.left) out << "  " << left.kind << " " << left.entity_id << ": " << left.detail << "; " << left.why << "\n";
  if (r.remaining > r.left.size()) out << "  ... and " << r.remaining - r.left.size() << " more\n";
}

void PrintDeadLetters(const std::vector<engine::DeadLetter>& letters, bool json, std::ostream& out) {
  if (json) {
    Json list = Json::array();
    for (const engine::DeadLetter& d : letters) {
      list.push_back({{"id", d.id},
                      {"sink", d.sink},
                      {"entity_type", d.entity_type},
                      {"partition", d.partition},
                      {"event_id", d.event_id},
                      {"entity_id", d.entity_id},
                      {"version", d.version},
                      {"created_at", d.created_at},
                      {"resolved_at", d.resolved_at ? Json(*d.resolved_at) : Json(nullptr)},
                      {"resolution", !d.resolution.empty() ? Json(d.resolution) : Json(nullptr)},
                      {"error", d.error}});
    }
    out << Json{{"dead_letters", list}, {"count", letters.size()}}.dump(2, ' ', false, Json::error_handler_t::replace)
        << "\n";
    return;
  }
  TextTable table({"ID", "SINK", "TYPE", "PART", "EVENT", "ENTITY", "VERSION", "CREATED", "RESOLVED", "ERROR"});
  for (const engine::DeadLetter& d : letters) {
    table.AddRow({std::to_string(d.id), d.sink, d.entity_type, std::to_string(d.partition), std::to_string(d.event_id),
                  d.entity_id, std::to_string(d.version), d.created_at, d.resolution, d.error});
  }
  table.Print(out);
  out << letters.size() << " dead letter(s)\n";
}

// One line per dead letter a retry or a discard (`action`) acted on.
void PrintDeadLetterActions(const engine::DeadLetterReport& report, std::string_view action, std::ostream& out) {
  using Kind = engine::DeadLetterAction::Kind;
  for (const engine::DeadLetterAction& a : report.actions) {
    switch (a.kind) {
      case Kind::kAlreadyResolved:
        out << "dead letter " << a.id << " (" << a.sink << ", entity " << a.entity_id << ") is already resolved ("
            << a.detail << "); nothing to " << action << "\n";
        break;
      case Kind::kEventGone:
        out << "dead letter " << a.id << ": its event no longer exists in main storage; left as is\n";
        break;
      case Kind::kRejectedAgain:
        out << "dead letter " << a.id << " (" << a.sink << ", entity " << a.entity_id
            << "): rejected again: " << a.detail << "\n";
        break;
      case Kind::kApplied:
      case Kind::kStale:
        out << "dead letter " << a.id << " (" << a.sink << ", entity " << a.entity_id
            << "): " << (a.kind == Kind::kApplied ? "applied" : "stale") << "\n";
        break;
      case Kind::kDiscarded:
        out << "dead letter " << a.id << " (" << a.sink << ", entity " << a.entity_id << ", version " << a.version
            << "): discarded\n";
        break;
    }
  }
}

// ---- commands ----

po::options_description StatusOptions(const std::string&) {
  po::options_description desc("usage: sluice status --config FILE [--json]\n\nPer sink and partition: offset, head, lag in events and seconds, state,\ncounters, the last error and the engine that owns it (its lease), read\nfrom MySQL (no running process needed); then the engines running and the\nrouting writers (their URL and how many partitions they own).\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "json", "print one JSON document (for scripts)");
  return desc;
}

int Status_(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  auto cfg = ConfigFrom(vm, "status");
  if (!cfg) return kExitFailure;
  std::vector<engine::EngineStatus> engines;
  std::vector<engine::EngineStatus> writers;
  auto status = engine::ReadStatus(*cfg, &engines, &writers);
  if (!status.ok()) {
    std::cerr << "sluice status: " << status.status().message() << "\n";
    return kExitFailure;
  }
  PrintStatus(*cfg, *status, engines, writers, vm.count("json") > 0, std::cout);
  return kExitOk;
}

po::options_description VerifyOptions(const std::string&) {
  po::options_description desc(
      "usage: sluice verify --config FILE [--sink NAME] [--repair]\n\n"
      "Compares every view (or one) with main storage: missing, extra, version\n"
      "mismatch and content mismatch; prints each view's count by kind and the first\n"
      "50 differences. Exit 0 when every view matches, 1 otherwise.\n"
      "Views of redis, mysql and elasticsearch sinks are compared 5,000 entities at a\n"
      "time, in memory that does not grow with the view; the others (kafka, plugins,\n"
      "views with code) hold the latest state of every entity. A comparison running\n"
      "longer than 2 s shows a progress line on stderr.\n\n"
      "--repair then rewrites, in the views of redis, mysql and elasticsearch sinks,\n"
      "only the entities that differ, from their latest event in main storage\n"
      "(without a running process, or beside one), compares them again, and says\n"
      "what was repaired and what remains and why. A row newer than storage, or of\n"
      "an entity storage has no events for, is overwritten or removed where the sink\n"
      "can do it safely (redis, mysql); elasticsearch gets advice (rebuild). Kafka\n"
      "and plugin sinks are only verified. Exit 0 when nothing remains different.\n\n"
      "options");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "verify only this sink")(
      "repair", "rewrite the entities that differ from main storage, then verify them again");
  return desc;
}

int Verify(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  auto cfg = ConfigFrom(vm, "verify");
  if (!cfg) return kExitFailure;
  std::optional<std::string> sink;
  if (vm.count("sink")) sink = vm["sink"].as<std::string>();
  Result<uint64_t> diffs = uint64_t{0};
  ProgressLine progress;
  if (vm.count("repair")) {
    const auto not_repairable = [&cfg, &progress](const engine::ViewCheck& check) {
      progress.Done();
      PrintViewCheck(check, std::cout);
      if (!check.not_compared.empty()) return;
      const bool code = std::any_of(cfg->sinks.begin(), cfg->sinks.end(), [&](const config::SinkConfig& s) {
        return s.name == check.sink && !s.code.empty();
      });
      std::cout << check.sink << ": not repaired: "
                << (code ? "a view with code is not rewritten from latest states alone"
                         : "a " + check.type + " sink cannot rewrite single entities")
                << " (sluice verify reports its differences only)\n";
    };
    diffs = engine::VerifyAndRepair(
        *cfg, sink, not_repairable,
        [&progress](const engine::RepairReport& r) {
          progress.Done();
          PrintRepairReport(r, std::cout);
        },
        std::ref(progress));
  } else {
    std::vector<engine::ViewCheck> checks;
    diffs = engine::Verify(*cfg, sink, checks, std::ref(progress));
    progress.Done();
    for (const engine::ViewCheck& check : checks) PrintViewCheck(check, std::cout);
  }
  if (!diffs.ok()) {
    std::cerr << "sluice verify: " << diffs.status().message() << "\n";
    return kExitFailure;
  }
  return *diffs == 0 ? kExitOk : kExitFailure;
}

po::options_description DeadLettersOptions(const std::string&) {
  po::options_description desc(
      "usage: sluice deadletters list|retry|discard --config FILE [--sink NAME] [--id N] [--all] [--json]\n\n"
      "  list     show the events sinks rejected (unresolved ones unless --all); --json for scripts\n"
      "  retry    re-apply unresolved dead letters: every one, a sink's (--sink), or one (--id);\n"
      "           exit 1 while any of them stays unresolved\n"
      "  discard  give up on dead letters without applying them: one (--id), or every unresolved\n"
      "           one of a sink (--sink); one of the two is required. Nothing asks for confirmation\n"
      "           and nothing is deleted: each is marked resolved as `discarded` (list --all shows\n"
      "           it). The view lacks that version until the entity changes again or is rebuilt.\n\n"
      "options");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "only this sink")("id", po::value<uint64_t>(), "retry, discard: only this dead letter")(
      "all", "list: include resolved dead letters")("json", "list: print one JSON document (for scripts)");
  return desc;
}

int DeadLetters(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  const std::string action = vm.count("action") ? vm["action"].as<std::string>() : "";
  if (action != "list" && action != "retry" && action != "discard") {
    throw Usage{action.empty() ? "deadletters needs list, retry or discard"
                               : "deadletters: unknown action '" + action + "' (list, retry or discard)"};
  }
  if (action != "list" && (vm.count("all") || vm.count("json"))) throw Usage{"--all and --json are for deadletters list"};
  if (action == "list" && vm.count("id")) throw Usage{"--id is for deadletters retry and discard"};
  if (action == "discard" && !vm.count("id") && !vm.count("sink")) {
    throw Usage{"deadletters discard needs --id N or --sink NAME (it never discards every sink's at once)"};
  }
  auto cfg = ConfigFrom(vm, "deadletters");
  if (!cfg) return kExitFailure;
  engine::DeadLetterFilter filter;
  if (vm.count("sink")) filter.sink = vm["sink"].as<std::string>();
  if (vm.count("id")) filter.id = vm["id"].as<uint64_t>();
  if (action == "list") {
    auto letters = engine::ListDeadLetters(*cfg, filter.sink, vm.count("all") > 0);
    if (!letters.ok()) {
      std::cerr << "sluice deadletters: " << letters.status().message() << "\n";
      return kExitFailure;
    }
    PrintDeadLetters(*letters, vm.count("json") > 0, std::cout);
    return kExitOk;
  }
  engine::DeadLetterReport report;
  auto done = action == "retry" ? engine::RetryDeadLetters(*cfg, filter, report)
                                : engine::DiscardDeadLetters(*cfg, filter, report);
  PrintDeadLetterActions(report, action, std::cout);
  if (done.ok() && report.finished) std::cout << *done << " dead letter(s) still unresolved\n";
  if (done.ok() && report.discarded_sink) {
    std::cout << *done << " dead letter(s) of sink " << *report.discarded_sink << " discarded\n";
  }
  if (!done.ok()) {
    std::cerr << "sluice deadletters: " << done.status().message() << "\n";
    return kExitFailure;
  }
  // retry: how many are still unresolved; discard: how many were discarded.
  return action == "retry" && *done > 0 ? kExitFailure : kExitOk;
}

}  // namespace

Subcommand StatusCommand() {
  Subcommand c;
  c.names = {"status"};
  c.synopsis = "status --config FILE";
  c.summary = "offset, head, lag and state per sink and partition (--json)";
  c.options = StatusOptions;
  c.run = Status_;
  return c;
}

Subcommand VerifyCommand() {
  Subcommand c;
  c.names = {"verify"};
  c.synopsis = "verify --config FILE";
  c.summary = "compare every view with main storage; exit 1 on any difference\n(--repair: rewrite what differs from main storage)";
  c.options = VerifyOptions;
  c.run = Verify;
  return c;
}

Subcommand DeadLettersCommand() {
  Subcommand c;
  c.names = {"deadletters"};
  c.synopsis = "deadletters list|retry|discard --config FILE";
  c.summary = "show, re-apply or give up on events a sink rejected";
  c.options = DeadLettersOptions;
  c.positionals = {"action"};
  c.run = DeadLetters;
  return c;
}

}  // namespace sluice::cli
