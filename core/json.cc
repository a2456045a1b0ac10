#include "core/json.h"

namespace sluice {

Result<Json> ParseJson(std::string_view text) {
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    // Parse again with exceptions only on the error path, for the position.
    try {
      Json ignored = Json::parse(text.begin(), text.end());
      (void)ignored;
    } catch (const Json::parse_error& e) {
      std::string m = e.what();
      // nlohmann prefixes "[json.exception.parse_error.101] "; keep the rest.
      if (auto p = m.find("] "); p != std::string::npos) m = m.substr(p + 2);
      return InvalidArgument("malformed JSON: " + m);
    }
    return InvalidArgument("malformed JSON");
  }
  return value;
}

std::string CanonicalJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void ApplyMergePatch(Json& target, const Json& patch) { target.merge_patch(patch); }

void AppendJsonString(std::string& out, std::string_view s) {
  out += Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace sluice
