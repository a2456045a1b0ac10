// State deltas (DESIGN 11, issue 23): what changed between two states of an
// entity, as a JSON array of operations, so that an event can store the
// change instead of the whole state. docs/delta.md is the grammar and its
// test vectors; this file is its one implementation.
//
//   [["s", ["a","b"], 1], ["r", ["c"]], ["a", ["items"], [4, 5]]]
//
//   "s" path value   the member at path becomes value (any JSON, null too)
//   "r" path         the member at path is removed
//   "a" path array   the array at path gets these elements at its end
//
// A path lists member names from the top (never array indexes: an array
// that changed other than by growing at its end is set whole). Applying
// Diff(old, new) to old gives back exactly new: the same types (1 is not
// 1.0, -0.0 is not 0.0), the same members, nulls kept. RFC 7386 merge patch
// cannot do that (a null in a patch removes the member).
//
// Pure functions; safe from any thread.
#pragma once

#include <optional>
#include <string>

#include "core/json.h"
#include "core/status.h"

namespace sluice {

// Whether a and b are the same JSON value, as their texts would say:
// unlike Json's ==, an integer never equals a float (1 is not 1.0), and
// -0.0 is not 0.0; signed and unsigned integers compare by value.
bool SameJson(const Json& a, const Json& b);

// The delta from `before` to `after`, both objects; nullopt when either is
// not an object (such a change is stored as a full state). An empty array
// when they are the same.
std::optional<Json> JsonDelta(const Json& before, const Json& after);

// A delta that makes of `before` what the RFC 7386 merge `patch` makes of
// it (not always JsonDelta's operations: a grown array is set whole), found
// from the patch alone, so that its cost follows the patch, not the state;
// nullopt when either is not an object. Members the patch sets to what they
// are already make no operation.
std::optional<Json> MergePatchDelta(const Json& before, const Json& patch);

// `before` with `delta` applied; InvalidArgument saying which operation is
// wrong when the delta does not follow the grammar or does not fit
// `before` (a path through a missing member or a non-object, "r" of a
// missing member, "a" to a non-array).
Result<Json> ApplyJsonDelta(const Json& before, const Json& delta);

}  // namespace sluice
