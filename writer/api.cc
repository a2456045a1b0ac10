#include "writer/api.h"

#include <charconv>
#include <optional>
#include <utility>

#include "core/percent_decode.h"

namespace sluice::writer {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  for (;;) {
    const size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) return out;
    pos = next + 1;
  }
}

Result<uint64_t> ParseUint(std::string_view s) {
  uint64_t v = 0;
  if (s.empty()) return InvalidArgument("empty number");
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return InvalidArgument("not a non-negative integer");
  return v;
}

}  // namespace

Result<std::string> PercentDecode(std::string_view s) {
  std::optional<std::string> out = sluice::PercentDecode(s);
  if (!out) return InvalidArgument("bad percent-encoding in the request path");
  return std::move(*out);
}

Result<Route> ParseRoute(std::string_view method, std::string_view target) {
  Route route;
  std::string_view path = target;
  if (const size_t q = target.find('?'); q != std::string_view::npos) {
    path = target.substr(0, q);
    for (std::string_view kv : Split(target.substr(q + 1), '&')) {
      if (kv.empty()) continue;
      const size_t eq = kv.find('=');
      ASSIGN_OR_RETURN(std::string k, PercentDecode(kv.substr(0, eq)));
      std::string v;
      if (eq != std::string_view::npos) {
        ASSIGN_OR_RETURN(v, PercentDecode(kv.substr(eq + 1)));
      }
      route.query.emplace_back(std::move(k), std::move(v));
    }
  }
  if (path == "/healthz") {
    if (method != "GET") return NotFound("use GET /healthz");
    route.kind = Route::Kind::kHealth;
    return route;
  }
  if (path == "/readyz") {
    if (method != "GET") return NotFound("use GET /readyz");
    route.kind = Route::Kind::kReady;
    return route;
  }
  auto parts = Split(path, '/');
  // "", "v1", "entities", type, id, ...
  if (parts.size() < 5 || !parts[0].empty() || parts[1] != "v1" || parts[2] != "entities") {
    return NotFound("no such path: " + std::string(path));
  }
  ASSIGN_OR_RETURN(route.type, PercentDecode(parts[3]));
  ASSIGN_OR_RETURN(route.entity_id, PercentDecode(parts[4]));
  if (parts.size() == 5 && method == "GET") {
    route.kind = Route::Kind::kGetEntity;
    return route;
  }
  if (parts.size() == 6 && parts[5] == "events" && method == "GET") {
    route.kind = Route::Kind::kGetEvents;
    return route;
  }
  if (parts.size() == 7 && parts[5] == "commands" && method == "POST") {
    route.kind = Route::Kind::kCommand;
    ASSIGN_OR_RETURN(route.command, PercentDecode(parts[6]));
    return route;
  }
  return NotFound("no such path for " + std::string(method) + ": " + std::string(path));
}

std::string_view AllowedMethod(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/healthz" || path == "/readyz") return "GET";
  const auto parts = Split(path, '/');
  // "", "v1", "entities", type, id, ...
  if (parts.size() < 5 || !parts[0].empty() || parts[1] != "v1" || parts[2] != "entities") return "";
  if (parts.size() == 5) return "GET";
  if (parts.size() == 6 && parts[5] == "events") return "GET";
  if (parts.size() == 7 && parts[5] == "commands") return "POST";
  return "";
}

Result<uint64_t> ParseIfMatch(std::string_view h) {
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  while (!h.empty() && h.back() == ' ') h.remove_suffix(1);
  if (h.substr(0, 2) == "W/") h.remove_prefix(2);
  if (h.size() >= 2 && h.front() == '"' && h.back() == '"') h = h.substr(1, h.size() - 2);
  auto v = ParseUint(h);
  if (!v.ok()) return InvalidArgument("If-Match must be an entity version such as \"5\"");
  return v;
}

Result<uint64_t> QueryUint(const Route& route, std::string_view name, uint64_t fallback) {
  for (const auto& [k, v] : route.query) {
    if (k != name) continue;
    auto parsed = ParseUint(v);
    if (!parsed.ok()) return InvalidArgument("query parameter " + std::string(name) + " must be a non-negative integer");
    return parsed;
  }
  return fallback;
}

}  // namespace sluice::writer
