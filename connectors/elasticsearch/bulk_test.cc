#include "connectors/elasticsearch/bulk.h"

#include <gtest/gtest.h>

#include "connectors/elasticsearch/rest_client.h"

namespace sluice::connectors::elasticsearch {
namespace {

ChangeEvent Event(std::string id, uint64_t version, std::string state, bool deleted = false) {
  ChangeEvent e;
  e.entity_type = "account";
  e.entity_id = std::move(id);
  e.version = version;
  e.state = std::move(state);
  e.deleted = deleted;
  return e;
}

TEST(BulkBody, IndexesWithTheEntityVersionAsExternalVersion) {
  std::string body;
  EXPECT_EQ(AppendBulkItem(Event("a\"1", 7, R"({"x":1})"), body), "");
  EXPECT_EQ(body,
            "{\"index\":{\"_id\":\"a\\\"1\",\"version\":7,\"version_type\":\"external\"}}\n"
            "{\"x\":1}\n");
}

TEST(BulkBody, DeleteIndexesATombstoneAtTheDeleteVersion) {
  std::string body;
  EXPECT_EQ(AppendBulkItem(Event("a", 3, "", /*deleted=*/true), body), "");
  EXPECT_EQ(body,
            "{\"index\":{\"_id\":\"a\",\"version\":3,\"version_type\":\"external\"}}\n"
            "{\"_sluice_deleted\":true}\n");
}

TEST(BulkBody, MultiLineStateIsPutOnOneLine) {
  std::string body;
  EXPECT_EQ(AppendBulkItem(Event("a", 1, "{\n  \"x\": [1,\n 2]\n}"), body), "");
  EXPECT_EQ(body.substr(body.find('\n') + 1), "{\"x\":[1,2]}\n");
}

TEST(BulkBody, RefusesWhatCannotBeADocument) {
  std::string body;
  EXPECT_NE(AppendBulkItem(Event("a", 1, "[1,2]"), body), "");
  EXPECT_NE(AppendBulkItem(Event("a", 1, "42"), body), "");
  EXPECT_NE(AppendBulkItem(Event("a", 1, ""), body), "");
  EXPECT_NE(AppendBulkItem(Event("a", 1, R"({"_sluice_deleted":false})"), body), "");
  EXPECT_EQ(body, "") << "a refused event appends nothing";
  // The name inside a value is not the member.
  EXPECT_EQ(AppendBulkItem(Event("a", 1, R"({"note":"_sluice_deleted"})"), body), "");
}

TEST(BulkResponse, ParsesStatusesAndErrors) {
  auto items = ParseBulkResponse(
      R"({"items":[{"index":{"status":201}},{"index":{"status":409,"error":{"type":"version_conflict_engine_exception","reason":"[a]: version conflict"}}},)"
      R"({"index":{"status":400,"error":{"type":"mapper_parsing_exception","reason":"failed to parse field [x]"}}}]})",
      3);
  ASSERT_TRUE(items.ok()) << items.status().message();
  ASSERT_EQ(items->size(), 3u);
  EXPECT_EQ(ClassifyItem((*items)[0]), ItemClass::kApplied);
  EXPECT_EQ(ClassifyItem((*items)[1]), ItemClass::kStale);
  EXPECT_EQ(ClassifyItem((*items)[2]), ItemClass::kRejected);
  EXPECT_EQ((*items)[2].error, "mapper_parsing_exception: failed to parse field [x]");
}

TEST(BulkResponse, WrongItemCountIsAnError) {
  EXPECT_FALSE(ParseBulkResponse(R"({"items":[{"index":{"status":201}}]})", 2).ok());
  EXPECT_FALSE(ParseBulkResponse(R"({"errors":false})", 1).ok());
  EXPECT_FALSE(ParseBulkResponse("<html>", 1).ok());
  EXPECT_FALSE(ParseBulkResponse(R"({"items":[{"index":{}}]})", 1).ok());
}

TEST(BulkResponse, ClassifiesServerTroubleAsRetryable) {
  EXPECT_EQ(ClassifyItem({429, "es_rejected_execution_exception: queue full", "es_rejected_execution_exception"}),
            ItemClass::kUnavailable);
  EXPECT_EQ(ClassifyItem({503, "unavailable_shards_exception", "unavailable_shards_exception"}),
            ItemClass::kUnavailable);
  EXPECT_EQ(ClassifyItem({403, "cluster_block_exception: read-only", "cluster_block_exception"}),
            ItemClass::kUnavailable);
  EXPECT_EQ(ClassifyItem({404, "index_not_found_exception: no such index", "index_not_found_exception"}),
            ItemClass::kMisconfigured);
  EXPECT_EQ(ClassifyItem({200, "", ""}), ItemClass::kApplied);
}

TEST(ErrorText, ReadsTheErrorObjectOrTheBody) {
  EXPECT_EQ(ErrorText(R"({"error":{"type":"security_exception","reason":"missing authentication"},"status":401})"),
            "security_exception: missing authentication");
  EXPECT_EQ(ErrorText("Bad Gateway"), "Bad Gateway");
}

TEST(EncodePathSegment, KeepsUnreservedAndEncodesTheRest) {
  EXPECT_EQ(EncodePathSegment("account_view-1.x~"), "account_view-1.x~");
  EXPECT_EQ(EncodePathSegment("a/b c?"), "a%2Fb%20c%3F");
}

}  // namespace
}  // namespace sluice::connectors::elasticsearch
