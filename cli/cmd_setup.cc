// sluice init, sluice config check, sluice version.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#ifdef SLUICE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include "cli/command.h"
#include "connectors/sink.h"
#include "handlers/handler_files.h"
#include "sql/layout.h"
#include "sql/layout_schema.h"
#include "sql/params.h"
#include "sql/schema.h"

namespace sluice::cli {
namespace {

// The allocator that serves this binary's malloc, for `sluice version`
// (CMake's SLUICE_JEMALLOC links jemalloc into the programs). Checked, not
// assumed: a malloc must show up in jemalloc's count of this thread's bytes.
std::string AllocatorName() {
#ifdef SLUICE_JEMALLOC
  const char* version = "?";
  size_t size = sizeof version;
  mallctl("version", &version, &size, nullptr, 0);
  const std::string name = std::string("jemalloc ") + version;
  uint64_t before = 0;
  uint64_t after = 0;
  size = sizeof before;
  if (mallctl("thread.allocated", &before, &size, nullptr, 0) != 0) return name + " (its counters are off)";
  void* volatile probe = std::malloc(4096);
  size = sizeof after;
  mallctl("thread.allocated", &after, &size, nullptr, 0);
  std::free(probe);
  return after > before ? name : "the C library's malloc (" + name + " is linked but does not serve malloc)";
#else
  return "the C library's malloc";
#endif
}

int ConfigCheck(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  std::string path = vm.count("file") ? vm["file"].as<std::string>() : "";
  if (path.empty() && vm.count("config")) path = vm["config"].as<std::string>();
  if (path.empty()) throw Usage{"config check needs a FILE"};
  auto cfg = LoadOrExplain(path);
  if (!cfg.ok()) return kExitFailure;
  // Handler files are compiled as `serve` would, so a syntax error shows here with file and line.
  if (auto scripts = handlers::LoadHandlerScripts(*cfg); !scripts.ok()) {
    std::cerr << scripts.status().message() << "\n";
    return kExitFailure;
  }
  // So is each sink's view code.
  if (Status code = connectors::CheckViewCode(*cfg); !code.ok()) {
    std::cerr << code.message() << "\n";
    return kExitFailure;
  }
  if (vm.count("print")) std::cout << cfg->Redacted();
  std::cout << path << ": ok\n";
  return kExitOk;
}

int Init(const Invocation& call) {
  const po::variables_map& vm = call.vm;
  if (!vm.count("config")) throw Usage{"init needs --config FILE"};
  auto cfg = LoadOrExplain(vm["config"].as<std::string>());
  if (!cfg.ok()) return kExitFailure;
  if (Status st = RunInit(*cfg, true, vm.count("accept-moves") > 0); !st.ok()) {
    std::cerr << "sluice init: " << st.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

int Version(const Invocation& call) {
  if (!call.args.empty()) throw Usage{"version takes no arguments, got '" + call.args[0] + "'"};
  std::cout << "sluice 0.1.0\nallocator: " << AllocatorName() << "\n";
  return kExitOk;
}

}  // namespace

Status RunInit(const config::Config& cfg, bool verbose, bool accept_moves) {
  const sql::StorageLayout layout = sql::LayoutFrom(cfg);
  // A member whose heartbeat is younger than the longer lease TTL may still run.
  const auto live_within = std::max(cfg.engine.lease_ttl, cfg.writer.lease_ttl);
  ASSIGN_OR_RETURN(auto done, sql::InitLayout(layout, sql::SpecsFrom(cfg), accept_moves, live_within));
  if (!verbose) return Status::Ok();
  for (const auto& s : done.servers) {
    std::cout << (layout.single() ? "" : "storage server " + s.name + ", ") << "database " << s.database << ": "
              << s.report.tables_created << " event tables created, " << s.report.types_registered
              << " entity types registered";
    if (s.report.upgraded_from != 0) {
      std::cout << ", schema upgraded from version " << s.report.upgraded_from << " to " << sql::kSchemaVersion;
    } else if (s.report.tables_created == 0 && s.report.types_registered == 0) {
      std::cout << " (already up to date)";
    }
    std::cout << "\n";
  }
  for (const std::string& m : done.moved) std::cout << "moved " << m << "\n";
  return Status::Ok();
}

Subcommand InitCommand() {
  Subcommand c;
  c.names = {"init"};
  c.synopsis = "init --config FILE [--accept-moves]";
  c.summary = "create the database, metadata and event tables (idempotent)";
  c.options = [](const std::string&) {
    po::options_description desc(
        "usage: sluice init --config FILE [--accept-moves]\n\nCreates the database, the metadata tables and one event table per entity type and\npartition, on each storage server for the partitions it holds, and records on main\nwhich server holds which partitions. Running it again changes nothing; a partition\ncount that differs from the existing tables is refused, and so is a changed placement\nunless --accept-moves (docs/deployment.md#moving-partitions-between-servers).\n\noptions");
    desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
        "accept-moves",
        "record a placement that moves partitions to other servers, once each moved table was copied to its new "
        "server (checked: it must hold at least the events of the old one)");
    return desc;
  };
  c.run = Init;
  return c;
}

Subcommand ConfigCheckCommand() {
  Subcommand c;
  c.names = {"config"};
  c.synopsis = "config check FILE";
  c.summary = "validate a config file and print every problem with file:line:column";
  c.second_word = "check";
  c.usage_help = "sluice config check --help";
  c.options = [](const std::string&) {
    po::options_description desc("usage: sluice config check FILE\n\nValidates FILE and prints every problem as FILE:LINE:COLUMN: message.\n\noptions");
    desc.add_options()("help,h", "show this help")("config", po::value<std::string>(), "the config file (same as FILE)")(
        "print", "print the resolved config, secrets shown as their ${env:...}/${file:...} references or ***");
    return desc;
  };
  c.positionals = {"file"};
  c.help_footer = "\nExit codes: 0 valid, 1 invalid, 2 usage error.\n";
  c.run = ConfigCheck;
  return c;
}

Subcommand VersionCommand() {
  Subcommand c;
  c.names = {"version", "--version"};
  c.synopsis = "version";
  c.summary = "print the version";
  c.usage_help = "sluice --help";
  c.run = Version;
  return c;
}

}  // namespace sluice::cli
