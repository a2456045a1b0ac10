#include "writer/api.h"

#include <gtest/gtest.h>

namespace sluice::writer {
namespace {

TEST(Api, RoutesCommandsAndReads) {
  auto r = ParseRoute("POST", "/v1/entities/account/a%2F1/commands/patch");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Route::Kind::kCommand);
  EXPECT_EQ(r->type, "account");
  EXPECT_EQ(r->entity_id, "a/1");
  EXPECT_EQ(r->command, "patch");

  r = ParseRoute("GET", "/v1/entities/account/a1");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Route::Kind::kGetEntity);

  r = ParseRoute("GET", "/v1/entities/account/a1/events?after_version=5&limit=10");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, Route::Kind::kGetEvents);
  EXPECT_EQ(*QueryUint(*r, "after_version", 0), 5u);
  EXPECT_EQ(*QueryUint(*r, "limit", 100), 10u);
  EXPECT_EQ(*QueryUint(*r, "missing", 7), 7u);
}

TEST(Api, RoutesHealthAndReadiness) {
  EXPECT_EQ(ParseRoute("GET", "/healthz")->kind, Route::Kind::kHealth);
  EXPECT_EQ(ParseRoute("GET", "/readyz")->kind, Route::Kind::kReady);
  EXPECT_EQ(ParseRoute("POST", "/readyz").status().code(), StatusCode::kNotFound);
}

TEST(Api, RejectsUnknownPathsAndBadEncoding) {
  EXPECT_EQ(ParseRoute("GET", "/v2/x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseRoute("DELETE", "/v1/entities/a/b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseRoute("GET", "/v1/entities/a/b/commands/x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ParseRoute("POST", "/v1/entities/a/b%zz/commands/x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRoute("POST", "/v1/entities/a/b%4/commands/x").status().code(), StatusCode::kInvalidArgument);
  auto r = ParseRoute("GET", "/v1/entities/a/b/events?after_version=-1");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(QueryUint(*r, "after_version", 0).ok());
}

TEST(Api, AllowedMethodSaysWhichMethodAKnownPathTakes) {
  EXPECT_EQ(AllowedMethod("/healthz"), "GET");
  EXPECT_EQ(AllowedMethod("/readyz?verbose=1"), "GET");
  EXPECT_EQ(AllowedMethod("/v1/entities/account/a1"), "GET");
  EXPECT_EQ(AllowedMethod("/v1/entities/account/a1/events?limit=2"), "GET");
  EXPECT_EQ(AllowedMethod("/v1/entities/account/a1/commands/patch"), "POST");
  // Paths the API does not have: no method (404, not 405).
  EXPECT_EQ(AllowedMethod("/v2/x"), "");
  EXPECT_EQ(AllowedMethod("/v1/entities/account"), "");
  EXPECT_EQ(AllowedMethod("/v1/entities/account/a1/commands"), "");
  EXPECT_EQ(AllowedMethod("/v1/entities/account/a1/other/x"), "");
  // A wrong method on a known path is NotFound from ParseRoute; AllowedMethod tells it apart.
  EXPECT_EQ(ParseRoute("DELETE", "/v1/entities/a/b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(AllowedMethod("/v1/entities/a/b"), "GET");
}

TEST(Api, IfMatchForms) {
  EXPECT_EQ(*ParseIfMatch("5"), 5u);
  EXPECT_EQ(*ParseIfMatch("\"12\""), 12u);
  EXPECT_EQ(*ParseIfMatch("W/\"3\""), 3u);
  EXPECT_FALSE(ParseIfMatch("*").ok());
  EXPECT_FALSE(ParseIfMatch("five").ok());
  EXPECT_FALSE(ParseIfMatch("").ok());
}

}  // namespace
}  // namespace sluice::writer
