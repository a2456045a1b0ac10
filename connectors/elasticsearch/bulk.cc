#include "connectors/elasticsearch/bulk.h"

#include "core/json.h"

namespace sluice::connectors::elasticsearch {
namespace {

constexpr size_t kMaxErrorText = 500;

std::string Truncated(std::string s) {
  if (s.size() > kMaxErrorText) {
    s.resize(kMaxErrorText);
    s += "...";
  }
  return s;
}

std::string ErrorOf(const Json& error) {
  if (error.is_string()) return error.get<std::string>();
  if (!error.is_object()) return error.dump();
  std::string type = error.value("type", "");
  std::string reason = error.value("reason", "");
  if (type.empty()) return reason.empty() ? error.dump() : reason;
  return reason.empty() ? type : type + ": " + reason;
}

}  // namespace

std::string AppendBulkItem(const ChangeEvent& event, std::string& body, std::string_view version_type) {
  std::string_view source = kTombstoneSource;
  std::string reformatted;
  if (!event.deleted) {
    const std::string_view state = event.state;
    const size_t first = state.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || state[first] != '{') {
      return "the entity state is not a JSON object; an Elasticsearch document must be one";
    }
    // A cheap test first: the field can only be present if its name is.
    const bool may_hold_marker = state.find(kTombstoneField) != std::string_view::npos;
    // NDJSON needs the source on one line; stored states are compact, so
    // this is rare.
    if (may_hold_marker || state.find_first_of("\r\n") != std::string_view::npos) {
      Json parsed = ParseJsonOrDiscarded(state);
      if (parsed.is_discarded() || !parsed.is_object()) return "the entity state is not valid JSON";
      if (parsed.contains(kTombstoneField)) {
        return "the entity state has the member \"" + std::string(kTombstoneField) +
               "\", which the elasticsearch sink reserves for tombstones";
      }
      reformatted = parsed.dump();
      source = reformatted;
    } else {
      source = state;
    }
  }
  body += R"({"index":{"_id":)";
  AppendJsonString(body, event.entity_id);
  body += R"(,"version":)";
  body += std::to_string(event.version);
  body += R"(,"version_type":")";
  body += version_type;
  body += R"("}})";
  body += '\n';
  body += source;
  body += '\n';
  return {};
}

Result<std::vector<BulkItem>> ParseBulkResponse(std::string_view body, size_t expected) {
  const Json doc = ParseJsonOrDiscarded(body);
  if (doc.is_discarded() || !doc.is_object()) {
    return Internal("the _bulk response is not a JSON object: " + Truncated(std::string(body.substr(0, 200))));
  }
  std::vector<BulkItem> items;
  items.reserve(expected);
  const auto it = doc.find("items");
  if (it == doc.end()) {
    // filter_path drops "items" when nothing matched; only an empty request has none.
    if (expected == 0) return items;
    return Internal("the _bulk response has no items");
  }
  if (!it->is_array() || it->size() != expected) {
    return Internal("the _bulk response has " + std::to_string(it->is_array() ? it->size() : 0) +
                    " items for " + std::to_string(expected) + " actions");
  }
  for (const Json& wrapper : *it) {
    if (!wrapper.is_object() || wrapper.size() != 1) return Internal("a _bulk response item is malformed");
    const Json& result = wrapper.begin().value();
    BulkItem item;
    const auto status = result.find("status");
    if (status == result.end() || !status->is_number_integer()) {
      return Internal("a _bulk response item has no status");
    }
    item.status = status->get<int>();
    if (const auto error = result.find("error"); error != result.end()) {
      item.error = Truncated(ErrorOf(*error));
      if (error->is_object()) item.error_type = error->value("type", "");
    }
    items.push_back(std::move(item));
  }
  return items;
}

ItemClass ClassifyItem(const BulkItem& item) {
  if (item.status >= 200 && item.status < 300) return ItemClass::kApplied;
  if (item.status == 409) return ItemClass::kStale;
  if (item.status == 429 || item.status >= 500) return ItemClass::kUnavailable;
  // A read-only index (disk flood stage, a closed index) clears when the
  // operator acts; the events are fine.
  if (item.error_type == "cluster_block_exception") return ItemClass::kUnavailable;
  if (item.error_type == "index_not_found_exception") return ItemClass::kMisconfigured;
  return ItemClass::kRejected;
}

std::string ErrorText(std::string_view body) {
  const Json doc = ParseJsonOrDiscarded(body);
  if (!doc.is_discarded() && doc.is_object()) {
    if (const auto error = doc.find("error"); error != doc.end()) return Truncated(ErrorOf(*error));
  }
  return Truncated(std::string(body.substr(0, kMaxErrorText)));
}

}  // namespace sluice::connectors::elasticsearch
