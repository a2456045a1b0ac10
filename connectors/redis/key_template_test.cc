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

}  // namespace
}  // namespace sluice::connectors::redis
