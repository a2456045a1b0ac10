// The admin endpoint's routing and authorization, without a network or a
// server (the sink controls themselves are covered by tests/admin_test.cc).
#include "admin/admin_service.h"

#include <gtest/gtest.h>

namespace sluice::admin {
namespace {

config::Config MakeConfig(const std::string& token) {
  config::Config c;
  c.admin.enabled = true;
  c.admin.token = token;
  return c;
}

http::Request Request(const std::string& method, const std::string& target, const std::string& auth = "") {
  http::Request r;
  r.method = method;
  r.target = target;
  if (!auth.empty()) r.headers.emplace_back("Authorization", auth);
  return r;
}

std::string Code(const http::Response& r) {
  auto j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("error")) return "";
  return j["error"]["code"].get<std::string>();
}

TEST(AdminService, ChangesNeedTheBearerToken) {
  const config::Config c = MakeConfig("tok-123");
  engine::SyncEngine engine(c);
  AdminService admin(c, engine);

  auto none = admin.Handle(Request("POST", "/v1/sinks/cache/pause"));
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(Code(none), "unauthorized");
  ASSERT_EQ(none.headers.size(), 1u);
  EXPECT_EQ(none.headers[0].first, "WWW-Authenticate");

  EXPECT_EQ(admin.Handle(Request("POST", "/v1/sinks/cache/pause", "Basic dG9rLTEyMw==")).status, 401);
  auto wrong = admin.Handle(Request("POST", "/v1/sinks/cache/pause", "Bearer tok-124"));
  EXPECT_EQ(wrong.status, 403);
  EXPECT_EQ(Code(wrong), "forbidden");
  EXPECT_EQ(admin.Handle(Request("POST", "/v1/sinks/cache/pause", "Bearer tok-12")).status, 403);
  EXPECT_EQ(admin.Handle(Request("POST", "/v1/sinks/cache/pause", "Bearer tok-1234")).status, 403);
  // The right token gets past the check: this engine has no such sink.
  auto right = admin.Handle(Request("POST", "/v1/sinks/cache/pause", "Bearer tok-123"));
  EXPECT_EQ(right.status, 404);
  EXPECT_EQ(Code(right), "unknown_sink");
}

TEST(AdminService, WithoutATokenEveryReadAndChangeIsRefused) {
  const config::Config c = MakeConfig("");
  engine::SyncEngine engine(c);
  AdminService admin(c, engine);
  for (const char* action : {"pause", "resume", "rewind", "rebuild"}) {
    auto r = admin.Handle(Request("POST", std::string("/v1/sinks/cache/") + action, "Bearer "));
    EXPECT_EQ(r.status, 403) << action;
    EXPECT_EQ(Code(r), "admin_disabled") << action;
    EXPECT_NE(r.body.find("admin.token"), std::string::npos) << r.body;
  }
  for (const char* read : {"/v1/status", "/v1/sinks/cache/rebuild"}) {
    auto r = admin.Handle(Request("GET", read));
    EXPECT_EQ(r.status, 403) << read;
    EXPECT_EQ(Code(r), "admin_disabled") << read;
  }
}

TEST(AdminService, ReadsNeedTheTokenTooAndRoutesAreChecked) {
  const config::Config c = MakeConfig("tok");
  engine::SyncEngine engine(c);
  AdminService admin(c, engine);
  EXPECT_EQ(admin.Handle(Request("GET", "/v1/status")).status, 401);
  EXPECT_EQ(admin.Handle(Request("GET", "/v1/status", "Bearer other")).status, 403);
  EXPECT_EQ(admin.Handle(Request("GET", "/v1/sinks/cache/rebuild")).status, 401);
  auto status = admin.Handle(Request("GET", "/v1/status", "Bearer tok"));
  EXPECT_EQ(status.status, 200);
  EXPECT_EQ(Json::parse(status.body), (Json{{"sinks", Json::array()}}));
  EXPECT_EQ(admin.Handle(Request("POST", "/v1/status", "Bearer tok")).status, 405);
  EXPECT_EQ(admin.Handle(Request("GET", "/v1/sinks/cache/pause")).status, 405);
  EXPECT_EQ(admin.Handle(Request("POST", "/v1/sinks/cache/explode", "Bearer tok")).status, 404);
  EXPECT_EQ(admin.Handle(Request("GET", "/v1/sinks/cache/rebuild", "Bearer tok")).status, 404);
  EXPECT_EQ(admin.Handle(Request("GET", "/nothing")).status, 404);
}

// Allow names the methods the path takes.
std::string Allow(const http::Response& r) {
  for (const auto& [name, value] : r.headers) {
    if (name == "Allow") return value;
  }
  return "(none)";
}

TEST(AdminService, WrongMethodIs405WithAllow) {
  const config::Config c = MakeConfig("tok");
  engine::SyncEngine engine(c);
  AdminService admin(c, engine);
  const auto status = admin.Handle(Request("DELETE", "/v1/status", "Bearer tok"));
  EXPECT_EQ(status.status, 405);
  EXPECT_EQ(Code(status), "method_not_allowed");
  EXPECT_EQ(Allow(status), "GET");
  for (const char* action : {"pause", "resume", "rewind"}) {
    const auto r = admin.Handle(Request("GET", std::string("/v1/sinks/cache/") + action));
    EXPECT_EQ(r.status, 405) << action;
    EXPECT_EQ(Allow(r), "POST") << action;
  }
  const auto rebuild = admin.Handle(Request("PUT", "/v1/sinks/cache/rebuild", "Bearer tok"));
  EXPECT_EQ(rebuild.status, 405);
  EXPECT_EQ(Allow(rebuild), "GET, POST");
  EXPECT_NE(rebuild.body.find("/v1/sinks/cache/rebuild takes GET, POST, not PUT"), std::string::npos) << rebuild.body;
}

}  // namespace
}  // namespace sluice::admin
