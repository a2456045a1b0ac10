// JSON helpers over nlohmann::json: parsing into a Result, the canonical
// text form used for storage and comparison, and JSON merge patch (RFC 7386).
// Pure functions, safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace sluice {

using Json = nlohmann::json;

// Parses text as one JSON value; InvalidArgument with the position on failure.
Result<Json> ParseJson(std::string_view text);

// Compact text with object keys sorted (nlohmann keeps objects sorted), so
// equal values always have equal text. Invalid UTF-8 cannot occur in values
// built by ParseJson.
std::string CanonicalJson(const Json& value);

// RFC 7386: applies patch to target in place.
void ApplyMergePatch(Json& target, const Json& patch);

// Appends s as a JSON string literal (with quotes) to out.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace sluice
