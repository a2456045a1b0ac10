// The sink types built into sluice: the one list (SLUICE_BUILTIN_SINK_TYPES in
// connectors/CMakeLists.txt, read by builtin_sink_types.cc).
//
// A built-in type is its folder, connectors/<type>/, which provides one
// BuiltinSinkType: how the config loader reads, checks and prints its keys
// (config::SinkType: name, can_push, key table, redaction) and the factory
// that builds a sink from a loaded SinkConfig. Adding a type is its folder
// plus its name in SLUICE_BUILTIN_SINK_TYPES (connectors/CMakeLists.txt). Any other `type:` is a plugin's
// (connectors/plugin/).
//
// Threads: the list is built on first use (thread-safe) and immutable after.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "config/sink_type.h"
#include "core/status.h"

namespace sluice::connectors {

class Sink;

// Builds the (unopened) sink a config describes; `global` supplies the main
// storage connection for sinks that default to it.
using SinkFactory =
    std::function<Result<std::unique_ptr<Sink>>(const config::SinkConfig& sink, const config::Config& global)>;

struct BuiltinSinkType {
  config::SinkType config;  // name, capabilities, keys, checks, redaction
  SinkFactory make;
};

// Every built-in type, in the order messages list them.
const std::vector<BuiltinSinkType>& BuiltinSinkTypeList();

// The same, as the config loader takes them: config::LoadConfig(path, BuiltinSinkTypes()).
const config::SinkTypes& BuiltinSinkTypes();

bool IsBuiltinSinkType(std::string_view type);

}  // namespace sluice::connectors
