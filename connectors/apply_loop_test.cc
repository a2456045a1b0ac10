#include "connectors/apply_loop.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

namespace sluice::connectors {
namespace {

// A sink that answers each Open() and Apply() from a script, and records the calls.
class ScriptSink : public Sink {
 public:
  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override { return {}; }
  Status Open() override {
    ++opens;
    if (open_failures > 0) {
      --open_failures;
      return Unavailable("connection refused");
    }
    return Status::Ok();
  }
  ApplyResult Apply(std::span<const ChangeEvent> events) override {
    calls.push_back(events.size());
    ApplyResult r;
    if (!statuses.empty()) {
      r.status = statuses.front();
      statuses.pop_front();
      if (!r.status.ok()) return r;
    }
    for (const ChangeEvent& e : events) {
      EventResult er;
      if (e.entity_id == "bad") {
        er.outcome = Outcome::kRejected;
        er.reason = "refused";
      } else if (e.version == 0) {
        er.outcome = Outcome::kStale;
      }
      r.results.push_back(er);
    }
    if (drop_one_result && !r.results.empty()) r.results.pop_back();
    return r;
  }
  // Pipelining: what Send() got, answered by Receive() in order.
  void Send(std::span<const ChangeEvent> events) override { sent.push_back(events); }
  ApplyResult Receive() override {
    const auto events = sent.front();
    sent.pop_front();
    return Apply(events);
  }
  Status Health() override { return Status::Ok(); }
  void Close() override { ++closes; }
  Status Verify(const std::vector<EntitySnapshot>&, std::vector<Difference>&) override { return Status::Ok(); }

  int opens = 0, closes = 0, open_failures = 0;
  bool drop_one_result = false;
  std::deque<Status> statuses;  // the next Apply() calls' statuses (ok when empty)
  std::vector<size_t> calls;    // events per Apply()
  std::deque<std::span<const ChangeEvent>> sent;  // sent and not received

 private:
  std::string name_ = "script";
};

std::vector<ChangeEvent> Events(size_t n) {
  std::vector<ChangeEvent> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i].event_id = i + 1;
    v[i].entity_id = "e" + std::to_string(i);
    v[i].version = 1;
  }
  return v;
}

ApplyLoop::Options Chunks(size_t n) {
  ApplyLoop::Options o;
  o.chunk_max = n;
  o.backoff_min = std::chrono::milliseconds(10);
  o.backoff_max = std::chrono::milliseconds(40);
  return o;
}

TEST(ApplyLoop, AppliesInOrderInChunksOfChunkMaxAndOpensOnce) {
  ScriptSink sink;
  ApplyLoop loop(sink, Chunks(4));
  const auto events = Events(10);
  std::vector<size_t> offsets;
  const size_t done = loop.Run(events, nullptr, [&](ChunkResult& c) {
    EXPECT_TRUE(c.status.ok());
    EXPECT_EQ(c.events.data(), events.data() + c.offset);
    offsets.push_back(c.offset);
    return ApplyLoop::Next::kContinue;
  });
  EXPECT_EQ(done, 10u);
  EXPECT_EQ(sink.calls, (std::vector<size_t>{4, 4, 2}));
  EXPECT_EQ(offsets, (std::vector<size_t>{0, 4, 8}));
  EXPECT_EQ(sink.opens, 1);
  EXPECT_TRUE(loop.open());
  EXPECT_EQ(loop.state(), SinkState::kRunning);
}

TEST(ApplyLoop, CountsEveryOutcomeOfAChunk) {
  ScriptSink sink;
  ApplyLoop loop(sink, Chunks(100));
  auto events = Events(5);
  events[1].entity_id = "bad";
  events[3].version = 0;
  events[4].version = 0;
  const ChunkResult r = loop.ApplyChunk(events);
  ASSERT_TRUE(r.status.ok());
  EXPECT_TRUE(r.applied);
  EXPECT_EQ(r.results.size(), 5u);
  EXPECT_EQ(r.counts.applied, 2u);
  EXPECT_EQ(r.counts.rejected, 1u);
  EXPECT_EQ(r.counts.stale, 2u);
}

TEST(ApplyLoop, ClassifiesFailuresByWhatTheCallerMustDo) {
  EXPECT_EQ(ClassifyFailure(Status::Ok()), FailureClass::kNone);
  EXPECT_EQ(ClassifyFailure(Unavailable("x")), FailureClass::kUnavailable);
  EXPECT_EQ(ClassifyFailure(Aborted("x")), FailureClass::kAborted);
  EXPECT_EQ(ClassifyFailure(InvalidArgument("x")), FailureClass::kFatal);
  EXPECT_EQ(ClassifyFailure(FailedPrecondition("x")), FailureClass::kFatal);
  EXPECT_EQ(ClassifyFailure(Internal("x")), FailureClass::kFatal);
}

TEST(ApplyLoop, ARetriedChunkIsTheSameChunkAndSuccessEndsTheBackoff) {
  ScriptSink sink;
  sink.statuses = {Status::Ok(), Unavailable("gone"), Aborted("deadlock")};
  ApplyLoop loop(sink, Chunks(3));
  const auto events = Events(7);
  std::vector<std::pair<size_t, FailureClass>> seen;
  const size_t done = loop.Run(events, nullptr, [&](ChunkResult& c) {
    seen.emplace_back(c.offset, c.failure);
    if (c.failure == FailureClass::kNone) return ApplyLoop::Next::kContinue;
    EXPECT_EQ(loop.state(), SinkState::kBackoff);
    EXPECT_TRUE(c.results.empty());
    loop.Close();
    return ApplyLoop::Next::kRetry;
  });
  EXPECT_EQ(done, 7u);
  EXPECT_EQ(seen, (std::vector<std::pair<size_t, FailureClass>>{{0, FailureClass::kNone},
                                                                 {3, FailureClass::kUnavailable},
                                                                 {3, FailureClass::kAborted},
                                                                 {3, FailureClass::kNone},
                                                                 {6, FailureClass::kNone}}));
  EXPECT_EQ(sink.calls, (std::vector<size_t>{3, 3, 3, 3, 1}));
  EXPECT_EQ(sink.opens, 3);  // reopened after each close
  EXPECT_EQ(sink.closes, 2);
  EXPECT_EQ(loop.state(), SinkState::kRunning);
}

TEST(ApplyLoop, AFailedOpenIsAFailedChunkWithoutAnApply) {
  ScriptSink sink;
  sink.open_failures = 1;
  ApplyLoop loop(sink, Chunks(10));
  const auto events = Events(2);
  ChunkResult r = loop.ApplyChunk(events);
  EXPECT_EQ(r.failure, FailureClass::kUnavailable);
  EXPECT_FALSE(r.applied);
  EXPECT_FALSE(loop.open());
  EXPECT_TRUE(sink.calls.empty());
  loop.Close();  // what a failed open may have left behind is released
  EXPECT_EQ(sink.closes, 1);
  r = loop.ApplyChunk(events);
  EXPECT_EQ(r.failure, FailureClass::kNone);
  EXPECT_TRUE(loop.open());
  EXPECT_EQ(sink.opens, 2);
}

TEST(ApplyLoop, AWrongNumberOfResultsIsFatal) {
  ScriptSink sink;
  sink.drop_one_result = true;
  ApplyLoop loop(sink, Chunks(10));
  const auto events = Events(3);
  const ChunkResult r = loop.ApplyChunk(events);
  EXPECT_EQ(r.failure, FailureClass::kFatal);
  EXPECT_EQ(r.status.code(), StatusCode::kInternal);
  EXPECT_NE(r.status.message().find("2 results for 3 events"), std::string::npos) << r.status.message();
}

TEST(ApplyLoop, HooksStopTheRunAndSayHowMuchWasDone) {
  ScriptSink sink;
  ApplyLoop loop(sink, Chunks(2));
  const auto events = Events(6);
  size_t befores = 0;
  size_t done = loop.Run(
      events, [&](size_t) { return ++befores == 3 ? ApplyLoop::Next::kStop : ApplyLoop::Next::kContinue; },
      [](ChunkResult&) { return ApplyLoop::Next::kContinue; });
  EXPECT_EQ(done, 4u);
  EXPECT_EQ(sink.calls.size(), 2u);
  done = loop.Run(events, nullptr, [](ChunkResult& c) {
    return c.offset == 0 ? ApplyLoop::Next::kStop : ApplyLoop::Next::kContinue;
  });
  EXPECT_EQ(done, 0u);  // a chunk the hook stopped at is not done
}

TEST(ApplyLoop, BackoffGrowsWithConsecutiveFailuresUpToItsCap) {
  ScriptSink sink;
  ApplyLoop loop(sink, Chunks(1));
  std::vector<int64_t> delays;
  for (int i = 0; i < 5; ++i) delays.push_back(loop.NextBackoff().count());
  EXPECT_GE(delays[0], 5);
  EXPECT_LE(delays[0], 10);
  EXPECT_GE(delays[4], 20);
  EXPECT_LE(delays[4], 40);
}

TEST(ApplyLoopPipelined, ReceivesChunksInTheOrderSentEachCheckedAndCounted) {
  ScriptSink sink;
  ApplyLoop loop(sink, Chunks(4));
  auto events = Events(6);
  events[4].entity_id = "bad";
  const std::span<const ChangeEvent> all(events);
  loop.Send(all.subspan(0, 3));
  loop.Send(all.subspan(3, 3));
  EXPECT_EQ(loop.in_flight(), 2u);
  EXPECT_EQ(sink.opens, 1);
  EXPECT_TRUE(sink.calls.empty()) << "nothing is received before Receive()";
  ChunkResult first = loop.ReceiveChunk();
  EXPECT_EQ(first.events.data(), all.data());
  EXPECT_TRUE(first.applied);
  EXPECT_EQ(first.counts.applied, 3u);
  std::vector<size_t> offsets_seen;
  const auto next = loop.Receive([&](ChunkResult& r) {
    offsets_seen.push_back(static_cast<size_t>(r.events.data() - all.data()));
    EXPECT_EQ(r.counts.applied, 2u);
    EXPECT_EQ(r.counts.rejected, 1u);
    return ApplyLoop::Next::kContinue;
  });
  EXPECT_EQ(next, ApplyLoop::Next::kContinue);
  EXPECT_EQ(offsets_seen, std::vector<size_t>{3});
  EXPECT_EQ(loop.in_flight(), 0u);
  EXPECT_EQ(loop.state(), SinkState::kRunning);
}

TEST(ApplyLoopPipelined, AFailedOpenIsThatChunksResultAndTheNextSendOpensAgain) {
  ScriptSink sink;
  sink.open_failures = 1;
  ApplyLoop loop(sink, Chunks(4));
  const auto events = Events(4);
  const std::span<const ChangeEvent> all(events);
  loop.Send(all.subspan(0, 2));
  loop.Send(all.subspan(2, 2));
  EXPECT_EQ(sink.opens, 2);
  EXPECT_EQ(sink.sent.size(), 1u) << "the chunk whose open failed is never sent";
  ChunkResult failed = loop.ReceiveChunk();
  EXPECT_FALSE(failed.applied);
  EXPECT_EQ(failed.failure, FailureClass::kUnavailable);
  EXPECT_EQ(loop.state(), SinkState::kBackoff);
  ChunkResult second = loop.ReceiveChunk();
  EXPECT_TRUE(second.status.ok()) << second.status.message();
  EXPECT_EQ(second.events.data(), all.data() + 2);
}

TEST(ApplyLoopPipelined, AFailureIsClassifiedAndTheStateFollowsTheCallersAnswer) {
  ScriptSink sink;
  sink.statuses = {Unavailable("timed out"), Status::Ok()};
  ApplyLoop loop(sink, Chunks(4));
  const auto events = Events(2);
  const std::span<const ChangeEvent> all(events);
  loop.Send(all.subspan(0, 1));
  loop.Send(all.subspan(1, 1));
  const auto retry = loop.Receive([](ChunkResult& r) {
    EXPECT_EQ(r.failure, FailureClass::kUnavailable);
    EXPECT_TRUE(r.results.empty());
    return ApplyLoop::Next::kRetry;
  });
  EXPECT_EQ(retry, ApplyLoop::Next::kRetry);
  EXPECT_EQ(loop.state(), SinkState::kBackoff);
  loop.Receive([](ChunkResult& r) {
    EXPECT_TRUE(r.status.ok());
    return ApplyLoop::Next::kContinue;
  });
  EXPECT_EQ(loop.state(), SinkState::kRunning);
}

TEST(ApplyLoopPipelined, ReceivingWithNothingSentIsAnInternalError) {
  ScriptSink sink;
  ApplyLoop loop(sink, Chunks(4));
  ChunkResult r = loop.ReceiveChunk();
  EXPECT_EQ(r.failure, FailureClass::kFatal);
}

TEST(ApplyLoopPipelined, ASinkThatDoesNotPipelineRefusesReceive) {
  class Plain : public ScriptSink {
   public:
    void Send(std::span<const ChangeEvent> events) override { Sink::Send(events); }
    ApplyResult Receive() override { return Sink::Receive(); }
  } sink;
  ApplyLoop loop(sink, Chunks(4));
  const auto events = Events(1);
  loop.Send(events);
  ChunkResult r = loop.ReceiveChunk();
  EXPECT_EQ(r.failure, FailureClass::kFatal);
  EXPECT_NE(r.status.message().find("does not pipeline"), std::string::npos) << r.status.message();
}

}  // namespace
}  // namespace sluice::connectors
