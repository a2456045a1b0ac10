#include "writer/commands.h"

#include <algorithm>
#include <chrono>

#include "core/log.h"

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

CommandRunner::CommandRunner(std::shared_ptr<const handlers::HandlerScript> script) : script_(std::move(script)) {}

CommandRunner::~CommandRunner() = default;

void CommandRunner::BeginBatch() {
  const int64_t wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  now_ms_ = std::max(now_ms_, wall);
}

CommandOutcome CommandRunner::Run(std::string_view name, const EntityView& entity, const Json& request,
                                  const std::string& command_id) {
  if (IsBuiltinCommand(name) || script_ == nullptr) return RunBuiltinCommand(name, entity, request);
  if (js_ == nullptr) {
    // The file compiled at start-up, so this fails only if the limits cannot hold it now.
    auto rt = handlers::JsRuntime::Create(script_->file, script_->source, script_->limits);
    if (!rt.ok()) {
      LogRateLimited(LogLevel::kError, "writer.handler_load", "writer: " + rt.status().message());
      return Reject(500, "handler_unavailable", "the handler file could not be loaded: " + rt.status().message());
    }
    js_ = std::move(rt).value();
  }
  handlers::JsContext ctx;
  ctx.command_id = command_id;
  ctx.version = entity.version;
  ctx.exists = entity.exists;
  ctx.now_ms = now_ms_;
  static const Json kEmpty = Json::object();
  const Json& state = entity.exists && entity.state != nullptr && entity.state->is_object() ? *entity.state : kEmpty;
  handlers::JsOutcome out = js_->Call(name, state, request, ctx);
  using Kind = handlers::JsOutcome::Kind;
  switch (out.kind) {
    case Kind::kApplied: {
      CommandOutcome o = Apply(std::move(out.state));
      o.response = std::move(out.response);
      return o;
    }
    case Kind::kRejected: return Reject(422, "rejected", std::move(out.message));
    case Kind::kTimeout:
      LogRateLimited(LogLevel::kWarn, "writer.handler_timeout", "writer: " + out.message);
      return Reject(500, "handler_timeout", std::move(out.message));
    case Kind::kOutOfMemory:
      LogRateLimited(LogLevel::kWarn, "writer.handler_memory", "writer: " + out.message);
      return Reject(500, "handler_out_of_memory", std::move(out.message));
    case Kind::kInvalidResult: return Reject(500, "handler_invalid_result", std::move(out.message));
  }
  return Reject(500, "internal", "unknown handler outcome");
}

}  // namespace sluice::writer
