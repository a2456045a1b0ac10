// The access-layer contract (tables_test.h) on the in-memory fake, and what
// only the fake has.
#include "sql/memory_tables.h"

#include <gtest/gtest.h>

#include "sql/routed_tables.h"
#include "sql/tables_test.h"

namespace sluice::sql {
namespace {

INSTANTIATE_TEST_SUITE_P(Memory, TablesContractTest,
                         ::testing::Values(StorageKind{"Memory", [] { return ContractStorage{MemoryStorage::Create(), nullptr}; }}),
                         KindName);

OffsetRow MakeOffset(uint64_t event_id) {
  OffsetRow row;
  row.event_id = event_id;
  return row;
}

StorageLayout TwoServerLayout() {
  StorageLayout layout;
  layout.servers = {{"main", {}}, {"second", {}}};
  layout.placement["account"] = {0, 1};
  return layout;
}

// Two fakes and the routed storage over them: partition 0 of "account" on main, 1 on second.
struct TwoFakes {
  std::shared_ptr<MemoryStorage> main = MemoryStorage::Create();
  std::shared_ptr<MemoryStorage> second = MemoryStorage::Create();
  RoutedStorage routed{TwoServerLayout(), {main, second}};
};

// The same contract through RoutedStorage over two fakes: partition 0 of
// "account" on one, partition 1 on the other, members and dead letters on
// the first.
ContractStorage TwoServers() {
  return ContractStorage{std::make_shared<RoutedStorage>(
                             TwoServerLayout(),
                             std::vector<std::shared_ptr<Storage>>{MemoryStorage::Create(), MemoryStorage::Create()}),
                         nullptr};
}

INSTANTIATE_TEST_SUITE_P(RoutedMemory, TablesContractTest,
                         ::testing::Values(StorageKind{"RoutedMemory", TwoServers}), KindName);

TEST(RoutedStorage, EachPartitionsRowsLiveOnItsServerOnly) {
  TwoFakes fakes;
  auto& [main, second, routed] = fakes;

  auto offsets = routed.OpenOffsets();
  ASSERT_TRUE(offsets->Save("s", "account", {{0, MakeOffset(5)}, {1, MakeOffset(7)}}).ok());
  auto on_main = main->OpenOffsets()->Load("s", "account");
  auto on_second = second->OpenOffsets()->Load("s", "account");
  ASSERT_TRUE(on_main.ok() && on_second.ok());
  EXPECT_EQ(on_main->size(), 1u);
  EXPECT_EQ(on_main->at(0).event_id, 5u);
  EXPECT_EQ(on_second->size(), 1u);
  EXPECT_EQ(on_second->at(1).event_id, 7u);

  auto leases = routed.OpenLeases();
  auto held = leases->Acquire("sink/s", "account", {0, 1}, "e1", std::chrono::seconds(10), {});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->size(), 2u);
  auto main_leases = main->OpenLeases()->List("sink/s");
  ASSERT_TRUE(main_leases.ok());
  ASSERT_EQ(main_leases->size(), 1u);
  EXPECT_EQ(main_leases->front().partition, 0u);
  ASSERT_TRUE(leases->Heartbeat("engine", "e1", "").ok());
  auto members = main->OpenLeases()->Members("engine", std::chrono::seconds(10));
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->size(), 1u);
}

TEST(RoutedStorage, ALeaseRoundFailsWhenAServerOfItsPartitionsIsDown) {
  TwoFakes fakes;
  auto& [main, second, routed] = fakes;
  auto leases = routed.OpenLeases();
  auto held = leases->Acquire("sink/s", "account", {0, 1}, "e1", std::chrono::seconds(10), {});
  ASSERT_TRUE(held.ok()) << held.status().message();
  ASSERT_EQ(held->size(), 2u);
  // Not an answer without partition 1: the caller would stop renewing a
  // lease it may still apply under, as if another owner had it.
  second->FailNext(MemoryStorage::Op::kLeases, Unavailable("second is down"));
  EXPECT_EQ(leases->Acquire("sink/s", "account", {0, 1}, "e1", std::chrono::seconds(10), *held).status().code(),
            StatusCode::kUnavailable);
  // Partition 0 alone is main's business.
  second->FailNext(MemoryStorage::Op::kLeases, Unavailable("second is down"));
  auto only_main = leases->Acquire("sink/s", "account", {0}, "e1", std::chrono::seconds(10), {{0, held->at(0)}});
  ASSERT_TRUE(only_main.ok()) << only_main.status().message();
  EXPECT_EQ(only_main->at(0), held->at(0));  // renewed, same token
}

TEST(RoutedStorage, AReaderKeepsServingTheServerThatIsUp) {
  TwoFakes fakes;
  auto& [main, second, routed] = fakes;
  auto log = routed.OpenEventLog();
  ASSERT_TRUE(log->Head("account", 0).ok());
  second->FailNext(MemoryStorage::Op::kHead, Unavailable("second is down"));
  EXPECT_EQ(log->Head("account", 1).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(log->healthy());  // main's session is fine: nothing to reopen before a call to main
  EXPECT_TRUE(log->Head("account", 0).ok());
  second->FailNext(MemoryStorage::Op::kOpen, Unavailable("still down"));
  EXPECT_EQ(log->Head("account", 1).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(log->Head("account", 1).ok());  // back: the call opened a new session itself
  // Every session broken: unhealthy, and Open() reopens them.
  main->FailNext(MemoryStorage::Op::kHead, Unavailable("main is down"));
  second->FailNext(MemoryStorage::Op::kHead, Unavailable("second is down"));
  EXPECT_FALSE(log->Head("account", 0).ok());
  EXPECT_FALSE(log->Head("account", 1).ok());
  EXPECT_FALSE(log->healthy());
  EXPECT_TRUE(log->Open().ok());
  EXPECT_TRUE(log->healthy());
}

TEST(StorageLayout, DescribesRangesByServer) {
  StorageLayout layout;
  layout.servers = {{"main", {}}, {"b", {}}};
  layout.placement["order"] = {0, 0, 1, 1, 0};
  EXPECT_EQ(layout.Describe("order", 5), "0-1 on main, 2-3 on b, 4 on main");
  EXPECT_EQ(layout.Describe("other", 3), "on main");
  EXPECT_EQ(layout.ServersOf("order", 5), (std::vector<size_t>{0, 1}));
}

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
