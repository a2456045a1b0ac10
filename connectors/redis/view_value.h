// What the redis sink stores for an entity state, in its two formats:
//   json  a string holding the state with the version spliced in as the FIRST
//         member, {"_version":N,...}, so that the version check script reads
//         it with one anchored string.match and no JSON decoding;
//   hash  a hash with a `_version` field plus one field per mapped value.
// Apply (writing) and Verify (comparing) share these so they cannot drift.
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/json.h"

namespace sluice::connectors::redis {

// The member / field that holds the entity version; reserved in states.
inline constexpr std::string_view kVersionMember = "_version";

// Appends `{"_version":N,` + the members of `state` + `}` to out (just
// `{"_version":N}` for an empty object) without parsing the state: only its
// outer braces are checked. False, with out unchanged, when the text is not
// braced like a JSON object.
bool AppendVersionedJson(std::string& out, std::string_view state, uint64_t version);

// True when the state's top level already has a `_version` member. Cheap for
// the usual state: parses only when the text contains "_version" at all.
bool HasVersionMember(std::string_view state);

using HashFields = std::vector<std::pair<std::string, std::string>>;

// The hash fields (without _version) for a parsed state. With `mapping`, one
// field per mapping whose pointer yields a non-null value (connectors::FieldText);
// with an empty mapping, every non-null top-level member, strings raw and
// other values as compact JSON. False with `reason` set when the state is not
// an object or (all-members mode) has its own `_version` member.
bool HashFieldsOf(const Json& state, const std::vector<config::FieldMapping>& mapping, HashFields& out,
                  std::string& reason);

}  // namespace sluice::connectors::redis
