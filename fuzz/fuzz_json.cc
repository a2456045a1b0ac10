// Fuzz target: core/json.h, which every byte sluice did not produce itself
// goes through. The input is one or two JSON texts separated by a NUL byte:
// a target and an RFC 7386 merge patch.
//
// Properties checked on every input:
//   - ParseJson never throws or crashes, whatever the bytes, and honours
//     max_depth: a value it returns is never deeper, and JsonDepth agrees;
//   - CanonicalJson is a fixed point: its text parses back to an equal value
//     whose canonical text is the same bytes;
//   - ApplyMergePatch of a parsed patch onto a parsed target gives a value no
//     deeper than the deeper of the two, whose canonical text parses back
//     (the writer stores exactly that for `patch`); patching the result again
//     with the same patch changes nothing (RFC 7386 is idempotent).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/json.h"
#include "fuzz/check.h"

namespace sluice::fuzz {
namespace {

// The parsed value of `text` under `max_depth`, checked; discarded on error.
Json ParseChecked(std::string_view text, uint32_t max_depth) {
  auto v = ParseJson(text, max_depth);
  if (!v.ok()) {
    SLUICE_FUZZ_CHECK(!v.status().message().empty(), "an error without a message");
    return Json(Json::value_t::discarded);
  }
  SLUICE_FUZZ_CHECK(JsonDepth(*v) <= max_depth,
                    "depth " + std::to_string(JsonDepth(*v)) + " > " + std::to_string(max_depth));
  const std::string canonical = CanonicalJson(*v);
  auto back = ParseJson(canonical, kMaxJsonDepthCap);
  SLUICE_FUZZ_CHECK(back.ok(), "canonical text does not parse: " + back.status().message());
  SLUICE_FUZZ_CHECK(*back == *v, "canonical text changed the value: " + canonical);
  SLUICE_FUZZ_CHECK(CanonicalJson(*back) == canonical, "canonical text is not a fixed point: " + canonical);
  return std::move(v).value();
}

}  // namespace
}  // namespace sluice::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view first = in.substr(0, nul);
  // The writer parses bodies at writer.max_json_depth (default 100), stored
  // values at the cap; a small limit exercises the refusal path too.
  const uint32_t small_depth = 1 + static_cast<uint32_t>(size % 7);
  (void)fuzz::ParseChecked(first, small_depth);
  Json target = fuzz::ParseChecked(first, kMaxJsonDepthCap);
  if (nul == std::string_view::npos || target.is_discarded()) return 0;
  const Json patch = fuzz::ParseChecked(in.substr(nul + 1), kDefaultMaxJsonDepth);
  if (patch.is_discarded()) return 0;

  const uint32_t bound = std::max(JsonDepth(target), JsonDepth(patch));
  ApplyMergePatch(target, patch);
  SLUICE_FUZZ_CHECK(JsonDepth(target) <= bound, "a merge patch went deeper than its inputs");
  const std::string once = CanonicalJson(target);
  auto stored = ParseJson(once);
  SLUICE_FUZZ_CHECK(stored.ok() && *stored == target, "a patched value does not parse back: " + once);
  ApplyMergePatch(target, patch);
  SLUICE_FUZZ_CHECK(CanonicalJson(target) == once, "a merge patch is not idempotent: " + once);
  return 0;
}
