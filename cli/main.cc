// sluice: one binary, one subcommand per job.
//
// Exit codes: 0 success, 1 failure (invalid config, storage refused, runtime
// error), 2 usage error.
//
// The table below lists every subcommand in the order `sluice --help` shows
// them; adding one is a row here and its options and run function in a
// cmd_*.cc file (see command.h).
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "connectors/plugin/plugin_host.h"

namespace sluice::cli {
namespace {

const std::vector<Subcommand>& Subcommands() {
  static const std::vector<Subcommand> table = {
      RunCommand("serve", "serve --config FILE [--id NAME]", "run the writer (HTTP API) and the sync engine in one process"),
      RunCommand("writer", "writer --config FILE", "run the writer alone"),
      RunCommand("sync", "sync --config FILE [--id NAME]", "run the sync engine alone (pull every partition into the sinks)"),
      InitCommand(),
      StatusCommand(),
      VerifyCommand(),
      DeadLettersCommand(),
      ArchiveCommand(),
      PauseResumeCommand(),
      RewindCommand(),
      RebuildCommand(),
      ConfigCheckCommand(),
      VersionCommand(),
  };
  return table;
}

// `sluice --help`: the table's synopses and summaries in two columns.
std::string TopHelp() {
  constexpr size_t kColumn = 29;  // where the summaries start
  std::string help =
      "sluice: a change-data pipeline whose source of truth lives in MySQL\n\n"
      "usage: sluice <command> [options]\n\n"
      "commands:\n";
  for (const Subcommand& c : Subcommands()) {
    std::string line = "  " + c.synopsis;
    if (line.size() + 1 > kColumn) {
      help += line + "\n";
      line.clear();
    }
    line.resize(kColumn, ' ');
    size_t from = 0;
    for (size_t nl; (nl = c.summary.find('\n', from)) != std::string::npos; from = nl + 1) {
      help += line + c.summary.substr(from, nl - from) + "\n";
      line.assign(kColumn, ' ');
    }
    help += line + c.summary.substr(from) + "\n";
  }
  help +=
      "\nRun `sluice <command> --help` for the options of a command.\n"
      "Exit codes: 0 success, 1 failure, 2 usage error.\n";
  return help;
}

const Subcommand* Find(const std::string& name) {
  for (const Subcommand& c : Subcommands()) {
    for (const std::string& n : c.names) {
      if (n == name) return &c;
    }
  }
  return nullptr;
}

int Dispatch(const Subcommand& command, const std::string& name, std::vector<std::string> args) {
  if (!command.second_word.empty()) {
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      std::cout << "usage: sluice " << command.synopsis << "\n";
      return args.empty() ? kExitUsage : kExitOk;
    }
    if (args[0] != command.second_word) throw Usage{"unknown " + name + " subcommand '" + args[0] + "'"};
    args.erase(args.begin());
  }
  Invocation call{name, std::move(args), {}};
  if (command.options) {
    const po::options_description desc = command.options(name);
    call.vm = Parse(desc, call.args, command.positionals);
    if (call.vm.count("help")) {
      std::cout << desc << command.help_footer;
      return kExitOk;
    }
  }
  return command.run(call);
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << TopHelp();
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::string name = args[0];
  const Subcommand* command = Find(name);
  // Where a usage error points: the command's own help once the command is known.
  std::string help = "sluice --help";
  if (command) help = command->usage_help.empty() ? "sluice " + name + " --help" : command->usage_help;
  try {
    if (!command) throw Usage{"unknown command '" + name + "'"};
    return Dispatch(*command, name, {args.begin() + 1, args.end()});
  } catch (const Usage& u) {
    std::cerr << "sluice: " << u.message << "\nRun `" << help << "` for usage.\n";
    return kExitUsage;
  }
}

}  // namespace
}  // namespace sluice::cli

int main(int argc, char** argv) {
  const int code = sluice::cli::Main(argc, argv);
  // Every sink is gone by now, on the failing paths too.
  sluice::connectors::plugin::ShutdownPlugins();
  return code;
}
