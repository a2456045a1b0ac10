// The pull loop with a sink that pipelines (Capabilities::pipeline): chunks
// kept in flight, received in order; a failure, a rejection with on_error
// stop, a failing flush, controls and a stop with chunks in flight; chunks
// a server applies out of order. On the in-memory tables, no server.
#include "engine/sink_runner.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "engine/sink_runner_test_fixture.h"

namespace sluice::engine {
namespace {

using namespace testing_fixture;
using namespace std::chrono_literals;

class PipelinedSinkRunnerTest : public SinkRunnerUnitTest {
 protected:
  void SetUp() override {
    SinkRunnerUnitTest::SetUp();
    script_.pipeline = 2;
  }
  // Every event id of partition p from 1 to n was applied at least once.
  void EveryEventApplied(uint32_t p, uint64_t n) {
    std::set<uint64_t> ids;
    std::lock_guard lock(script_.mu);
    for (const auto& [q, id] : script_.applied) {
      if (q == p) ids.insert(id);
    }
    for (uint64_t id = 1; id <= n; ++id) EXPECT_TRUE(ids.count(id)) << "event " << id << " of partition " << p;
  }
  int CallsWhileInFlight() {
    std::lock_guard lock(script_.mu);
    return script_.calls_while_in_flight;
  }
};

TEST_F(PipelinedSinkRunnerTest, KeepsTwoChunksInFlightAndAppliesEveryPartitionInOrder) {
  Append(0, 30);  // one batch of 30, sent as chunks of 8
  Append(1, 7);
  Start(config::OnError::kDeadLetter, /*chunk=*/8);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 37; }));
  runner_->Stop();
  const auto last = EachPartitionInOrder();
  EXPECT_EQ(last.at(0), 30u);
  EXPECT_EQ(last.at(1), 7u);
  EXPECT_EQ(Saved(0), 30u);
  EXPECT_EQ(Saved(1), 7u);
  EXPECT_EQ(script_.max_in_flight, 2u) << "the next chunk goes before the last one's results";
  EXPECT_EQ(CallsWhileInFlight(), 0) << "the sink was called otherwise with chunks in flight";
}

// A failed chunk brings back the one sent after it; both are applied again
// after the backoff: nothing lost, the newest version held, offsets at the end.
TEST_F(PipelinedSinkRunnerTest, AFailedChunkIsAppliedAgainWithThoseSentAfterIt) {
  Append(0, 20, "same");  // one entity, versions 1..20
  script_.unavailable_calls = 3;
  Start(config::OnError::kDeadLetter, /*chunk=*/4);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 20; }));
  runner_->Stop();
  EveryEventApplied(0, 20);
  const auto t = runner_->totals();
  EXPECT_EQ(t.applied + t.stale, 20u);
  // Chunk 1 fails, chunk 2 (in flight) fails too and is taken back unretried,
  // chunk 1 fails once more alone: two retries for three failed calls.
  EXPECT_EQ(t.retries, 2u);
  EXPECT_EQ(Saved(0), 20u);
  EXPECT_EQ(script_.versions["same"], 20u);
  EXPECT_EQ(CallsWhileInFlight(), 0) << "closed or flushed with chunks in flight";
}

// A server may apply the later of two chunks in flight first: the older
// versions come back stale, and the newest wins.
TEST_F(PipelinedSinkRunnerTest, ChunksAppliedOutOfOrderLeaveTheNewestVersion) {
  script_.reorder = true;
  Append(0, 24, "same");
  Start(config::OnError::kDeadLetter, /*chunk=*/4);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 24; }));
  runner_->Stop();
  const auto t = runner_->totals();
  EXPECT_EQ(t.applied + t.stale, 24u);
  EXPECT_GT(t.stale, 0u) << "no chunk was overtaken";
  EXPECT_EQ(script_.versions["same"], 24u);
  EXPECT_EQ(Saved(0), 24u);
}

// The chunk after a rejection may already be applied; no offset passes the
// rejected event.
TEST_F(PipelinedSinkRunnerTest, ARejectionWithOnErrorStopMovesNoOffsetPastIt) {
  Append(0, 10);
  script_.reject = {{0, 3}};
  Start(config::OnError::kStop, /*chunk=*/2);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.state == SinkState::kStopped; }));
  runner_->Stop();
  EXPECT_EQ(Saved(0), 2u);
  EXPECT_EQ(storage_->Offsets("rec", kType).at(0).state, "stopped");
  EXPECT_TRUE(storage_->DeadLetters().empty());
  EXPECT_EQ(CallsWhileInFlight(), 0);
}

TEST_F(PipelinedSinkRunnerTest, OffsetsNeverPassWhatTheSinkFlushed) {
  Append(0, 40);
  {
    std::lock_guard lock(script_.mu);
    script_.fail_flush = true;
  }
  std::atomic<bool> done{false};
  std::atomic<uint64_t> saved_while_failing{0};
  std::thread watch([&] {
    while (!done) {
      {
        std::lock_guard lock(script_.mu);
        if (!script_.fail_flush) break;
      }
      saved_while_failing = std::max(saved_while_failing.load(), Saved(0));
    }
  });
  Start(config::OnError::kDeadLetter, /*chunk=*/4);
  ASSERT_TRUE(WaitFor([&](const auto&) {
    std::lock_guard lock(script_.mu);
    return script_.applied.size() >= 120;
  }));
  {
    std::lock_guard lock(script_.mu);
    script_.fail_flush = false;
  }
  done = true;
  watch.join();
  EXPECT_EQ(saved_while_failing.load(), 0u) << "an offset was saved while no flush succeeded";
  ASSERT_TRUE(WaitFor([&](const auto&) { return Saved(0) == 40; }));
  runner_->Stop();
  std::lock_guard lock(script_.mu);
  for (uint64_t id = 1; id <= 40; ++id) EXPECT_TRUE(script_.durable.count({0, id})) << id;
  EXPECT_EQ(script_.calls_while_in_flight, 0);
}

// Controls (the operator's, the anti-entropy's, a rebuild's switch-over)
// wait for the chunks in flight: the sink has one caller at a time.
TEST_F(PipelinedSinkRunnerTest, ControlsRunWithNothingInFlight) {
  Append(0, 400);
  Append(1, 400);
  Start(config::OnError::kDeadLetter, /*chunk=*/4);
  int controls = 0, saw_in_flight = 0;
  while (runner_->totals().applied < 800 && controls < 200) {
    ASSERT_TRUE(runner_
                    ->RunOnApplier([&](connectors::Sink&) {
                      std::lock_guard lock(script_.mu);
                      if (script_.in_flight != 0) ++saw_in_flight;
                      return Status::Ok();
                    })
                    .ok());
    ++controls;
  }
  ASSERT_TRUE(runner_->Pause().ok());
  ASSERT_TRUE(runner_->Resume().ok());
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 800; }));
  runner_->Stop();
  EXPECT_EQ(saw_in_flight, 0);
  EXPECT_EQ(CallsWhileInFlight(), 0);
  EachPartitionInOrder();
  EXPECT_EQ(script_.max_in_flight, 2u);
}

// Stop() while the applier waits for a chunk's result with another one in
// flight: both are received, acknowledged and saved.
TEST_F(PipelinedSinkRunnerTest, AStopWithChunksInFlightSavesWhatCameBack) {
  Append(0, 8);  // two chunks of 4, both in flight
  {
    std::lock_guard lock(script_.mu);
    script_.hold_receive = true;
  }
  Start(config::OnError::kDeadLetter, /*chunk=*/4);
  {
    std::unique_lock lock(script_.mu);
    ASSERT_TRUE(script_.cv.wait_for(lock, 10s, [&] { return script_.in_receive && script_.in_flight == 2; }));
  }
  std::thread stop([&] { runner_->Stop(); });
  std::this_thread::sleep_for(20ms);  // Stop() has set the runner stopping
  {
    std::lock_guard lock(script_.mu);
    script_.hold_receive = false;
  }
  script_.cv.notify_all();
  stop.join();
  EXPECT_EQ(Saved(0), 8u) << "the chunks in flight at the stop were not acknowledged";
  std::lock_guard lock(script_.mu);
  for (uint64_t id = 1; id <= 8; ++id) EXPECT_TRUE(script_.durable.count({0, id})) << id;
  EXPECT_EQ(script_.calls_while_in_flight, 0);
}

// The sink took a chunk but its dead letter could not be written: the
// chunk after it, in flight, comes back before the sink is closed, and both
// go again; the sink is never stopped for it.
TEST_F(PipelinedSinkRunnerTest, AFailedDeadLetterWriteWithAChunkInFlightRetriesBoth) {
  Append(0, 10);
  script_.reject = {{0, 2}};
  storage_->FailNext(MemoryStorage::Op::kDeadLetterAdd, Unavailable("storage went away"), 2);
  Start(config::OnError::kDeadLetter, /*chunk=*/2);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.offsets.at(0) == 10 || t.state == SinkState::kStopped; }));
  runner_->Stop();
  const auto t = runner_->totals();
  EXPECT_NE(t.state, SinkState::kStopped) << t.last_error;
  EXPECT_EQ(Saved(0), 10u);
  EXPECT_EQ(storage_->DeadLetters().size(), 1u);
  std::lock_guard lock(script_.mu);
  // The taken-back chunk's writes went with the close: it was applied again.
  for (uint64_t id = 1; id <= 10; ++id) {
    if (id != 2) {
      EXPECT_TRUE(script_.durable.count({0, id})) << id;
    }
  }
  EXPECT_EQ(script_.calls_while_in_flight, 0);
}

// A failed chunk whose sink then fails to flush goes back to the last flush
// (the events since are read again): a chunk sent after that must not move
// the offset past events not yet applied again. Watched all along: no saved
// offset ever passes an event the sink did not make durable.
TEST_F(PipelinedSinkRunnerTest, AFailedFlushAfterAFailedChunkSavesNoOffsetPastWhatIsDurable) {
  Append(0, 400);
  // Chunks 1 and 2 go through (not flushed yet), chunk 3 fails with chunk 4
  // in flight, and the flush before the sink is closed fails.
  script_.unavailable_at_call = 3;
  script_.fail_flushes = 1;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> violations{0};
  std::thread watch([&] {
    while (!done) {
      const uint64_t saved = Saved(0);
      std::lock_guard lock(script_.mu);
      for (uint64_t id = 1; id <= saved; ++id) {
        if (!script_.durable.count({0, id})) {
          ++violations;
          break;
        }
      }
    }
  });
  Start(config::OnError::kDeadLetter, /*chunk=*/4);
  const bool through = WaitFor([](const auto& t) { return t.offsets.at(0) == 400; });
  runner_->Stop();
  done = true;
  watch.join();
  ASSERT_TRUE(through);
  EXPECT_EQ(violations.load(), 0u) << "an offset was saved past events the sink had not made durable";
  EXPECT_EQ(Saved(0), 400u);
  EXPECT_EQ(CallsWhileInFlight(), 0);
}

}  // namespace
}  // namespace sluice::engine
