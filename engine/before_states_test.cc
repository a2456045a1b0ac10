// engine/before_states over the in-memory tables: where each state before
// comes from (the batch, the kept states, one read), and that a batch never
// costs more than one read.
#include "engine/before_states.h"

#include <gtest/gtest.h>

#include "engine/event_reader.h"
#include "sql/memory_tables.h"

namespace sluice::engine {
namespace {

using Op = sql::MemoryStorage::Op;

class BeforeStatesTest : public ::testing::Test {
 protected:
  // Appends the next event of `entity` to partition 0 (state {"n": event_id}).
  void Add(const std::string& entity, bool deleted = false) {
    sql::EventRow r;
    r.event_id = ++head_;
    r.entity_id = entity;
    r.version = ++versions_[entity];
    r.command_id = "c" + std::to_string(r.event_id);
    r.command_name = deleted ? "delete" : "put";
    r.request = R"({"req":)" + std::to_string(r.event_id) + "}";
    r.response = "{}";
    r.deleted = deleted;
    if (!deleted) r.state = R"({"n":)" + std::to_string(r.event_id) + "}";
    ASSERT_TRUE(storage_->Insert("account", 0, r).ok());
  }

  // Reads events after `after` (full columns) and fills their states before.
  std::vector<connectors::ChangeEvent> Read(BeforeStates& b, uint64_t after, uint32_t limit = 100) {
    auto r = ReadEvents(*log_, "account", 0, after, limit, sql::EventLog::Columns::kFull);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(b.Fill(*log_, "account", 0, r->events).ok());
    return std::move(r->events);
  }

  uint64_t head_ = 0;
  std::map<std::string, uint64_t> versions_;
  std::shared_ptr<sql::MemoryStorage> storage_ = sql::MemoryStorage::Create();
  std::unique_ptr<sql::EventLog> log_ = storage_->OpenEventLog();
};

TEST_F(BeforeStatesTest, EachEventGetsTheStateItsEntityHadBeforeIt) {
  Add("a");        // 1: a@1, nothing before
  Add("b");        // 2: b@1
  Add("a");        // 3: a@2, before = event 1's state
  Add("a", true);  // 4: a@3 deleted, before = event 3's state
  Add("a");        // 5: a@4 re-created: nothing before (null)
  Add("b");        // 6: b@2, before = event 2's state
  BeforeStates b;
  auto events = Read(b, 0);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0].before, "");
  EXPECT_EQ(events[1].before, "");
  EXPECT_EQ(events[2].before, R"({"n":1})");
  EXPECT_EQ(events[3].before, R"({"n":3})");
  EXPECT_EQ(events[4].before, "");
  EXPECT_EQ(events[5].before, R"({"n":2})");
  EXPECT_EQ(events[2].request, R"({"req":3})");  // full columns
  EXPECT_EQ(storage_->calls(Op::kAtVersions), 0u);  // all from the batch itself
  EXPECT_EQ(b.stats().from_batch, 4u);
}

TEST_F(BeforeStatesTest, LaterBatchesUseTheKeptStatesAndReadTheRestInOneStatement) {
  for (int i = 0; i < 10; ++i) Add("e" + std::to_string(i));  // events 1..10
  BeforeStates b;
  (void)Read(b, 0, 5);  // events 1..5 seen: e0..e4 kept
  for (int i = 0; i < 10; ++i) Add("e" + std::to_string(i));  // events 11..20: version 2 of each
  auto rest = Read(b, 5, 100);  // events 6..20; e5..e9's first versions are in this batch too
  ASSERT_EQ(rest.size(), 15u);
  for (const auto& e : rest) {
    if (e.version == 2) {
      EXPECT_EQ(e.before, R"({"n":)" + std::to_string(e.event_id - 10) + "}") << e.entity_id;
    }
  }
  EXPECT_EQ(storage_->calls(Op::kAtVersions), 0u);
  EXPECT_EQ(b.stats().from_cache, 5u);
  // A fresh reader (a restart) starting at event 10 has kept nothing: the
  // ten states before are one read.
  BeforeStates fresh;
  auto after_restart = Read(fresh, 10);
  ASSERT_EQ(after_restart.size(), 10u);
  for (const auto& e : after_restart) EXPECT_EQ(e.before, R"({"n":)" + std::to_string(e.event_id - 10) + "}");
  EXPECT_EQ(storage_->calls(Op::kAtVersions), 1u);
  EXPECT_EQ(fresh.stats().from_storage, 10u);
}

// The kept states are bounded: with room for 4 entities, the most recently
// seen are found, the ones seen long ago are read (in one statement), and
// every state before is right either way.
TEST_F(BeforeStatesTest, KeptStatesAreBoundedAndTheRecentOnesAreKept) {
  for (int i = 0; i < 8; ++i) Add("e" + std::to_string(i));  // events 1..8
  BeforeStates b(4);
  for (uint64_t at = 0; at < 8; ++at) (void)Read(b, at, 1);  // one batch per event: e0 .. e7 seen in turn
  for (int i = 0; i < 8; ++i) Add("e" + std::to_string(i));  // events 9..16: version 2 of each
  auto again = Read(b, 8, 100);
  ASSERT_EQ(again.size(), 8u);
  for (const auto& e : again) EXPECT_EQ(e.before, R"({"n":)" + std::to_string(e.event_id - 8) + "}") << e.entity_id;
  EXPECT_EQ(b.stats().from_cache, 4u);  // e4 .. e7
  EXPECT_EQ(b.stats().from_cache + b.stats().from_storage, 8u);
  EXPECT_EQ(storage_->calls(Op::kAtVersions), 1u);
}

TEST_F(BeforeStatesTest, AReadFailureIsReportedAndAMissingEventBeforeIsAnError) {
  Add("a");
  Add("a");
  BeforeStates b;
  auto r = ReadEvents(*log_, "account", 0, 1, 10, sql::EventLog::Columns::kFull);
  ASSERT_TRUE(r.ok());
  storage_->FailNext(Op::kAtVersions, Unavailable("down"));
  EXPECT_EQ(b.Fill(*log_, "account", 0, r->events).code(), StatusCode::kUnavailable);
  ASSERT_TRUE(b.Fill(*log_, "account", 0, r->events).ok());
  EXPECT_EQ(r->events[0].before, R"({"n":1})");
  // An event whose previous version storage lacks (I3 forbids it).
  connectors::ChangeEvent orphan = r->events[0];
  orphan.entity_id = "ghost";
  orphan.version = 5;
  std::vector<connectors::ChangeEvent> one{orphan};
  const Status st = b.Fill(*log_, "account", 0, one);
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("ghost version 5"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace sluice::engine
