#include "connectors/redis/redis_cluster.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice::connectors::redis {
namespace {

// Slots from the Redis Cluster specification and Redis's own tests.
TEST(RedisCluster, KeySlotMatchesRedis) {
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 % kClusterSlots);  // CRC16/XMODEM's check value
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot(""), 0);
  // Only the hash tag is hashed: the first '{', the first '}' after it.
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("{user1000}.followers"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), KeySlot("foo{}{bar}"));  // empty tag: the whole key
  EXPECT_NE(KeySlot("foo{}{bar}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
}

TEST(RedisCluster, HashTag) {
  EXPECT_TRUE(HasHashTag("a{b}c"));
  EXPECT_FALSE(HasHashTag("account:42"));
  EXPECT_FALSE(HasHashTag("a{}b"));
  EXPECT_FALSE(HasHashTag("a{b"));
  EXPECT_FALSE(HasHashTag("a}b{"));
}

// A tombstone lives in its value key's slot, whatever the key holds
// (entity ids are any visible ASCII, braces included).
TEST(RedisCluster, SameSlotKeyKeepsTheSlot) {
  EXPECT_EQ(SameSlotKey("account:42", ":_tomb"), "{account:42}:_tomb");
  EXPECT_EQ(SameSlotKey("account:{7}", ":_tomb"), "account:{7}:_tomb");
  for (const std::string key : {"account:42", "account:{7}", "a}b", "x{}y}", "{", "}", "a{b", "}{", "{}", "k}{z}"}) {
    const std::string tomb = SameSlotKey(key, ":_tomb");
    EXPECT_EQ(KeySlot(tomb), KeySlot(key)) << key << " -> " << tomb;
    EXPECT_TRUE(tomb.ends_with(":_tomb")) << tomb;
  }
  // Every slot has a tag for the keys that hold a '}' and no hash tag.
  for (int i = 0; i < 2000; ++i) {
    const std::string key = "k}" + std::to_string(i);
    EXPECT_EQ(KeySlot(SameSlotKey(key, ":_tomb")), KeySlot(key)) << key;
  }
}

TEST(RedisCluster, ParseRedirect) {
  auto moved = ParseRedirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(moved);
  EXPECT_FALSE(moved->ask);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->host, "127.0.0.1");
  EXPECT_EQ(moved->port, 6381);
  auto ask = ParseRedirect("ASK 12182 [::1]:7002");
  ASSERT_TRUE(ask);
  EXPECT_TRUE(ask->ask);
  EXPECT_EQ(ask->host, "::1");
  EXPECT_EQ(ask->port, 7002);
  EXPECT_FALSE(ParseRedirect("MOVED 16384 127.0.0.1:6381"));
  EXPECT_FALSE(ParseRedirect("MOVED 1 127.0.0.1:0"));
  EXPECT_FALSE(ParseRedirect("MOVED x 127.0.0.1:1"));
  EXPECT_FALSE(ParseRedirect("ERR MOVED 1 h:1"));
  EXPECT_FALSE(ParseRedirect("MOVED 1"));
  EXPECT_TRUE(IsNonLocalKeyError("ERR Error running script: Script attempted to access a non local key in a cluster node"));
  EXPECT_FALSE(IsNonLocalKeyError("WRONGTYPE Operation against a key"));
}

}  // namespace
}  // namespace sluice::connectors::redis
