// sluice archive status|run: the archive of old events (docs/archive.md),
// read and moved from MySQL and the store alone (engine/operator.h).
#include <cstdint>
#include <cstdio>
#include <map>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/json.h"
#include "core/text_table.h"
#include "engine/operator.h"

namespace sluice::cli {
namespace {

std::string Bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

void PrintArchiveStatus(const std::vector<archive::PartitionArchiveStatus>& parts, bool json, std::ostream& out) {
  Json doc = Json::array();
  TextTable table({"TYPE", "PART", "WATERMARK", "SEGMENTS", "ARCHIVED", "ARCHIVE_SIZE", "HOT_ROWS", "STUBS",
                   "HOT_SIZE", "OLDEST_HOT", "OLDEST_HOT_AGE_S", "SLOWEST_SINK"});
  for (const auto& p : parts) {
    doc.push_back({{"entity_type", p.type},
                   {"partition", p.partition},
                   {"watermark", p.watermark},
                   {"segments", p.segments},
                   {"archived_events", p.archived_events},
                   {"archive_bytes", p.archive_bytes},
                   {"archived_state_bytes", p.archived_state_bytes},
                   {"hot_rows", p.hot.rows},
                   {"stubs", p.hot.stubs},
                   {"hot_bytes", p.hot.bytes},
                   {"oldest_hot_event_id", p.hot.oldest_event_id},
                   {"oldest_hot_age_seconds", p.oldest_hot_age_seconds},
                   {"slowest_sink", p.slowest},
                   {"slowest_sink_offset", p.applied}});
    char age[32];
    std::snprintf(age, sizeof age, "%.0f", p.oldest_hot_age_seconds);
    table.AddRow({p.type, std::to_string(p.partition), std::to_string(p.watermark), std::to_string(p.segments),
                  std::to_string(p.archived_events), Bytes(p.archive_bytes), std::to_string(p.hot.rows),
                  std::to_string(p.hot.stubs), Bytes(p.hot.bytes), std::to_string(p.hot.oldest_event_id), age,
                  p.slowest.empty() ? "-" : p.slowest + "@" + std::to_string(p.applied)});
  }
  if (json) {
    out << Json{{"partitions", doc}}.dump(2) << "\n";
    return;
  }
  table.Print(out);
}

po::options_description ArchiveOptions(const std::string&) {
  po::options_description desc(
      "usage: sluice archive status|run --config FILE [--type NAME] [--max-steps N] [--json]\n\n"
      "  status  per entity type with an archive policy and partition: the watermark (the last\n"
      "          archived event_id), segments and their size, the hot table's rows, stubs and size,\n"
      "          its oldest event still whole and how old it is, and the slowest sink\n"
      "  run     archive now what the policies let leave the hot tables (also what serve and\n"
      "          sync do every archive.interval): one line per segment written; exit 0 when\n"
      "          done, 1 on an error (a rerun resumes; nothing is lost or written twice)\n\n"
      "options");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "type", po::value<std::string>(), "run: only this entity type")(
      "max-steps", po::value<uint64_t>()->default_value(1000000), "run: at most this many segments per type")(
      "json", "status: print one JSON document (for scripts)");
  return desc;
}

int Archive(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  const std::string action = vm.count("action") ? vm["action"].as<std::string>() : "";
  if (action != "status" && action != "run") {
    throw Usage{action.empty() ? "archive needs status or run" : "archive: unknown action '" + action + "' (status or run)"};
  }
  if (action == "status" && vm.count("type")) throw Usage{"--type is for archive run"};
  if (action == "run" && vm.count("json")) throw Usage{"--json is for archive status"};
  auto cfg = ConfigFrom(vm, "archive");
  if (!cfg) return kExitFailure;
  if (action == "status") {
    auto parts = engine::ReadArchiveStatus(*cfg);
    if (!parts.ok()) {
      std::cerr << "sluice archive status: " << parts.status().message() << "\n";
      return kExitFailure;
    }
    PrintArchiveStatus(*parts, vm.count("json") > 0, std::cout);
    return kExitOk;
  }
  std::optional<std::string> type;
  if (vm.count("type")) type = vm["type"].as<std::string>();
  uint64_t events = 0;
  uint64_t segments = 0;
  std::map<std::string, std::string> held;  // type/partition -> why its last step archived nothing
  auto done = engine::RunArchive(*cfg, type, vm["max-steps"].as<uint64_t>(), [&](const archive::StepReport& r) {
    const std::string where = r.type + "/p" + std::to_string(r.partition);
    if (r.last_event_id == 0) {
      held[where] = r.held_back;
      return;
    }
    ++segments;
    events += r.events;
    std::cout << "archived " << where << " events " << r.first_event_id << ".." << r.last_event_id << ": "
              << r.events << " events, " << Bytes(r.state_bytes) << " -> " << Bytes(r.bytes) << ", " << r.stubbed
              << " hot rows made stubs" << (r.orphans_deleted ? ", " + std::to_string(r.orphans_deleted) +
                                                                    " leftover object(s) of an interrupted run removed"
                                                              : "")
              << std::endl;
  });
  if (!done.ok()) {
    std::cerr << "sluice archive run: " << done.status().message() << "\n";
    return kExitFailure;
  }
  for (const auto& [where, why] : held) {
    if (!why.empty()) std::cout << "kept " << where << ": " << why << "\n";
  }
  std::cout << "archive run: " << segments << " segment(s), " << events << " event(s)\n";
  return kExitOk;
}

}  // namespace

Subcommand ArchiveCommand() {
  Subcommand c;
  c.names = {"archive"};
  c.synopsis = "archive status|run --config FILE";
  c.summary = "move old events to the archive's store (run), or show it (status)";
  c.options = ArchiveOptions;
  c.positionals = {"action"};
  c.run = Archive;
  return c;
}

}  // namespace sluice::cli
