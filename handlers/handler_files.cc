#include "handlers/handler_files.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace sluice::handlers {

bool HandlerScript::HasCommand(const std::string& name) const {
  return std::binary_search(commands.begin(), commands.end(), name);
}

JsLimits LimitsFrom(const config::WriterConfig& writer) {
  JsLimits limits;
  limits.timeout = writer.handler_timeout;
  limits.memory_bytes = static_cast<size_t>(writer.handler_memory);
  limits.max_json_depth = writer.max_json_depth;
  return limits;
}

Result<std::map<std::string, std::shared_ptr<const HandlerScript>>> LoadHandlerScripts(const config::Config& config) {
  std::map<std::string, std::shared_ptr<const HandlerScript>> scripts;
  std::string problems;
  for (const auto& [type, entity] : config.entities) {
    if (entity.handlers.empty()) continue;
    const std::string named_at = " (entities." + type + ".handlers at " + entity.handlers_origin + ")";
    std::ifstream in(entity.handlers, std::ios::binary);
    std::ostringstream text;
    if (!in || !(text << in.rdbuf())) {
      problems += entity.handlers + ": cannot read the handler file" + named_at + "\n";
      continue;
    }
    auto script = std::make_shared<HandlerScript>();
    script->file = entity.handlers;
    script->source = text.str();
    script->limits = LimitsFrom(config.writer);
    auto runtime = JsRuntime::Create(script->file, script->source, script->limits);
    if (!runtime.ok()) {
      problems += runtime.status().message() + named_at + "\n";
      continue;
    }
    script->commands = (*runtime)->commands();
    scripts.emplace(type, std::move(script));
  }
  if (!problems.empty()) {
    problems.pop_back();
    return InvalidArgument(std::move(problems));
  }
  return scripts;
}

}  // namespace sluice::handlers
