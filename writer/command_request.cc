#include "writer/command_request.h"

#include "core/names.h"
#include "writer/api.h"
#include "writer/commands.h"

namespace sluice::writer {

std::optional<Reply> CheckEntityId(std::string_view id) {
  if (IsValidEntityId(id)) return std::nullopt;
  return ErrorReply(400, "invalid_entity_id", "entity ids are 1 to 64 bytes of visible ASCII (0x21-0x7e)");
}

std::variant<CommandRequest, Reply> ValidateCommandRequest(std::string_view type, const std::string& command,
                                                           const handlers::HandlerScript* script,
                                                           std::optional<std::string_view> idempotency_key,
                                                           std::optional<std::string_view> if_match,
                                                           std::string_view body, uint32_t max_json_depth) {
  if (!IsBuiltinCommand(command) && !(script && script->HasCommand(command))) {
    std::string known = "create, put, patch, delete";
    if (script) {
      for (const auto& c : script->commands) known += ", " + c;
    }
    return ErrorReply(404, "unknown_command",
                      "entity type '" + std::string(type) + "' has no command '" + command + "' (its commands: " +
                          known + ")");
  }
  CommandRequest out;
  if (idempotency_key) {
    if (!IsValidCommandId(*idempotency_key)) {
      return ErrorReply(400, "invalid_idempotency_key", "Idempotency-Key must be 1 to 128 bytes of visible ASCII");
    }
    out.command_id = std::string(*idempotency_key);
  }
  if (if_match) {
    auto v = ParseIfMatch(*if_match);
    if (!v.ok()) return ErrorReply(400, "invalid_if_match", v.status().message());
    out.expected_version = *v;
  }
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    out.request = Json::object();
  } else {
    auto parsed = ParseJson(body, max_json_depth);
    if (!parsed.ok()) return ErrorReply(400, "malformed_json", parsed.status().message());
    out.request = std::move(parsed).value();
  }
  out.request_text = CanonicalJson(out.request);
  return out;
}

std::optional<Reply> CheckExpectedVersion(std::optional<uint64_t> expected, uint64_t current) {
  if (!expected || *expected == current) return std::nullopt;
  return ErrorReply(409, "version_mismatch",
                    "If-Match expects version " + std::to_string(*expected) + " but the entity is at version " +
                        std::to_string(current),
                    R"({"current_version":)" + std::to_string(current) + "}");
}

}  // namespace sluice::writer
