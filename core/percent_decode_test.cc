#include "core/percent_decode.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(PercentDecode, DecodesEscapesAndKeepsTheRest) {
  EXPECT_EQ(PercentDecode("a%2Fb%2fc+d"), "a/b/c+d");
  EXPECT_EQ(PercentDecode(""), "");
  EXPECT_EQ(PercentDecode("%00"), std::string(1, '\0'));
}

TEST(PercentDecode, RefusesATruncatedOrNonHexEscape) {
  for (const char* bad : {"%", "%4", "a%zz", "%g0", "x%"}) EXPECT_EQ(PercentDecode(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace sluice
