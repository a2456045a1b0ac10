// The sluice program's own surface that needs no server.
#include <string>
#include <vector>

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

// Issue 18, item 11: an argument nothing takes is a usage error (exit 2)
// before anything runs, not silently ignored.
TEST(CliTest, StrayPositionalArgumentsAreUsageErrors) {
  const std::vector<std::vector<std::string>> commands = {
      {"init", "--config", "x.yaml", "extra"},
      {"serve", "--config", "x.yaml", "extra"},
      {"writer", "extra", "--config", "x.yaml"},
      {"sync", "--config", "x.yaml", "extra"},
      {"status", "--config", "x.yaml", "extra"},
      {"verify", "--config", "x.yaml", "extra"},
      {"deadletters", "list", "extra", "--config", "x.yaml"},
      {"pause", "--config", "x.yaml", "--sink", "s", "extra"},
      {"rewind", "--config", "x.yaml", "--sink", "s", "--to", "0", "extra"},
      {"rebuild", "--config", "x.yaml", "--sink", "s", "extra"},
      {"config", "check", "x.yaml", "extra"},
      {"version", "extra"},
  };
  for (const auto& args : commands) {
    std::string out;
    EXPECT_EQ(testing::RunSluice(args, &out), 2) << args[0] << ": " << out;
    EXPECT_NE(out.find("'extra'"), std::string::npos) << args[0] << ": " << out;
    EXPECT_NE(out.find("--help` for usage"), std::string::npos) << args[0] << ": " << out;
  }
  std::string out;
  EXPECT_EQ(testing::RunSluice({"status", "--config", "x.yaml", "extra"}, &out), 2);
  EXPECT_NE(out.find("sluice: unexpected argument 'extra'\nRun `sluice status --help` for usage."), std::string::npos)
      << out;
}

// Each command's help lists the options it acts on, and no internal ones.
TEST(CliTest, HelpListsOnlyTheCommandsOwnOptions) {
  std::string serve, writer, sync, deadletters, check;
  ASSERT_EQ(testing::RunSluice({"serve", "--help"}, &serve), 0);
  ASSERT_EQ(testing::RunSluice({"writer", "--help"}, &writer), 0);
  ASSERT_EQ(testing::RunSluice({"sync", "--help"}, &sync), 0);
  EXPECT_NE(serve.find("--no-init"), std::string::npos) << serve;
  EXPECT_NE(serve.find("--allow-weak-durability"), std::string::npos) << serve;
  EXPECT_EQ(writer.find("--no-init"), std::string::npos) << writer;
  EXPECT_NE(writer.find("--allow-weak-durability"), std::string::npos) << writer;
  EXPECT_EQ(sync.find("--no-init"), std::string::npos) << sync;
  EXPECT_EQ(sync.find("--allow-weak-durability"), std::string::npos) << sync;
  std::string out;
  EXPECT_EQ(testing::RunSluice({"sync", "--config", "x.yaml", "--no-init"}, &out), 2) << out;

  ASSERT_EQ(testing::RunSluice({"deadletters", "--help"}, &deadletters), 0);
  EXPECT_EQ(deadletters.find("--action"), std::string::npos) << deadletters;
  for (const char* word : {"list|retry|discard", "--id", "--json", "--sink", "--all"}) {
    EXPECT_NE(deadletters.find(word), std::string::npos) << word << "\n" << deadletters;
  }
  ASSERT_EQ(testing::RunSluice({"config", "check", "--help"}, &check), 0);
  EXPECT_EQ(check.find("--file"), std::string::npos) << check;
}

TEST(CliTest, DeadLetterActionsCheckTheirOptions) {
  std::string out;
  EXPECT_EQ(testing::RunSluice({"deadletters", "discard", "--config", "x.yaml"}, &out), 2);
  EXPECT_NE(out.find("deadletters discard needs --id N or --sink NAME"), std::string::npos) << out;
  EXPECT_EQ(testing::RunSluice({"deadletters", "retry", "--config", "x.yaml", "--json"}, &out), 2);
  EXPECT_NE(out.find("--all and --json are for deadletters list"), std::string::npos) << out;
  EXPECT_EQ(testing::RunSluice({"deadletters", "list", "--config", "x.yaml", "--id", "3"}, &out), 2);
  EXPECT_EQ(testing::RunSluice({"deadletters", "drop", "--config", "x.yaml"}, &out), 2);
  EXPECT_NE(out.find("unknown action 'drop' (list, retry or discard)"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice
