// The checks a command request passes before it can reach MySQL, as pure
// functions: what the HTTP layer checks before it queues a command
// (DESIGN 3.3 step 1) and the If-Match check the partition worker makes
// against the entity's version. WriterService, PartitionWorker and the fuzz
// target fuzz/fuzz_command_request.cc all call these, so the fuzzer runs the
// writer's own code. Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/json.h"
#include "handlers/handler_files.h"
#include "writer/reply.h"

namespace sluice::writer {

// A command request as the HTTP layer accepted it.
struct CommandRequest {
  std::string command_id;                    // the Idempotency-Key; empty when the request had none
  std::optional<uint64_t> expected_version;  // If-Match
  Json request;                              // the body; {} when it was blank
  std::string request_text;                  // CanonicalJson(request), as stored
};

// 400 invalid_entity_id unless `id` is a valid entity id (core/names.h).
std::optional<Reply> CheckEntityId(std::string_view id);

// Checks the rest of a routed POST /v1/entities/{type}/{id}/commands/{name}
// whose type is configured and whose id passed CheckEntityId, in the order
// the writer answers: the command (404 unknown_command unless it is built in
// or one of `script`'s), Idempotency-Key (400 invalid_idempotency_key),
// If-Match (400 invalid_if_match), then the body (400 malformed_json; a
// blank body is {}, anything else goes through ParseJson with
// max_json_depth). `type` is for messages; `script` is the type's handler
// file, or null when it has none. Headers are nullopt when absent.
std::variant<CommandRequest, Reply> ValidateCommandRequest(std::string_view type, const std::string& command,
                                                           const handlers::HandlerScript* script,
                                                           std::optional<std::string_view> idempotency_key,
                                                           std::optional<std::string_view> if_match,
                                                           std::string_view body, uint32_t max_json_depth);

// 409 version_mismatch, with error.current_version, when the request's
// If-Match (`expected`) names another version than the entity's `current`.
std::optional<Reply> CheckExpectedVersion(std::optional<uint64_t> expected, uint64_t current);

}  // namespace sluice::writer
