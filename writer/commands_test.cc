#include "writer/commands.h"

#include <gtest/gtest.h>

namespace sluice::writer {
namespace {

Json J(const char* s) { return *ParseJson(s); }

TEST(Commands, CreateRefusesAnExistingEntity) {
  Json st = J(R"({"a":1})");
  EXPECT_TRUE(RunBuiltinCommand("create", {false, 0, nullptr}, J(R"({"a":1})")).applied);
  auto o = RunBuiltinCommand("create", {true, 3, &st}, J(R"({"a":2})"));
  EXPECT_FALSE(o.applied);
  EXPECT_EQ(o.http_status, 409);
  EXPECT_EQ(o.error_code, "already_exists");
}

TEST(Commands, CreateAfterDeleteIsAllowed) {
  auto o = RunBuiltinCommand("create", {false, 7, nullptr}, J(R"({"a":1})"));
  EXPECT_TRUE(o.applied);
}

TEST(Commands, PutReplacesAndPatchMerges) {
  Json st = J(R"({"a":1,"b":{"c":2}})");
  EXPECT_EQ(CanonicalJson(RunBuiltinCommand("put", {true, 1, &st}, J(R"({"z":0})")).new_state), R"({"z":0})");
  EXPECT_EQ(CanonicalJson(RunBuiltinCommand("patch", {true, 1, &st}, J(R"({"b":{"c":null,"d":3}})")).new_state),
            R"({"a":1,"b":{"d":3}})");
  EXPECT_EQ(CanonicalJson(RunBuiltinCommand("patch", {false, 0, nullptr}, J(R"({"n":1})")).new_state),
            R"({"n":1})");
}

TEST(Commands, NonObjectBodiesAreRejected) {
  auto o = RunBuiltinCommand("patch", {false, 0, nullptr}, J("[1]"));
  EXPECT_FALSE(o.applied);
  EXPECT_EQ(o.http_status, 400);
}

TEST(Commands, DeleteNeedsAnEntity) {
  Json st = J("{}");
  EXPECT_EQ(RunBuiltinCommand("delete", {false, 0, nullptr}, J("{}")).http_status, 404);
  auto o = RunBuiltinCommand("delete", {true, 2, &st}, J("{}"));
  EXPECT_TRUE(o.applied);
  EXPECT_TRUE(o.deleted);
  EXPECT_TRUE(o.new_state.is_null());
}

}  // namespace
}  // namespace sluice::writer
