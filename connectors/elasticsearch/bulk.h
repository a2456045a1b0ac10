// The _bulk request and response of the elasticsearch sink, as pure
// functions (unit-tested without a server).
//
// Each event becomes one "index" action with version_type=external and
// version = the entity version, so Elasticsearch/OpenSearch itself refuses
// (409) any write whose version is not greater than the document's. A
// delete indexes a tombstone document, {"_sluice_deleted": true}, at the
// delete's version instead of removing the document: a real delete's
// version is forgotten after index.gc_deletes (60 s) and on a restart of
// the node, after which a replayed older write would resurrect the entity.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "connectors/sink.h"
#include "core/status.h"

namespace sluice::connectors::elasticsearch {

// The field that marks a tombstone document; a live document never has it
// (the sink refuses a state that does).
inline constexpr std::string_view kTombstoneField = "_sluice_deleted";
inline constexpr std::string_view kTombstoneSource = R"({"_sluice_deleted":true})";

// Appends the action and source lines of `event` to an NDJSON body. Returns
// an empty string when it did, or the reason the event cannot be indexed
// (its state is not a JSON object, or uses the tombstone field); then
// nothing is appended. `version_type` is "external" (a greater version
// only) or, for a repair, "external_gte" (the same version too).
std::string AppendBulkItem(const ChangeEvent& event, std::string& body, std::string_view version_type = "external");

// What became of one bulk item.
struct BulkItem {
  int status = 0;         // the item's HTTP status
  std::string error;      // "type: reason" when the item failed
  std::string error_type; // the error's type alone
};

// Parses a _bulk response (any filter_path that keeps items.*.status and
// items.*.error) into `expected` items. kInternal when it is not one.
Result<std::vector<BulkItem>> ParseBulkResponse(std::string_view body, size_t expected);

// How the sink treats one item's status.
enum class ItemClass {
  kApplied,      // 2xx
  kStale,        // 409: the index holds this version or a newer one
  kRejected,     // another 4xx: this document is refused for good (mapping conflict...)
  kUnavailable,  // 429, 5xx, a blocked index: retry the batch later
  kMisconfigured // the index is missing: stop and tell the operator
};
ItemClass ClassifyItem(const BulkItem& item);

// The text of an error response of the REST API ({"error": {"type", "reason"}}),
// or the start of the body when it is not one.
std::string ErrorText(std::string_view body);

}  // namespace sluice::connectors::elasticsearch
