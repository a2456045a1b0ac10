#include "writer/command_request.h"

#include <gtest/gtest.h>

namespace sluice::writer {
namespace {

const CommandRequest& Accepted(const std::variant<CommandRequest, Reply>& v) {
  static const CommandRequest kNone;
  const auto* ok = std::get_if<CommandRequest>(&v);
  EXPECT_NE(ok, nullptr) << std::get<Reply>(v).body;
  return ok ? *ok : kNone;
}

Reply Refused(const std::variant<CommandRequest, Reply>& v) {
  const auto* r = std::get_if<Reply>(&v);
  EXPECT_NE(r, nullptr);
  return r ? *r : Reply{};
}

TEST(CommandRequest, AcceptsAValidRequest) {
  auto v = ValidateCommandRequest("account", "patch", nullptr, "key-1", "W/\"3\"", R"({"b":1, "a":2})", 100);
  const CommandRequest& c = Accepted(v);
  EXPECT_EQ(c.command_id, "key-1");
  EXPECT_EQ(c.expected_version, 3u);
  EXPECT_EQ(c.request_text, R"({"a":2,"b":1})");
}

TEST(CommandRequest, ABlankBodyIsAnEmptyObjectAndNoHeadersAreNeeded) {
  auto v = ValidateCommandRequest("account", "delete", nullptr, std::nullopt, std::nullopt, " \r\n\t", 100);
  const CommandRequest& c = Accepted(v);
  EXPECT_TRUE(c.command_id.empty());
  EXPECT_FALSE(c.expected_version.has_value());
  EXPECT_EQ(c.request_text, "{}");
}

TEST(CommandRequest, RefusesInTheWritersOrder) {
  // The unknown command is reported before the bad key, the bad key before
  // the bad If-Match, that before the malformed body.
  Reply r = Refused(ValidateCommandRequest("account", "deposit", nullptr, "a b", "x", "{", 100));
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("unknown_command"), std::string::npos);
  EXPECT_NE(r.body.find("create, put, patch, delete"), std::string::npos);
  r = Refused(ValidateCommandRequest("account", "put", nullptr, "a b", "x", "{", 100));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("invalid_idempotency_key"), std::string::npos);
  r = Refused(ValidateCommandRequest("account", "put", nullptr, "k", "x", "{", 100));
  EXPECT_NE(r.body.find("invalid_if_match"), std::string::npos);
  r = Refused(ValidateCommandRequest("account", "put", nullptr, "k", "1", "{", 100));
  EXPECT_NE(r.body.find("malformed_json"), std::string::npos);
}

TEST(CommandRequest, BodiesDeeperThanTheLimitAreMalformed) {
  EXPECT_EQ(Refused(ValidateCommandRequest("t", "put", nullptr, std::nullopt, std::nullopt, "[[[1]]]", 2)).status, 400);
  Accepted(ValidateCommandRequest("t", "put", nullptr, std::nullopt, std::nullopt, "[[[1]]]", 3));
  EXPECT_EQ(Refused(ValidateCommandRequest("t", "put", nullptr, std::nullopt, std::nullopt, "{\"x\":1e400}", 100)).status,
            400);
}

TEST(CommandRequest, KnowsTheScriptsCommands) {
  handlers::HandlerScript script;
  script.commands = {"deposit", "open"};
  Accepted(ValidateCommandRequest("account", "deposit", &script, std::nullopt, std::nullopt, "{}", 100));
  Reply r = Refused(ValidateCommandRequest("account", "close", &script, std::nullopt, std::nullopt, "{}", 100));
  EXPECT_NE(r.body.find("create, put, patch, delete, deposit, open"), std::string::npos);
}

TEST(CommandRequest, EntityIds) {
  EXPECT_FALSE(CheckEntityId("alice").has_value());
  ASSERT_TRUE(CheckEntityId("al ice").has_value());
  EXPECT_EQ(CheckEntityId("").value().status, 400);
}

TEST(CommandRequest, ExpectedVersion) {
  EXPECT_FALSE(CheckExpectedVersion(std::nullopt, 4).has_value());
  EXPECT_FALSE(CheckExpectedVersion(4, 4).has_value());
  auto r = CheckExpectedVersion(1, 3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 409);
  EXPECT_EQ(r->body,
            R"({"error":{"code":"version_mismatch","message":"If-Match expects version 1 but the entity is at version 3","current_version":3}})");
}

}  // namespace
}  // namespace sluice::writer
