// The built-in commands: create, put, patch (RFC 7386) and delete.
//
// A command handler is a deterministic function of (current entity, request):
// it either produces the entity's next state and a response, or rejects the
// command with an HTTP status and a message (nothing is written then).
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/json.h"
#include "handlers/handler_files.h"
#include "handlers/js_runtime.h"

namespace sluice::writer {

// The entity as a handler sees it.
struct EntityView {
  bool exists = false;       // false when never created or deleted
  uint64_t version = 0;      // latest version, counting deletes (0: no events)
  const Json* state = nullptr;  // the current state when exists
};

struct CommandOutcome {
  bool applied = false;
  // When applied:
  Json new_state;         // null for a delete
  bool deleted = false;
  Json response = Json::object();
  // When rejected:
  int http_status = 0;
  std::string error_code;
  std::string message;
};

bool IsBuiltinCommand(std::string_view name);

// Runs one built-in command; name must satisfy IsBuiltinCommand.
CommandOutcome RunBuiltinCommand(std::string_view name, const EntityView& entity, const Json& request);

// Runs the built-in commands and, when the entity type has a handler file,
// its JavaScript commands (docs/handlers.md). One per partition worker, used
// only on that worker's thread; its JsRuntime is built on first use there.
//
// A JavaScript command sees a copy of the state ({} when the entity does not
// exist), changes it in place and returns the response. Outcomes: applied;
// 422 `rejected` with the thrown message; 500 `handler_timeout`,
// `handler_out_of_memory` or `handler_invalid_result` when the handler was
// stopped or produced something that is not JSON. Nothing is written unless
// it applied.
class CommandRunner {
 public:
  // script: the type's handler file, or null when it has none.
  explicit CommandRunner(std::shared_ptr<const handlers::HandlerScript> script);
  ~CommandRunner();

  // Fixes ctx.now for the commands of the next batch: the wall clock in
  // milliseconds, never earlier than the previous batch's.
  void BeginBatch();

  // Runs `name`, a built-in or one of the script's commands (the HTTP layer
  // has checked that it is one of them).
  CommandOutcome Run(std::string_view name, const EntityView& entity, const Json& request,
                     const std::string& command_id);

 private:
  std::shared_ptr<const handlers::HandlerScript> script_;
  std::unique_ptr<handlers::JsRuntime> js_;
  int64_t now_ms_ = 0;
};

}  // namespace sluice::writer
