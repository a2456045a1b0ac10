#include "engine/read_groups.h"

#include <gtest/gtest.h>

#include <numeric>

namespace sluice::engine {
namespace {

std::vector<uint32_t> Partitions(uint32_t n) {
  std::vector<uint32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

// Every partition is in exactly one group, in the order given.
void ExpectEachOnceInOrder(const std::vector<ReadGroup>& groups, const std::vector<uint32_t>& given) {
  std::vector<uint32_t> seen;
  for (const ReadGroup& g : groups) seen.insert(seen.end(), g.partitions.begin(), g.partitions.end());
  EXPECT_EQ(seen, given);
}

TEST(ReadGroups, ManyPartitionsShareStatementsOfSixteenEachWithItsShare) {
  const auto all = Partitions(1024);
  const auto groups = BacklogReadGroups(all, 5000);
  ASSERT_EQ(groups.size(), 64u);
  for (const ReadGroup& g : groups) {
    EXPECT_EQ(g.partitions.size(), 16u);
    EXPECT_EQ(g.limit, 5000u / 16);
  }
  ExpectEachOnceInOrder(groups, all);
}

TEST(ReadGroups, GroupsAreAsEvenAsTheCountAllows) {
  const auto all = Partitions(20);
  const auto groups = BacklogReadGroups(all, 1000);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].partitions.size(), 10u);
  EXPECT_EQ(groups[1].partitions.size(), 10u);
  EXPECT_EQ(groups[0].limit, 100u);
  ExpectEachOnceInOrder(groups, all);
}

TEST(ReadGroups, ASmallBatchMaxStillReadsAnEventOfEachPartition) {
  const auto all = Partitions(16);
  const auto groups = BacklogReadGroups(all, 4);
  ASSERT_EQ(groups.size(), 4u);
  for (const ReadGroup& g : groups) {
    EXPECT_EQ(g.partitions.size(), 4u);
    EXPECT_EQ(g.limit, 1u);
  }
  ExpectEachOnceInOrder(groups, all);
}

TEST(ReadGroups, OnePartitionReadsAWholeBatchAndNoneNoStatement) {
  const std::vector<uint32_t> one{7};
  const auto groups = BacklogReadGroups(one, 5000);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].partitions, one);
  EXPECT_EQ(groups[0].limit, 5000u);
  EXPECT_TRUE(BacklogReadGroups({}, 5000).empty());
}

}  // namespace
}  // namespace sluice::engine
