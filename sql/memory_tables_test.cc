// The access-layer contract (tables_test.h) on the in-memory fake, and what
// only the fake has.
#include "sql/memory_tables.h"

#include <gtest/gtest.h>

#include "sql/tables_test.h"

namespace sluice::sql {
namespace {

INSTANTIATE_TEST_SUITE_P(Memory, TablesContractTest,
                         ::testing::Values(StorageKind{"Memory", [] { return ContractStorage{MemoryStorage::Create(), nullptr}; }}),
                         KindName);

TEST(TimestampText, IsWhatMariaDbPrintsForATimestamp6InUtc) {
  EXPECT_EQ(TimestampText(0), "1970-01-01 00:00:00.000000");
  EXPECT_EQ(TimestampText(1763726400123456), "2025-11-21 12:00:00.123456");
  EXPECT_EQ(TimestampText(1763726400000001), "2025-11-21 12:00:00.000001");
}

TEST(MemoryStorage, AFailedReadIsCountedAndBreaksTheSessionWhenUnavailable) {
  auto storage = MemoryStorage::Create();
  auto log = storage->OpenEventLog();
  storage->FailNext(MemoryStorage::Op::kHistory, Unavailable("gone"));
  EXPECT_EQ(log->History("account", 0, "a", 0, 10).status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(log->healthy());
  EXPECT_TRUE(log->History("account", 0, "a", 0, 10).ok());  // reopened
  EXPECT_EQ(storage->calls(MemoryStorage::Op::kHistory), 2u);
}

}  // namespace
}  // namespace sluice::sql
