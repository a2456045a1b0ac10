#include "connectors/redis/view_value.h"

#include <gtest/gtest.h>

namespace sluice::connectors::redis {
namespace {

std::string Versioned(std::string_view state, uint64_t version) {
  std::string out;
  if (!AppendVersionedJson(out, state, version)) return "<rejected>";
  return out;
}

TEST(AppendVersionedJson, PutsTheVersionFirst) {
  EXPECT_EQ(Versioned(R"({"a":1,"b":"x"})", 7), R"({"_version":7,"a":1,"b":"x"})");
}

TEST(AppendVersionedJson, EmptyObject) {
  EXPECT_EQ(Versioned("{}", 1), R"({"_version":1})");
  EXPECT_EQ(Versioned(" { \n } ", 2), R"({"_version":2})");
}

TEST(AppendVersionedJson, NestedObjectsAndWhitespace) {
  std::string out = Versioned(R"(  { "o":{"p":{}}, "l":[{}] }  )", 9007199254740991ULL);
  EXPECT_EQ(out, R"({"_version":9007199254740991,"o":{"p":{}}, "l":[{}] })");
  auto parsed = Json::parse(out);
  EXPECT_EQ(parsed["_version"], 9007199254740991ULL);
  EXPECT_EQ(parsed["o"], Json::parse(R"({"p":{}})"));
}

TEST(AppendVersionedJson, RejectsNonObjects) {
  for (const char* state : {"", " ", "[]", "1", "\"{}\"", "{", "}", "null"}) {
    std::string out = "keep";
    EXPECT_FALSE(AppendVersionedJson(out, state, 1)) << state;
    EXPECT_EQ(out, "keep");
  }
}

TEST(AppendVersionedJson, AppendsToExistingText) {
  std::string out = "prefix";
  ASSERT_TRUE(AppendVersionedJson(out, R"({"a":1})", 3));
  EXPECT_EQ(out, R"(prefix{"_version":3,"a":1})");
}

TEST(HasVersionMember, OnlyAtTopLevel) {
  EXPECT_FALSE(HasVersionMember(R"({"a":1})"));
  EXPECT_FALSE(HasVersionMember(R"({"a":{"_version":1}})"));
  EXPECT_FALSE(HasVersionMember(R"({"a":"_version"})"));
  EXPECT_TRUE(HasVersionMember(R"({"_version":1})"));
  EXPECT_TRUE(HasVersionMember(R"({"b":2,"_version":"x"})"));
}

TEST(HashFieldsOf, AllMembers) {
  auto state = Json::parse(R"({"s":"text","n":1.5,"b":false,"o":{"k":[1,2]},"z":null})");
  HashFields fields;
  std::string reason;
  ASSERT_TRUE(HashFieldsOf(state, {}, fields, reason));
  HashFields expected = {{"b", "false"}, {"n", "1.5"}, {"o", R"({"k":[1,2]})"}, {"s", "text"}};
  EXPECT_EQ(fields, expected);
}

TEST(HashFieldsOf, Mapping) {
  auto state = Json::parse(R"({"owner":{"name":"ann"},"balance":12,"gone":null})");
  std::vector<config::FieldMapping> mapping = {
      {"owner", "/owner/name", ""}, {"balance", "/balance", ""}, {"gone", "/gone", ""}, {"nope", "/x/y", ""}};
  HashFields fields;
  std::string reason;
  ASSERT_TRUE(HashFieldsOf(state, mapping, fields, reason));
  HashFields expected = {{"owner", "ann"}, {"balance", "12"}};
  EXPECT_EQ(fields, expected);
}

TEST(HashFieldsOf, RejectsNonObjectsAndReservedMember) {
  HashFields fields;
  std::string reason;
  EXPECT_FALSE(HashFieldsOf(Json::parse("[1]"), {}, fields, reason));
  EXPECT_FALSE(reason.empty());
  reason.clear();
  EXPECT_FALSE(HashFieldsOf(Json::parse(R"({"_version":3})"), {}, fields, reason));
  EXPECT_NE(reason.find("_version"), std::string::npos);
}

}  // namespace
}  // namespace sluice::connectors::redis
