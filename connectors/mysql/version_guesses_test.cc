// The mysql sink's guesses about its rows, without a server: the version
// hints' bound and AbsentGuesses' back-off (mysql_sink_impl.h).
#include <gtest/gtest.h>

#include "connectors/mysql/mysql_sink_impl.h"

namespace sluice::connectors::mysql {
namespace {

// How many of the next `n` chunks may guess.
int AllowedOf(AbsentGuesses& g, int n) {
  int allowed = 0;
  for (int i = 0; i < n; ++i) allowed += g.Allowed() ? 1 : 0;
  return allowed;
}

TEST(MysqlAbsentGuesses, EachWrongGuessDoublesTheChunksThatReadUpToTheCap) {
  AbsentGuesses g;
  EXPECT_EQ(AllowedOf(g, 5), 5);
  for (const uint32_t skip : {1u, 2u, 4u, 8u}) {
    g.Wrong();
    for (uint32_t i = 0; i < skip; ++i) EXPECT_FALSE(g.Allowed()) << "skip " << skip << ", chunk " << i;
    EXPECT_TRUE(g.Allowed()) << "skip " << skip;
  }
  for (int i = 0; i < 20; ++i) g.Wrong();
  for (uint32_t i = 0; i < AbsentGuesses::kMaxSkip; ++i) ASSERT_FALSE(g.Allowed()) << i;
  EXPECT_TRUE(g.Allowed());
}

TEST(MysqlAbsentGuesses, ARightGuessHalvesTheNextWait) {
  AbsentGuesses g;
  for (int i = 0; i < 4; ++i) g.Wrong();  // penalty 8
  EXPECT_EQ(AllowedOf(g, 8), 0);
  g.Right();  // 4
  g.Wrong();  // 8 again, not 16
  EXPECT_EQ(AllowedOf(g, 9), 1);
  g.Right();
  g.Right();
  g.Right();
  g.Right();  // 0
  g.Wrong();  // 1
  EXPECT_EQ(AllowedOf(g, 2), 1);
}

TEST(MysqlVersionHints, ForgetsEverythingWhenFullAndNothingWhenOff) {
  VersionHints hints(2);
  hints.Remember("a", 1);
  hints.Remember("b", 2);
  hints.Remember("a", 3);  // an update takes no room
  EXPECT_EQ(hints.Find("a"), 3u);
  hints.Remember("c", 4);  // full: starts again
  EXPECT_FALSE(hints.Find("a"));
  EXPECT_EQ(hints.Find("c"), 4u);
  VersionHints off(0);
  off.Remember("a", 1);
  EXPECT_FALSE(off.Find("a"));
  EXPECT_FALSE(off.enabled());
}

}  // namespace
}  // namespace sluice::connectors::mysql
