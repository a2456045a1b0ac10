// ReaderPool on the in-memory tables: each job gets its thread's event log,
// or the error that kept it from opening a session (and the next job tries
// again). No server.
#include "writer/reader_pool.h"

#include <gtest/gtest.h>

#include <future>

#include "sql/memory_tables.h"

namespace sluice::writer {
namespace {

using sql::MemoryStorage;

// Runs one job on the pool and returns what it was given: ok, or the status.
Status RunOne(ReaderPool& pool, const std::function<void(sql::EventLog&)>& with_log = nullptr) {
  std::promise<Status> given;
  EXPECT_TRUE(pool.Submit([&given, &with_log](Result<sql::EventLog*> log) {
    if (log.ok() && with_log) with_log(**log);
    given.set_value(log.status());
  }));
  return given.get_future().get();
}

TEST(ReaderPool, AJobGetsTheConnectErrorAndTheNextOneASession) {
  auto storage = MemoryStorage::Create();
  sql::EventRow row;
  row.event_id = 1;
  row.entity_id = "a";
  row.version = 1;
  row.command_id = "c1";
  row.state = "{}";
  ASSERT_TRUE(storage->Insert("account", 0, row).ok());
  ReaderPool pool(storage, 1, 10);
  pool.Start();
  storage->FailNext(MemoryStorage::Op::kOpen, Unavailable("server gone"));
  EXPECT_EQ(RunOne(pool).code(), StatusCode::kUnavailable);
  std::vector<sql::EventRow> read;
  EXPECT_TRUE(RunOne(pool, [&read](sql::EventLog& log) { read = log.History("account", 0, "a", 0, 10).value(); }).ok());
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].event_id, 1u);
  EXPECT_EQ(storage->calls(MemoryStorage::Op::kOpen), 2u);  // the session is kept for the jobs after
  EXPECT_TRUE(RunOne(pool).ok());
  EXPECT_EQ(storage->calls(MemoryStorage::Op::kOpen), 2u);
  pool.Stop();
  EXPECT_FALSE(pool.Submit([](Result<sql::EventLog*>) {}));  // stopped: refused
}

TEST(ReaderPool, AFullQueueRefusesTheJob) {
  auto storage = MemoryStorage::Create();
  ReaderPool pool(storage, 1, 1);  // not started: nothing drains the queue
  EXPECT_TRUE(pool.Submit([](Result<sql::EventLog*>) {}));
  EXPECT_FALSE(pool.Submit([](Result<sql::EventLog*>) {}));
  pool.Start();
  pool.Stop();  // runs the queued job, then joins
}

}  // namespace
}  // namespace sluice::writer
