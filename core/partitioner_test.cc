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

// The partition vectors published in docs/partitioning.md, every row, so
// that the table other clients check themselves against is the one we hold.
TEST(PartitionOf, DocumentedVectors) {
  struct Row {
    const char* id;
    int32_t murmur2;
    uint32_t of4;
    uint32_t of16;
  };
  const Row rows[] = {
      {"21", -973932308, 0, 12},
      {"foobar", -790332482, 2, 14},
      {"abc", 479470107, 3, 11},
      {"a-little-bit-long-string", -985981536, 0, 0},
      {"a-little-bit-longer-string", -1486304829, 3, 3},
      {"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 1, 13},
      {"alice", 1951417749, 1, 5},
      {"bob", -2048144690, 2, 14},
      {"account-1", 1835529620, 0, 4},
      {"account-2", 34099444, 0, 4},
      {"order-1001", 297523878, 2, 6},
      {"a", -1563381124, 0, 12},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.id);
    EXPECT_EQ(Murmur2(r.id), r.murmur2);
    EXPECT_EQ(PartitionOf(r.id, 4), r.of4);
    EXPECT_EQ(PartitionOf(r.id, 16), r.of16);
  }
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
