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

// TakeAll hands every entry over, in their order of use, and leaves an empty
// cache of the same capacity behind.
TEST(LruCache, TakeAllHandsTheEntriesOverAndLeavesItEmpty) {
  LruCache<std::string, int> c(2);
  c.Put("a", 1);
  c.Put("b", 2);
  ASSERT_NE(c.Find("a"), nullptr);  // a is the most recent
  auto taken = c.TakeAll();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.Find("a"), nullptr);
  ASSERT_EQ(taken.size(), 2u);
  taken.Put("c", 3);  // evicts b, the least recent, in the taken cache
  EXPECT_EQ(taken.Find("b"), nullptr);
  EXPECT_EQ(*taken.Find("a"), 1);
  c.Put("x", 1);
  c.Put("y", 2);
  c.Put("z", 3);  // the same capacity: x goes
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.Find("x"), nullptr);
}

}  // namespace
}  // namespace sluice
