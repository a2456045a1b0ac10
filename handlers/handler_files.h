// The handler files a Config names, read and compiled once at start-up (and
// by `sluice config check`), so that a syntax error stops the process before
// it serves anything. Pure functions, safe from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/status.h"
#include "handlers/js_runtime.h"

namespace sluice::handlers {

// One entity type's handler file: what each partition worker builds its own
// JsRuntime from. Immutable; shared by const pointer between threads.
struct HandlerScript {
  std::string file;    // path as resolved by the config
  std::string source;  // the file's text as compiled at start-up
  JsLimits limits;
  std::vector<std::string> commands;  // sorted
  bool HasCommand(const std::string& name) const;
};

// The limits config.writer sets.
JsLimits LimitsFrom(const config::WriterConfig& writer);

// Reads and compiles the handler file of every entity type that has one.
// InvalidArgument listing every problem, one per line, as
// "FILE:LINE: what" followed by where the config named the file.
Result<std::map<std::string, std::shared_ptr<const HandlerScript>>> LoadHandlerScripts(const config::Config& config);

}  // namespace sluice::handlers
