// Percent-decoding (RFC 3986 "%XX"), the one implementation: the writer's
// request paths and the redis sink's URL user info both use it.
// A pure function, safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace sluice {

// `s` with every "%XX" (two hex digits, either case) replaced by its byte;
// other characters, '+' included, stay as they are. nullopt when a '%' is not
// followed by two hex digits.
std::optional<std::string> PercentDecode(std::string_view s);

}  // namespace sluice
