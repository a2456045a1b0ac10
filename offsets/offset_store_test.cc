// OffsetStore on the in-memory offset table: what a rewind keeps and moves.
#include "offsets/offset_store.h"

#include <gtest/gtest.h>

#include "sql/memory_tables.h"

namespace sluice::offsets {
namespace {

TEST(OffsetStoreTest, SavesAndLoadsEveryPartition) {
  auto storage = sql::MemoryStorage::Create();
  OffsetStore store(storage->OpenOffsets());
  PartitionProgress p;
  p.event_id = 7;
  p.applied = 5;
  p.stale = 1;
  p.dead_lettered = 1;
  p.state = "backoff";
  p.last_error = std::string(3000, 'x');
  ASSERT_TRUE(store.Save("s", "account", {{0, p}, {2, PartitionProgress{}}}).ok());
  auto loaded = store.Load("s", "account");
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ(loaded->at(0).event_id, 7u);
  EXPECT_EQ(loaded->at(0).state, "backoff");
  EXPECT_EQ(loaded->at(0).last_error.size(), 2000u);  // cut, as the column is
  EXPECT_TRUE(store.Load("other", "account")->empty());
}

TEST(OffsetStoreTest, RewindMovesOffsetsAndKeepsCounters) {
  auto storage = sql::MemoryStorage::Create();
  OffsetStore store(storage->OpenOffsets());
  PartitionProgress p;
  p.event_id = 9;
  p.applied = 9;
  ASSERT_TRUE(store.Save("s", "account", {{0, p}, {1, p}}).ok());
  ASSERT_TRUE(store.Rewind("s", "account", 1, 4, 3).ok());
  auto one = store.Load("s", "account");
  EXPECT_EQ(one->at(0).event_id, 9u);
  EXPECT_EQ(one->at(1).event_id, 4u);
  EXPECT_EQ(one->at(1).applied, 9u);
  ASSERT_TRUE(store.Rewind("s", "account", std::nullopt, 0, 3).ok());
  auto all = store.Load("s", "account");
  ASSERT_EQ(all->size(), 3u);  // a partition without a row gets one
  for (const auto& [partition, progress] : *all) EXPECT_EQ(progress.event_id, 0u);
  ASSERT_TRUE(store.Delete("s", "account").ok());
  EXPECT_TRUE(store.Load("s", "account")->empty());
}

TEST(OffsetStoreTest, FailuresAreReturnedAndTheSessionReopens) {
  auto storage = sql::MemoryStorage::Create();
  OffsetStore store(storage->OpenOffsets());
  storage->FailNext(sql::MemoryStorage::Op::kOffsetsSave, Unavailable("gone"));
  PartitionProgress p;
  p.event_id = 1;
  EXPECT_EQ(store.Save("s", "account", {{0, p}}).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(store.Save("s", "account", {{0, p}}).ok());
  EXPECT_EQ(storage->calls(sql::MemoryStorage::Op::kOpen), 2u);
  EXPECT_EQ(storage->Offsets("s", "account").at(0).event_id, 1u);
}

}  // namespace
}  // namespace sluice::offsets
