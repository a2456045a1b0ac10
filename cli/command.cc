#include "cli/command.h"

#include <iostream>
#include <utility>

#include "connectors/builtin_sink_types.h"
#include "connectors/plugin/plugin_host.h"

namespace sluice::cli {

po::variables_map Parse(const po::options_description& desc, const std::vector<std::string>& args,
                        const std::vector<std::string>& positionals) {
  constexpr const char* kStray = "stray-argument";
  po::options_description hidden;
  po::positional_options_description pos;
  for (const std::string& name : positionals) {
    hidden.add_options()(name.c_str(), po::value<std::string>());
    pos.add(name.c_str(), 1);
  }
  hidden.add_options()(kStray, po::value<std::vector<std::string>>());
  pos.add(kStray, -1);
  po::options_description all;
  all.add(desc).add(hidden);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    if (vm.count(kStray)) throw Usage{"unexpected argument '" + vm[kStray].as<std::vector<std::string>>().front() + "'"};
    po::notify(vm);
  } catch (const po::error& e) {
    throw Usage{e.what()};
  }
  return vm;
}

Result<config::Config> LoadOrExplain(const std::string& path) {
  auto cfg = config::LoadConfig(path, connectors::BuiltinSinkTypes());
  if (!cfg.ok()) {
    std::cerr << cfg.status().message() << "\n";
    return cfg;
  }
  // Plugin libraries load here, so a bad library or a plugin sink's bad
  // options stop every command (config check included) before it starts.
  if (Status st = connectors::plugin::CheckPlugins(*cfg); !st.ok()) {
    std::cerr << st.message() << "\n";
    return st;
  }
  return cfg;
}

std::optional<config::Config> ConfigFrom(const po::variables_map& vm, const std::string& command) {
  if (!vm.count("config")) throw Usage{command + " needs --config FILE"};
  auto cfg = LoadOrExplain(vm["config"].as<std::string>());
  if (!cfg.ok()) return std::nullopt;
  return std::move(cfg).value();
}

}  // namespace sluice::cli
