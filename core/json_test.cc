#include "core/json.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(Json, ParseRejectsMalformed) {
  EXPECT_TRUE(ParseJson(R"({"a":1})").ok());
  auto bad = ParseJson(R"({"a":)");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("malformed JSON"), std::string::npos);
  EXPECT_FALSE(ParseJson("").ok());
  EXPECT_FALSE(ParseJson("{} trailing").ok());
  EXPECT_FALSE(ParseJson("\"\xff\"").ok());  // invalid UTF-8
}

TEST(Json, CanonicalFormSortsKeys) {
  auto a = ParseJson(R"({ "b" : 1, "a" : [true, null] })");
  auto b = ParseJson(R"({"a":[true,null],"b":1})");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(CanonicalJson(*a), CanonicalJson(*b));
  EXPECT_EQ(CanonicalJson(*a), R"({"a":[true,null],"b":1})");
}

// The examples of RFC 7386 appendix A.
TEST(Json, MergePatchRfc7386Examples) {
  struct Case { const char* target; const char* patch; const char* result; };
  const Case cases[] = {
      {R"({"a":"b"})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"b"})", R"({"b":"c"})", R"({"a":"b","b":"c"})"},
      {R"({"a":"b"})", R"({"a":null})", R"({})"},
      {R"({"a":"b","b":"c"})", R"({"a":null})", R"({"b":"c"})"},
      {R"({"a":["b"]})", R"({"a":"c"})", R"({"a":"c"})"},
      {R"({"a":"c"})", R"({"a":["b"]})", R"({"a":["b"]})"},
      {R"({"a":{"b":"c"}})", R"({"a":{"b":"d","c":null}})", R"({"a":{"b":"d"}})"},
      {R"({"a":[{"b":"c"}]})", R"({"a":[1]})", R"({"a":[1]})"},
      {R"(["a","b"])", R"(["c","d"])", R"(["c","d"])"},
      {R"({"a":"b"})", R"(["c"])", R"(["c"])"},
      {R"({"a":"foo"})", R"(null)", R"(null)"},
      {R"({"a":"foo"})", R"("bar")", R"("bar")"},
      {R"({"e":null})", R"({"a":1})", R"({"a":1,"e":null})"},
      {R"([1,2])", R"({"a":"b","c":null})", R"({"a":"b"})"},
      {R"({})", R"({"a":{"bb":{"ccc":null}}})", R"({"a":{"bb":{}}})"},
  };
  for (const auto& c : cases) {
    Json target = *ParseJson(c.target);
    ApplyMergePatch(target, *ParseJson(c.patch));
    EXPECT_EQ(CanonicalJson(target), c.result) << c.target << " + " << c.patch;
  }
}

TEST(Json, AppendJsonStringEscapes) {
  std::string out;
  AppendJsonString(out, "a\"b\\c\n");
  EXPECT_EQ(out, R"("a\"b\\c\n")");
}

}  // namespace
}  // namespace sluice
