// engine::DurabilityBarrier against the real MariaDB (DESIGN I5): what each
// mode runs, that rounds are shared by concurrent waiters, and that a server
// out of reach is an error the reader sees (its events are then read again).
// The crash side (kill -9 of mariadbd) is tests/durability_fault_test.cc.
#include "engine/durability_barrier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using config::DurabilityBarrier;

TEST(DurabilityBarrier, AutoWaitsForTheFlushedLsnOnMariadb) {
  SLUICE_REQUIRE_MYSQL();
  engine::DurabilityBarrier barrier(MysqlParams(), DurabilityBarrier::kAuto);
  EXPECT_EQ(barrier.mode(), "auto");
  ASSERT_TRUE(barrier.Wait().ok());
  EXPECT_EQ(barrier.mode(), "lsn");  // MariaDB reports Innodb_lsn_flushed
  EXPECT_EQ(barrier.counters().rounds, 1u);
}

TEST(DurabilityBarrier, CommitModeCommitsARowOfItsOwnPerRound) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("barrier");
  sql::ConnectParams params = MysqlParams();
  params.database = db.name();
  engine::DurabilityBarrier barrier(params, DurabilityBarrier::kCommit);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(barrier.Wait().ok());
  EXPECT_EQ(barrier.mode(), "commit");
  EXPECT_EQ(db.Scalar("SELECT n FROM sluice_durability_barrier WHERE id = 1"), 3);
}

TEST(DurabilityBarrier, ConcurrentWaitersShareRounds) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("barrier_shared");
  sql::ConnectParams params = MysqlParams();
  params.database = db.name();
  for (const DurabilityBarrier mode : {DurabilityBarrier::kCommit, DurabilityBarrier::kLsn}) {
    engine::DurabilityBarrier barrier(params, mode);
    constexpr int kThreads = 8;
    constexpr int kWaits = 50;
    std::atomic<int> failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kWaits; ++i) {
          if (!barrier.Wait().ok()) ++failed;
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(failed.load(), 0);
    const auto c = barrier.counters();
    EXPECT_EQ(c.waits, uint64_t{kThreads * kWaits});
    // Every wait was covered by a round, and waiters arriving during a round
    // shared the next one.
    EXPECT_LT(c.rounds, c.waits) << config::DurabilityBarrierName(mode);
    EXPECT_GE(c.rounds, uint64_t{kWaits});
  }
}

// With nobody committing, the redo log can stay unflushed past what a read
// saw (here: a transaction left open wrote to it) until InnoDB's background
// flush, up to a second later. An lsn round then commits a row of its own,
// which flushes the log, instead of waiting for that.
TEST(DurabilityBarrier, LsnModeFlushesTheLogItselfWhenNobodyCommits) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("barrier_force");
  sql::ConnectParams params = MysqlParams();
  params.database = db.name();
  ASSERT_TRUE(db.conn().Execute("CREATE TABLE pad (id INT PRIMARY KEY, body LONGTEXT) ENGINE=InnoDB").ok());
  engine::DurabilityBarrier barrier(params, DurabilityBarrier::kLsn);
  ASSERT_TRUE(barrier.Wait().ok());
  auto open = sql::Connection::Open(params);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  sql::Connection& writer = **open;
  // The background flush may land between the write and the round; a few
  // tries make that chance negligible.
  for (int attempt = 0; attempt < 5 && barrier.counters().forced_flushes == 0; ++attempt) {
    ASSERT_TRUE(writer.Execute("BEGIN").ok());
    ASSERT_TRUE(writer.Execute("INSERT INTO pad VALUES (" + std::to_string(attempt) + ", REPEAT('x', 200000))").ok());
    ASSERT_TRUE(barrier.Wait().ok());
    ASSERT_TRUE(writer.Execute("ROLLBACK").ok());
  }
  EXPECT_GE(barrier.counters().forced_flushes, 1u);
  EXPECT_EQ(barrier.mode(), "lsn");
  EXPECT_GE(db.Scalar("SELECT n FROM sluice_durability_barrier WHERE id = 1"), 1);
}

TEST(DurabilityBarrier, OffRunsNothing) {
  engine::DurabilityBarrier barrier(MysqlParams(), DurabilityBarrier::kOff);
  ASSERT_TRUE(barrier.Wait().ok());
  EXPECT_EQ(barrier.counters().rounds, 0u);
}

TEST(DurabilityBarrier, UnreachableServerIsAnErrorForTheReader) {
  SLUICE_REQUIRE_MYSQL();
  TcpProxy proxy(MysqlParams().host, MysqlParams().port);
  sql::ConnectParams params = MysqlParams();
  params.port = proxy.port();
  engine::DurabilityBarrier barrier(params, DurabilityBarrier::kAuto);
  ASSERT_TRUE(barrier.Wait().ok());
  proxy.SetEnabled(false);
  const Status st = barrier.Wait();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  proxy.SetEnabled(true);
  EXPECT_TRUE(barrier.Wait().ok());  // reconnects
}

}  // namespace
}  // namespace sluice::testing
