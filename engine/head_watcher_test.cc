// How the engine learns that partitions moved (engine/head_watcher.h), on
// the in-memory tables: a reader woken per partition reads nothing while
// nothing is announced, reads a partition it is woken for, and the
// watcher's looks find the commits nobody announced. No server.
#include "engine/head_watcher.h"

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "sql/memory_tables.h"

namespace sluice::engine {
namespace {

using sql::MemoryStorage;
using namespace std::chrono_literals;

constexpr const char* kType = "account";
constexpr uint32_t kPartitions = 3;

// Records the events applied; thread-safe.
class RecordingSink : public connectors::Sink {
 public:
  const std::string& name() const override { return name_; }
  connectors::Capabilities capabilities() const override { return {}; }
  Status Open() override { return Status::Ok(); }
  connectors::ApplyResult Apply(std::span<const connectors::ChangeEvent> events) override {
    std::lock_guard lock(mu_);
    connectors::ApplyResult r;
    for (const auto& e : events) {
      applied_.insert({e.partition, e.event_id});
      r.results.emplace_back();
    }
    return r;
  }
  Status Health() override { return Status::Ok(); }
  void Close() override {}
  Status Verify(const std::vector<connectors::EntitySnapshot>&, std::vector<connectors::Difference>&) override {
    return Status::Ok();
  }
  size_t applied() const {
    std::lock_guard lock(mu_);
    return applied_.size();
  }

 private:
  std::string name_ = "rec";
  mutable std::mutex mu_;
  std::set<std::pair<uint32_t, uint64_t>> applied_;
};

class HeadWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override { storage_ = MemoryStorage::Create(); }
  void TearDown() override {
    if (watcher_) watcher_->Stop();
    if (runner_) runner_->Stop();
  }

  // Appends n events to partition p, as a writer that announces nothing would.
  uint64_t Append(uint32_t p, int n) {
    for (int i = 0; i < n; ++i) {
      sql::EventRow r;
      r.event_id = ++head_[p];
      r.entity_id = "p" + std::to_string(p) + "e" + std::to_string(r.event_id);
      r.version = 1;
      r.command_id = "c" + std::to_string(r.event_id);
      r.command_name = "put";
      r.state = "{}";
      EXPECT_TRUE(storage_->Insert(kType, p, r).ok());
    }
    return head_[p];
  }

  void StartRunner() {
    SinkRunnerOptions o;
    o.sink.name = "rec";
    o.sink.type = "recording";
    o.sink.entity = kType;
    o.partitions = kPartitions;
    o.engine.offset_flush_interval = 5ms;
    o.engine.idle_poll_max = 2ms;  // would poll every 2 ms if it were not woken per partition
    o.engine.anti_entropy.enabled = false;
    o.barrier = std::make_shared<DurabilityBarrier>(sql::ConnectParams{}, config::DurabilityBarrier::kOff);
    o.storage = storage_;
    o.woken_per_partition = true;
    auto sink = std::make_unique<RecordingSink>();
    sink_ = sink.get();
    runner_ = std::make_unique<SinkRunner>(std::move(o), std::move(sink));
    ASSERT_TRUE(runner_->Start().ok());
  }

  void StartWatcher(std::chrono::milliseconds slowest) {
    watcher_metrics_ = std::make_shared<metrics::HeadWatcherMetrics>(registry_);
    watcher_ = std::make_unique<HeadWatcher>(
        HeadWatcher::Options{.storage = storage_,
                             .partitions = {{kType, kPartitions}},
                             .fast = 5ms,
                             .slowest = slowest,
                             .metrics = watcher_metrics_},
        std::vector<SinkRunner*>{runner_.get()});
    watcher_->Start();
  }

  bool WaitApplied(size_t n, std::chrono::milliseconds within = 10s) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < until) {
      if (sink_->applied() >= n) return true;
      std::this_thread::sleep_for(1ms);
    }
    return sink_->applied() >= n;
  }

  double Counter(std::string_view name) { return registry_.Counter(name).Add({}).Value(); }

  std::shared_ptr<MemoryStorage> storage_;
  std::map<uint32_t, uint64_t> head_;
  metrics::Registry registry_;
  std::shared_ptr<metrics::HeadWatcherMetrics> watcher_metrics_;
  RecordingSink* sink_ = nullptr;
  std::unique_ptr<SinkRunner> runner_;
  std::unique_ptr<HeadWatcher> watcher_;
};

TEST_F(HeadWatcherTest, AnIdleReaderReadsOnlyThePartitionsItIsWokenFor) {
  Append(0, 5);
  Append(2, 3);
  StartRunner();
  ASSERT_TRUE(WaitApplied(8));  // the first pass reads every partition
  std::this_thread::sleep_for(20ms);
  const uint64_t reads = storage_->calls(MemoryStorage::Op::kReadAfter);
  std::this_thread::sleep_for(200ms);  // 100 idle polls' worth at idle_poll_max 2ms
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kReadAfter), reads) << "an idle reader woken per partition polled";

  // A commit nobody announced stays unread...
  const uint64_t head = Append(1, 4);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sink_->applied(), 8u);
  // ...a wake-up for a head already read costs nothing...
  runner_->Wake(0, 5);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kReadAfter), reads);
  // ...and a wake-up for the partition that moved reads it.
  runner_->Wake(1, head);
  ASSERT_TRUE(WaitApplied(12));
}

TEST_F(HeadWatcherTest, ALookFindsWhatNoWriterAnnouncedAndCountsIt) {
  Append(0, 2);
  StartRunner();
  StartWatcher(/*slowest=*/40ms);
  ASSERT_TRUE(WaitApplied(2));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(Counter("sluice_engine_unannounced_commits_total"), 0) << "what was committed before the start";

  Append(1, 3);  // nobody announces it
  ASSERT_TRUE(WaitApplied(5, 5s)) << "the fallback look never found the commit";
  // Counted once the look after the one that found it saw no notice either.
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (Counter("sluice_engine_unannounced_commits_total") < 1 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  // Once per look that found the partition moved (a look may fall between two of the 3 inserts).
  EXPECT_GE(Counter("sluice_engine_unannounced_commits_total"), 1);
  EXPECT_LE(Counter("sluice_engine_unannounced_commits_total"), 3);
  EXPECT_EQ(watcher_->heads(kType).at(1), 3u);
}

TEST_F(HeadWatcherTest, AnnouncedCommitsAreReadAtOnceAndNeverCountedAsMissed) {
  StartRunner();
  StartWatcher(/*slowest=*/10s);  // no look comes to the rescue within the test
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (!watcher_->looked() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(watcher_->looked());
  std::this_thread::sleep_for(200ms);  // the looks back off towards 10 s
  const double looks = Counter("sluice_engine_head_looks_total");
  size_t expected = 0;
  for (int round = 0; round < 20; ++round) {
    const uint32_t p = round % kPartitions;
    watcher_->Announce(kType, p, Append(p, 2));
    expected += 2;
    ASSERT_TRUE(WaitApplied(expected, 2s)) << "round " << round;
  }
  EXPECT_EQ(Counter("sluice_engine_unannounced_commits_total"), 0);
  EXPECT_LE(Counter("sluice_engine_head_looks_total") - looks, 2) << "announced commits made the engine look";
  EXPECT_EQ(watcher_->heads(kType).at(0), head_[0]);
}

TEST_F(HeadWatcherTest, AForgedNoticeCostsAReadAndHidesNothing) {
  StartRunner();
  StartWatcher(/*slowest=*/40ms);
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (!watcher_->looked() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  // A datagram claims partition 0 is far ahead.
  watcher_->Announce(kType, 0, uint64_t{1} << 62, /*trusted=*/false);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sink_->applied(), 0u);
  // The writer of this process still wakes the runner for its real commits...
  watcher_->Announce(kType, 0, Append(0, 3));
  ASSERT_TRUE(WaitApplied(3, 2s)) << "a forged notice suppressed a real one";
  // ...the forged head shows nowhere...
  std::this_thread::sleep_for(150ms);  // a few looks
  EXPECT_EQ(watcher_->heads(kType).at(0), 3u);
  // ...and commits nobody announces are still found, and counted.
  Append(0, 2);
  ASSERT_TRUE(WaitApplied(5, 5s));
  const auto counted = std::chrono::steady_clock::now() + 5s;
  while (Counter("sluice_engine_unannounced_commits_total") < 1 && std::chrono::steady_clock::now() < counted) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(Counter("sluice_engine_unannounced_commits_total"), 1);
}

// A look over many partitions takes a while: a commit can land after the
// look read its partition, and its notice (a datagram) before the look is
// done. That notice still announces the commit: the next looks do not count
// it as missed, and do not go back to looking every few ms for it.
TEST_F(HeadWatcherTest, ANoticeThatComesDuringALookIsNotCountedAsMissed) {
  StartRunner();
  StartWatcher(/*slowest=*/20ms);
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (!watcher_->looked() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(watcher_->looked());
  for (int round = 0; round < 5; ++round) {
    const uint32_t p = round % kPartitions;
    // The next look's read waits; meanwhile the notice of a commit it will
    // not see comes in; then the commit becomes visible.
    storage_->Hold(MemoryStorage::Op::kHead);
    const uint64_t calls = storage_->calls(MemoryStorage::Op::kHead);
    const auto held = std::chrono::steady_clock::now() + 2s;
    while (storage_->calls(MemoryStorage::Op::kHead) == calls && std::chrono::steady_clock::now() < held) {
      std::this_thread::sleep_for(1ms);
    }
    watcher_->Announce(kType, p, head_[p] + 1, /*trusted=*/false);
    storage_->Release(MemoryStorage::Op::kHead);
    std::this_thread::sleep_for(5ms);  // the look read the partition without it
    Append(p, 1);
    std::this_thread::sleep_for(60ms);  // the looks that find it
  }
  EXPECT_EQ(Counter("sluice_engine_unannounced_commits_total"), 0);
  ASSERT_TRUE(WaitApplied(5, 2s));
}

TEST_F(HeadWatcherTest, AReadThatFailsAfterAWakeUpIsRetriedWithoutAnotherOne) {
  StartRunner();
  std::this_thread::sleep_for(50ms);  // the first pass is over; the reader sleeps until woken
  storage_->FailNext(MemoryStorage::Op::kReadAfter, Unavailable("the session timed out while idle"));
  runner_->Wake(1, Append(1, 2));
  ASSERT_TRUE(WaitApplied(2, 5s)) << "the reader went back to sleep after its read failed";
}

}  // namespace
}  // namespace sluice::engine
