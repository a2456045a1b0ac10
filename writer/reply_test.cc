#include "writer/reply.h"

#include <gtest/gtest.h>

#include "core/json.h"

namespace sluice::writer {
namespace {

TEST(Reply, CommandReplyBodyIsStable) {
  EXPECT_EQ(CommandReplyBody("account", "a\"1", 3, 17, 2, "{}"),
            R"({"type":"account","id":"a\"1","version":3,"event_id":17,"partition":2,"response":{}})");
}

TEST(Reply, ErrorBodyIsValidJson) {
  auto j = ParseJson(ErrorBody("malformed_json", "bad \"thing\"\n"));
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["error"]["code"], "malformed_json");
  EXPECT_EQ((*j)["error"]["message"], "bad \"thing\"\n");
  auto extra = ParseJson(ErrorBody("version_mismatch", "m", R"({"current_version":7})"));
  ASSERT_TRUE(extra.ok());
  EXPECT_EQ((*extra)["error"]["current_version"], 7);
  auto r = UnavailableReply("down");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.retry_after_seconds, 1);
}

}  // namespace
}  // namespace sluice::writer
