// The pull loop (SinkRunner) on the in-memory tables and a scripted sink:
// ordering, offsets saved only past what the sink flushed, dead letters per
// on_error, retries while the sink or storage is unavailable, gaps, a sink
// that prepares its batches ahead. No server.
#include "engine/sink_runner.h"

#include <gtest/gtest.h>

#include "engine/lease_keeper.h"
#include "engine/sink_runner_test_fixture.h"

namespace sluice::engine {
namespace {

using namespace testing_fixture;
using connectors::ChangeEvent;
using connectors::Outcome;
using sql::MemoryStorage;
using namespace std::chrono_literals;

TEST_F(SinkRunnerUnitTest, AppliesEveryPartitionInOrderAndSavesItsOffsets) {
  Append(0, 30);
  Append(1, 7);
  Start(config::OnError::kDeadLetter, /*chunk=*/8);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 37; }));
  runner_->Stop();
  std::map<uint32_t, uint64_t> last;
  for (const auto& [p, id] : script_.applied) {
    EXPECT_EQ(id, last[p] + 1) << "partition " << p;  // nothing skipped, nothing out of order
    last[p] = id;
  }
  EXPECT_EQ(Saved(0), 30u);
  EXPECT_EQ(Saved(1), 7u);
  EXPECT_EQ(storage_->Offsets("rec", kType).at(0).applied, 30u);
}

// Every flush interval the applier tells the sink, busy or not (the Kafka
// sink closes the producers of partitions that stopped sending then, also
// while others send): while events keep coming, and once none do.
TEST_F(SinkRunnerUnitTest, TheSinkIsToldAboutEveryFlushIntervalBusyOrNot) {
  Append(0, 40);
  Start(config::OnError::kDeadLetter, /*chunk=*/8);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 40; }));
  const auto idle_calls = [this] {
    std::lock_guard lock(script_.mu);
    return script_.idle_calls;
  };
  // Busy: an event every millisecond, each applied before the next.
  const int before_busy = idle_calls();
  for (uint64_t n = 41; n <= 240; ++n) {
    Append(0, 1);
    ASSERT_TRUE(WaitFor([n](const auto& t) { return t.applied == n; }));
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_GE(idle_calls(), before_busy + 3) << "not told while events kept coming";
  // Idle.
  const int after_busy = idle_calls();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (idle_calls() < after_busy + 3) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "not told while nothing came";
    std::this_thread::sleep_for(1ms);
  }
}

TEST_F(SinkRunnerUnitTest, StartsFromTheStoredOffsets) {
  Append(0, 5);
  sql::OffsetRow row;
  row.event_id = 3;
  ASSERT_TRUE(storage_->OpenOffsets()->Save("rec", kType, {{0, row}}).ok());
  Start();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 5; }));
  runner_->Stop();
  EXPECT_EQ(script_.applied, (std::vector<std::pair<uint32_t, uint64_t>>{{0, 4}, {0, 5}}));
}

TEST_F(SinkRunnerUnitTest, OffsetsNeverPassWhatTheSinkFlushed) {
  Append(0, 10);
  {
    std::lock_guard lock(script_.mu);
    script_.fail_flush = true;
  }
  Start();
  // Applied (acknowledged) again and again, never flushed: the saved offset stays.
  ASSERT_TRUE(WaitFor([&](const auto&) {
    std::lock_guard lock(script_.mu);
    return script_.applied.size() >= 30;
  }));
  EXPECT_EQ(Saved(0), 0u);
  {
    std::lock_guard lock(script_.mu);
    script_.fail_flush = false;
  }
  ASSERT_TRUE(WaitFor([&](const auto&) { return Saved(0) == 10; }));
  runner_->Stop();
  std::lock_guard lock(script_.mu);
  for (uint64_t id = 1; id <= 10; ++id) EXPECT_TRUE(script_.durable.count({0, id})) << id;
}

TEST_F(SinkRunnerUnitTest, ARejectedEventIsDeadLetteredAndThePartitionMovesOn) {
  Append(0, 5);
  script_.reject = {{0, 3}};
  Start(config::OnError::kDeadLetter);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 5; }));
  runner_->Stop();
  const auto letters = storage_->DeadLetters();
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].sink, "rec");
  EXPECT_EQ(letters[0].event_id, 3u);
  EXPECT_EQ(letters[0].error, "refused by the test");
  EXPECT_EQ(runner_->totals().dead_lettered, 1u);
  EXPECT_EQ(storage_->Offsets("rec", kType).at(0).dead_lettered, 1u);
}

TEST_F(SinkRunnerUnitTest, ARejectionWithOnErrorStopStopsBeforeTheEvent) {
  Append(0, 5);
  script_.reject = {{0, 3}};
  Start(config::OnError::kStop);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.state == SinkState::kStopped; }));
  runner_->Stop();
  EXPECT_EQ(Saved(0), 2u);
  EXPECT_EQ(storage_->Offsets("rec", kType).at(0).state, "stopped");
  EXPECT_TRUE(storage_->DeadLetters().empty());
}

TEST_F(SinkRunnerUnitTest, AFailedDeadLetterWriteRetriesWithoutMovingPastTheEvent) {
  Append(0, 4);
  script_.reject = {{0, 2}};
  storage_->FailNext(MemoryStorage::Op::kDeadLetterAdd, Unavailable("storage went away"), 3);
  Start();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 4; }));
  runner_->Stop();
  EXPECT_EQ(storage_->DeadLetters().size(), 1u);
  EXPECT_GE(runner_->totals().retries, 3u);
}

TEST_F(SinkRunnerUnitTest, AnUnavailableSinkIsRetriedAndReapplyingIsStale) {
  Append(0, 6, "same");  // one entity, versions 1..6
  script_.unavailable_calls = 3;
  Start();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 6; }));
  runner_->Stop();
  const auto t = runner_->totals();
  EXPECT_EQ(t.applied + t.stale, 6u);
  EXPECT_EQ(t.retries, 3u);
  EXPECT_EQ(script_.versions["same"], 6u);
}

TEST_F(SinkRunnerUnitTest, ReadFailuresAreRetried) {
  Append(1, 3);
  storage_->FailNext(MemoryStorage::Op::kReadAfter, Unavailable("connection lost"), 2);
  Start();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(1) == 3; }));
  runner_->Stop();
  EXPECT_GE(storage_->calls(MemoryStorage::Op::kOpen), 2u);  // the reader's session was reopened
}

TEST_F(SinkRunnerUnitTest, AGapIsCountedAndNeverSkipped) {
  Append(0, 2);
  sql::EventRow r;
  r.event_id = 4;  // 3 is missing
  r.entity_id = "late";
  r.version = 1;
  r.command_id = "c4";
  r.state = "{}";
  ASSERT_TRUE(storage_->Insert(kType, 0, r).ok());
  Start();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 2 && t.gaps > 0; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(runner_->totals().offsets.at(0), 2u);
  r.event_id = 3;
  r.entity_id = "filled";
  r.command_id = "c3";
  ASSERT_TRUE(storage_->Insert(kType, 0, r).ok());
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 4; }));
}

// A runner woken per partition (as in a SyncEngine) over many partitions
// with a few events each: every partition may hold a backlog at the start,
// and they are read 16 to a statement, each limited to its share of
// batch_max, not one statement per partition.
TEST_F(SinkRunnerUnitTest, ManyPartitionsWithAFewEventsEachAreReadSixteenToAStatement) {
  constexpr uint32_t kMany = 64;
  for (uint32_t p = 0; p < kMany; ++p) Append(p, 6);  // batch_max 100 / 16 partitions = 6 each
  StartWokenPerPartition(kMany, /*chunk=*/1000, /*read_max=*/100, /*inflight=*/4);
  ASSERT_TRUE(WaitApplied(kMany * 6));
  // Each partition filled its share of 6: one more pass reads what is left
  // of each (nothing), again 16 to a statement; then the reader sleeps
  // until a wake-up.
  const uint64_t expected = 2u * kMany / 16;
  const auto settle = std::chrono::steady_clock::now() + 5s;
  while (storage_->calls(MemoryStorage::Op::kReadAfter) < expected && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(1ms);
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kReadAfter), expected);
  runner_->Stop();
  EachPartitionInOrder();
}

// engine.batch_max below the 16 partitions a statement may take: each
// partition still reads at least one event per statement, and every event
// arrives once, in order.
TEST_F(SinkRunnerUnitTest, ABatchMaxSmallerThanTheGroupStillReadsEveryPartitionToTheEnd) {
  constexpr uint32_t kMany = 10;
  for (uint32_t p = 0; p < kMany; ++p) Append(p, 3);
  StartWokenPerPartition(kMany, /*chunk=*/2, /*read_max=*/4, /*inflight=*/1);
  ASSERT_TRUE(WaitApplied(kMany * 3));
  runner_->Stop();
  EachPartitionInOrder();
}

// One partition with a long backlog among partitions with a few events: the
// backlog is read to the end in order while the others are applied, and
// events read ahead stay within inflight_batches batches of batch_max.
TEST_F(SinkRunnerUnitTest, ALongBacklogBesideShortOnesIsReadToTheEndInOrder) {
  constexpr uint32_t kMany = 20;
  Append(0, 1000);
  for (uint32_t p = 1; p < kMany; ++p) Append(p, 3);
  StartWokenPerPartition(kMany, /*chunk=*/40, /*read_max=*/50, /*inflight=*/2);
  const uint64_t total = 1000 + (kMany - 1) * 3;
  const auto until = std::chrono::steady_clock::now() + 10s;
  uint64_t most_ahead = 0;
  while (runner_->totals().applied < total && std::chrono::steady_clock::now() < until) {
    const auto t = runner_->totals();
    most_ahead = std::max(most_ahead, t.read - t.applied);
    std::this_thread::sleep_for(100us);
  }
  ASSERT_EQ(runner_->totals().applied, total);
  runner_->Stop();
  // Read ahead: what the reader may queue (2 batches of 50) plus the batch
  // the applier holds (it takes a whole batch, and applies it in chunks).
  EXPECT_LE(most_ahead, 3u * 50);
  EXPECT_EQ(EachPartitionInOrder()[0], 1000u);
}

TEST_F(SinkRunnerUnitTest, AFailedOffsetSaveIsRetriedAtTheNextFlush) {
  Append(0, 3);
  storage_->FailNext(MemoryStorage::Op::kOffsetsSave, Unavailable("storage went away"), 2);
  Start();
  ASSERT_TRUE(WaitFor([&](const auto&) { return Saved(0) == 3; }));
  EXPECT_GE(storage_->calls(MemoryStorage::Op::kOffsetsSave), 3u);
}

TEST_F(SinkRunnerUnitTest, PauseKeepsOffsetsAndResumeCarriesOn) {
  Start();
  ASSERT_TRUE(runner_->Pause().ok());
  EXPECT_EQ(storage_->Offsets("rec", kType).at(0).state, "paused");
  Append(0, 3);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(runner_->totals().applied, 0u);
  ASSERT_TRUE(runner_->Resume().ok());
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 3; }));
}

// A control the applier has started runs to its end, however long past
// the patience (a rebuild's swap of millions of keys), and its caller gets
// its own result rather than a timeout.
TEST_F(SinkRunnerUnitTest, AStartedControlIsWaitedForToItsEnd) {
  control_patience_ = 50ms;
  Start();
  const Status st = runner_->RunOnApplier([](connectors::Sink&) {
    std::this_thread::sleep_for(300ms);
    return Status::Ok();
  });
  EXPECT_TRUE(st.ok()) << st.message();
}

// A control the applier does not start within the patience: withdrawn, it
// never runs (a rebuild that gave up must not swap or pause later); left
// queued, it runs once the applier gets to it.
TEST_F(SinkRunnerUnitTest, AControlNotStartedInTimeIsWithdrawnOrLeftQueued) {
  control_patience_ = 50ms;
  Start();
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> busy{false};
  std::thread blocker([&] {
    runner_->RunOnApplier([&](connectors::Sink&) {
      busy = true;
      released.wait();
      return Status::Ok();
    }).IgnoreError();
  });
  while (!busy) std::this_thread::sleep_for(1ms);
  std::atomic<int> withdrawn_ran{0}, queued_ran{0};
  const Status withdrawn = runner_->RunOnApplier([&](connectors::Sink&) {
    ++withdrawn_ran;
    return Status::Ok();
  }, LateControl::kWithdrawn);
  EXPECT_EQ(withdrawn.code(), StatusCode::kUnavailable);
  EXPECT_NE(withdrawn.message().find("withdrawn"), std::string::npos) << withdrawn.message();
  const Status queued = runner_->RunOnApplier([&](connectors::Sink&) {
    ++queued_ran;
    return Status::Ok();
  });
  EXPECT_EQ(queued.code(), StatusCode::kUnavailable);
  EXPECT_NE(queued.message().find("stays queued"), std::string::npos) << queued.message();
  release.set_value();
  blocker.join();
  // The applier has passed both by the time a later control returns.
  ASSERT_TRUE(runner_->RunOnApplier([](connectors::Sink&) { return Status::Ok(); }).ok());
  EXPECT_EQ(withdrawn_ran, 0);
  EXPECT_EQ(queued_ran, 1);
}

// A sink that prepares: every batch goes through Prepare() (on the
// preparer thread) before the applier hands it to Apply(), in read order.
TEST_F(SinkRunnerUnitTest, APreparingSinkGetsEveryBatchPreparedInOrderBeforeApply) {
  script_.prepares = true;
  Append(0, 250);
  Append(1, 90);
  Start(config::OnError::kDeadLetter, /*chunk=*/64);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 340; }));
  runner_->Stop();
  std::lock_guard lock(script_.mu);
  EXPECT_EQ(script_.applied_unprepared, 0);
  EXPECT_EQ(script_.prepared.size(), 340u);
  std::map<uint32_t, uint64_t> last;
  for (const auto& [p, id] : script_.prepared) {
    EXPECT_EQ(id, last[p] + 1) << "partition " << p;
    last[p] = id;
  }
  last.clear();
  for (const auto& [p, id] : script_.applied) {
    EXPECT_EQ(id, last[p] + 1) << "partition " << p;
    last[p] = id;
  }
}

// An offset move while a batch is being prepared, and others wait for the
// preparer, drops them all: nothing read from the old position is applied
// after the move, and everything after the new one is, once, in order.
TEST_F(SinkRunnerUnitTest, AnOffsetMoveWhileBatchesArePreparedDropsThem) {
  script_.prepares = true;
  script_.hold_prepare = true;
  Append(0, 350);  // 4 batches of engine.batch_max 100
  Start();
  {
    std::unique_lock lock(script_.mu);
    ASSERT_TRUE(script_.cv.wait_for(lock, 10s, [&] { return script_.in_prepare; }));
  }
  // The reader fills the read-ahead behind the held batch.
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.read == 350; }));
  ASSERT_TRUE(runner_->SetOffsets({{0, 20}}).ok());
  {
    std::lock_guard lock(script_.mu);
    script_.hold_prepare = false;
  }
  script_.cv.notify_all();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 350; }));
  runner_->Stop();
  std::lock_guard lock(script_.mu);
  std::vector<uint64_t> applied;
  for (const auto& [p, id] : script_.applied) applied.push_back(id);
  ASSERT_EQ(applied.size(), 330u);
  for (size_t k = 0; k < applied.size(); ++k) EXPECT_EQ(applied[k], 21 + k);
  EXPECT_EQ(script_.applied_unprepared, 0);
}


// ---- several engines (DESIGN 10): ownership, fencing, the lease keeper ----

class SharedSinkTest : public SinkRunnerUnitTest {
 protected:
  void TearDown() override {
    for (auto& k : keepers_) k->Stop();
    for (auto& r : runners_) r->Stop();
    SinkRunnerUnitTest::TearDown();
  }

  // A runner of engine `owner`, applying into `script`.
  SinkRunner* Runner(const std::string& owner, Script* script,
                     std::chrono::milliseconds offset_flush_interval = 5ms) {
    SinkRunnerOptions o = Options(4, 4);
    o.owner = owner;
    o.engine.offset_flush_interval = offset_flush_interval;
    runners_.push_back(std::make_unique<SinkRunner>(std::move(o), std::make_unique<ScriptedSink>(script)));
    EXPECT_TRUE(runners_.back()->Start().ok());
    return runners_.back().get();
  }

  LeaseKeeper* Keeper(const std::string& member, SinkRunner* runner, std::chrono::milliseconds ttl) {
    keepers_.push_back(std::make_unique<LeaseKeeper>(
        LeaseKeeper::Options{.member = member, .address = "", .ttl = ttl, .storage = storage_, .on_failure = {}},
        std::vector<SinkRunner*>{runner}));
    return keepers_.back().get();
  }

  // Engine a takes every partition and an operator pauses the sink there.
  std::pair<SinkRunner*, LeaseKeeper*> HoldEveryPartitionAndPause() {
    SinkRunner* a = Runner("engine-a", &script_);
    LeaseKeeper* ka = Keeper("engine-a", a, 10s);
    EXPECT_TRUE(ka->Round().ok());
    EXPECT_TRUE(Eventually([&] { return a->owned().size() == kPartitions; }));
    EXPECT_TRUE(a->Pause().ok());
    return {a, ka};
  }

  // The engine stops and gives its leases back (not left to expire).
  static void LeaveCleanly(SinkRunner* runner, LeaseKeeper* keeper) {
    keeper->Stop();
    runner->Stop();
    keeper->Leave();
  }

  template <typename Pred>
  static bool Eventually(Pred pred, std::chrono::milliseconds within = 10s) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < until) {
      if (pred()) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }

  static size_t AppliedOf(Script& s, uint32_t p) {
    std::lock_guard lock(s.mu);
    return static_cast<size_t>(
        std::count_if(s.applied.begin(), s.applied.end(), [p](const auto& e) { return e.first == p; }));
  }

  Script other_;  // a second engine's sink (outlives the runners)
  std::vector<std::unique_ptr<SinkRunner>> runners_;
  std::vector<std::unique_ptr<LeaseKeeper>> keepers_;
};

TEST_F(SharedSinkTest, ARunnerWithAnOwnerAppliesOnlyThePartitionsItWasGiven) {
  Append(0, 10);
  Append(1, 10);
  SinkRunner* a = Runner("engine-a", &script_);
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(script_.applied.empty());  // nothing given yet
  auto leases = storage_->OpenLeases();
  auto got = leases->Acquire("sink/rec", kType, {0}, "engine-a", 10s, {});
  ASSERT_TRUE(got.ok());
  a->SetOwned(*got, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 10; }));
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(AppliedOf(script_, 1), 0u);
  EXPECT_EQ(Saved(1), 0u);
  EXPECT_EQ(a->owned(), (std::map<uint32_t, uint64_t>{{0, 1}}));
  EXPECT_EQ(a->totals().offsets, (std::map<uint32_t, uint64_t>{{0, 10}}));
}

// Paused or cut off past its lease, a former owner's offset writes are
// refused once another engine took the partition: it drops the partition
// and the new owner's offsets stand.
TEST_F(SharedSinkTest, AFormerOwnerIsFencedAndDropsThePartition) {
  Append(0, 6);
  SinkRunner* a = Runner("engine-a", &script_);
  auto leases = storage_->OpenLeases();
  auto got = leases->Acquire("sink/rec", kType, {0}, "engine-a", 10s, {});
  ASSERT_TRUE(got.ok());
  a->SetOwned(*got, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 6; }));
  storage_->ExpireLeases("sink/rec", kType);
  auto b = leases->Acquire("sink/rec", kType, {0}, "engine-b", 10s, {});
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->at(0), 2u);
  sql::OffsetRow row;
  row.event_id = 3;  // engine-b went back (say, a rewind)
  ASSERT_TRUE(storage_->OpenOffsets()->SaveFenced("rec", kType, {{0, row}}, {"sink/rec", "engine-b", *b}).ok());
  Append(0, 4);  // engine-a still applies these, but cannot save past them
  ASSERT_TRUE(Eventually([&] { return a->owned().empty(); }));
  EXPECT_EQ(Saved(0), 3u);
  EXPECT_TRUE(a->totals().offsets.empty());
  ASSERT_TRUE(Eventually([&] {  // the sink lets go of it too
    std::lock_guard lock(script_.mu);
    return !script_.released.empty();
  }));
  std::lock_guard lock(script_.mu);
  EXPECT_EQ(script_.released, (std::vector<std::vector<uint32_t>>{{0}}));
}

// A partition the lease round no longer gives (another engine took it) is
// saved, dropped and then released from the sink (Sink::Released: the Kafka
// sink closes its producer), with no chunk in flight; the partition kept
// goes on. The periodic offset flush is an hour away: the only save before
// the release is the takeover's own.
TEST_F(SharedSinkTest, APartitionGivenUpIsReleasedFromTheSinkOnceItsOffsetsAreSaved) {
  for (const uint32_t pipeline : {1u, 2u}) {
    SCOPED_TRACE("pipeline " + std::to_string(pipeline));
    Script& script = pipeline == 1 ? script_ : other_;  // members: they outlive the runners
    script.pipeline = pipeline;
    const std::string owner = pipeline == 1 ? "engine-a" : "engine-b";
    const uint64_t saved_before = Saved(1);  // the first round's, in the second
    Append(0, 5);
    Append(1, 5);
    SinkRunner* r = Runner(owner, &script, std::chrono::hours(1));
    auto leases = storage_->OpenLeases();
    storage_->ExpireLeases("sink/rec", kType);
    auto both = leases->Acquire("sink/rec", kType, {0, 1}, owner, 10s, {});
    ASSERT_TRUE(both.ok());
    ASSERT_EQ(both->size(), 2u);
    r->SetOwned(*both, std::chrono::steady_clock::now() + 10s);
    ASSERT_TRUE(Eventually([&] { return AppliedOf(script, 0) == 5 && AppliedOf(script, 1) == 5; }));
    EXPECT_EQ(Saved(1), saved_before);  // not flushed yet
    std::optional<uint64_t> saved_at_release;
    script.on_released = [&](std::span<const uint32_t>) {
      if (!saved_at_release) saved_at_release = Saved(1);
    };
    r->SetOwned({{0, both->at(0)}}, std::chrono::steady_clock::now() + 10s);
    ASSERT_TRUE(Eventually([&] {
      std::lock_guard lock(script.mu);
      return !script.released.empty();
    }));
    {
      std::lock_guard lock(script.mu);
      EXPECT_EQ(script.released, (std::vector<std::vector<uint32_t>>{{1}}));
      EXPECT_EQ(script.calls_while_in_flight, 0);
    }
    EXPECT_EQ(saved_at_release, saved_before + 5);  // what it applied of partition 1 is saved first
    Append(0, 3);
    ASSERT_TRUE(Eventually([&] { return AppliedOf(script, 0) == 8; }));
    EXPECT_EQ(AppliedOf(script, 1), 5u);
    EXPECT_EQ(r->owned(), (std::map<uint32_t, uint64_t>{{0, both->at(0)}}));
    r->Stop();
    script.on_released = nullptr;
  }
}

// A partition taken over while the engine holds others: a sink that learns
// at TakeOver() what the partition's last owner wrote (Kafka reads its topic
// back) stays open for the partitions it held; any other sink is closed and
// opened again before the new partition's first event, so that its Open()
// learns it. Either way the new partition is settled (TakeOver) and applied.
TEST_F(SharedSinkTest, TakingAPartitionOverClosesTheSinkOnlyWhereOpenMustLearnIt) {
  for (const bool stays_open : {true, false}) {
    SCOPED_TRACE(stays_open ? "stays open" : "re-opened");
    Append(0, 5);  // the second engine starts from the first's offsets
    Append(1, 5);
    Script& script = stays_open ? script_ : other_;  // members: they outlive the runners
    script.stays_open = stays_open;
    const std::string owner = stays_open ? "engine-a" : "engine-b";
    SinkRunner* r = Runner(owner, &script);
    auto leases = storage_->OpenLeases();
    storage_->ExpireLeases("sink/rec", kType);
    auto first = leases->Acquire("sink/rec", kType, {0}, owner, 10s, {});
    ASSERT_TRUE(first.ok());
    r->SetOwned(*first, std::chrono::steady_clock::now() + 10s);
    ASSERT_TRUE(Eventually([&] { return AppliedOf(script, 0) == 5; }));
    int closes_before = 0;
    {
      std::lock_guard lock(script.mu);
      closes_before = script.closes;
    }
    auto both = leases->Acquire("sink/rec", kType, {0, 1}, owner, 10s, *first);
    ASSERT_TRUE(both.ok());
    ASSERT_EQ(both->size(), 2u);
    r->SetOwned(*both, std::chrono::steady_clock::now() + 10s);
    ASSERT_TRUE(Eventually([&] { return AppliedOf(script, 1) == 5; }));
    {
      std::lock_guard lock(script.mu);
      EXPECT_EQ(script.closes - closes_before, stays_open ? 0 : 1);
      ASSERT_EQ(script.taken.size(), 2u);
      EXPECT_EQ(script.taken[0], *first);
      EXPECT_EQ(script.taken[1], (std::map<uint32_t, uint64_t>{{1, both->at(1)}}));
    }
    r->Stop();
  }
}

TEST_F(SharedSinkTest, PastItsLeasesValidityARunnerAppliesNothing) {
  SinkRunner* a = Runner("engine-a", &script_);
  auto got = storage_->OpenLeases()->Acquire("sink/rec", kType, {0, 1}, "engine-a", 10s, {});
  ASSERT_TRUE(got.ok());
  a->SetOwned(*got, std::chrono::steady_clock::now() + 30ms);
  std::this_thread::sleep_for(60ms);
  Append(0, 5);
  std::this_thread::sleep_for(60ms);
  EXPECT_EQ(AppliedOf(script_, 0), 0u);  // read, maybe, but held
  a->SetOwned(*got, std::chrono::steady_clock::now() + 10s);  // renewed
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 5; }));
}

// Two engines' keepers split the partitions, hand them over when one
// leaves, and never hold one partition at once (the lease log); every
// event reaches the sink.
TEST_F(SharedSinkTest, TwoEnginesSplitThePartitionsAndHandThemOver) {
  Script& other = other_;
  Append(0, 20);
  Append(1, 20);
  SinkRunner* a = Runner("engine-a", &script_);
  SinkRunner* b = Runner("engine-b", &other);
  LeaseKeeper* ka = Keeper("engine-a", a, 400ms);
  LeaseKeeper* kb = Keeper("engine-b", b, 400ms);
  ka->Start();
  ASSERT_TRUE(Eventually([&] { return a->owned().size() == 2; }));
  kb->Start();
  // b joins: one partition moves, handed over (released, not left to expire).
  ASSERT_TRUE(Eventually([&] { return a->owned().size() == 1 && b->owned().size() == 1; }, 3s));
  Append(0, 20);
  Append(1, 20);
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 40 && Saved(1) == 40; }));
  // b leaves cleanly: a takes its partition at its next round.
  LeaveCleanly(b, kb);
  ASSERT_TRUE(Eventually([&] { return a->owned().size() == 2; }, 3s));
  Append(0, 5);
  Append(1, 5);
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 45 && Saved(1) == 45; }));
  ka->Stop();
  // Every event reached one sink or the other, in order per engine.
  std::set<std::pair<uint32_t, uint64_t>> seen;
  for (Script* s : {&script_, &other}) {
    std::lock_guard lock(s->mu);
    seen.insert(s->applied.begin(), s->applied.end());
  }
  EXPECT_EQ(seen.size(), 90u);
  auto history = storage_->OpenLeases()->History("sink/rec");
  ASSERT_TRUE(history.ok());
  EXPECT_GE(history->size(), 4u);  // taken by a, one by b, back to a
  // What the sinks saw, merged in time: per partition, the engine applying
  // it changes only at a takeover (a new token), never back and forth, as
  // it would if both applied it at once.
  std::map<uint32_t, std::vector<std::pair<std::chrono::steady_clock::time_point, int>>> by_partition;
  for (int engine = 0; engine < 2; ++engine) {
    Script& sc = engine == 0 ? script_ : other;
    std::lock_guard lock(sc.mu);
    for (size_t i = 0; i < sc.applied.size(); ++i) {
      by_partition[sc.applied[i].first].emplace_back(sc.applied_at[i], engine);
    }
  }
  for (auto& [p, applies] : by_partition) {
    std::sort(applies.begin(), applies.end());
    int switches = 0;
    for (size_t i = 1; i < applies.size(); ++i) switches += applies[i].second != applies[i - 1].second;
    const auto tokens = std::count_if(history->begin(), history->end(), [p = p](const auto& h) { return h.partition == p; });
    EXPECT_LE(switches, tokens - 1) << "partition " << p << ": applied by turns " << switches << " times, taken "
                                    << tokens << " times";
  }
  for (size_t i = 1; i < history->size(); ++i) {
    const auto& x = history->at(i - 1);
    const auto& y = history->at(i);
    if (x.partition == y.partition) {
      EXPECT_LE(x.ended_at_ms, y.taken_at_ms) << "partition " << y.partition;
    }
  }
}

// A restarted engine (same name, a new process) takes its leases over as
// soon as its former process is gone; the former runner, if it still ran,
// is fenced and lets go. A second process under the name of a live one
// waits, then fails, and the live one carries on.
TEST_F(SharedSinkTest, ARestartedEngineTakesOverFromItsFormerProcess) {
  Append(0, 5);
  Append(1, 5);
  Script& later = other_;
  SinkRunner* old_runner = Runner("engine-a", &script_);
  LeaseKeeper* old_keeper = Keeper("engine-a", old_runner, 200ms);
  ASSERT_TRUE(old_keeper->Round().ok());
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 5 && Saved(1) == 5; }));
  SinkRunner* new_runner = Runner("engine-a", &later);
  LeaseKeeper* new_keeper = Keeper("engine-a", new_runner, 200ms);
  // While the former process lives, the newcomer only waits for the name...
  ASSERT_TRUE(new_keeper->Round().ok());
  ASSERT_TRUE(old_keeper->Round().ok());
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(new_runner->owned().empty());
  // ...and past the TTL gives up; the running one is untouched.
  std::this_thread::sleep_for(250ms);
  const Status twin = new_keeper->Round();
  EXPECT_EQ(twin.code(), StatusCode::kFailedPrecondition) << twin.ToString();
  EXPECT_NE(twin.message().find("engine.id"), std::string::npos);
  ASSERT_TRUE(old_keeper->Round().ok());
  EXPECT_EQ(old_runner->owned().size(), 2u);

  // The former process's keeper dies (its session and claim with it); its
  // runner lives on, a zombie. A restarted process takes over at once.
  keepers_.clear();
  SinkRunner* restarted = Runner("engine-a", &later);
  LeaseKeeper* keeper = Keeper("engine-a", restarted, 10s);
  ASSERT_TRUE(keeper->Round().ok());
  ASSERT_TRUE(Eventually([&] { return restarted->owned().size() == 2; }));
  for (const auto& [p, token] : restarted->owned()) EXPECT_EQ(token, 2u);
  Append(0, 1);  // the zombie's next save is refused: it drops both
  ASSERT_TRUE(Eventually([&] { return old_runner->owned().empty(); }));
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 6; }));
}

// A sink paused as a whole stays paused across a restart, also in the
// moments before the restarted engine holds its partitions again: status
// never says running meanwhile, and a resume then is refused, not lost.
TEST_F(SharedSinkTest, APausedSinkIsPausedFromTheStartOfARestartedEngine) {
  Append(0, 2);
  SinkRunner* before = Runner("engine-a", &script_);
  LeaseKeeper* k = Keeper("engine-a", before, 10s);
  ASSERT_TRUE(k->Round().ok());
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 2; }));
  ASSERT_TRUE(before->Pause().ok());
  keepers_.clear();
  before->Stop();
  Append(0, 3);

  SinkRunner* restarted = Runner("engine-a", &other_);
  EXPECT_TRUE(restarted->owned().empty());
  EXPECT_TRUE(restarted->totals().paused);
  EXPECT_EQ(restarted->totals().state, SinkState::kPaused);
  const Status early = restarted->Resume();
  EXPECT_EQ(early.code(), StatusCode::kUnavailable) << early.ToString();
  EXPECT_TRUE(restarted->totals().paused);

  LeaseKeeper* again = Keeper("engine-a", restarted, 10s);
  ASSERT_TRUE(again->Round().ok());
  ASSERT_TRUE(Eventually([&] { return restarted->owned().size() == 2; }));
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(AppliedOf(other_, 0), 0u);
  EXPECT_EQ(storage_->Offsets("rec", kType).at(0).state, "paused");
  ASSERT_TRUE(restarted->Resume().ok());
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 5; }));
  EXPECT_EQ(AppliedOf(other_, 0), 3u);
}

// Resumed on the engine that holds the partitions while a restarted one
// waits for them: the waiting engine's resume goes through, and it runs
// the partitions it takes later.
TEST_F(SharedSinkTest, AResumeElsewhereBeforeTheTakeoverHolds) {
  Append(0, 2);
  auto [a, ka] = HoldEveryPartitionAndPause();
  ASSERT_FALSE(HasFailure());
  SinkRunner* b = Runner("engine-b", &other_);
  EXPECT_TRUE(b->totals().paused);
  ASSERT_TRUE(a->Resume().ok());
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 2; }));
  // The stored pause is gone: b's resume clears its own, nothing to refuse.
  EXPECT_TRUE(b->Resume().ok());
  EXPECT_FALSE(b->totals().paused);

  // A second restart while a's resume is stored: c starts running, and
  // the partitions it takes from a stay running.
  SinkRunner* c = Runner("engine-c", &other_);
  EXPECT_FALSE(c->totals().paused);
  LeaveCleanly(a, ka);
  LeaseKeeper* kc = Keeper("engine-c", c, 10s);
  ASSERT_TRUE(kc->Round().ok());
  ASSERT_TRUE(Eventually([&] { return c->owned().size() == 2; }));
  Append(0, 3);
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 5; }));
  EXPECT_FALSE(c->totals().paused);
  EXPECT_EQ(storage_->Offsets("rec", kType).at(0).state, "running");
}

// The pause read at the start stands in for the partitions' own states
// until they come: resumed elsewhere meanwhile, they come running.
TEST_F(SharedSinkTest, APauseReadAtTheStartGivesWayToThePartitionsStates) {
  auto [a, ka] = HoldEveryPartitionAndPause();
  ASSERT_FALSE(HasFailure());
  SinkRunner* b = Runner("engine-b", &other_);
  EXPECT_TRUE(b->totals().paused);
  ASSERT_TRUE(a->Resume().ok());
  LeaveCleanly(a, ka);
  LeaseKeeper* kb = Keeper("engine-b", b, 10s);
  ASSERT_TRUE(kb->Round().ok());
  ASSERT_TRUE(Eventually([&] { return b->owned().size() == 2; }));
  EXPECT_FALSE(b->totals().paused);
  EXPECT_EQ(b->totals().state, SinkState::kRunning);
  Append(1, 4);
  ASSERT_TRUE(Eventually([&] { return Saved(1) == 4; }));
}

// An engine with no share of the sink learns of a resume made where the
// partitions are held at its next lease round.
TEST_F(SharedSinkTest, AnEngineWithNoShareFollowsAResumeElsewhere) {
  auto [a, ka] = HoldEveryPartitionAndPause();
  ASSERT_FALSE(HasFailure());
  SinkRunner* b = Runner("engine-b", &other_);
  EXPECT_TRUE(b->totals().paused);
  b->SetOwned({}, std::chrono::steady_clock::now() + 10s);  // a round that gave it nothing
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(b->totals().paused);  // still stored paused
  ASSERT_TRUE(a->Resume().ok());
  b->SetOwned({}, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(Eventually([&] { return !b->totals().paused; }));
  EXPECT_EQ(b->totals().state, SinkState::kRunning);
}

// While storage cannot be read, the pause read at the start stands: a lease
// round with no partitions keeps it, and a resume fails with storage's
// error instead of clearing it.
TEST_F(SharedSinkTest, ThePauseReadAtTheStartStandsWhileStorageCannotBeRead) {
  auto [a, ka] = HoldEveryPartitionAndPause();
  ASSERT_FALSE(HasFailure());
  SinkRunner* b = Runner("engine-b", &other_);
  ASSERT_TRUE(b->totals().paused);
  ASSERT_TRUE(a->Resume().ok());
  storage_->FailNext(MemoryStorage::Op::kOffsetsLoad, Unavailable("storage went away"), 1);
  b->SetOwned({}, std::chrono::steady_clock::now() + 10s);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(b->totals().paused);
  storage_->FailNext(MemoryStorage::Op::kOffsetsLoad, Unavailable("storage went away"), 1);
  const Status resumed = b->Resume();
  EXPECT_NE(resumed.message().find("storage went away"), std::string::npos) << resumed.ToString();
  EXPECT_TRUE(b->totals().paused);
  b->SetOwned({}, std::chrono::steady_clock::now() + 10s);  // storage back: a's resume shows
  ASSERT_TRUE(Eventually([&] { return !b->totals().paused; }));
}

// A pause made on an engine whose pause was read at its start is its own:
// a resume elsewhere does not undo it when the partitions come.
TEST_F(SharedSinkTest, APauseMadeBeforeThePartitionsComeHolds) {
  auto [a, ka] = HoldEveryPartitionAndPause();
  ASSERT_FALSE(HasFailure());
  SinkRunner* b = Runner("engine-b", &other_);
  ASSERT_TRUE(b->Pause().ok());
  ASSERT_TRUE(a->Resume().ok());
  LeaveCleanly(a, ka);
  LeaseKeeper* kb = Keeper("engine-b", b, 10s);
  ASSERT_TRUE(kb->Round().ok());
  ASSERT_TRUE(Eventually([&] { return b->owned().size() == kPartitions; }));
  Append(0, 3);
  std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(b->totals().paused);
  EXPECT_EQ(AppliedOf(other_, 0), 0u);
  ASSERT_TRUE(b->Resume().ok());
  ASSERT_TRUE(Eventually([&] { return Saved(0) == 3; }));
}

// A pause made in this process holding no partitions (an engine with no
// share, a rebuild's switch-over) is always undone by its resume.
TEST_F(SharedSinkTest, APauseAndResumeWithNoPartitionsHeldAreAPair) {
  SinkRunner* a = Runner("engine-a", &script_);
  ASSERT_TRUE(a->Pause().ok());
  EXPECT_TRUE(a->totals().paused);
  ASSERT_TRUE(a->Resume().ok());
  EXPECT_FALSE(a->totals().paused);
  EXPECT_EQ(a->totals().state, SinkState::kRunning);
}

// Paused in part (another engine's share), a restarted engine starts
// running and pauses only if a partition it takes says so.
TEST_F(SharedSinkTest, ASinkPausedInPartStartsRunning) {
  SinkRunner* a = Runner("engine-a", &script_);
  auto leases = storage_->OpenLeases();
  auto got = leases->Acquire("sink/rec", kType, {0}, "engine-a", 10s, {});
  ASSERT_TRUE(got.ok());
  a->SetOwned(*got, std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(Eventually([&] { return a->owned().size() == 1; }));
  ASSERT_TRUE(a->Pause().ok());
  ASSERT_EQ(storage_->Offsets("rec", kType).at(0).state, "paused");
  SinkRunner* b = Runner("engine-b", &other_);
  EXPECT_FALSE(b->totals().paused);
  EXPECT_EQ(b->totals().state, SinkState::kRunning);
}

// A runner whose sink stopped for good applies nothing: the keeper lets
// its leases go.
TEST_F(SharedSinkTest, AStoppedRunnerGivesItsLeasesBack) {
  SinkRunner* a = Runner("engine-a", &script_);
  LeaseKeeper* k = Keeper("engine-a", a, 10s);
  ASSERT_TRUE(k->Round().ok());
  ASSERT_TRUE(Eventually([&] { return a->owned().size() == 2; }));
  a->Stop();
  EXPECT_TRUE(a->stopped());
  EXPECT_TRUE(a->owned().empty());
  ASSERT_TRUE(k->Round().ok());
  auto leases = storage_->OpenLeases()->List("sink/rec");
  ASSERT_TRUE(leases.ok());
  for (const auto& l : *leases) EXPECT_EQ(l.owner, "") << "partition " << l.partition;
}

}  // namespace
}  // namespace sluice::engine
