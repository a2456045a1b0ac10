// The pull loop's unit-test fixture: a scripted sink (optionally
// pipelining: Capabilities::pipeline) over the in-memory tables, shared by
// sink_runner_test.cc and sink_runner_pipeline_test.cc. No server.
#pragma once

#include "engine/sink_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <thread>

#include <gtest/gtest.h>

#include "sql/memory_tables.h"

namespace sluice::engine::testing_fixture {

using connectors::ChangeEvent;
using connectors::Outcome;
using sql::MemoryStorage;
using namespace std::chrono_literals;

constexpr const char* kType = "account";
constexpr uint32_t kPartitions = 2;

// What the fake sink does and saw; shared with the test under `mu`.
struct Script {
  std::mutex mu;
  int unavailable_calls = 0;             // the next calls fail with kUnavailable
  int unavailable_at_call = 0;           // this call (1, 2, ... of Apply/Receive, and Send with `reorder`) fails with kUnavailable
  int calls = 0;
  int idle_calls = 0;                    // Sink::Idle() calls
  bool fail_flush = false;
  int fail_flushes = 0;  // the next flushes fail (then they succeed)
  std::set<std::pair<uint32_t, uint64_t>> reject;  // (partition, event_id) refused for good
  std::vector<std::pair<uint32_t, uint64_t>> applied;  // every event of every successful Apply(), in order
  std::vector<std::chrono::steady_clock::time_point> applied_at;  // when each of `applied` was applied
  std::set<std::pair<uint32_t, uint64_t>> buffered, durable;
  std::map<std::string, uint64_t> versions;  // the view as flushed: entity -> version
  std::map<std::string, uint64_t> pending;   // written since the last flush (lost on Close)
  int stale = 0;
  // Capabilities::prepares: Prepare() marks each event; Apply() counts the unmarked.
  bool prepares = false;
  std::vector<std::pair<uint32_t, uint64_t>> prepared;  // every event Prepare() saw, in order
  int applied_unprepared = 0;
  bool hold_prepare = false;  // Prepare() waits (on cv) until it is cleared
  bool in_prepare = false;
  std::condition_variable cv;
  // Capabilities::pipeline: Send() queues a chunk, Receive() applies the
  // oldest. With `reorder` a chunk sent while another is in flight is
  // applied at once, before the older one (as a server may).
  uint32_t pipeline = 1;
  bool reorder = false;
  bool hold_receive = false;   // Receive() waits (on cv) until it is cleared
  bool in_receive = false;
  size_t in_flight = 0, max_in_flight = 0;
  int calls_while_in_flight = 0;  // any other call of the sink while chunks were in flight
  // Capabilities::stays_open_at_takeover; Close() and TakeOver() calls seen.
  bool stays_open = false;
  int closes = 0;
  std::vector<std::map<uint32_t, uint64_t>> taken;  // the tokens of each TakeOver()
  std::vector<std::vector<uint32_t>> released;      // the partitions of each Released()
  // Called by Released() without `mu` held (a test looks at storage there),
  // before it adds to `released`.
  std::function<void(std::span<const uint32_t>)> on_released;
};

class ScriptedSink : public connectors::Sink {
 public:
  explicit ScriptedSink(Script* s) : s_(s) {}
  const std::string& name() const override { return name_; }
  connectors::Capabilities capabilities() const override {
    connectors::Capabilities c;
    c.prepares = s_->prepares;
    c.pipeline = s_->pipeline;
    c.stays_open_at_takeover = s_->stays_open;
    return c;
  }
  Status Open() override {
    std::lock_guard lock(s_->mu);
    NothingInFlight();
    return Status::Ok();
  }
  void Prepare(std::span<ChangeEvent> events) override {
    std::unique_lock lock(s_->mu);
    s_->in_prepare = true;
    s_->cv.notify_all();
    s_->cv.wait(lock, [&] { return !s_->hold_prepare; });
    s_->in_prepare = false;
    for (ChangeEvent& e : events) {
      s_->prepared.emplace_back(e.partition, e.event_id);
      e.prepared = std::make_shared<const connectors::PreparedEvent>();
    }
  }
  connectors::ApplyResult Apply(std::span<const ChangeEvent> events) override {
    std::lock_guard lock(s_->mu);
    NothingInFlight();
    return ApplyLocked(events);
  }
  void Send(std::span<const ChangeEvent> events) override {
    std::lock_guard lock(s_->mu);
    Sent& sent = sent_.emplace_back();
    sent.events = events;
    if (s_->reorder && sent_.size() > 1) sent.result = ApplyLocked(events);
    s_->in_flight = sent_.size();
    s_->max_in_flight = std::max(s_->max_in_flight, sent_.size());
  }
  connectors::ApplyResult Receive() override {
    std::unique_lock lock(s_->mu);
    s_->in_receive = true;
    s_->cv.notify_all();
    s_->cv.wait(lock, [&] { return !s_->hold_receive; });
    s_->in_receive = false;
    if (sent_.empty()) {
      ++s_->calls_while_in_flight;  // a broken contract, as the elasticsearch sink would answer it
      return connectors::ApplyResult{Internal("nothing was sent to receive"), {}};
    }
    Sent sent = std::move(sent_.front());
    sent_.pop_front();
    s_->in_flight = sent_.size();
    return sent.result ? std::move(*sent.result) : ApplyLocked(sent.events);
  }
  Status Flush() override {
    std::lock_guard lock(s_->mu);
    NothingInFlight();
    if (s_->fail_flushes > 0) {
      --s_->fail_flushes;
      return Unavailable("the remote store refused the buffered batch");
    }
    if (s_->fail_flush) return Unavailable("the remote store refused the buffered batch");
    s_->durable.insert(s_->buffered.begin(), s_->buffered.end());
    s_->buffered.clear();
    for (const auto& [id, v] : s_->pending) s_->versions[id] = std::max(s_->versions[id], v);
    s_->pending.clear();
    return Status::Ok();
  }
  Status Health() override { return Status::Ok(); }
  void Idle() override {
    std::lock_guard lock(s_->mu);
    NothingInFlight();
    ++s_->idle_calls;
  }
  Status TakeOver(const connectors::TakenOver& taken) override {
    std::lock_guard lock(s_->mu);
    NothingInFlight();
    s_->taken.push_back(taken.tokens);
    return Status::Ok();
  }
  void Released(std::span<const uint32_t> partitions) override {
    if (s_->on_released) s_->on_released(partitions);  // before it shows in `released`
    std::lock_guard lock(s_->mu);
    NothingInFlight();
    s_->released.emplace_back(partitions.begin(), partitions.end());
  }
  void Close() override {
    std::lock_guard lock(s_->mu);
    NothingInFlight();
    ++s_->closes;
    sent_.clear();  // what was in flight is gone, as in the elasticsearch sink
    s_->in_flight = 0;
    s_->buffered.clear();
    s_->pending.clear();
  }
  Status Verify(const std::vector<connectors::EntitySnapshot>&, std::vector<connectors::Difference>&) override {
    return Status::Ok();
  }

 private:
  struct Sent {
    std::span<const ChangeEvent> events;
    std::optional<connectors::ApplyResult> result;  // applied ahead of older chunks (reorder)
  };
  void NothingInFlight() {
    if (!sent_.empty()) ++s_->calls_while_in_flight;
  }
  connectors::ApplyResult ApplyLocked(std::span<const ChangeEvent> events) {
    connectors::ApplyResult r;
    if (++s_->calls == s_->unavailable_at_call) {
      r.status = Unavailable("server went away");
      return r;
    }
    if (s_->unavailable_calls > 0) {
      --s_->unavailable_calls;
      r.status = Unavailable("server went away");
      return r;
    }
    const auto now = std::chrono::steady_clock::now();
    for (const auto& e : events) {
      s_->applied.emplace_back(e.partition, e.event_id);
      s_->applied_at.push_back(now);
      if (!e.prepared) ++s_->applied_unprepared;
      connectors::EventResult er;
      if (s_->reject.count({e.partition, e.event_id})) {
        er.outcome = Outcome::kRejected;
        er.reason = "refused by the test";
      } else if (std::max(s_->versions[e.entity_id], s_->pending[e.entity_id]) >= e.version) {
        er.outcome = Outcome::kStale;  // the per-row version check
      } else {
        s_->pending[e.entity_id] = e.version;
        s_->buffered.insert({e.partition, e.event_id});
      }
      r.results.push_back(er);
    }
    return r;
  }

  std::string name_ = "rec";
  Script* s_;
  std::deque<Sent> sent_;
};

class SinkRunnerUnitTest : public ::testing::Test {
 protected:
  void SetUp() override { storage_ = MemoryStorage::Create(); }
  void TearDown() override {
    if (runner_) runner_->Stop();
  }

  // Appends events to partition p; entity ids "e<k>" with one version each unless given.
  void Append(uint32_t p, int n, const std::string& entity = "") {
    for (int i = 0; i < n; ++i) {
      sql::EventRow r;
      r.event_id = ++head_[p];
      r.entity_id = entity.empty() ? "p" + std::to_string(p) + "e" + std::to_string(r.event_id) : entity;
      r.version = ++versions_[r.entity_id];
      r.command_id = "c" + std::to_string(p) + "-" + std::to_string(r.event_id);
      r.command_name = "put";
      r.state = "{}";
      ASSERT_TRUE(storage_->Insert(kType, p, r).ok());
    }
  }

  // The runner's options for sink "rec" on the in-memory tables, fast timings.
  SinkRunnerOptions Options(uint32_t chunk, uint32_t read_max) {
    SinkRunnerOptions o;
    o.sink.name = "rec";
    o.sink.type = "scripted";
    o.sink.entity = kType;
    o.sink.batch_max = chunk;
    o.partitions = kPartitions;
    o.engine.offset_flush_interval = 5ms;
    o.engine.idle_poll_max = 2ms;
    o.engine.retry_backoff_max = 10ms;
    o.engine.batch_max = read_max;
    o.engine.anti_entropy.enabled = false;
    o.barrier = std::make_shared<DurabilityBarrier>(sql::ConnectParams{}, config::DurabilityBarrier::kOff);
    o.storage = storage_;
    o.control_patience = control_patience_;
    return o;
  }

  std::chrono::milliseconds control_patience_ = std::chrono::minutes(1);

  void Start(config::OnError on_error = config::OnError::kDeadLetter, uint32_t chunk = 1000) {
    SinkRunnerOptions o = Options(chunk, 100);
    o.sink.on_error = on_error;
    runner_ = std::make_unique<SinkRunner>(std::move(o), std::make_unique<ScriptedSink>(&script_));
    ASSERT_TRUE(runner_->Start().ok());
  }

  template <typename Pred>
  bool WaitFor(Pred pred) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      if (pred(runner_->totals())) return true;
      runner_->Wake();
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  // A runner woken per partition (as inside a SyncEngine) over `partitions`.
  void StartWokenPerPartition(uint32_t partitions, uint32_t chunk, uint32_t read_max, uint32_t inflight) {
    SinkRunnerOptions o = Options(chunk, read_max);
    o.partitions = partitions;
    o.woken_per_partition = true;
    o.engine.inflight_batches = inflight;
    runner_ = std::make_unique<SinkRunner>(std::move(o), std::make_unique<ScriptedSink>(&script_));
    ASSERT_TRUE(runner_->Start().ok());
  }

  // Waits (without waking the runner) until `n` events are applied.
  bool WaitApplied(uint64_t n) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (runner_->totals().applied < n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
    return runner_->totals().applied == n;
  }

  // Checks that each partition's events were applied once, in order, from
  // the first; the last event_id applied per partition.
  std::map<uint32_t, uint64_t> EachPartitionInOrder() {
    std::map<uint32_t, uint64_t> last;
    for (const auto& [p, id] : script_.applied) EXPECT_EQ(id, ++last[p]) << "partition " << p;
    return last;
  }

  uint64_t Saved(uint32_t p) {
    const auto stored = storage_->Offsets("rec", kType);
    return stored.count(p) ? stored.at(p).event_id : 0;
  }

  std::shared_ptr<MemoryStorage> storage_;
  std::map<uint32_t, uint64_t> head_;
  std::map<std::string, uint64_t> versions_;
  Script script_;
  std::unique_ptr<SinkRunner> runner_;
};

}  // namespace sluice::engine::testing_fixture
