// engine/assignment: balanced, the same whatever order the members come in,
// and stable when a member joins or leaves.
#include "core/assignment.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace sluice {
namespace {

std::map<std::string, size_t> Loads(const std::map<uint32_t, std::string>& a) {
  std::map<std::string, size_t> out;
  for (const auto& [p, m] : a) ++out[m];
  return out;
}

size_t Moved(const std::map<uint32_t, std::string>& before, const std::map<uint32_t, std::string>& after) {
  size_t moved = 0;
  for (const auto& [p, m] : before) moved += after.at(p) != m;
  return moved;
}

TEST(Assignment, EveryPartitionHasOneMemberAndLoadsDifferByAtMostOne) {
  for (uint32_t partitions : {1u, 4u, 16u, 64u, 1024u}) {
    for (size_t n = 1; n <= 5; ++n) {
      std::vector<std::string> members;
      for (size_t i = 0; i < n; ++i) members.push_back("engine-" + std::to_string(i));
      const auto a = Assign("sink/cache", "account", partitions, members);
      ASSERT_EQ(a.size(), partitions);
      const auto loads = Loads(a);
      size_t lo = partitions, hi = 0;
      for (const std::string& m : members) {
        const size_t l = loads.count(m) ? loads.at(m) : 0;
        lo = std::min(lo, l);
        hi = std::max(hi, l);
      }
      EXPECT_LE(hi - lo, 1u) << partitions << " partitions, " << n << " members";
    }
  }
  EXPECT_TRUE(Assign("sink/cache", "account", 8, {}).empty());
}

TEST(Assignment, TheOrderOfTheMembersChangesNothing) {
  std::vector<std::string> members = {"c", "a", "d", "b"};
  const auto first = Assign("writer", "order", 64, members);
  std::sort(members.begin(), members.end());
  do {
    EXPECT_EQ(Assign("writer", "order", 64, members), first);
  } while (std::next_permutation(members.begin(), members.end()));
}

TEST(Assignment, AJoinOrALeaveMovesLittleMoreThanItsShare) {
  const std::vector<std::string> three = {"engine-a", "engine-b", "engine-c"};
  const std::vector<std::string> four = {"engine-a", "engine-b", "engine-c", "engine-d"};
  for (uint32_t partitions : {16u, 64u, 256u}) {
    const auto before = Assign("sink/search", "account", partitions, three);
    const auto after = Assign("sink/search", "account", partitions, four);
    // The newcomer's share must move; a few more may, to keep loads even.
    const size_t share = partitions / 4;
    EXPECT_GE(Moved(before, after), share);
    EXPECT_LE(Moved(before, after), share + share / 2 + 2) << partitions;
    // Leaving: the leaver's partitions move, and few others.
    const auto back = Assign("sink/search", "account", partitions, three);
    EXPECT_EQ(back, before);
    size_t others = 0;
    for (const auto& [p, m] : after) others += m != "engine-d" && back.at(p) != m;
    EXPECT_LE(others, share / 2 + 2) << partitions;
  }
}

TEST(Assignment, ScopesAreSpreadIndependently) {
  const std::vector<std::string> two = {"engine-a", "engine-b"};
  // One partition per sink: the sinks do not all land on the same engine.
  std::map<std::string, size_t> owners;
  for (int s = 0; s < 20; ++s) ++owners[Assign("sink/s" + std::to_string(s), "account", 1, two).at(0)];
  EXPECT_EQ(owners.size(), 2u);
}

}  // namespace
}  // namespace sluice
