// PartitionWorker on the in-memory event tables: batching, the statement-size
// cut, and each kind of conflict (DESIGN 3.3 step 6, I4), without a server.
#include "writer/partition_worker.h"

#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <thread>
#include <gtest/gtest.h>

#include "core/json_delta.h"
#include "core/thread_name.h"
#include "sql/memory_tables.h"

namespace sluice::writer {
namespace {

using sql::MemoryStorage;

constexpr const char* kType = "account";

class PartitionWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { storage_ = MemoryStorage::Create(); }

  std::unique_ptr<PartitionWorker> MakeWorker(size_t max_statement_bytes = 8 << 20,
                                              std::chrono::milliseconds idle_exit = std::chrono::seconds(10),
                                              uint32_t snapshot_every = 1) {
    PartitionWorkerOptions o;
    o.snapshot_every = snapshot_every;
    o.idle_exit = idle_exit;
    o.type = kType;
    o.partition = 0;
    o.storage = storage_;
    o.batch_max = 100;
    o.cache_entries = 1000;
    o.conflict_retries = 4;
    o.max_statement_bytes = max_statement_bytes;
    o.overlap_commits = overlap_;
    return std::make_unique<PartitionWorker>(std::move(o));
  }

  // A put of {"n": n} on entity `id`, its reply delivered to the returned future.
  static Command Put(const std::string& id, const std::string& command_id, int n,
                     std::promise<Reply>* done, std::optional<uint64_t> if_match = std::nullopt) {
    Command c;
    c.entity_id = id;
    c.name = "put";
    c.command_id = command_id;
    c.expected_version = if_match;
    c.request = Json{{"n", n}};
    c.request_text = CanonicalJson(c.request);
    c.reply = [done](Reply r) { done->set_value(std::move(r)); };
    return c;
  }

  // Submits one put to a started worker and waits for its reply.
  static Reply Run(PartitionWorker& w, const std::string& id, const std::string& command_id, int n,
                   std::optional<uint64_t> if_match = std::nullopt) {
    std::promise<Reply> done;
    auto f = done.get_future();
    w.Submit(Put(id, command_id, n, &done, if_match));
    return f.get();
  }

  static Json Body(const Reply& r) { return Json::parse(r.body); }

  // A row another writer stored.
  void OtherWriter(uint64_t event_id, const std::string& id, uint64_t version, const std::string& command_id) {
    sql::EventRow r;
    r.event_id = event_id;
    r.entity_id = id;
    r.version = version;
    r.command_id = command_id;
    r.command_name = "put";
    r.request = R"({"n":0})";
    r.response = "null";
    r.state = R"({"n":0})";
    ASSERT_TRUE(storage_->Insert(kType, 0, r).ok());
  }

  std::shared_ptr<MemoryStorage> storage_;
  bool overlap_ = false;  // PartitionWorkerOptions::overlap_commits
};

// What holds with and without overlapping commits.
class PartitionWorkerModesTest : public PartitionWorkerTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    PartitionWorkerTest::SetUp();
    overlap_ = GetParam();
  }
};
INSTANTIATE_TEST_SUITE_P(Overlap, PartitionWorkerModesTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Overlapping" : "OneByOne"; });

// Overlapping commits alone.
class PartitionWorkerOverlapTest : public PartitionWorkerTest {
 protected:
  void SetUp() override {
    PartitionWorkerTest::SetUp();
    overlap_ = true;
  }
};

TEST_P(PartitionWorkerModesTest, QueuedCommandsGoInOneBatchWithDenseEventIdsAndVersions) {
  auto w = MakeWorker();
  std::vector<std::promise<Reply>> done(6);
  // Queued before the thread starts: taken as one batch.
  for (int i = 0; i < 6; ++i) w->Submit(Put(i % 2 == 0 ? "a" : "b", "c" + std::to_string(i), i, &done[i]));
  w->Start();
  for (int i = 0; i < 6; ++i) {
    const Reply r = done[i].get_future().get();
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Body(r)["event_id"], i + 1);
    EXPECT_EQ(Body(r)["version"], i / 2 + 1);
  }
  w->Stop();
  EXPECT_EQ(w->stats().batches, 1u);
  EXPECT_EQ(w->stats().events, 6u);
  const auto rows = storage_->Events(kType, 0);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[5].entity_id, "b");
  EXPECT_EQ(rows[5].version, 3u);
  EXPECT_EQ(rows[5].state, R"({"n":5})");
}

TEST_P(PartitionWorkerModesTest, AnIdleWorkerEndsItsThreadAndSessionAndTheNextCommandStartsThem) {
  auto w = MakeWorker(8 << 20, /*idle_exit=*/std::chrono::milliseconds(30));
  w->Start();
  EXPECT_EQ(ThreadNamesOf()["sluice-commit"], 0) << "a thread before any command";
  const Reply first = Run(*w, "a", "c1", 1);
  ASSERT_EQ(first.status, 200) << first.body;
  const uint64_t opened = storage_->calls(MemoryStorage::Op::kOpen);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ThreadNamesOf()["sluice-commit"] > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(ThreadNamesOf()["sluice-commit"], 0) << "the idle worker kept its thread";
  // The next command starts a thread and a new session, on the same head.
  const Reply second = Run(*w, "a", "c2", 2);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(Body(second)["event_id"], 2);
  EXPECT_EQ(Body(second)["version"], 2);
  EXPECT_GT(storage_->calls(MemoryStorage::Op::kOpen), opened) << "no new session after the idle end";
  // A retry of the first command still gets its first reply.
  const Reply again = Run(*w, "a", "c1", 1);
  EXPECT_EQ(again.body, first.body);
  w->Stop();
  EXPECT_EQ(storage_->Events(kType, 0).size(), 2u);
}

TEST_P(PartitionWorkerModesTest, ABatchIsCutBeforeItsStatementGrowsTooLarge) {
  auto w = MakeWorker(/*max_statement_bytes=*/300);
  std::vector<std::promise<Reply>> done(5);
  for (int i = 0; i < 5; ++i) w->Submit(Put("e" + std::to_string(i), "c", i, &done[i]));
  w->Start();
  for (int i = 0; i < 5; ++i) {
    const Reply r = done[i].get_future().get();
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Body(r)["event_id"], i + 1);
  }
  w->Stop();
  EXPECT_GT(w->stats().batches, 1u);
  EXPECT_EQ(w->stats().events, 5u);
}

TEST_P(PartitionWorkerModesTest, ARetryIsAnsweredFromTheCacheByteForByte) {
  auto w = MakeWorker();
  w->Start();
  const Reply first = Run(*w, "a", "k1", 1);
  const Reply again = Run(*w, "a", "k1", 1);
  const Reply other = Run(*w, "a", "k1", 2);  // same key, other request
  w->Stop();
  EXPECT_EQ(again.body, first.body);
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(other.status, 409);
  EXPECT_EQ(storage_->Events(kType, 0).size(), 1u);
}

TEST_P(PartitionWorkerModesTest, AnEventIdTakenByAnotherWriterReloadsTheHead) {
  auto w = MakeWorker();
  w->Start();
  ASSERT_EQ(Run(*w, "a", "k1", 1).status, 200);
  OtherWriter(2, "z", 1, "other");
  const Reply r = Run(*w, "a", "k2", 2);
  w->Stop();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["event_id"], 3);
  EXPECT_EQ(Body(r)["version"], 2);
  EXPECT_EQ(w->stats().conflicts_primary, 1u);
}

TEST_P(PartitionWorkerModesTest, AStaleCachedEntityIsReloadedOnAVersionConflict) {
  auto w = MakeWorker();
  w->Start();
  ASSERT_EQ(Run(*w, "a", "k1", 1).status, 200);
  OtherWriter(10, "a", 2, "other");  // the worker's cache still says version 1
  const Reply r = Run(*w, "a", "k2", 2);
  w->Stop();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["version"], 3);
  EXPECT_EQ(Body(r)["event_id"], 11);
  EXPECT_EQ(w->stats().conflicts_version, 1u);
}

TEST_P(PartitionWorkerModesTest, ARetryThatRacedItsOriginalIsAnsweredFromStorage) {
  auto w = MakeWorker();
  w->Start();
  ASSERT_EQ(Run(*w, "a", "k1", 1).status, 200);
  // Another writer stored command k2 of entity a (as version 5, so only the command key collides).
  sql::EventRow stored;
  stored.event_id = 20;
  stored.entity_id = "a";
  stored.version = 5;
  stored.command_id = "k2";
  stored.command_name = "put";
  stored.request = R"({"n":2})";
  stored.response = "null";
  stored.state = R"({"n":2})";
  ASSERT_TRUE(storage_->Insert(kType, 0, stored).ok());
  const Reply r = Run(*w, "a", "k2", 2);
  w->Stop();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.replayed);
  EXPECT_EQ(Body(r)["event_id"], 20);
  EXPECT_EQ(Body(r)["version"], 5);
  EXPECT_EQ(w->stats().conflicts_command, 1u);
  EXPECT_EQ(storage_->Events(kType, 0).size(), 2u);
}

TEST_P(PartitionWorkerModesTest, ARefusalOnAStaleCachedEntityIsCheckedAgainstStorage) {
  auto w = MakeWorker();
  w->Start();
  ASSERT_EQ(Run(*w, "a", "k1", 1).status, 200);
  OtherWriter(2, "a", 2, "other");
  // If-Match 2 fails on the cached version 1, but storage holds 2: no 409.
  const Reply r = Run(*w, "a", "k2", 2, /*if_match=*/2);
  w->Stop();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["version"], 3);
  EXPECT_EQ(w->stats().stale_refusals, 1u);
}

TEST_P(PartitionWorkerModesTest, UnavailableStorageAnswers503AndTheNextBatchReconnects) {
  auto w = MakeWorker();
  w->Start();
  ASSERT_EQ(Run(*w, "a", "k1", 1).status, 200);
  const uint64_t opened = storage_->calls(MemoryStorage::Op::kOpen);
  storage_->FailNext(MemoryStorage::Op::kAppend, Unavailable("connection lost"));
  const Reply failed = Run(*w, "a", "k2", 2);
  const Reply retried = Run(*w, "a", "k2", 2);
  w->Stop();
  EXPECT_EQ(failed.status, 503);
  ASSERT_EQ(retried.status, 200) << retried.body;
  EXPECT_EQ(Body(retried)["version"], 2);
  EXPECT_EQ(w->stats().unavailable, 1u);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kOpen), opened + (overlap_ ? 2 : 1));  // each session, new
}

TEST_P(PartitionWorkerModesTest, EndlessConflictsGiveUpWith503) {
  auto w = MakeWorker();
  w->Start();
  ASSERT_EQ(Run(*w, "a", "k1", 1).status, 200);
  storage_->FailNext(MemoryStorage::Op::kAppend,
                     Aborted("MySQL error 1062 (23000): Duplicate entry '2' for key 'PRIMARY'"), 10);
  const Reply r = Run(*w, "a", "k2", 2);
  w->Stop();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(w->stats().conflicts_primary, 5u);
}

// A built-in patch of a state that stores deltas is planned from the patch
// alone; whatever the batches and cuts, every stored state rebuilds to what
// the patches make, deltas and whole states where the rule says.
TEST_P(PartitionWorkerModesTest, PatchDeltasRebuildEveryStateThroughCutsAndRestarts) {
  auto w = MakeWorker(/*max_statement_bytes=*/600, std::chrono::seconds(10), /*snapshot_every=*/5);
  w->Start();
  Json doc = {{"pad", std::string(300, 'p')}, {"n", 0}, {"keep", nullptr}, {"o", {{"a", 1}}}};
  std::vector<Json> expected = {Json()};
  {
    std::promise<Reply> done;
    Command c = Put("e", "create", 0, &done);
    c.request = doc;
    c.request_text = CanonicalJson(doc);
    w->Submit(std::move(c));
    ASSERT_EQ(done.get_future().get().status, 200);
    expected.push_back(doc);
  }
  // Queued together: several batches, each cut by the statement size.
  std::vector<std::promise<Reply>> done(24);
  for (int i = 0; i < 24; ++i) {
    Json patch = {{"n", i + 1}};
    if (i % 3 == 0) patch["o"] = {{"b", i}, {"a", nullptr}};
    if (i % 5 == 0) patch["keep"] = nullptr;  // a member that is null in the state: removed by the patch
    if (i % 7 == 0) patch["new"] = {{"x", nullptr}, {"y", 1.0}};
    Command c = Put("e", "p" + std::to_string(i), 0, &done[i]);
    c.name = "patch";
    c.request = patch;
    c.request_text = CanonicalJson(patch);
    w->Submit(std::move(c));
    doc.merge_patch(patch);
    expected.push_back(doc);
  }
  for (auto& d : done) ASSERT_EQ(d.get_future().get().status, 200);
  w->Stop();
  const auto events = storage_->Events(kType, 0);
  ASSERT_EQ(events.size(), expected.size() - 1);
  size_t deltas = 0;
  for (const auto& e : events) deltas += !e.delta.empty();
  EXPECT_GE(deltas, 15u);
  EXPECT_LE(deltas, 20u);  // a whole state at least every 5 versions
  // Every version rebuilt from storage, as readers see it.
  auto log = storage_->OpenEventLog();
  std::vector<std::pair<std::string, uint64_t>> keys;
  for (uint64_t v = 1; v < expected.size(); ++v) keys.emplace_back("e", v);
  auto rows = log->AtVersions(kType, 0, keys);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), expected.size() - 1);
  for (const auto& r : *rows) {
    ASSERT_TRUE(SameJson(Json::parse(r.state), expected[r.version])) << "version " << r.version << ": " << r.state;
  }
  // A new worker (nothing cached) continues the chain from storage.
  auto again = MakeWorker(600, std::chrono::seconds(10), 5);
  again->Start();
  std::promise<Reply> last;
  Command c = Put("e", "after", 0, &last);
  c.name = "patch";
  c.request = Json{{"n", 100}};
  c.request_text = CanonicalJson(c.request);
  again->Submit(std::move(c));
  ASSERT_EQ(last.get_future().get().status, 200);
  again->Stop();
  doc["n"] = 100;
  auto latest = log->LatestOf(kType, 0, {"e"});
  ASSERT_TRUE(latest.ok());
  ASSERT_EQ(latest->size(), 1u);
  EXPECT_TRUE(SameJson(Json::parse(latest->at(0).state), doc)) << latest->at(0).state;
}

// Waits until `op` was called `n` times; false after 10 s.
bool AwaitCalls(const MemoryStorage& storage, MemoryStorage::Op op, uint64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (storage.calls(op) < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST_F(PartitionWorkerOverlapTest, TheNextBatchIsInsertedWhileTheLastOneCommitsAndCommitsAfterIt) {
  auto w = MakeWorker();
  w->Start();
  storage_->Hold(MemoryStorage::Op::kCommit);
  std::promise<Reply> first_done, second_done;
  w->Submit(Put("a", "k1", 1, &first_done));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kCommit, 1));  // batch 1 commits, held there
  w->Submit(Put("a", "k2", 2, &second_done));
  // Batch 2 is planned on batch 1's state and inserted while batch 1 commits.
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kAppend, 2));
  auto first = first_done.get_future();
  auto second = second_done.get_future();
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(20)), std::future_status::timeout);
  EXPECT_TRUE(storage_->Events(kType, 0).empty());  // nothing is visible before its COMMIT
  storage_->Release(MemoryStorage::Op::kCommit);
  const Reply r1 = first.get();
  const Reply r2 = second.get();
  w->Stop();
  ASSERT_EQ(r1.status, 200) << r1.body;
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(Body(r1)["event_id"], 1);
  EXPECT_EQ(Body(r2)["event_id"], 2);
  EXPECT_EQ(Body(r2)["version"], 2);
  const auto events = storage_->Events(kType, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].state, R"({"n":2})");
}

TEST_F(PartitionWorkerOverlapTest, ABatchPlannedOnOneThatDidNotCommitIsPlannedAgain) {
  auto w = MakeWorker();
  w->Start();
  storage_->Hold(MemoryStorage::Op::kCommit);
  storage_->FailNext(MemoryStorage::Op::kCommit, Unavailable("connection lost"));
  std::promise<Reply> first_done, second_done;
  w->Submit(Put("a", "k1", 1, &first_done));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kCommit, 1));
  w->Submit(Put("a", "k2", 2, &second_done));  // staged as version 2, event 2
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kAppend, 2));
  storage_->Release(MemoryStorage::Op::kCommit);  // batch 1's COMMIT fails
  const Reply r1 = first_done.get_future().get();
  const Reply r2 = second_done.get_future().get();
  w->Stop();
  EXPECT_EQ(r1.status, 503);
  ASSERT_EQ(r2.status, 200) << r2.body;
  // Batch 2 was rolled back and planned on what storage holds: version 1, event 1.
  EXPECT_EQ(Body(r2)["version"], 1);
  EXPECT_EQ(Body(r2)["event_id"], 1);
  const auto events = storage_->Events(kType, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].command_id, "k2");
}

TEST_F(PartitionWorkerOverlapTest, CommandsThatArriveWhileTheLastBatchCommitsJoinTheNextOne) {
  auto w = MakeWorker();
  w->Start();
  storage_->Hold(MemoryStorage::Op::kCommit);
  std::promise<Reply> a, b, c;
  w->Submit(Put("e", "k1", 1, &a));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kCommit, 1));
  w->Submit(Put("e", "k2", 2, &b));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kAppend, 2));
  w->Submit(Put("e", "k3", 3, &c));  // joins k2's open transaction
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kAppend, 3));
  storage_->Release(MemoryStorage::Op::kCommit);
  const Reply ra = a.get_future().get(), rb = b.get_future().get(), rc = c.get_future().get();
  w->Stop();
  ASSERT_EQ(rc.status, 200) << rc.body;
  EXPECT_EQ(Body(ra)["event_id"], 1);
  EXPECT_EQ(Body(rb)["event_id"], 2);
  EXPECT_EQ(Body(rc)["event_id"], 3);
  EXPECT_EQ(Body(rc)["version"], 3);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kCommit), 2u);  // k1's, then k2 and k3 in one
  EXPECT_EQ(storage_->Events(kType, 0).size(), 3u);
}

// Stop() with a COMMIT in flight and a batch staged behind it waits for
// both and answers both; an idle worker with one in flight lands it first.
TEST_F(PartitionWorkerOverlapTest, StopWaitsForTheCommitInFlightAndTheBatchBehindIt) {
  auto w = MakeWorker(8 << 20, std::chrono::milliseconds(50));
  w->Start();
  storage_->Hold(MemoryStorage::Op::kCommit);
  std::promise<Reply> first, second;
  w->Submit(Put("e", "k1", 1, &first));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kCommit, 1));
  w->Submit(Put("e", "k2", 2, &second));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kAppend, 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(120));  // past idle_exit: nothing may end while held
  std::thread stopper([&] { w->Stop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  storage_->Release(MemoryStorage::Op::kCommit);
  stopper.join();
  EXPECT_EQ(first.get_future().get().status, 200);
  EXPECT_EQ(second.get_future().get().status, 200);
  EXPECT_EQ(storage_->Events(kType, 0).size(), 2u);
}

// A batch that conflicts at COMMIT goes back to the queue, and the batch
// planned on it goes back behind it: the later command still lands last.
TEST_F(PartitionWorkerOverlapTest, AfterAConflictAtCommitCommandsKeepTheirOrder) {
  auto w = MakeWorker();
  w->Start();
  storage_->Hold(MemoryStorage::Op::kCommit);
  storage_->FailNext(MemoryStorage::Op::kCommit, Aborted("MySQL error 1213 (40001): Deadlock found"));
  std::promise<Reply> first, second;
  w->Submit(Put("e", "k1", 1, &first));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kCommit, 1));
  w->Submit(Put("e", "k2", 2, &second));
  ASSERT_TRUE(AwaitCalls(*storage_, MemoryStorage::Op::kAppend, 2));
  storage_->Release(MemoryStorage::Op::kCommit);
  const Reply r1 = first.get_future().get(), r2 = second.get_future().get();
  w->Stop();
  ASSERT_EQ(r1.status, 200) << r1.body;
  ASSERT_EQ(r2.status, 200) << r2.body;
  const auto events = storage_->Events(kType, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].command_id, "k1");
  EXPECT_EQ(events[1].command_id, "k2");
  EXPECT_EQ(events[1].state, R"({"n":2})");
}

TEST_F(PartitionWorkerOverlapTest, AConflictAtCommitRequeuesTheBatchAndARetryIsAnsweredFromStorage) {
  auto w = MakeWorker();
  w->Start();
  ASSERT_EQ(Run(*w, "a", "k1", 1).status, 200);
  // Galera: another node's write certified first; its COMMIT names no key.
  storage_->FailNext(MemoryStorage::Op::kCommit, Aborted("MySQL error 1213 (40001): Deadlock found"));
  const Reply r = Run(*w, "a", "k2", 2);
  // The same command again, once it is stored: the stored event answers it.
  const Reply again = Run(*w, "a", "k2", 2);
  w->Stop();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Body(r)["version"], 2);
  EXPECT_EQ(again.body, r.body);
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(storage_->Events(kType, 0).size(), 2u);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kCommit), 3u);  // k1, k2 refused, k2
}

TEST_F(PartitionWorkerOverlapTest, EndlessConflictsAtCommitGiveUpWith503) {
  auto w = MakeWorker();
  w->Start();
  storage_->FailNext(MemoryStorage::Op::kCommit, Aborted("MySQL error 1213 (40001): Deadlock found"), 100);
  const Reply r = Run(*w, "a", "k1", 1);
  w->Stop();
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(storage_->Events(kType, 0).empty());
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kCommit), 5u);  // the first try and conflict_retries more
}

// Many clients on few entities while appends fail now and then: whatever
// overlapped, the stored events are dense and in order, every entity's
// versions are 1..n, each state follows from the one before, and a command
// is stored exactly when it was answered 200 (a failed COMMIT here stores
// nothing), once.
TEST_P(PartitionWorkerModesTest, ManyClientsUnderFailuresKeepEveryInvariant) {
  auto w = MakeWorker();
  w->Start();
  constexpr int kClients = 8;
  constexpr int kCommands = 150;
  std::vector<std::thread> clients;
  std::mutex mu;
  std::map<std::string, int> answered;  // command id -> status
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < kCommands; ++i) {
        if (i % 25 == 0) {
          storage_->FailNext(overlap_ ? MemoryStorage::Op::kCommit : MemoryStorage::Op::kAppend,
                             i % 50 == 0 ? Unavailable("connection lost") : Aborted("MySQL error 1213 (40001): Deadlock"));
        }
        const std::string id = "e" + std::to_string((t + i) % 3);
        const std::string command = "c" + std::to_string(t) + "-" + std::to_string(i);
        std::promise<Reply> done;
        auto f = done.get_future();
        Command c = Put(id, command, i, &done);
        c.name = "patch";
        c.request = Json{{"c" + std::to_string(t), i}};
        c.request_text = CanonicalJson(c.request);
        w->Submit(std::move(c));
        const Reply r = f.get();
        std::lock_guard lock(mu);
        answered[command] = r.status;
      }
    });
  }
  for (auto& c : clients) c.join();
  w->Stop();
  const auto events = storage_->Events(kType, 0);
  std::map<std::string, uint64_t> versions;
  std::map<std::string, Json> states;
  std::set<std::string> stored;
  for (size_t k = 0; k < events.size(); ++k) {
    const auto& e = events[k];
    ASSERT_EQ(e.event_id, k + 1) << "event ids dense and in order";
    ASSERT_EQ(e.version, ++versions[e.entity_id]) << e.entity_id;
    ASSERT_TRUE(stored.insert(e.command_id).second) << e.command_id << " stored twice";
    // Each state is the one before with this command's patch applied.
    Json expected = states.count(e.entity_id) ? states[e.entity_id] : Json::object();
    ApplyMergePatch(expected, Json::parse(e.request));
    ASSERT_EQ(Json::parse(e.state), expected) << e.entity_id << " v" << e.version;
    states[e.entity_id] = expected;
  }
  size_t ok = 0;
  for (const auto& [command, status] : answered) {
    EXPECT_TRUE(status == 200 || status == 503) << command << ": " << status;
    EXPECT_EQ(stored.count(command), status == 200 ? 1u : 0u) << command << ": " << status;
    ok += status == 200;
  }
  EXPECT_EQ(answered.size(), size_t{kClients * kCommands});
  EXPECT_GT(ok, answered.size() / 2);
}

}  // namespace
}  // namespace sluice::writer
