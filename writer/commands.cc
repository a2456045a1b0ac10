#include "writer/commands.h"

namespace sluice::writer {
namespace {

CommandOutcome Reject(int status, std::string code, std::string message) {
  CommandOutcome o;
  o.http_status = status;
  o.error_code = std::move(code);
  o.message = std::move(message);
  return o;
}

CommandOutcome Apply(Json state) {
  CommandOutcome o;
  o.applied = true;
  o.new_state = std::move(state);
  return o;
}

}  // namespace

bool IsBuiltinCommand(std::string_view name) {
  return name == "create" || name == "put" || name == "patch" || name == "delete";
}

CommandOutcome RunBuiltinCommand(std::string_view name, const EntityView& entity, const Json& request) {
  if (name == "delete") {
    if (!entity.exists) return Reject(404, "not_found", "the entity does not exist");
    CommandOutcome o;
    o.applied = true;
    o.deleted = true;
    o.new_state = nullptr;
    return o;
  }
  if (!request.is_object()) {
    return Reject(400, "invalid_request", "the body of '" + std::string(name) + "' must be a JSON object");
  }
  if (name == "create") {
    if (entity.exists) {
      return Reject(409, "already_exists",
                    "the entity already exists at version " + std::to_string(entity.version));
    }
    return Apply(request);
  }
  if (name == "put") return Apply(request);
  // patch: a missing entity is patched from the empty object.
  Json state = entity.exists ? *entity.state : Json::object();
  ApplyMergePatch(state, request);
  return Apply(std::move(state));
}

}  // namespace sluice::writer
