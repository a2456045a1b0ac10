#include "core/partitioner.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

// Apache Kafka's own vectors (UtilsTest.testMurmur2): matching them proves the
// hash is Kafka's, byte for byte.
TEST(Murmur2, MatchesKafkaVectors) {
  EXPECT_EQ(Murmur2("21"), -973932308);
  EXPECT_EQ(Murmur2("foobar"), -790332482);
  EXPECT_EQ(Murmur2("a-little-bit-long-string"), -985981536);
  EXPECT_EQ(Murmur2("a-little-bit-longer-string"), -1486304829);
  EXPECT_EQ(Murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
  EXPECT_EQ(Murmur2("abc"), 479470107);
}

// The partition vectors published in docs/partitioning.md.
TEST(PartitionOf, DocumentedVectors) {
  EXPECT_EQ(PartitionOf("21", 16), 12u);
  EXPECT_EQ(PartitionOf("foobar", 16), 14u);
  EXPECT_EQ(PartitionOf("abc", 16), 11u);
  EXPECT_EQ(PartitionOf("account-1", 16), PartitionOf("account-1", 16));
  EXPECT_EQ(PartitionOf("anything", 1), 0u);
}

TEST(PartitionOf, SpreadsEvenly) {
  constexpr uint32_t kPartitions = 16;
  int counts[kPartitions] = {};
  for (int i = 0; i < 160000; ++i) ++counts[PartitionOf("entity-" + std::to_string(i), kPartitions)];
  for (int c : counts) {
    EXPECT_GT(c, 9000);
    EXPECT_LT(c, 11000);
  }
}

}  // namespace
}  // namespace sluice
