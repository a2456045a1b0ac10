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

// A number outside a double's range threw out_of_range.406 from the error
// path of the old parser and aborted the process.
TEST(Json, ParseRefusesNumbersOutsideADouble) {
  for (const char* text : {R"({"x":1e400})", "-1e400", "[1,2,1E+999]", "123e99999999999999999999"}) {
    auto r = ParseJson(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("number overflow"), std::string::npos) << r.status().message();
  }
  // Large integers that still fit a double are numbers, not errors.
  EXPECT_TRUE(ParseJson("123456789012345678901234567890").ok());
  EXPECT_TRUE(ParseJson("1e308").ok());
}

TEST(Json, ParseBoundsNestingDepth) {
  const auto nested = [](size_t depth, char open, char close) {
    return std::string(depth, open) + std::string(depth, close);
  };
  EXPECT_TRUE(ParseJson(nested(100, '[', ']'), 100).ok());
  auto deep = ParseJson(nested(101, '[', ']'), 100);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("deeper than 100"), std::string::npos) << deep.status().message();
  std::string objects;
  for (int i = 0; i < 5; ++i) objects += R"({"a":)";
  objects += "1";
  for (int i = 0; i < 5; ++i) objects += "}";
  EXPECT_TRUE(ParseJson(objects, 5).ok());
  EXPECT_FALSE(ParseJson(objects, 4).ok());
  // 60,000 unclosed brackets (the body that overflowed the stack): an error,
  // found at the cap without building 60,000 levels.
  auto hostile = ParseJson(std::string(60000, '['));
  ASSERT_FALSE(hostile.ok());
  EXPECT_NE(hostile.status().message().find("deeper than 1000"), std::string::npos);
  // The cap holds whatever the caller asks for.
  EXPECT_FALSE(ParseJson(nested(kMaxJsonDepthCap + 1, '[', ']'), 1u << 30).ok());
  auto at_cap = ParseJson(nested(kMaxJsonDepthCap, '[', ']'));
  ASSERT_TRUE(at_cap.ok());
  EXPECT_EQ(JsonDepth(*at_cap), kMaxJsonDepthCap);
  EXPECT_EQ(CanonicalJson(*at_cap), nested(kMaxJsonDepthCap, '[', ']'));
}

TEST(Json, DepthCountsContainers) {
  EXPECT_EQ(JsonDepth(Json(1)), 0u);
  EXPECT_EQ(JsonDepth(Json::array()), 1u);
  EXPECT_EQ(JsonDepth(*ParseJson(R"({"a":[1,{"b":[]}],"c":2})")), 4u);
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

// The ASCII fast path writes what nlohmann's serializer (CanonicalJson) writes,
// for every byte and for mixed strings; non-ASCII goes through nlohmann.
TEST(Json, AppendJsonStringIsCanonicalJson) {
  std::vector<std::string> cases = {"", "plain", "tab\there", std::string("nul\0in", 6), "\x7f del", "caf\xc3\xa9",
                                    "bad \xff utf-8", "\x1f\x01\\\"/"};
  for (int c = 0; c < 256; ++c) cases.push_back(std::string(1, static_cast<char>(c)) + "x");
  uint32_t seed = 7;
  for (int n = 0; n < 500; ++n) {
    std::string s;
    for (int k = 0; k < 12; ++k) {
      seed = seed * 1103515245 + 12345;
      s += static_cast<char>((seed >> 16) & (n % 2 == 0 ? 0x7f : 0xff));
    }
    cases.push_back(s);
  }
  for (const std::string& s : cases) {
    std::string out = "[";
    AppendJsonString(out, s);
    EXPECT_EQ(out, "[" + CanonicalJson(Json(s))) << s;
  }
}

}  // namespace
}  // namespace sluice
