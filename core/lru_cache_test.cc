#include "core/lru_cache.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

TEST(LruCache, EvictsTheLeastRecentlyUsed) {
  LruCache<std::string, int> c(2);
  c.Put("a", 1);
  c.Put("b", 2);
  ASSERT_NE(c.Find("a"), nullptr);  // a is now the most recent
  c.Put("c", 3);                    // evicts b
  EXPECT_EQ(c.Find("b"), nullptr);
  EXPECT_EQ(*c.Find("a"), 1);
  EXPECT_EQ(*c.Find("c"), 3);
  c.Put("a", 10);
  EXPECT_EQ(*c.Find("a"), 10);
  EXPECT_EQ(c.size(), 2u);
  c.Erase("a");
  EXPECT_EQ(c.Find("a"), nullptr);
  c.Clear();
  EXPECT_EQ(c.size(), 0u);
}

}  // namespace
}  // namespace sluice
