// JSON helpers over nlohmann::json: parsing into a Result, the canonical
// text form used for storage and comparison, and JSON merge patch (RFC 7386).
// Pure functions, safe from any thread.
//
// Every parse of bytes sluice did not produce itself (request bodies, values
// read back from MySQL, Redis, OpenSearch, Kafka, plugin replies) goes through
// ParseJson: it never throws, refuses numbers outside a double's range and
// bounds the nesting depth, so that the recursive walks over a parsed value
// (dump, comparison, merge patch, handing it to JavaScript) stay within a
// thread's stack.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace sluice {

using Json = nlohmann::json;

// The deepest nesting any parse accepts: arrays and objects inside each other
// (a scalar at the top is depth 0, `[1]` is depth 1). Values sluice reads
// back from its own storage and from sinks are parsed against this; request
// bodies against the smaller writer.max_json_depth.
inline constexpr uint32_t kMaxJsonDepthCap = 1000;
// writer.max_json_depth when the config does not set it (MongoDB's BSON
// documents stop at 100 levels too).
inline constexpr uint32_t kDefaultMaxJsonDepth = 100;

// Parses text as one JSON value. InvalidArgument, with the byte position, on
// malformed text, invalid UTF-8, a number a double cannot hold (1e400), or
// nesting deeper than max_depth (at most kMaxJsonDepthCap). Never throws.
Result<Json> ParseJson(std::string_view text, uint32_t max_depth = kMaxJsonDepthCap);

// ParseJson for callers that treat every failure alike: the value, or a
// discarded value (is_discarded()) on any error.
Json ParseJsonOrDiscarded(std::string_view text);

// The nesting depth of a value (0 for a scalar); iterative, safe at any depth.
uint32_t JsonDepth(const Json& value);

// Compact text with object keys sorted (nlohmann keeps objects sorted), so
// equal values always have equal text. Invalid UTF-8 cannot occur in values
// built by ParseJson; elsewhere it is replaced by U+FFFD, never thrown.
std::string CanonicalJson(const Json& value);

// RFC 7386: applies patch to target in place.
void ApplyMergePatch(Json& target, const Json& patch);

// Appends s as a JSON string literal (with quotes) to out.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace sluice
