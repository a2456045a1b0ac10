// The anti-entropy's logic without servers: the walk over partitions and
// entity ids, the pacing of steps, and what CompareAndRepair compares,
// repairs and leaves alone (against an in-memory point view).
#include "engine/anti_entropy.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "engine/memory_view_test.h"

namespace sluice::engine {
namespace {

using connectors::ChangeEvent;
using connectors::Difference;
using connectors::EntitySnapshot;
using connectors::Outcome;
using connectors::RepairGuard;
using metrics::DifferenceKind;

TEST(EntityWalk, WalksEachPartitionInIdOrderAndCountsPasses) {
  EntityWalk walk(3);
  EXPECT_EQ(walk.partition(), 0u);
  EXPECT_EQ(walk.after(), "");
  // Partition 0 holds 5 entities: steps of 2, 2, then 1 (short: next partition).
  EXPECT_FALSE(walk.Advance(2, 2, "b"));
  EXPECT_EQ(walk.partition(), 0u);
  EXPECT_EQ(walk.after(), "b");
  EXPECT_FALSE(walk.Advance(2, 2, "d"));
  EXPECT_EQ(walk.after(), "d");
  EXPECT_FALSE(walk.Advance(1, 2, "e"));
  EXPECT_EQ(walk.partition(), 1u);
  EXPECT_EQ(walk.after(), "");
  // Partition 1 is empty; partition 2 holds exactly 2: a full step, then an empty one.
  EXPECT_FALSE(walk.Advance(0, 2, ""));
  EXPECT_EQ(walk.partition(), 2u);
  EXPECT_FALSE(walk.Advance(2, 2, "y"));
  EXPECT_EQ(walk.partition(), 2u);
  EXPECT_EQ(walk.after(), "y");
  EXPECT_EQ(walk.passes(), 0u);
  EXPECT_TRUE(walk.Advance(0, 2, ""));
  EXPECT_EQ(walk.passes(), 1u);
  EXPECT_EQ(walk.partition(), 0u);
  EXPECT_EQ(walk.after(), "");
}

TEST(EntityWalk, OnePartitionEndsAPassAtEveryShortStep) {
  EntityWalk walk(1);
  EXPECT_FALSE(walk.Advance(100, 100, "k"));
  EXPECT_TRUE(walk.Advance(7, 100, "z"));
  EXPECT_TRUE(walk.Advance(0, 100, ""));
  EXPECT_EQ(walk.passes(), 2u);
}

TEST(StepInterval, IsBatchOverRate) {
  EXPECT_EQ(StepInterval(100, 100), std::chrono::seconds(1));  // the defaults: one step a second
  EXPECT_EQ(StepInterval(1000, 100), std::chrono::milliseconds(100));
  EXPECT_EQ(StepInterval(10, 100), std::chrono::seconds(10));
  EXPECT_EQ(StepInterval(3, 1), std::chrono::nanoseconds(333'333'333));
  EXPECT_EQ(StepInterval(1'000'000, 1), std::chrono::microseconds(1));
  EXPECT_GE(StepInterval(0, 0).count(), 1);  // never zero, never a division by zero
}

ChangeEvent Latest(const std::string& id, uint32_t partition, uint64_t event_id, uint64_t version,
                   const std::string& state, bool deleted = false) {
  ChangeEvent e;
  e.entity_type = "account";
  e.partition = partition;
  e.event_id = event_id;
  e.entity_id = id;
  e.version = version;
  e.deleted = deleted;
  e.state = deleted ? "" : state;
  return e;
}

const auto kBarrierOk = [] { return Status::Ok(); };
using EventKeys = std::set<std::pair<uint32_t, uint64_t>>;
const DeadLetterLookup kNoDeadLetters = [](const std::vector<std::pair<uint32_t, uint64_t>>&) -> Result<EventKeys> {
  return EventKeys{};
};

TEST(CompareAndRepair, RepairsOnlyTheEntitiesThatDifferAndCountsEachKind) {
  MemoryView view;
  view.rows["same"] = {3, false, R"({"n":3})"};
  view.rows["older"] = {1, false, R"({"n":1})"};
  view.rows["altered"] = {2, false, R"({"n":666})"};
  view.rows["deleted"] = {4, false, R"({"n":4})"};
  view.rows["gone"] = {2, true, ""};  // a tombstone of a deleted entity: fine
  // "missing" has no row.
  const std::vector<ChangeEvent> latest = {
      Latest("altered", 0, 5, 2, R"({"n":2})"),  Latest("deleted", 0, 6, 5, "", true),
      Latest("gone", 1, 2, 2, "", true),          Latest("missing", 1, 3, 7, R"({"n":7})"),
      Latest("older", 1, 4, 2, R"({"n":2})"),     Latest("same", 1, 5, 3, R"({"n":3})"),
  };
  auto r = CompareAndRepair(view, latest, {{0, 10}, {1, 10}}, kBarrierOk, kNoDeadLetters);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->skipped);
  EXPECT_EQ(r->checked, 6u);
  EXPECT_EQ(r->differences[static_cast<size_t>(DifferenceKind::kMissing)], 1u);
  EXPECT_EQ(r->differences[static_cast<size_t>(DifferenceKind::kExtra)], 1u);
  EXPECT_EQ(r->differences[static_cast<size_t>(DifferenceKind::kVersionMismatch)], 1u);
  EXPECT_EQ(r->differences[static_cast<size_t>(DifferenceKind::kContentMismatch)], 1u);
  EXPECT_EQ(r->differences[static_cast<size_t>(DifferenceKind::kAhead)], 0u);
  EXPECT_EQ(r->repaired, 4u);
  EXPECT_EQ(r->unrepaired, 0u);
  EXPECT_TRUE(r->newer.empty());
  // One write call, of exactly the four that differed.
  ASSERT_EQ(view.repair_calls.size(), 1u);
  EXPECT_EQ(view.repair_calls[0], (std::vector<std::string>{"altered", "deleted", "missing", "older"}));
  EXPECT_EQ(view.rows["altered"].state, R"({"n":2})");
  EXPECT_TRUE(view.rows["deleted"].deleted);
  EXPECT_EQ(view.rows["missing"].version, 7u);
  EXPECT_EQ(view.rows["older"].version, 2u);
  // Now the view matches: a second step finds nothing and writes nothing.
  r = CompareAndRepair(view, latest, {{0, 10}, {1, 10}}, kBarrierOk, kNoDeadLetters);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checked, 6u);
  EXPECT_EQ(r->repaired, 0u);
  EXPECT_EQ(view.repair_calls.size(), 1u);
}

TEST(CompareAndRepair, EntitiesTheSinkHasNotReachedAreNotCompared) {
  MemoryView view;  // empty: everything would be missing
  const std::vector<ChangeEvent> latest = {Latest("a", 0, 5, 1, "{}"), Latest("b", 0, 6, 1, "{}"),
                                           Latest("c", 1, 9, 1, "{}"), Latest("d", 2, 1, 1, "{}")};
  // Partition 0 applied up to event 5, partition 1 up to 8; partition 2 is unknown.
  auto r = CompareAndRepair(view, latest, {{0, 5}, {1, 8}}, kBarrierOk, kNoDeadLetters);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checked, 1u);
  EXPECT_EQ(r->repaired, 1u);
  ASSERT_EQ(view.repair_calls.size(), 1u);
  EXPECT_EQ(view.repair_calls[0], (std::vector<std::string>{"a"}));
  // Nothing passed: the view is not even read.
  MemoryView untouched;
  r = CompareAndRepair(untouched, latest, {{0, 0}, {1, 0}, {2, 0}}, kBarrierOk, kNoDeadLetters);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checked, 0u);
  EXPECT_EQ(untouched.verify_calls, 0);
}

TEST(CompareAndRepair, AViewNewerThanTheReadIsLeftForTheCallerToRecheck) {
  MemoryView view;
  view.rows["a"] = {9, false, "{}"};   // newer than the read: storage moved on, or the view is ahead
  view.rows["b"] = {4, true, ""};      // a tombstone newer than the live version read
  const std::vector<ChangeEvent> latest = {Latest("a", 0, 1, 5, "{}"), Latest("b", 3, 2, 2, "{}")};
  auto r = CompareAndRepair(view, latest, {{0, 1}, {3, 2}}, kBarrierOk, kNoDeadLetters);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checked, 2u);
  ASSERT_EQ(r->newer.size(), 2u);
  EXPECT_EQ(r->newer[0].entity_id, "a");
  EXPECT_EQ(r->newer[0].partition, 0u);
  EXPECT_EQ(r->newer[0].view_version, 9u);
  EXPECT_EQ(r->newer[1].entity_id, "b");
  EXPECT_EQ(r->newer[1].partition, 3u);
  EXPECT_EQ(r->newer[1].view_version, 4u);
  for (size_t k = 0; k < metrics::kDifferenceKinds; ++k) EXPECT_EQ(r->differences[k], 0u) << k;
  EXPECT_TRUE(view.repair_calls.empty()) << "a versioned repair can never fix a view ahead of storage";
}

TEST(CompareAndRepair, NothingIsWrittenWhenTheBarrierFails) {
  MemoryView view;
  int waits = 0;
  auto r = CompareAndRepair(view, std::vector<ChangeEvent>{Latest("a", 0, 1, 1, "{}")}, {{0, 1}}, [&] {
    ++waits;
    return Unavailable("storage is gone");
  }, kNoDeadLetters);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(r->differences[static_cast<size_t>(DifferenceKind::kMissing)], 1u);
  EXPECT_EQ(r->repaired, 0u);
  EXPECT_EQ(r->unrepaired, 1u);
  EXPECT_NE(r->repair_error.find("storage is gone"), std::string::npos) << r->repair_error;
  EXPECT_TRUE(view.repair_calls.empty());
  // And the barrier is not waited for when nothing differs.
  view.rows["a"] = {1, false, "{}"};
  r = CompareAndRepair(view, std::vector<ChangeEvent>{Latest("a", 0, 1, 1, "{}")}, {{0, 1}}, [&] {
    ++waits;
    return Status::Ok();
  }, kNoDeadLetters);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(waits, 1);
}

TEST(CompareAndRepair, RefusedRepairsAreCountedWithAnExample) {
  MemoryView view;
  view.refuse["bad"] = "value too long for column note";
  auto r = CompareAndRepair(view, std::vector<ChangeEvent>{Latest("bad", 0, 1, 1, "{}"), Latest("ok", 0, 2, 1, "{}")},
                            {{0, 2}}, kBarrierOk, kNoDeadLetters);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->repaired, 1u);
  EXPECT_EQ(r->unrepaired, 1u);
  EXPECT_EQ(r->unrepaired_example, "entity bad: refused: value too long for column note");
}

TEST(CompareAndRepair, AnEntityWhoseLatestEventIsADeadLetterIsLeftToDeadLetters) {
  MemoryView view;  // empty: both would be missing
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> asked;
  const DeadLetterLookup lookup = [&](const std::vector<std::pair<uint32_t, uint64_t>>& events) -> Result<EventKeys> {
    asked.push_back(events);
    return EventKeys{{1, 7}};
  };
  auto r = CompareAndRepair(view, std::vector<ChangeEvent>{Latest("dead", 1, 7, 1, "{}"), Latest("lost", 1, 8, 1, "{}")},
                            {{1, 8}}, kBarrierOk, lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checked, 2u);
  EXPECT_EQ(r->differences[static_cast<size_t>(DifferenceKind::kMissing)], 1u);
  EXPECT_EQ(r->repaired, 1u);
  ASSERT_EQ(view.repair_calls.size(), 1u);
  EXPECT_EQ(view.repair_calls[0], (std::vector<std::string>{"lost"}));
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::vector<std::pair<uint32_t, uint64_t>>{{1, 7}, {1, 8}}));
  // Asked only when something differs; a failed lookup fails the step.
  asked.clear();
  r = CompareAndRepair(view, std::vector<ChangeEvent>{Latest("lost", 1, 8, 1, "{}")}, {{1, 8}}, kBarrierOk, lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(asked.empty());
  MemoryView other;
  r = CompareAndRepair(other, std::vector<ChangeEvent>{Latest("x", 0, 1, 1, "{}")}, {{0, 1}}, kBarrierOk,
                       [](const auto&) -> Result<EventKeys> { return Unavailable("storage is gone"); });
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(other.repair_calls.empty());
}

}  // namespace
}  // namespace sluice::engine
