#include "core/cpus.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(CpusUnderQuota, AQuotaRoundsUpAndNeverExceedsTheCpus) {
  EXPECT_EQ(CpusUnderQuota("200000 100000\n", 64), 2u);
  EXPECT_EQ(CpusUnderQuota("150000 100000", 64), 2u);
  EXPECT_EQ(CpusUnderQuota("50000 100000", 64), 1u);
  EXPECT_EQ(CpusUnderQuota("800000 100000", 4), 4u);
}

TEST(CpusUnderQuota, NoQuotaOrUnreadableTextKeepsTheCpus) {
  EXPECT_EQ(CpusUnderQuota("max 100000\n", 8), 8u);
  EXPECT_EQ(CpusUnderQuota("", 8), 8u);
  EXPECT_EQ(CpusUnderQuota("garbage", 8), 8u);
  EXPECT_EQ(CpusUnderQuota("0 100000", 8), 8u);
}

TEST(UsableCpus, AtLeastOne) { EXPECT_GE(UsableCpus(), 1u); }

}  // namespace
}  // namespace sluice
