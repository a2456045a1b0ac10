// engine::SinkRunner against a real MariaDB with a recording sink: short
// batches of several partitions go to the sink in one Apply(), and each
// partition's offset still moves by exactly what the sink acknowledged. The
// sink buffers what it acknowledges until Flush(), like a batching sink: the
// saved offsets never pass what it flushed.
#include "engine/sink_runner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "offsets/offset_store.h"
#include "sql/schema.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using connectors::ChangeEvent;
using connectors::Outcome;

// What the sink saw and how it answers; shared with the test thread.
struct Script {
  std::mutex mu;
  std::vector<std::vector<std::pair<uint32_t, uint64_t>>> calls;  // per successful Apply: (partition, event_id)
  std::set<std::pair<uint32_t, uint64_t>> reject;                 // events to reject
  bool unavailable = false;
  int unavailable_calls = 0;
  // Acknowledged events wait in `buffered` until Flush() moves them to
  // `durable`; Close() drops them.
  std::set<std::pair<uint32_t, uint64_t>> buffered, durable;
  std::map<std::pair<uint32_t, uint64_t>, int> applies;  // per event: successful Apply() calls
  bool fail_flush = false;
  int flushes = 0, failed_flushes = 0;
};

class RecordingSink : public connectors::Sink {
 public:
  RecordingSink(std::string name, Script* s) : name_(std::move(name)), s_(s) {}
  const std::string& name() const override { return name_; }
  connectors::Capabilities capabilities() const override { return {}; }
  Status Open() override { return Status::Ok(); }
  connectors::ApplyResult Apply(std::span<const ChangeEvent> events) override {
    std::lock_guard lock(s_->mu);
    connectors::ApplyResult r;
    if (s_->unavailable) {
      ++s_->unavailable_calls;
      r.status = Unavailable("server went away");
      return r;
    }
    auto& call = s_->calls.emplace_back();
    for (const auto& e : events) {
      call.emplace_back(e.partition, e.event_id);
      s_->buffered.insert({e.partition, e.event_id});
      ++s_->applies[{e.partition, e.event_id}];
      connectors::EventResult er;
      if (s_->reject.count({e.partition, e.event_id})) {
        er.outcome = Outcome::kRejected;
        er.reason = "refused by the test";
      }
      r.results.push_back(er);
    }
    return r;
  }
  Status Flush() override {
    std::lock_guard lock(s_->mu);
    ++s_->flushes;
    if (s_->fail_flush) {
      ++s_->failed_flushes;
      return Unavailable("the remote store refused the buffered batch");
    }
    s_->durable.insert(s_->buffered.begin(), s_->buffered.end());
    s_->buffered.clear();
    return Status::Ok();
  }
  Status Health() override { return Status::Ok(); }
  void Close() override {
    std::lock_guard lock(s_->mu);
    s_->buffered.clear();
  }
  Status Verify(const std::vector<connectors::EntitySnapshot>&, std::vector<connectors::Difference>&) override {
    return Status::Ok();
  }

 private:
  std::string name_;
  Script* s_;
};

constexpr uint32_t kPartitions = 4;

class SinkRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_MYSQL();
    db_ = std::make_unique<TestDatabase>("runner");
    auto init = sql::InitSchema(db_->conn(), db_->name(), {{"account", kPartitions}});
    ASSERT_TRUE(init.ok()) << init.status().ToString();
  }
  void TearDown() override {
    if (runner_) runner_->Stop();
  }

  // Appends n events to partition p (entity "p<p>e<k>", one version each).
  void Append(uint32_t p, int n) {
    std::string q = "INSERT INTO " + sql::QuoteIdent(sql::EventTableName("account", p)) + " " +
                    sql::kEventInsertColumns + " VALUES ";
    for (int i = 0; i < n; ++i) {
      const uint64_t id = ++head_[p];
      if (i > 0) q += ',';
      q += "(" + std::to_string(id) + ",'p" + std::to_string(p) + "e" + std::to_string(id) + "',1,'c" +
           std::to_string(p) + "-" + std::to_string(id) + "','patch',NULL,'{}','{}','{}',NULL,0)";
    }
    auto done = db_->conn().Execute(q);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
  }

  void Start(config::OnError on_error = config::OnError::kDeadLetter,
             std::chrono::milliseconds offset_flush_interval = std::chrono::seconds(1)) {
    engine::SinkRunnerOptions o;
    o.engine.offset_flush_interval = offset_flush_interval;
    o.sink.name = "rec";
    o.sink.type = "recording";
    o.sink.entity = "account";
    o.sink.batch_max = 1000;
    o.sink.on_error = on_error;
    o.partitions = kPartitions;
    o.mysql = MysqlParams();
    o.mysql.database = db_->name();
    runner_ = std::make_unique<engine::SinkRunner>(o, std::make_unique<RecordingSink>("rec", &script_));
    ASSERT_TRUE(runner_->Start().ok());
  }

  // Waits until pred(totals) holds; false after 30 s.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      if (pred(runner_->totals())) return true;
      runner_->Wake();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // The offsets saved in MySQL, per partition.
  std::map<uint32_t, uint64_t> Stored() {
    sql::ConnectParams params = MysqlParams();
    params.database = db_->name();
    offsets::OffsetStore store(params);
    auto loaded = store.Load("rec", "account");
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    std::map<uint32_t, uint64_t> out;
    for (uint32_t p = 0; p < kPartitions; ++p) out[p] = loaded.ok() && loaded->count(p) ? loaded->at(p).event_id : 0;
    return out;
  }

  // Events 1..offsets[p] of each partition that the sink has not flushed.
  std::vector<std::pair<uint32_t, uint64_t>> NotDurable(const std::map<uint32_t, uint64_t>& offsets) {
    std::lock_guard lock(script_.mu);
    std::vector<std::pair<uint32_t, uint64_t>> out;
    for (const auto& [p, upto] : offsets) {
      for (uint64_t id = 1; id <= upto; ++id) {
        if (!script_.durable.count({p, id})) out.emplace_back(p, id);
      }
    }
    return out;
  }

  template <typename Pred>
  bool WaitForScript(Pred pred) {
    return WaitFor([&](const auto&) {
      std::lock_guard lock(script_.mu);
      return pred(script_);
    });
  }

  // Pauses, appends `per_partition` events to every partition, waits until
  // the reader has queued them all: the applier then finds them together.
  void AppendWhilePaused(int per_partition) {
    ASSERT_TRUE(runner_->Pause().ok());
    const uint64_t read = runner_->totals().read;
    for (uint32_t p = 0; p < kPartitions; ++p) Append(p, per_partition);
    ASSERT_TRUE(WaitFor([&](const auto& t) { return t.read == read + kPartitions * per_partition; }));
  }

  std::unique_ptr<TestDatabase> db_;
  std::map<uint32_t, uint64_t> head_;
  Script script_;
  std::unique_ptr<engine::SinkRunner> runner_;
};

TEST_F(SinkRunnerTest, ShortBatchesOfSeveralPartitionsGoInOneApply) {
  for (uint32_t p = 0; p < kPartitions; ++p) Append(p, 3);
  Start();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 12; }));

  AppendWhilePaused(2);
  const size_t calls_before = script_.calls.size();
  ASSERT_TRUE(runner_->Resume().ok());
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 20; }));
  std::lock_guard lock(script_.mu);
  ASSERT_EQ(script_.calls.size(), calls_before + 1) << "the 4 short batches took more than one Apply";
  const auto& call = script_.calls.back();
  std::map<uint32_t, std::vector<uint64_t>> by_partition;
  for (const auto& [p, id] : call) by_partition[p].push_back(id);
  for (uint32_t p = 0; p < kPartitions; ++p) EXPECT_EQ(by_partition[p], (std::vector<uint64_t>{4, 5})) << p;
  const auto totals = runner_->totals();
  for (uint32_t p = 0; p < kPartitions; ++p) EXPECT_EQ(totals.offsets.at(p), 5u) << p;
  EXPECT_EQ(totals.stale + totals.dead_lettered, 0u);
}

TEST_F(SinkRunnerTest, AStopInsideAMergedApplyMovesEachOffsetOnlyPastWhatWasAcknowledged) {
  for (uint32_t p = 0; p < kPartitions; ++p) Append(p, 3);
  Start(config::OnError::kStop);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 12; }));
  AppendWhilePaused(2);
  {
    std::lock_guard lock(script_.mu);
    script_.reject.insert({1, 5});  // the second new event of partition 1
  }
  ASSERT_TRUE(runner_->Resume().ok());
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.state == SinkState::kStopped; }));
  const auto totals = runner_->totals();
  // The merged Apply held p0 4,5 | p1 4,5 | p2 4,5 | p3 4,5 (partition order of the read).
  EXPECT_EQ(totals.offsets.at(0), 5u);
  EXPECT_EQ(totals.offsets.at(1), 4u);
  EXPECT_EQ(totals.offsets.at(2), 3u);
  EXPECT_EQ(totals.offsets.at(3), 3u);
  EXPECT_EQ(totals.applied, 12u + 3u);
  EXPECT_NE(totals.last_error.find("refused by the test"), std::string::npos) << totals.last_error;
}

TEST_F(SinkRunnerTest, ARewindDuringRetriesDropsOnlyThatPartitionsPartOfAMergedApply) {
  for (uint32_t p = 0; p < kPartitions; ++p) Append(p, 3);
  Start();
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 12; }));
  AppendWhilePaused(2);
  {
    std::lock_guard lock(script_.mu);
    script_.unavailable = true;
  }
  ASSERT_TRUE(runner_->Resume().ok());
  ASSERT_TRUE(WaitFor([&](const auto&) {
    std::lock_guard lock(script_.mu);
    return script_.unavailable_calls >= 1;
  }));
  // Runs on the applier between two retries of the merged work.
  ASSERT_TRUE(runner_->SetOffsets({{2, 0}}).ok());
  const size_t calls_before = script_.calls.size();
  {
    std::lock_guard lock(script_.mu);
    script_.unavailable = false;
  }
  // p2 is read again from its start: 5 events; the others' 2 new events once.
  ASSERT_TRUE(WaitFor([](const auto& t) {
    return t.offsets.at(0) == 5 && t.offsets.at(1) == 5 && t.offsets.at(2) == 5 && t.offsets.at(3) == 5;
  }));
  std::lock_guard lock(script_.mu);
  std::map<uint32_t, std::vector<uint64_t>> seen;
  for (size_t c = calls_before; c < script_.calls.size(); ++c) {
    for (const auto& [p, id] : script_.calls[c]) seen[p].push_back(id);
  }
  EXPECT_EQ(seen[0], (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(seen[1], (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(seen[2], (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(seen[3], (std::vector<uint64_t>{4, 5}));
}

TEST_F(SinkRunnerTest, SavedOffsetsNeverPassWhatTheSinkFlushed) {
  Start(config::OnError::kDeadLetter, std::chrono::milliseconds(10));
  for (int round = 0; round < 20; ++round) {
    Append(static_cast<uint32_t>(round % kPartitions), 7);
    // The saved offsets first, what the sink made durable after: durable
    // only grows, so it must already cover the offsets read before it.
    const auto stored = Stored();
    const auto missing = NotDurable(stored);
    ASSERT_TRUE(missing.empty()) << "offset " << stored.at(missing.front().first) << " of partition "
                                 << missing.front().first << " was saved, but event " << missing.front().second
                                 << " was never flushed";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(WaitFor([&](const auto&) { return Stored() == head_; }));
  EXPECT_TRUE(NotDurable(head_).empty());
}

TEST_F(SinkRunnerTest, AFailedFlushKeepsTheOffsetsBackAndAppliesItsEventsAgain) {
  Start(config::OnError::kDeadLetter, std::chrono::milliseconds(10));
  Append(0, 3);
  ASSERT_TRUE(WaitFor([&](const auto&) { return Stored().at(0) == 3; }));
  {
    std::lock_guard lock(script_.mu);
    script_.fail_flush = true;
  }
  Append(0, 4);  // events 4..7
  ASSERT_TRUE(WaitForScript([](const Script& s) { return s.failed_flushes >= 3 && s.applies.count({0, 7}); }));
  EXPECT_EQ(Stored().at(0), 3u) << "the offset passed events the sink failed to flush";
  const auto failing = runner_->totals();
  EXPECT_GE(failing.retries, 1u);
  EXPECT_EQ(failing.state, SinkState::kBackoff);  // while flushes fail, even between successful applies
  EXPECT_NE(failing.last_error.find("the remote store refused the buffered batch"), std::string::npos)
      << failing.last_error;
  {
    std::lock_guard lock(script_.mu);
    script_.fail_flush = false;
  }
  ASSERT_TRUE(WaitFor([&](const auto&) { return Stored().at(0) == 7; }));
  EXPECT_TRUE(NotDurable({{0, 7}}).empty());
  std::lock_guard lock(script_.mu);
  // Each failed flush closed the sink, which dropped its buffer: the events
  // since the last flush were applied again, and counted once.
  EXPECT_GE(script_.applies.at({0, 4}), 2);
  const auto recovered = runner_->totals();
  EXPECT_EQ(recovered.applied, 7u);
  EXPECT_EQ(recovered.state, SinkState::kRunning);
}

TEST_F(SinkRunnerTest, TheSinkIsFlushedBeforeItIsClosedAfterAFailureAndWhenPaused) {
  // Offsets are never saved on the timer here: only the other reasons flush.
  Start(config::OnError::kDeadLetter, std::chrono::hours(1));
  Append(0, 3);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 3; }));
  EXPECT_EQ(NotDurable({{0, 3}}).size(), 3u);  // acknowledged, still buffered
  {
    std::lock_guard lock(script_.mu);
    script_.unavailable = true;
  }
  Append(0, 2);
  // The failed Apply closes the sink, which would drop the buffer: flushed first.
  ASSERT_TRUE(WaitForScript([](const Script& s) { return s.unavailable_calls >= 1 && s.flushes >= 1; }));
  EXPECT_TRUE(NotDurable({{0, 3}}).empty());
  {
    std::lock_guard lock(script_.mu);
    script_.unavailable = false;
  }
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 5; }));
  EXPECT_EQ(Stored().at(0), 0u);  // not saved yet
  ASSERT_TRUE(runner_->Pause().ok());
  EXPECT_TRUE(NotDurable({{0, 5}}).empty());
  EXPECT_EQ(Stored().at(0), 5u);
  ASSERT_TRUE(runner_->Resume().ok());
  Append(0, 1);
  ASSERT_TRUE(WaitFor([](const auto& t) { return t.applied == 6; }));
  runner_->Stop();
  EXPECT_TRUE(NotDurable({{0, 6}}).empty());
  EXPECT_EQ(Stored().at(0), 6u);
}

}  // namespace
}  // namespace sluice::testing
