#include "core/json_delta.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace sluice {
namespace {

Json J(const char* text) { return Json::parse(text); }

// The test vectors of docs/delta.md: before, after, and the delta's exact
// canonical text.
struct Vector {
  const char* before;
  const char* after;
  const char* delta;
};
constexpr Vector kVectors[] = {
    {R"({"a":1})", R"({"a":1})", R"([])"},
    {R"({"a":1})", R"({"a":2})", R"([["s",["a"],2]])"},
    {R"({"a":1})", R"({"a":null})", R"([["s",["a"],null]])"},
    {R"({"a":1,"b":2})", R"({"b":2})", R"([["r",["a"]]])"},
    {R"({})", R"({"n":{"x":[1,{"y":null}]}})", R"([["s",["n"],{"x":[1,{"y":null}]}]])"},
    {R"({"n":{"x":1,"y":2}})", R"({"n":{"x":1,"z":3}})", R"([["r",["n","y"]],["s",["n","z"],3]])"},
    {R"({"l":[1,2]})", R"({"l":[1,2,3,4]})", R"([["a",["l"],[3,4]]])"},
    {R"({"l":[1,2]})", R"({"l":[2,1]})", R"([["s",["l"],[2,1]]])"},
    {R"({"l":[1,2]})", R"({"l":[1]})", R"([["s",["l"],[1]]])"},
    {R"({"v":1})", R"({"v":1.0})", R"([["s",["v"],1.0]])"},
    {R"({"v":0.0})", R"({"v":-0.0})", R"([["s",["v"],-0.0]])"},
    {R"({"v":"1"})", R"({"v":1})", R"([["s",["v"],1]])"},
    {R"({"o":{"k":1}})", R"({"o":[1]})", R"([["s",["o"],[1]]])"},
    {R"({"a\"b":1,"é":2})", R"({"a\"b":3,"é":2,"":0})", R"([["s",[""],0],["s",["a\"b"],3]])"},
    {R"({"u":18446744073709551615})", R"({"u":-9223372036854775808})", R"([["s",["u"],-9223372036854775808]])"},
};

TEST(JsonDelta, TheDocumentedVectors) {
  for (const Vector& v : kVectors) {
    SCOPED_TRACE(std::string(v.before) + " -> " + v.after);
    const Json before = J(v.before);
    const Json after = J(v.after);
    const auto delta = JsonDelta(before, after);
    ASSERT_TRUE(delta.has_value());
    EXPECT_EQ(CanonicalJson(*delta), v.delta);
    Result<Json> applied = ApplyJsonDelta(before, J(v.delta));
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
    EXPECT_TRUE(SameJson(*applied, after));
    EXPECT_EQ(CanonicalJson(*applied), CanonicalJson(after));
  }
}

TEST(JsonDelta, SameJsonIsStrictAboutTypes) {
  EXPECT_FALSE(SameJson(J("1"), J("1.0")));
  EXPECT_FALSE(SameJson(J("0.0"), J("-0.0")));
  EXPECT_FALSE(SameJson(J("1"), J("true")));
  EXPECT_TRUE(SameJson(J(R"({"a":[1,null,{"b":1.5}]})"), J(R"({"a":[1,null,{"b":1.5}]})")));
  EXPECT_FALSE(SameJson(J(R"({"a":1})"), J(R"({"b":1})")));
  EXPECT_FALSE(SameJson(J("[1,2]"), J("[1,2,3]")));
  EXPECT_TRUE(SameJson(J("18446744073709551615"), J("18446744073709551615")));
  EXPECT_TRUE(SameJson(Json(int64_t{5}), Json(uint64_t{5})));
  EXPECT_FALSE(SameJson(Json(int64_t{-1}), Json(uint64_t{18446744073709551615u})));
}

TEST(JsonDelta, OnlyObjectsHaveDeltas) {
  EXPECT_FALSE(JsonDelta(J("[1]"), J(R"({"a":1})")).has_value());
  EXPECT_FALSE(JsonDelta(J(R"({"a":1})"), J("null")).has_value());
  EXPECT_FALSE(ApplyJsonDelta(J("[1]"), J("[]")).ok());
}

TEST(JsonDelta, AMalformedOrMisfittingDeltaIsRefusedAndSaysWhich) {
  const Json base = J(R"({"a":{"b":1},"l":[1],"n":2})");
  const struct {
    const char* delta;
    const char* says;
  } cases[] = {
      {R"({"s":1})", "a JSON array of operations"},
      {R"([["x",["a"],1]])", "operation 0"},
      {R"([["s",["a"]]])", "take a path and a value"},
      {R"([["r",["a"],1]])", "take a path and a value"},
      {R"([["s",[],1]])", "non-empty array of member names"},
      {R"([["s",["a",1],1]])", "non-empty array of member names"},
      {R"([["s",["n"],1],["s",["q","r"],1]])", "operation 1: the path goes through a missing member \"q\""},
      {R"([["s",["n","x"],1]])", "not an object"},
      {R"([["r",["zz"]]])", "removes a missing member \"zz\""},
      {R"([["a",["n"],[1]]])", "not an array"},
      {R"([["a",["l"],1]])", "not an array"},
      {R"([1])", "operation 0"},
  };
  for (const auto& c : cases) {
    Result<Json> r = ApplyJsonDelta(base, J(c.delta));
    ASSERT_FALSE(r.ok()) << c.delta;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.delta << ": " << r.status().message();
  }
}

// Random pairs of states, the second a random edit of the first: applying
// the delta always gives back exactly the second.
Json RandomValue(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 3 ? 6 : 8)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 5) - 2;
    case 3: return (rng() % 2 == 0 ? -0.0 : 0.0) + static_cast<double>(rng() % 3);
    case 4: return std::string(1, static_cast<char>('a' + rng() % 3));
    case 5: return static_cast<uint64_t>(rng() % 3);
    case 6: {
      Json a = Json::array();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i) {
        o[std::string(1, static_cast<char>('k' + rng() % 4))] = RandomValue(rng, depth + 1);
      }
      return o;
    }
  }
}

void Edit(Json& v, std::mt19937& rng, int depth) {
  if (v.is_object() && !v.empty() && rng() % 3 != 0) {
    auto it = v.begin();
    std::advance(it, rng() % v.size());
    if (rng() % 4 == 0) {
      v.erase(it);
    } else {
      Edit(*it, rng, depth + 1);
    }
    return;
  }
  if (v.is_array() && rng() % 2 == 0) {
    v.push_back(RandomValue(rng, depth + 1));
    return;
  }
  v = RandomValue(rng, depth);
}

TEST(JsonDelta, RandomEditsRoundTripExactly) {
  std::mt19937 rng(20261129);
  int nonempty = 0;
  for (int i = 0; i < 20000; ++i) {
    Json before = Json::object();
    for (int k = 0; k < 4; ++k) before[std::string(1, static_cast<char>('k' + k))] = RandomValue(rng, 1);
    Json after = before;
    for (int e = 0, n = 1 + static_cast<int>(rng() % 3); e < n; ++e) Edit(after, rng, 0);
    if (!after.is_object()) after = Json::object({{"x", after}});
    const auto delta = JsonDelta(before, after);
    ASSERT_TRUE(delta.has_value());
    if (!delta->empty()) ++nonempty;
    // Through text, as storage keeps it.
    Result<Json> applied = ApplyJsonDelta(ParseJson(CanonicalJson(before)).value(),
                                          ParseJson(CanonicalJson(*delta)).value());
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
    ASSERT_EQ(CanonicalJson(*applied), CanonicalJson(after))
        << CanonicalJson(before) << " + " << CanonicalJson(*delta);
    ASSERT_TRUE(SameJson(*applied, after));
  }
  EXPECT_GT(nonempty, 15000);
}

// Random merge patches of random states: the delta found from the patch
// alone makes what the patch makes, through text as storage keeps it.
TEST(JsonDelta, MergePatchDeltasMakeWhatThePatchMakes) {
  std::mt19937 rng(20261130);
  int nonempty = 0;
  for (int i = 0; i < 20000; ++i) {
    Json before = Json::object();
    for (int k = 0; k < 4; ++k) before[std::string(1, static_cast<char>('k' + k))] = RandomValue(rng, 1);
    Json patch = Json::object();
    for (int k = 0, n = static_cast<int>(rng() % 4); k < n; ++k) {
      patch[std::string(1, static_cast<char>('k' + rng() % 5))] = RandomValue(rng, 1);
    }
    Json after = before;
    after.merge_patch(patch);
    const auto delta = MergePatchDelta(before, patch);
    ASSERT_TRUE(delta.has_value());
    if (!delta->empty()) ++nonempty;
    Result<Json> applied = ApplyJsonDelta(ParseJson(CanonicalJson(before)).value(),
                                          ParseJson(CanonicalJson(*delta)).value());
    ASSERT_TRUE(applied.ok()) << applied.status().ToString() << ": " << CanonicalJson(before) << " + "
                              << CanonicalJson(*delta);
    ASSERT_TRUE(SameJson(*applied, after)) << CanonicalJson(before) << " patched with " << CanonicalJson(patch)
                                           << ": " << CanonicalJson(*applied) << " != " << CanonicalJson(after);
    // Nothing changed, no operation: as JsonDelta says.
    ASSERT_EQ(delta->empty(), JsonDelta(before, after)->empty()) << CanonicalJson(patch);
  }
  EXPECT_GT(nonempty, 10000);
  EXPECT_FALSE(MergePatchDelta(Json::array(), Json::object()).has_value());
  EXPECT_FALSE(MergePatchDelta(Json::object(), Json::array()).has_value());
}

// A small change of a large state is a small delta.
TEST(JsonDelta, ASmallPatchOfALargeStateIsSmall) {
  Json state = Json::object();
  for (int i = 0; i < 2000; ++i) state["field" + std::to_string(i)] = std::string(40, 'x');
  Json after = state;
  after["field7"] = "changed";
  after["count"] = 1;
  const std::string full = CanonicalJson(after);
  const std::string delta = CanonicalJson(*JsonDelta(state, after));
  EXPECT_GT(full.size(), 100000u);
  EXPECT_LT(delta.size(), 64u) << delta;
}

}  // namespace
}  // namespace sluice
