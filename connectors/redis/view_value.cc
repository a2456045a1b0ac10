#include "connectors/redis/view_value.h"

#include <charconv>

#include "connectors/sink.h"
#include "core/json.h"

namespace sluice::connectors::redis {
namespace {

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

bool AppendVersionedJson(std::string& out, std::string_view state, uint64_t version) {
  size_t begin = 0;
  size_t end = state.size();
  while (begin < end && IsJsonSpace(state[begin])) ++begin;
  while (end > begin && IsJsonSpace(state[end - 1])) --end;
  if (end - begin < 2 || state[begin] != '{' || state[end - 1] != '}') return false;
  ++begin;  // past '{'
  while (begin < end && IsJsonSpace(state[begin])) ++begin;

  out += "{\"_version\":";
  char digits[24];
  auto [p, ec] = std::to_chars(digits, digits + sizeof digits, version);
  (void)ec;  // 24 chars always hold a uint64_t
  out.append(digits, p);
  // `begin` now sits on the first member or on the closing brace of `{}`.
  if (state[begin] != '}') out += ',';
  out.append(state.data() + begin, end - begin);
  return true;
}

bool HasVersionMember(std::string_view state) {
  if (state.find("\"_version\"") == std::string_view::npos) return false;
  Json parsed = ParseJsonOrDiscarded(state);
  return parsed.is_object() && parsed.contains(kVersionMember);
}

bool HashFieldsOf(const Json& state, const std::vector<config::FieldMapping>& mapping, HashFields& out,
                  std::string& reason) {
  out.clear();
  if (!state.is_object()) {
    reason = "the state is not a JSON object";
    return false;
  }
  if (!mapping.empty()) {
    for (const auto& f : mapping) {
      if (auto text = FieldText(state, f.pointer)) out.emplace_back(f.name, std::move(*text));
    }
    return true;
  }
  if (state.contains(kVersionMember)) {
    reason = "the state has a top-level member \"_version\", which the redis hash format reserves";
    return false;
  }
  for (const auto& [name, value] : state.items()) {
    if (value.is_null()) continue;
    out.emplace_back(name, value.is_string() ? value.get<std::string>() : CanonicalJson(value));
  }
  return true;
}

}  // namespace sluice::connectors::redis
