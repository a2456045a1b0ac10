#include "connectors/redis/key_template.h"

#include <gtest/gtest.h>

namespace sluice::connectors::redis {
namespace {

TEST(KeyTemplate, BuildsKeys) {
  auto t = KeyTemplate::Parse("{type}:{id}", "account");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Key("42"), "account:42");
  std::string out = "x|";
  t->AppendKey(out, "7");
  EXPECT_EQ(out, "x|account:7");
}

TEST(KeyTemplate, RequiresId) {
  auto t = KeyTemplate::Parse("{type}:all", "account");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
}

TEST(KeyTemplate, ScanPatternEscapesGlobCharacters) {
  auto t = KeyTemplate::Parse("c[1]*?\\:{type}:{id}:v", "order");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ScanPattern(), "c\\[1\\]\\*\\?\\\\:order:*:v");
}

TEST(KeyTemplate, IdOfStripsPrefixAndSuffix) {
  auto t = KeyTemplate::Parse("app:{type}:{id}:v1", "order");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->IdOf("app:order:a:b:v1"), "a:b");
  EXPECT_EQ(t->IdOf("app:order::v1"), "");
  EXPECT_EQ(t->IdOf("app:order:a:v2"), std::nullopt);
  EXPECT_EQ(t->IdOf("app:other:a:v1"), std::nullopt);
  EXPECT_EQ(t->IdOf("app:order:v1"), std::nullopt);
}

TEST(KeyTemplate, IdOfWithTheIdTwice) {
  auto t = KeyTemplate::Parse("{id}/{type}/{id}", "t");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Key("ab"), "ab/t/ab");
  EXPECT_EQ(t->IdOf("ab/t/ab"), "ab");
  EXPECT_EQ(t->IdOf("ab/t/ac"), std::nullopt);
  EXPECT_EQ(t->IdOf("ab/t/abc"), std::nullopt);
}

TEST(KeyTemplate, RoundTripsEveryId) {
  auto t = KeyTemplate::Parse("p:{id}", "t");
  ASSERT_TRUE(t.ok());
  for (const char* id : {"1", "a:b", "p:", "*", "x:_tomb", "é"}) EXPECT_EQ(t->IdOf(t->Key(id)), id);
}

TEST(KeyTemplate, ViewKeysAreValueAndTombstoneKeys) {
  auto t = KeyTemplate::Parse("app:{id}:v", "t");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->IsViewKey("app:a:v"));
  EXPECT_TRUE(t->IsViewKey("app:a:v:_tomb"));
  EXPECT_FALSE(t->IsViewKey("app:a:w"));
  EXPECT_FALSE(t->IsViewKey("other:a:v:_tomb"));
  EXPECT_EQ(t->literal_prefix(), "app:");
}

// A shadow key never matches the live pattern and a live key never matches
// the shadow's, whatever the ids.
TEST(KeyTemplate, ShadowKeysAndLiveKeysNeverMatchEachOthersTemplate) {
  for (const char* tpl : {"{type}:{id}", "_x:{id}", "__rebuild:{id}", "rebuild:{id}", "r:{id}:v", "_:{id}"}) {
    auto live = KeyTemplate::Parse(tpl, "t");
    ASSERT_TRUE(live.ok());
    const std::string prefix = ShadowKeyPrefix(live->literal_prefix());
    auto shadow = KeyTemplate::Parse(prefix + tpl, "t");
    ASSERT_TRUE(shadow.ok());
    for (const char* id : {"1", "__rebuild:t:1", "rebuild:_x:1", "ebuild:r:1:v", ""}) {
      const std::string live_key = live->Key(id);
      const std::string shadow_key = shadow->Key(id);
      EXPECT_EQ(shadow_key, prefix + live_key);
      EXPECT_FALSE(live->IsViewKey(shadow_key)) << tpl << " " << shadow_key;
      EXPECT_FALSE(shadow->IsViewKey(live_key)) << tpl << " " << live_key;
    }
  }
}

}  // namespace
}  // namespace sluice::connectors::redis
