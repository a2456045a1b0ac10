// Parsing of the writer's HTTP API requests into routes, with the errors the
// API promises (DESIGN 3.4). Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sluice::writer {

// Several writers: a command forwarded to the writer that owns its
// partition carries Sluice-Forwarded-By (the forwarding writer's name) and
// is never forwarded again; every command reply names, in Sluice-Writer,
// the writer that handled it.
inline constexpr const char* kForwardedByHeader = "Sluice-Forwarded-By";
inline constexpr const char* kWriterHeader = "Sluice-Writer";

struct Route {
  enum class Kind { kCommand, kGetEntity, kGetEvents, kHealth, kReady };
  Kind kind = Kind::kHealth;
  std::string type;
  std::string entity_id;
  std::string command;  // kCommand
  std::vector<std::pair<std::string, std::string>> query;  // decoded query parameters
};

// Splits and percent-decodes the request target. NotFound for paths the API
// does not have and for another method on a path it has (AllowedMethod tells
// the two apart), InvalidArgument for bad percent-encoding. Does not check
// that the type or command exist.
Result<Route> ParseRoute(std::string_view method, std::string_view target);

// The method the API takes on the target's path ("GET" or "POST"; what a 405
// reply's Allow header lists), or empty when the API has no such path.
std::string_view AllowedMethod(std::string_view target);

// Decodes %XX sequences; InvalidArgument on a bad sequence. '+' stays '+'.
Result<std::string> PercentDecode(std::string_view s);

// If-Match: a version number, bare or as an ETag ("5" or W/"5").
Result<uint64_t> ParseIfMatch(std::string_view header);

// A non-negative integer query parameter; `fallback` when absent.
Result<uint64_t> QueryUint(const Route& route, std::string_view name, uint64_t fallback);

}  // namespace sluice::writer
