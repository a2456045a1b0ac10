#include "writer/pusher.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/thread_slice.h"

namespace sluice::writer {
namespace {

using connectors::ChangeEvent;
using namespace std::chrono_literals;

// A sink whose answers a test scripts: Open fails while `down`; Apply blocks
// while `hold` is set, rejects entity ids starting with "bad", reports
// versions <= `stale_upto` as stale.
struct Script {
  std::mutex mu;
  std::condition_variable cv;
  bool down = false;
  bool hold = false;
  bool unavailable = false;
  uint64_t stale_upto = 0;
  int opens = 0;
  int entered = 0;  // Apply calls begun
  std::vector<size_t> apply_sizes;
  std::chrono::nanoseconds slice{-1};  // the applying thread's time slice, as the kernel reports it
  std::string slice_error;             // why the slice could not be read
  // Blocks until Apply has been entered n times.
  void AwaitEntered(int n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return entered >= n; });
  }
  void Release() {
    {
      std::lock_guard lock(mu);
      hold = false;
    }
    cv.notify_all();
  }
};

class FakeSink : public connectors::Sink {
 public:
  explicit FakeSink(Script* s) : s_(s) {}
  const std::string& name() const override { return name_; }
  connectors::Capabilities capabilities() const override { return {.can_push = true}; }
  Status Open() override {
    std::lock_guard lock(s_->mu);
    ++s_->opens;
    return s_->down ? Unavailable("connection refused") : Status::Ok();
  }
  connectors::ApplyResult Apply(std::span<const ChangeEvent> events) override {
    std::unique_lock lock(s_->mu);
    ++s_->entered;
    s_->cv.notify_all();
    s_->cv.wait(lock, [&] { return !s_->hold; });
    s_->apply_sizes.push_back(events.size());
    if (const auto slice = CurrentThreadSlice(); slice.ok()) {
      s_->slice = slice.value();
    } else {
      s_->slice_error = slice.status().ToString();
    }
    connectors::ApplyResult r;
    if (s_->unavailable) {
      r.status = Unavailable("server went away");
      return r;
    }
    for (const auto& e : events) {
      connectors::EventResult er;
      if (e.entity_id.rfind("bad", 0) == 0) {
        er.outcome = connectors::Outcome::kRejected;
        er.reason = "refused";
      } else if (e.version <= s_->stale_upto) {
        er.outcome = connectors::Outcome::kStale;
      }
      r.results.push_back(er);
    }
    return r;
  }
  Status Health() override { return Status::Ok(); }
  void Close() override {}
  Status Verify(const std::vector<connectors::EntitySnapshot>&, std::vector<connectors::Difference>&) override {
    return Status::Ok();
  }

 private:
  Script* s_;
  std::string name_ = "fake";
};

std::shared_ptr<const std::vector<ChangeEvent>> Events(std::vector<std::pair<std::string, uint64_t>> ids) {
  auto v = std::make_shared<std::vector<ChangeEvent>>();
  for (auto& [id, version] : ids) {
    ChangeEvent e;
    e.entity_type = "account";
    e.entity_id = id;
    e.version = version;
    e.state = "{}";
    v->push_back(e);
  }
  return v;
}

std::unique_ptr<Pusher> MakePusher(Script* s, size_t max_pending = 20000,
                                   std::chrono::milliseconds backoff = std::chrono::milliseconds(200),
                                   metrics::PushMetrics* push_metrics = nullptr,
                                   std::chrono::microseconds thread_slice = 0us) {
  Pusher::Options o;
  o.metrics = push_metrics;
  o.thread_slice = thread_slice;
  o.sink.name = "fake";
  o.sink.push.enabled = true;
  o.sink.push.mode = config::PushConfig::Mode::kSync;
  o.where = "sink 'fake'";
  o.max_pending_events = max_pending;
  o.reopen_backoff_min = backoff;
  o.reopen_backoff_max = backoff;
  auto p = std::make_unique<Pusher>(o, [s]() -> Result<std::unique_ptr<connectors::Sink>> {
    return std::unique_ptr<connectors::Sink>(std::make_unique<FakeSink>(s));
  });
  p->Start();
  return p;
}

TEST(Pusher, ReportsEachEventsOutcome) {
  Script s;
  s.stale_upto = 1;
  auto p = MakePusher(&s);
  auto t = p->Submit(Events({{"a", 2}, {"b", 1}, {"bad", 5}}), Pusher::Clock::now() + 10s);
  const auto out = p->Wait(*t);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], PushOutcome::kUpdated);
  EXPECT_EQ(out[1], PushOutcome::kUpdated);  // stale: the view already has it
  EXPECT_EQ(out[2], PushOutcome::kRejected);
  p->Stop();
  EXPECT_EQ(p->counters().applied, 1u);
  EXPECT_EQ(p->counters().stale, 1u);
  EXPECT_EQ(p->counters().rejected, 1u);
  EXPECT_EQ(p->counters().failed, 0u);
  EXPECT_EQ(p->counters().events, 3u);
}

TEST(Pusher, WaitReturnsAtTheDeadlineWhileTheSinkHangs) {
  Script s;
  s.hold = true;
  auto p = MakePusher(&s);
  auto t = p->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 30ms);
  const auto out = p->Wait(*t);  // returns although Apply is still blocked
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], PushOutcome::kPending);
  EXPECT_EQ(PushOutcomeName(out[0]), "timeout");
  s.Release();
  p->Stop();
  EXPECT_EQ(p->counters().late, 1u);
  EXPECT_EQ(p->counters().applied, 1u);  // it landed after all
}

TEST(Pusher, BatchesQueuedBehindASlowPushAreAppliedTogether) {
  Script s;
  s.hold = true;
  auto p = MakePusher(&s);
  auto first = p->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 10s);
  s.AwaitEntered(1);  // the pusher is inside Apply with the first batch
  auto second = p->Submit(Events({{"b", 1}, {"c", 1}}), Pusher::Clock::now() + 10s);
  auto third = p->Submit(Events({{"d", 1}}), Pusher::Clock::now() + 10s);
  s.Release();
  EXPECT_EQ(p->Wait(*third)[0], PushOutcome::kUpdated);
  EXPECT_EQ(p->Wait(*second)[1], PushOutcome::kUpdated);
  p->Stop();
  std::lock_guard lock(s.mu);
  EXPECT_EQ(s.apply_sizes, (std::vector<size_t>{1, 3}));
}

// The value after `series ` in the exposition text, or -1.
double SeriesValue(const std::string& text, const std::string& series) {
  const size_t at = text.find(series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 1));
}

TEST(Pusher, TheWaitHistogramTimesEachBatchUntilThePusherTakesIt) {
  metrics::Registry registry;
  metrics::WriterMetrics writer_metrics(registry);
  Script s;
  s.hold = true;
  auto p = MakePusher(&s, 20000, 200ms, &writer_metrics.ForPush("fake"));
  auto first = p->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 10s);
  s.AwaitEntered(1);  // the pusher holds the first batch
  auto second = p->Submit(Events({{"b", 1}}), Pusher::Clock::now() + 10s);
  std::this_thread::sleep_for(30ms);  // the second batch cannot be taken before Release
  s.Release();
  EXPECT_EQ(p->Wait(*second)[0], PushOutcome::kUpdated);
  p->Stop();
  const std::string text = registry.Text();
  EXPECT_EQ(SeriesValue(text, R"(sluice_writer_push_wait_seconds_count{sink="fake"})"), 2) << text;
  // The second batch waited behind the first at least as long as the test held it.
  EXPECT_GE(SeriesValue(text, R"(sluice_writer_push_wait_seconds_sum{sink="fake"})"), 0.030) << text;
  EXPECT_EQ(SeriesValue(text, R"(sluice_writer_push_duration_seconds_count{sink="fake"})"), 2) << text;
}

TEST(Pusher, AFullQueueFailsAtOnce) {
  Script s;
  s.hold = true;
  auto p = MakePusher(&s, /*max_pending=*/2);
  auto first = p->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 10s);
  s.AwaitEntered(1);  // the pusher took it and blocks
  auto queued = p->Submit(Events({{"b", 1}, {"c", 1}}), Pusher::Clock::now() + 10s);
  auto refused = p->Submit(Events({{"d", 1}}), Pusher::Clock::now() + 10s);
  EXPECT_TRUE(refused->finished);
  EXPECT_EQ(p->Wait(*refused)[0], PushOutcome::kFailed);
  s.Release();
  EXPECT_EQ(p->Wait(*queued)[0], PushOutcome::kUpdated);
  p->Stop();
  EXPECT_EQ(p->counters().failed, 1u);
}

TEST(Pusher, ASinkThatIsDownFailsFastUntilItsBackoffPasses) {
  Script s;
  s.down = true;
  auto p = MakePusher(&s, 20000, 2s);  // the first retry comes 1..2 s after the failure
  auto t1 = p->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 10s);
  EXPECT_EQ(p->Wait(*t1)[0], PushOutcome::kFailed);  // Open failed
  // Within the back-off the next push fails without trying.
  auto t2 = p->Submit(Events({{"b", 1}}), Pusher::Clock::now() + 10s);
  EXPECT_TRUE(t2->finished);
  EXPECT_EQ(t2->outcomes[0], PushOutcome::kFailed);
  {
    std::lock_guard lock(s.mu);
    EXPECT_EQ(s.opens, 1);
    s.down = false;
  }
  // After the back-off it reconnects.
  std::this_thread::sleep_for(2100ms);
  auto t3 = p->Submit(Events({{"c", 1}}), Pusher::Clock::now() + 10s);
  EXPECT_EQ(p->Wait(*t3)[0], PushOutcome::kUpdated);
  p->Stop();
  EXPECT_EQ(p->counters().failed, 2u);
  EXPECT_EQ(p->counters().applied, 1u);
}

TEST(Pusher, ABatchLevelFailureFailsTheBatchAndReopensLater) {
  Script s;
  s.unavailable = true;
  auto p = MakePusher(&s);
  auto t = p->Submit(Events({{"a", 1}, {"b", 2}}), Pusher::Clock::now() + 10s);
  const auto out = p->Wait(*t);
  EXPECT_EQ(out[0], PushOutcome::kFailed);
  EXPECT_EQ(out[1], PushOutcome::kFailed);
  p->Stop();
  EXPECT_EQ(p->counters().failed, 2u);
}

TEST(Pusher, StopFailsWhatIsStillQueued) {
  Script s;
  s.hold = true;
  auto p = MakePusher(&s);
  auto first = p->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 10s);
  s.AwaitEntered(1);
  auto queued = p->Submit(Events({{"b", 1}}), Pusher::Clock::now() + 10s);
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    s.Release();
  });
  p->Stop();
  releaser.join();
  EXPECT_TRUE(first->finished);
  EXPECT_TRUE(queued->finished);
  EXPECT_EQ(queued->outcomes[0], PushOutcome::kFailed);
  EXPECT_EQ(first->outcomes[0], PushOutcome::kUpdated);
}

TEST(Pusher, ThePusherThreadRunsWithTheConfiguredSlice) {
  Script with_slice, without;
  auto p = MakePusher(&with_slice, 20000, 200ms, nullptr, 300us);
  auto q = MakePusher(&without);
  p->Wait(*p->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 10s));
  q->Wait(*q->Submit(Events({{"a", 1}}), Pusher::Clock::now() + 10s));
  p->Stop();
  q->Stop();
  ASSERT_EQ(with_slice.slice_error, "");
  ASSERT_EQ(without.slice_error, "");
  ASSERT_GE(with_slice.slice.count(), 0) << "the sink was not applied to";
  ASSERT_GE(without.slice.count(), 0) << "the sink was not applied to";
  if (without.slice.count() == 0) GTEST_SKIP() << "this kernel reports no slices (Linux 6.12 and later do)";
  EXPECT_EQ(with_slice.slice, 300us);
  EXPECT_NE(without.slice, 300us);
}

}  // namespace
}  // namespace sluice::writer
