// Fuzz target: one HTTP request through everything the writer does with it
// before MySQL (writer/README.md), with the writer's own functions:
// route parsing and percent-decoding (writer/api.h), the entity type and id,
// the command name, Idempotency-Key, If-Match and body checks
// (writer/command_request.h), the query parameters of a history read, the
// If-Match check against the entity's version, the command itself
// (writer/commands.h CommandRunner: the built-in commands and the JavaScript
// commands of config/examples/handlers/account.js) against a fuzzed prior
// state, and the reply and error bodies (writer/reply.h). The entity types
// are those of config/examples/quickstart.yaml: `account` with handlers,
// `order` with the built-in commands only.
//
// Properties checked on every input: nothing crashes, leaks or trips a
// sanitizer; every reply body is a JSON object of the documented shape; the
// request, state and response texts that would be stored parse back (within
// kMaxJsonDepthCap, as every later read parses them) to the same value.
//
// The input is text so that seeds can be written by hand (fuzz/README.md):
//
//   POST /v1/entities/account/alice/commands/patch     <- METHOD SP TARGET
//   Idempotency-Key: alice-1                            <- header lines
//   If-Match: "1"
//   Prior-Version: 1                  the entity's version before the command (0)
//   Prior-State: {"balance":100}      its state; without it the entity does not exist
//   Max-Json-Depth: 100               writer.max_json_depth (clamped to 1..1000)
//                                                        <- an empty line
//   {"balance":150}                                      <- the body, to the end
//
// Header names are matched ignoring case, the first of each wins, and the
// value is trimmed of spaces and tabs, as http::Request::Header gives them.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"
#include "core/json.h"
#include "core/partitioner.h"
#include "fuzz/check.h"
#include "handlers/handler_files.h"
#include "writer/api.h"
#include "writer/command_request.h"
#include "writer/commands.h"
#include "writer/reply.h"

namespace sluice::fuzz {
namespace {

struct FuzzRequest {
  std::string_view method;
  std::string_view target;
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  std::string_view body;

  std::optional<std::string_view> Header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k.size() == name.size() &&
          std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          })) {
        return v;
      }
    }
    return std::nullopt;
  }
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

FuzzRequest Split(std::string_view in) {
  FuzzRequest r;
  auto line = [&in]() {
    const size_t nl = in.find('\n');
    std::string_view l = in.substr(0, nl);
    in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    return l;
  };
  const std::string_view first = line();
  const size_t sp = first.find(' ');
  r.method = first.substr(0, sp);
  if (sp != std::string_view::npos) r.target = first.substr(sp + 1);
  while (!in.empty()) {
    const std::string_view l = line();
    if (l.empty()) break;
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos) continue;
    r.headers.emplace_back(l.substr(0, colon), Trim(l.substr(colon + 1)));
  }
  r.body = in;
  return r;
}

uint64_t Uint(std::optional<std::string_view> s, uint64_t fallback) {
  if (!s) return fallback;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  return ec == std::errc() && ptr == s->data() + s->size() ? v : fallback;
}

// What the writer is configured with: the quick-start example's entity
// types and handler file, loaded the way `sluice serve` loads them.
struct Writer {
  config::Config config;
  std::map<std::string, std::shared_ptr<const handlers::HandlerScript>> scripts;
  std::map<std::string, writer::CommandRunner> runners;  // one per type, as each partition worker has one
};

Writer& TheWriter() {
  static Writer* w = [] {
    setenv("SLUICE_MYSQL_PASSWORD", "fuzz", 0);
    auto* out = new Writer;
    auto config =
        config::LoadConfig(SLUICE_SOURCE_DIR "/config/examples/quickstart.yaml", connectors::BuiltinSinkTypes());
    SLUICE_FUZZ_CHECK(config.ok(), config.status().message());
    out->config = std::move(config).value();
    auto scripts = handlers::LoadHandlerScripts(out->config);
    SLUICE_FUZZ_CHECK(scripts.ok(), scripts.status().message());
    out->scripts = std::move(scripts).value();
    SLUICE_FUZZ_CHECK(out->scripts.count("account") == 1, "account has no handlers in quickstart.yaml");
    for (const auto& [name, entity] : out->config.entities) {
      auto it = out->scripts.find(name);
      out->runners.try_emplace(name, it == out->scripts.end() ? nullptr : it->second);
    }
    return out;
  }();
  return *w;
}

// Every error the API sends: {"error":{"code":"...","message":"..."}} with a
// 4xx or 5xx status, valid JSON whatever the request held.
void CheckErrorReply(const writer::Reply& r) {
  SLUICE_FUZZ_CHECK(r.status >= 400 && r.status <= 599, "status " + std::to_string(r.status) + ": " + r.body);
  auto body = ParseJson(r.body);
  SLUICE_FUZZ_CHECK(body.ok(), "error body is not JSON: " + r.body);
  SLUICE_FUZZ_CHECK(body->is_object() && body->size() == 1 && body->contains("error"), r.body);
  const Json& e = (*body)["error"];
  SLUICE_FUZZ_CHECK(e.is_object() && e.contains("code") && e["code"].is_string() && e.contains("message") &&
                        e["message"].is_string(),
                    r.body);
}

// Text the writer stores: every later read parses it with ParseJson and the
// default cap, and must get the same value back.
void CheckStoredJson(const std::string& text, const Json& value, const char* what) {
  auto back = ParseJson(text);
  SLUICE_FUZZ_CHECK(back.ok(), std::string(what) + " does not parse back: " + back.status().message());
  SLUICE_FUZZ_CHECK(*back == value, std::string(what) + " changed through its text: " + text);
  SLUICE_FUZZ_CHECK(CanonicalJson(*back) == text, std::string(what) + " is not canonical: " + text);
}

void RunCommand(const FuzzRequest& req, writer::Route& route) {
  Writer& w = TheWriter();
  auto type = w.config.entities.find(route.type);
  if (type == w.config.entities.end()) {
    return CheckErrorReply(
        writer::ErrorReply(404, "unknown_entity_type", "no entity type '" + route.type + "' is configured"));
  }
  if (auto invalid = writer::CheckEntityId(route.entity_id)) return CheckErrorReply(*invalid);
  auto script = w.scripts.find(route.type);
  uint32_t max_depth = w.config.writer.max_json_depth;
  if (auto d = req.Header("Max-Json-Depth")) {
    max_depth = static_cast<uint32_t>(std::clamp<uint64_t>(Uint(d, max_depth), 1, kMaxJsonDepthCap));
  }
  auto checked = writer::ValidateCommandRequest(route.type, route.command,
                                                script == w.scripts.end() ? nullptr : script->second.get(),
                                                req.Header("Idempotency-Key"), req.Header("If-Match"), req.body,
                                                max_depth);
  if (const auto* refused = std::get_if<writer::Reply>(&checked)) return CheckErrorReply(*refused);
  const writer::CommandRequest& cmd = std::get<writer::CommandRequest>(checked);
  SLUICE_FUZZ_CHECK(JsonDepth(cmd.request) <= max_depth, cmd.request_text);
  CheckStoredJson(cmd.request_text, cmd.request, "the request");
  const uint32_t partition = PartitionOf(route.entity_id, type->second.partitions);
  SLUICE_FUZZ_CHECK(partition < type->second.partitions, route.entity_id);

  // The entity as the partition worker would have it cached: states come
  // from storage, so they parse within the cap; anything else is not a
  // state the writer can hold.
  Json prior_state;
  writer::EntityView entity;
  entity.version = Uint(req.Header("Prior-Version"), 0);
  if (auto text = req.Header("Prior-State")) {
    auto parsed = ParseJson(*text);
    if (!parsed.ok()) return;
    prior_state = std::move(parsed).value();
    entity.exists = true;
    entity.state = &prior_state;
    entity.version = std::max<uint64_t>(entity.version, 1);
  }
  if (entity.version == UINT64_MAX) return;  // the next version would not fit

  if (auto mismatch = writer::CheckExpectedVersion(cmd.expected_version, entity.version)) {
    return CheckErrorReply(*mismatch);
  }
  writer::CommandRunner& runner = w.runners.at(route.type);
  runner.BeginBatch();
  const std::string command_id = cmd.command_id.empty() ? "gen-fuzz" : cmd.command_id;
  writer::CommandOutcome out = runner.Run(route.command, entity, cmd.request, command_id);
  if (!out.applied) {
    return CheckErrorReply(writer::ErrorReply(out.http_status, out.error_code, out.message));
  }
  const std::string response_text = CanonicalJson(out.response);
  CheckStoredJson(response_text, out.response, "the response");
  if (out.deleted) {
    SLUICE_FUZZ_CHECK(out.new_state.is_null(), "a delete left a state");
  } else {
    CheckStoredJson(CanonicalJson(out.new_state), out.new_state, "the new state");
  }
  const std::string body = writer::CommandReplyBody(route.type, route.entity_id, entity.version + 1,
                                                    entity.version + 7, partition, response_text);
  auto reply = ParseJson(body);
  SLUICE_FUZZ_CHECK(reply.ok() && reply->is_object() && (*reply)["id"] == route.entity_id &&
                        (*reply)["response"] == out.response,
                    body);
}

// A read up to the query MySQL would get (WriterService::HandleGetEntity and
// HandleGetEvents).
void RunRead(writer::Route& route) {
  const Writer& w = TheWriter();
  if (!w.config.entities.count(route.type)) {
    return CheckErrorReply(
        writer::ErrorReply(404, "unknown_entity_type", "no entity type '" + route.type + "' is configured"));
  }
  if (auto invalid = writer::CheckEntityId(route.entity_id)) return CheckErrorReply(*invalid);
  if (route.kind != writer::Route::Kind::kGetEvents) return;
  auto after = writer::QueryUint(route, "after_version", 0);
  if (!after.ok()) return CheckErrorReply(writer::ErrorReply(400, "invalid_request", after.status().message()));
  auto limit = writer::QueryUint(route, "limit", 100);
  if (!limit.ok()) return CheckErrorReply(writer::ErrorReply(400, "invalid_request", limit.status().message()));
}

}  // namespace
}  // namespace sluice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const fuzz::FuzzRequest req = fuzz::Split(std::string_view(reinterpret_cast<const char*>(data), size));
  auto route = writer::ParseRoute(req.method, req.target);
  if (!route.ok()) {
    // WriterService::Handle: 405 with Allow for another method on a known
    // path, 404 for an unknown one, 400 for bad percent-encoding.
    const bool not_found = route.status().code() == StatusCode::kNotFound;
    const std::string_view allow = writer::AllowedMethod(req.target);
    SLUICE_FUZZ_CHECK(allow.empty() || allow == "GET" || allow == "POST", std::string(allow));
    if (not_found && !allow.empty()) {
      SLUICE_FUZZ_CHECK(allow != req.method, "a path's own method was refused: " + std::string(req.target));
      fuzz::CheckErrorReply(writer::ErrorReply(405, "method_not_allowed", "use " + std::string(allow)));
    } else {
      fuzz::CheckErrorReply(writer::ErrorReply(not_found ? 404 : 400, not_found ? "not_found" : "invalid_request",
                                               route.status().message()));
    }
    return 0;
  }
  switch (route->kind) {
    case writer::Route::Kind::kCommand: fuzz::RunCommand(req, *route); break;
    case writer::Route::Kind::kGetEntity:
    case writer::Route::Kind::kGetEvents: fuzz::RunRead(*route); break;
    case writer::Route::Kind::kHealth:
    case writer::Route::Kind::kReady: break;
  }
  return 0;
}
