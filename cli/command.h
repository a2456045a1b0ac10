// What every subcommand of the `sluice` binary is made of, and the helpers
// they share. main.cc holds the table of subcommands; each cmd_*.cc defines
// the options and the run function of a group of them. Main thread only.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "config/config.h"
#include "core/status.h"
#include "sql/schema.h"

namespace sluice::cli {

namespace po = boost::program_options;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// A usage error: main prints it with where to find the command's help and
// exits with kExitUsage.
struct Usage {
  std::string message;
};

// One call of a subcommand.
struct Invocation {
  std::string name;               // the name it was called by ("pause" or "resume", ...)
  std::vector<std::string> args;  // the arguments after the name (and after its second word)
  po::variables_map vm;           // args parsed against its options (empty without options)
};

// One row of the table of subcommands (main.cc).
struct Subcommand {
  std::vector<std::string> names;  // the names that select it; rows may share a run function
  std::string synopsis;            // the left column of `sluice --help`
  std::string summary;             // its right column; each '\n' starts a continuation line
  std::string second_word;         // a required second word ("check" of `config check`), or empty
  std::string usage_help;          // where a usage error points; empty: `sluice <name> --help`
  // Its options, as its --help shows them, for the name it was called by.
  // Null: it takes no options and reads Invocation::args itself.
  std::function<po::options_description(const std::string& name)> options;
  std::vector<std::string> positionals;  // positional arguments, in order (not shown by --help)
  std::string help_footer;               // printed after the options by --help
  std::function<int(const Invocation&)> run;
};

// Parses a command's arguments against `desc` (what its --help shows).
// `positionals` names its positional arguments in order: each is read as a
// string under that name and not listed by --help. Throws Usage on a bad
// command line, including an argument that nothing takes.
po::variables_map Parse(const po::options_description& desc, const std::vector<std::string>& args,
                        const std::vector<std::string>& positionals = {});

// Loads and checks a config (plugins included), or prints why not on stderr.
Result<config::Config> LoadOrExplain(const std::string& path);

// Loads the config named by --config, or explains why not (nullopt); a
// missing --config is a Usage error of `command`.
std::optional<config::Config> ConfigFrom(const po::variables_map& vm, const std::string& command);

// The row of each subcommand, by file (see main.cc for the order of the table).

// cmd_setup.cc
Subcommand InitCommand();
Subcommand ConfigCheckCommand();
Subcommand VersionCommand();
// accept_moves: record a changed placement (sql::InitLayout).
Status RunInit(const config::Config& cfg, bool verbose, bool accept_moves = false);  // also used by serve

// cmd_run.cc: serve, writer and sync
Subcommand RunCommand(const std::string& name, const std::string& synopsis, const std::string& summary);

// cmd_storage.cc: commands that work from MySQL and the views
Subcommand StatusCommand();
Subcommand VerifyCommand();
Subcommand DeadLettersCommand();

// cmd_archive.cc
Subcommand ArchiveCommand();

// cmd_admin.cc: commands that reach a running process
Subcommand PauseResumeCommand();
Subcommand RewindCommand();
Subcommand RebuildCommand();

}  // namespace sluice::cli
