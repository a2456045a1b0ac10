#include "core/commit_notice.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(CommitNotice, RoundTripsAndSplitsIntoDatagramsThatFit) {
  std::vector<CommitNotice> notices;
  for (uint32_t p = 0; p < 300; ++p) notices.push_back({"account", p, 18446744073709551615ull - p});
  const auto datagrams = EncodeCommitNotices(notices);
  ASSERT_GT(datagrams.size(), 1u);
  std::vector<CommitNotice> back;
  for (const auto& d : datagrams) {
    EXPECT_LE(d.size(), kCommitNoticeDatagramMax);
    auto got = DecodeCommitNotices(d);
    ASSERT_TRUE(got.ok()) << got.status().message();
    back.insert(back.end(), got->begin(), got->end());
  }
  EXPECT_EQ(back, notices);
  EXPECT_TRUE(EncodeCommitNotices({}).empty());
}

TEST(CommitNotice, RefusesAnythingElseWhole) {
  for (const std::string& bad : {std::string(""), std::string("sluice-commits 1\n"), std::string("sluice-commits 2\na 1 2\n"),
                                std::string("sluice-commits 1\naccount 1 2"), std::string("sluice-commits 1\naccount 1\n"),
                                std::string("sluice-commits 1\naccount 1 2 3\n"), std::string("sluice-commits 1\naccount -1 2\n"),
                                std::string("sluice-commits 1\naccount 01 2\n"), std::string("sluice-commits 1\naccount 4294967296 2\n"),
                                std::string("sluice-commits 1\naccount 1 18446744073709551616\n"),
                                std::string("sluice-commits 1\nAcc\x01unt 1 2\n"), std::string("sluice-commits 1\n 1 2\n"),
                                std::string("sluice-commits 1\naccount 1 2\n") + std::string(1400, 'x')}) {
    EXPECT_FALSE(DecodeCommitNotices(bad).ok()) << bad;
  }
  auto ok = DecodeCommitNotices("sluice-commits 1\naccount 0 0\norder_item 7 42\n");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, (std::vector<CommitNotice>{{"account", 0, 0}, {"order_item", 7, 42}}));
}

}  // namespace
}  // namespace sluice
