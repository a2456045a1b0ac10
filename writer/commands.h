// The built-in commands: create, put, patch (RFC 7386) and delete.
//
// A command handler is a deterministic function of (current entity, request):
// it either produces the entity's next state and a response, or rejects the
// command with an HTTP status and a message (nothing is written then).
// Pure functions, safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "core/json.h"

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

}  // namespace sluice::writer
