#include "core/json.h"

#include <algorithm>
#include <vector>

namespace sluice {
namespace {

// nlohmann's DOM builder behind a depth check: returning false from a SAX
// call ends the parse, so a deep input stops at max_depth + 1 without
// building anything deeper. Errors are kept instead of thrown.
class DepthLimitedSax {
 public:
  DepthLimitedSax(Json& result, uint32_t max_depth) : dom_(result, /*allow_exceptions=*/false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const std::string& s) { return dom_.number_float(v, s); }
  bool string(std::string& v) { return dom_.string(v); }
  bool binary(Json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) { return Enter() && dom_.start_object(n); }
  bool key(std::string& k) { return dom_.key(k); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return Enter() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& ex) {
    std::string m = ex.what();
    // nlohmann prefixes "[json.exception.parse_error.101] "; keep the rest.
    if (auto p = m.find("] "); p != std::string::npos) m = m.substr(p + 2);
    error_ = "malformed JSON: " + m;
    if (error_.find("at byte") == std::string::npos && error_.find("at line") == std::string::npos) {
      error_ += " (at byte " + std::to_string(position) + ")";
    }
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool Enter() {
    if (++depth_ > max_depth_) {
      error_ = "JSON nested deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  uint32_t max_depth_;
  uint32_t depth_ = 0;
  std::string error_;
};

}  // namespace

Result<Json> ParseJson(std::string_view text, uint32_t max_depth) {
  max_depth = std::min(max_depth, kMaxJsonDepthCap);
  Json value;
  DepthLimitedSax sax(value, max_depth);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, /*strict=*/true);
  } catch (const Json::exception& e) {
    // Not expected (errors go to parse_error), but a throw must never escape.
    return InvalidArgument(std::string("malformed JSON: ") + e.what());
  } catch (const std::bad_alloc&) {
    return InvalidArgument("malformed JSON: too large to parse");
  }
  if (!ok || !sax.error().empty()) {
    return InvalidArgument(sax.error().empty() ? std::string("malformed JSON") : sax.error());
  }
  return value;
}

Json ParseJsonOrDiscarded(std::string_view text) {
  Result<Json> parsed = ParseJson(text);
  if (!parsed.ok()) return Json(Json::value_t::discarded);
  return std::move(parsed).value();
}

uint32_t JsonDepth(const Json& value) {
  uint32_t deepest = 0;
  std::vector<std::pair<const Json*, uint32_t>> stack{{&value, 0}};
  while (!stack.empty()) {
    auto [v, depth] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, depth + 1);
    for (const Json& child : *v) stack.emplace_back(&child, depth + 1);
  }
  return deepest;
}

std::string CanonicalJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void ApplyMergePatch(Json& target, const Json& patch) { target.merge_patch(patch); }

void AppendJsonString(std::string& out, std::string_view s) {
  // ASCII (ids, names, timestamps: nearly every string sluice writes) is
  // escaped here; anything else goes through nlohmann's serializer, which
  // replaces invalid UTF-8, so both give CanonicalJson's text.
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      out += Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
      return;
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out += '"';
  size_t plain = 0;  // start of the run not yet appended
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xf];
    }
  }
  out.append(s.data() + plain, s.size() - plain);
  out += '"';
}

}  // namespace sluice
