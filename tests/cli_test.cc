// The sluice program's own surface that needs no server.
#include <string>

#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace sluice {
namespace {

TEST(CliTest, VersionNamesTheAllocatorThatServesMalloc) {
  std::string out;
  ASSERT_EQ(testing::RunSluice({"version"}, &out), 0) << out;
  EXPECT_NE(out.find("sluice 0.1.0\n"), std::string::npos) << out;
#ifdef SLUICE_JEMALLOC
  // The build links jemalloc into the programs: it must be the one serving
  // malloc, not merely loaded beside the C library's.
  EXPECT_NE(out.find("allocator: jemalloc 5."), std::string::npos) << out;
#else
  EXPECT_NE(out.find("allocator: the C library's malloc\n"), std::string::npos) << out;
#endif
}

}  // namespace
}  // namespace sluice
