#include "core/names.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

TEST(Names, EntityIds) {
  EXPECT_TRUE(IsValidEntityId("a"));
  EXPECT_TRUE(IsValidEntityId("acct:42/x~!"));
  EXPECT_TRUE(IsValidEntityId(std::string(64, 'x')));
  EXPECT_FALSE(IsValidEntityId(""));
  EXPECT_FALSE(IsValidEntityId(std::string(65, 'x')));
  EXPECT_FALSE(IsValidEntityId("has space"));
  EXPECT_FALSE(IsValidEntityId("tab\t"));
  EXPECT_FALSE(IsValidEntityId("caf\xc3\xa9"));
  EXPECT_FALSE(IsValidEntityId(std::string("nul\0x", 5)));
}

TEST(Names, TypeAndCommandNames) {
  EXPECT_TRUE(IsValidTypeName("account"));
  EXPECT_TRUE(IsValidTypeName("order_line2"));
  EXPECT_FALSE(IsValidTypeName("Account"));
  EXPECT_FALSE(IsValidTypeName("2fa"));
  EXPECT_FALSE(IsValidTypeName("a-b"));
  EXPECT_FALSE(IsValidTypeName(std::string(49, 'a')));
  EXPECT_TRUE(IsValidCommandName("transfer_out"));
  EXPECT_FALSE(IsValidCommandName("drop table"));
  EXPECT_TRUE(IsValidCommandId(std::string(128, 'k')));
  EXPECT_FALSE(IsValidCommandId(std::string(129, 'k')));
}

}  // namespace
}  // namespace sluice
