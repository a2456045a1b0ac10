// Partition workers sharing BatchThreads, on the in-memory event tables:
// threads and sessions bounded by the thread count whatever the partitions,
// one thread per partition, every command answered in order, no partition
// starved by a busy one on its thread, and nothing held when idle.
#include "writer/batch_threads.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/thread_name.h"
#include "sql/memory_tables.h"
#include "sql/routed_tables.h"
#include "writer/partition_worker.h"

namespace sluice::writer {
namespace {

using sql::MemoryStorage;
using namespace std::chrono_literals;

constexpr const char* kType = "account";

// The batch threads and, with overlap, their commit stages (a stage's
// thread carries its maker's name until it names itself).
int BatchThreadsNow() {
  auto names = ThreadNamesOf();
  return names["sluice-commit"] + names["sluice-txcommit"];
}

bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// How the threads commit: a batch at a time, overlapping, or grouping the
// batches of several partitions in one transaction.
enum class Mode { kOneByOne, kOverlapping, kGrouped };

class BatchThreadsTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override { storage_ = MemoryStorage::Create(); }

  static bool Overlap() { return GetParam() == Mode::kOverlapping; }
  static size_t GroupMax() { return GetParam() == Mode::kGrouped ? 8 : 1; }

  void MakeThreads(size_t n, std::chrono::milliseconds idle_exit = 10s) {
    threads_ = std::make_unique<BatchThreads>(BatchThreads::Options{.storage = storage_,
                                                                    .threads = n,
                                                                    .overlap_commits = Overlap(),
                                                                    .group_commit_max = GroupMax(),
                                                                    .idle_exit = idle_exit});
  }

  // Workers for partitions [0, n), thread keys 0..n-1; each commit notes its thread.
  void MakeWorkers(uint32_t n, uint32_t batch_max = 100, std::chrono::milliseconds idle_exit = 10s) {
    for (uint32_t p = 0; p < n; ++p) {
      PartitionWorkerOptions o;
      o.type = kType;
      o.partition = p;
      o.storage = storage_;
      o.batch_max = batch_max;
      o.cache_entries = 1000;
      o.conflict_retries = conflict_retries_;
      o.overlap_commits = Overlap();
      o.threads = threads_.get();
      o.thread_key = p;
      o.idle_exit = idle_exit;
      o.on_commit = [this](const std::string&, uint32_t partition, uint64_t) {
        std::lock_guard lock(mu_);
        committed_on_[partition].insert(std::this_thread::get_id());
      };
      workers_.push_back(std::make_unique<PartitionWorker>(std::move(o)));
      workers_.back()->Start();
    }
  }

  void StopAll() {
    for (auto& w : workers_) w->Stop();
    threads_->Stop();
  }

  // A put of {"n": n} on `id`; its reply is noted in `order` with `tag`.
  Command Put(const std::string& id, const std::string& command_id, int n, std::promise<Reply>* done,
              std::string tag = "") {
    Command c;
    c.entity_id = id;
    c.name = "put";
    c.command_id = command_id;
    c.request = Json{{"n", n}};
    c.request_text = CanonicalJson(c.request);
    c.reply = [this, done, tag](Reply r) {
      if (!tag.empty()) {
        std::lock_guard lock(mu_);
        order_.push_back(tag);
      }
      done->set_value(std::move(r));
    };
    return c;
  }

  std::shared_ptr<MemoryStorage> storage_;
  std::unique_ptr<BatchThreads> threads_;
  std::vector<std::unique_ptr<PartitionWorker>> workers_;
  uint32_t conflict_retries_ = 16;  // of the workers MakeWorkers makes
  std::mutex mu_;
  std::map<uint32_t, std::set<std::thread::id>> committed_on_;
  std::vector<std::string> order_;
};
INSTANTIATE_TEST_SUITE_P(Modes, BatchThreadsTest, ::testing::Values(Mode::kOneByOne, Mode::kOverlapping, Mode::kGrouped),
                         [](const ::testing::TestParamInfo<Mode>& i) {
                           return i.param == Mode::kOneByOne ? "OneByOne"
                                  : i.param == Mode::kOverlapping ? "Overlapping"
                                                                  : "Grouped";
                         });

// 48 partitions under load from 8 clients on 3 threads: at most 3 threads
// and sessions (with overlap 6: each has a commit stage and a spare), each partition's batches on one thread,
// every command answered once with dense event ids and versions.
TEST_P(BatchThreadsTest, ManyPartitionsShareFewThreadsAndSessionsAndEachStaysOnOne) {
  MakeThreads(3);
  constexpr uint32_t kPartitions = 48;
  MakeWorkers(kPartitions);
  constexpr int kClients = 8, kPerClient = 300;
  std::atomic<int> most_threads{0};
  std::vector<std::thread> clients;
  std::vector<std::vector<Reply>> replies(kClients);
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::vector<std::promise<Reply>> done(kPerClient);
      std::vector<std::future<Reply>> got;
      for (int i = 0; i < kPerClient; ++i) {
        const uint32_t p = static_cast<uint32_t>((c * kPerClient + i) % kPartitions);
        got.push_back(done[i].get_future());
        workers_[p]->Submit(Put("e" + std::to_string(c % 4), "c" + std::to_string(c) + "-" + std::to_string(i), i,
                                &done[i]));
        if (i % 50 == 0) most_threads = std::max(most_threads.load(), BatchThreadsNow());
      }
      for (auto& f : got) replies[c].push_back(f.get());
    });
  }
  for (auto& t : clients) t.join();
  most_threads = std::max(most_threads.load(), BatchThreadsNow());
  StopAll();
  for (const auto& rs : replies) {
    for (const Reply& r : rs) ASSERT_EQ(r.status, 200) << r.body;
  }
  EXPECT_LE(most_threads.load(), Overlap() ? 6 : 3) << "batch threads beyond BatchThreads::Options::threads";
  EXPECT_LE(storage_->calls(MemoryStorage::Op::kOpen), Overlap() ? 6u : 3u) << "sessions beyond one (two) per thread";
  std::set<std::thread::id> all;
  for (const auto& [p, ids] : committed_on_) {
    EXPECT_EQ(ids.size(), 1u) << "partition " << p << " was served by " << ids.size() << " threads";
    all.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(committed_on_.size(), kPartitions);
  EXPECT_LE(all.size(), 3u);
  size_t events = 0;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const auto rows = storage_->Events(kType, p);
    std::map<std::string, uint64_t> versions;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].event_id, i + 1) << "partition " << p;
      EXPECT_EQ(rows[i].version, ++versions[rows[i].entity_id]) << "partition " << p;
    }
    events += rows.size();
  }
  EXPECT_EQ(events, size_t{kClients} * kPerClient);
}

// Two partitions on one thread: while the first has a long queue, a command
// of the second waits for at most one batch of the first.
TEST_P(BatchThreadsTest, ABusyPartitionGivesItsThreadUpAfterABatchWhenAnotherWaits) {
  MakeThreads(1);
  MakeWorkers(2, /*batch_max=*/10);
  const MemoryStorage::Op held = Overlap() ? MemoryStorage::Op::kCommit : MemoryStorage::Op::kAppend;
  storage_->Hold(held);
  std::promise<Reply> first;
  workers_[0]->Submit(Put("a", "a0", 0, &first, "a0"));
  ASSERT_TRUE(Eventually([&] { return storage_->calls(held) >= 1; }));  // its batch is held in storage
  std::vector<std::promise<Reply>> queued(100);
  for (int i = 0; i < 100; ++i) workers_[0]->Submit(Put("a", "a" + std::to_string(i + 1), i, &queued[i], "a"));
  std::promise<Reply> other;
  workers_[1]->Submit(Put("b", "b0", 0, &other, "b"));
  storage_->Release(held);
  ASSERT_EQ(other.get_future().get().status, 200);
  for (auto& q : queued) ASSERT_EQ(q.get_future().get().status, 200);
  StopAll();
  std::lock_guard lock(mu_);
  const auto b = std::find(order_.begin(), order_.end(), "b");
  ASSERT_NE(b, order_.end());
  // Before it: a0's batch, and with overlap the batch that grew behind it.
  const auto before = b - order_.begin();
  EXPECT_LE(before, Overlap() ? 11 : 1) << "the second partition waited for more than one batch of the first";
}

// With nothing to do, the threads end with their sessions and the workers
// drop their caches; the next command starts a thread again and reads the
// head again.
TEST_P(BatchThreadsTest, IdleThreadsEndAndTheNextCommandStartsOne) {
  MakeThreads(2, 30ms);
  MakeWorkers(4, 100, 30ms);
  for (uint32_t p = 0; p < 4; ++p) {
    std::promise<Reply> done;
    workers_[p]->Submit(Put("x", "c1", 1, &done));
    ASSERT_EQ(done.get_future().get().status, 200);
  }
  ASSERT_TRUE(Eventually([&] { return threads_->running() == 0 && ThreadNamesOf()["sluice-commit"] == 0; }))
      << threads_->running() << " threads still run";
  const uint64_t heads = storage_->calls(MemoryStorage::Op::kHead);
  std::promise<Reply> again;
  workers_[2]->Submit(Put("x", "c2", 2, &again));
  const Reply r = again.get_future().get();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["version"], 2);
  EXPECT_GT(storage_->calls(MemoryStorage::Op::kHead), heads) << "the idle worker kept its cached head";
  StopAll();
}

// Two partitions on one thread: when the second one's batch finds the
// session broken and opens a new one, the first one drops its cached head
// and entities before its next batch (commits may have been lost in the
// outage), as it did when every worker had its own session.
TEST_P(BatchThreadsTest, AWorkerReadsAgainAfterAnotherOneReopenedTheThreadsSessions) {
  MakeThreads(1);
  MakeWorkers(2);
  std::promise<Reply> a1, b1, b2, b3, a2;
  workers_[0]->Submit(Put("a", "a1", 1, &a1));
  ASSERT_EQ(a1.get_future().get().status, 200);
  workers_[1]->Submit(Put("b", "b1", 1, &b1));
  ASSERT_EQ(b1.get_future().get().status, 200);
  storage_->FailNext(MemoryStorage::Op::kAppend, Unavailable("connection lost"));
  workers_[1]->Submit(Put("b", "b2", 2, &b2));
  ASSERT_EQ(b2.get_future().get().status, 503);
  workers_[1]->Submit(Put("b", "b2", 2, &b3));  // opens the thread's sessions again
  ASSERT_EQ(b3.get_future().get().status, 200);
  const uint64_t heads = storage_->calls(MemoryStorage::Op::kHead);
  const uint64_t reads = storage_->calls(MemoryStorage::Op::kLatestOf);
  workers_[0]->Submit(Put("a", "a2", 2, &a2));
  const Reply r = a2.get_future().get();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["version"], 2);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kHead), heads + 1) << "the first worker kept its head";
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kLatestOf), reads + 1) << "the first worker kept its entity";
  StopAll();
}

// With several storage servers a thread's event log has a session per
// server and reconnects one by itself: an outage of one server answered
// 503 to one partition still makes the other partitions of the thread
// read their head and entities again.
TEST_P(BatchThreadsTest, AnOutageOfOneOfSeveralServersDropsTheThreadsCaches) {
  auto main = MemoryStorage::Create();
  auto second = MemoryStorage::Create();
  sql::StorageLayout layout;
  layout.servers = {{"main", {}}, {"second", {}}};
  layout.placement[kType] = {0, 0, 1};  // partitions 0 and 1 on main, 2 on second
  auto routed = std::make_shared<sql::RoutedStorage>(layout, std::vector<std::shared_ptr<sql::Storage>>{main, second});
  threads_ = std::make_unique<BatchThreads>(
      BatchThreads::Options{.storage = routed, .threads = 1, .overlap_commits = Overlap(), .group_commit_max = GroupMax()});
  for (uint32_t p = 0; p < 3; ++p) {
    PartitionWorkerOptions o;
    o.type = kType;
    o.partition = p;
    o.storage = routed;
    o.overlap_commits = Overlap();
    o.threads = threads_.get();
    o.thread_key = 0;  // all three on the one thread
    workers_.push_back(std::make_unique<PartitionWorker>(std::move(o)));
    workers_.back()->Start();
  }
  auto run = [&](uint32_t p, const std::string& id, const std::string& key, int n) {
    std::promise<Reply> done;
    workers_[p]->Submit(Put(id, key, n, &done));
    return done.get_future().get();
  };
  ASSERT_EQ(run(2, "c", "c1", 1).status, 200);  // the thread's session to `second`
  ASSERT_EQ(run(0, "a", "a1", 1).status, 200);  // and to `main`; partition 0 caches its head
  main->FailNext(MemoryStorage::Op::kAppend, Unavailable("connection lost"));
  ASSERT_EQ(run(1, "b", "b1", 1).status, 503);
  ASSERT_EQ(run(1, "b", "b1", 1).status, 200);
  const uint64_t heads = main->calls(MemoryStorage::Op::kHead);
  const Reply r = run(0, "a", "a2", 2);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["version"], 2);
  EXPECT_EQ(main->calls(MemoryStorage::Op::kHead), heads + 1) << "partition 0 kept its head through the outage";
  StopAll();
}

// A thread kept busy by one partition still drops the caches of the other
// partitions it serves once they had no command for idle_exit: the sweep
// runs between the busy partition's batches, not only when it lets go.
TEST_P(BatchThreadsTest, ABusyThreadDropsTheCachesOfItsIdlePartitions) {
  MakeThreads(1, 30ms);
  MakeWorkers(2, /*batch_max=*/10, 30ms);
  std::promise<Reply> b1;
  workers_[1]->Submit(Put("b", "b1", 1, &b1));
  ASSERT_EQ(b1.get_future().get().status, 200);
  // Partition 0's first batch is held at its INSERT past idle_exit...
  const uint64_t appends = storage_->calls(MemoryStorage::Op::kAppend);
  storage_->Hold(MemoryStorage::Op::kAppend);
  std::promise<Reply> a1;
  workers_[0]->Submit(Put("a", "a1", 1, &a1));
  ASSERT_TRUE(Eventually([&] { return storage_->calls(MemoryStorage::Op::kAppend) > appends; }));
  std::this_thread::sleep_for(60ms);
  // ... and its second at the read of a new entity, so that partition 1's
  // next command arrives while partition 0 still holds the thread.
  const uint64_t reads = storage_->calls(MemoryStorage::Op::kLatestOf);
  storage_->Hold(MemoryStorage::Op::kLatestOf);
  std::promise<Reply> a2;
  workers_[0]->Submit(Put("c", "c1", 1, &a2));
  storage_->Release(MemoryStorage::Op::kAppend);
  // (With overlap, a1 is answered only after c1 is planned: not waited for here.)
  ASSERT_TRUE(Eventually([&] { return storage_->calls(MemoryStorage::Op::kLatestOf) > reads; }));
  const uint64_t heads = storage_->calls(MemoryStorage::Op::kHead);
  std::promise<Reply> b2;
  workers_[1]->Submit(Put("b", "b2", 2, &b2));
  storage_->Release(MemoryStorage::Op::kLatestOf);
  ASSERT_EQ(a1.get_future().get().status, 200);
  ASSERT_EQ(a2.get_future().get().status, 200);
  const Reply r = b2.get_future().get();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["version"], 2);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kHead), heads + 1) << "the idle partition kept its cached head";
  StopAll();
}

// Group commit, on the in-memory tables: each test makes several partitions'
// batches meet in one turn of the thread by holding the batch of a blocker
// partition in its INSERT while they queue.
class GroupCommitTest : public BatchThreadsTest {
 protected:
  // Submits a command to `blocker`, holds its INSERT, runs `queue` (which
  // submits the commands that should meet in one turn) and lets it go.
  void BehindAHeldBatch(uint32_t blocker, const std::function<void()>& queue) {
    const uint64_t appends = storage_->calls(MemoryStorage::Op::kAppend);
    storage_->Hold(MemoryStorage::Op::kAppend);
    std::promise<Reply> held;
    workers_[blocker]->Submit(Put("blocker", "blocker-" + std::to_string(appends), 0, &held));
    ASSERT_TRUE(Eventually([&] { return storage_->calls(MemoryStorage::Op::kAppend) > appends; }));
    queue();
    storage_->Release(MemoryStorage::Op::kAppend);
    ASSERT_EQ(held.get_future().get().status, 200);
  }

  // Partitions [0, n) over two servers, `placement[p]` the server of
  // partition p, all on one batch thread; `main` and `second` their tables.
  void MakeTwoServers(const std::vector<size_t>& placement) {
    main_ = MemoryStorage::Create();
    second_ = MemoryStorage::Create();
    sql::StorageLayout layout;
    layout.servers = {{"main", {}}, {"second", {}}};
    layout.placement[kType] = placement;
    auto routed =
        std::make_shared<sql::RoutedStorage>(layout, std::vector<std::shared_ptr<sql::Storage>>{main_, second_});
    threads_ = std::make_unique<BatchThreads>(
        BatchThreads::Options{.storage = routed, .threads = 1, .group_commit_max = GroupMax()});
    for (uint32_t p = 0; p < placement.size(); ++p) {
      PartitionWorkerOptions o;
      o.type = kType;
      o.partition = p;
      o.storage = routed;
      o.threads = threads_.get();
      o.thread_key = p;
      workers_.push_back(std::make_unique<PartitionWorker>(std::move(o)));
      workers_.back()->Start();
    }
  }

  // A command to each of the partitions, answered: each caches its head
  // and entity "a".
  void CacheHeads(std::initializer_list<uint32_t> partitions) {
    for (uint32_t p : partitions) {
      std::promise<Reply> first;
      workers_[p]->Submit(Put("a", "first", 1, &first));
      ASSERT_EQ(first.get_future().get().status, 200);
    }
  }

  // Another writer stores event `event_id` of partition p in `tables`.
  static void OtherWriterStores(MemoryStorage& tables, uint32_t p, uint64_t event_id) {
    sql::EventRow other;
    other.event_id = event_id;
    other.entity_id = "b";
    other.version = 1;
    other.command_id = "other-writer";
    other.command_name = "put";
    other.state = R"({"n":0})";
    ASSERT_TRUE(tables.Insert(kType, p, other).ok());
  }

  // Every reply 200, of `version` when given.
  static void ExpectStored(std::vector<std::promise<Reply>>& done, std::optional<int> version = std::nullopt) {
    for (auto& d : done) {
      const Reply r = d.get_future().get();
      ASSERT_EQ(r.status, 200) << r.body;
      if (version) {
        EXPECT_EQ(Json::parse(r.body)["version"], *version);
      }
    }
  }

  std::shared_ptr<MemoryStorage> main_, second_;

  // Partitions 1..3 hold `rows` rows each, dense.
  void ExpectEachOfThreeHolds(size_t rows) {
    for (uint32_t p = 1; p <= 3; ++p) {
      EXPECT_EQ(storage_->Events(kType, p).size(), rows) << "partition " << p;
      ExpectDense(p);
    }
  }

  // The rows of partition p: event ids 1..n, each entity's versions 1..k,
  // each command id once.
  void ExpectDense(uint32_t p) {
    const auto rows = storage_->Events(kType, p);
    std::map<std::string, uint64_t> versions;
    std::set<std::string> commands;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].event_id, i + 1) << "partition " << p;
      EXPECT_EQ(rows[i].version, ++versions[rows[i].entity_id]) << "partition " << p;
      EXPECT_TRUE(commands.insert(rows[i].entity_id + "/" + rows[i].command_id).second)
          << "partition " << p << ": " << rows[i].command_id << " stored twice";
    }
  }
};
INSTANTIATE_TEST_SUITE_P(Grouped, GroupCommitTest, ::testing::Values(Mode::kGrouped),
                         [](const ::testing::TestParamInfo<Mode>&) { return "Grouped"; });

// Three partitions' batches that meet in one turn are stored by one COMMIT,
// and sluice_writer_transaction_partitions says so.
TEST_P(GroupCommitTest, TheBatchesOfSeveralPartitionsCommitInOneTransaction) {
  metrics::Registry registry;
  metrics::WriterMetrics writer_metrics(registry);
  threads_ = std::make_unique<BatchThreads>(BatchThreads::Options{
      .storage = storage_, .threads = 1, .group_commit_max = GroupMax(), .metrics = &writer_metrics});
  MakeWorkers(4);
  std::vector<std::promise<Reply>> done(6);
  const uint64_t commits = storage_->calls(MemoryStorage::Op::kCommit);
  BehindAHeldBatch(0, [&] {
    for (uint32_t i = 0; i < 6; ++i) {
      workers_[1 + i % 3]->Submit(Put("e" + std::to_string(i), "c" + std::to_string(i), static_cast<int>(i), &done[i]));
    }
  });
  ExpectStored(done, 1);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kCommit), commits + 1) << "not one COMMIT for the three partitions";
  StopAll();
  // The blocker's transaction of one partition, the group's of three.
  const std::string text = registry.Text();
  EXPECT_NE(text.find("sluice_writer_transaction_partitions_count 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sluice_writer_transaction_partitions_sum 4\n"), std::string::npos) << text;
  ExpectEachOfThreeHolds(2);
}

// When one partition's batch finds its head taken (another writer stored
// event 2), it leaves the transaction and stores its batch alone after
// reading its head again; the other two are stored together without it.
// Every command is answered 200 and stored once.
TEST_P(GroupCommitTest, AConflictInOneBatchLetsEachPartitionStoreItsOwnAlone) {
  MakeThreads(1);
  MakeWorkers(4);
  CacheHeads({1, 2, 3});
  OtherWriterStores(*storage_, 2, 2);
  const uint64_t commits = storage_->calls(MemoryStorage::Op::kCommit);
  std::vector<std::promise<Reply>> done(3);
  BehindAHeldBatch(0, [&] {
    for (uint32_t p = 1; p <= 3; ++p) workers_[p]->Submit(Put("a", "second", 2, &done[p - 1]));
  });
  ExpectStored(done, 2);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kCommit), commits + 1)
      << "partitions 1 and 3 were not stored together without the conflicting one";
  StopAll();
  for (uint32_t p = 1; p <= 3; ++p) ExpectDense(p);
  EXPECT_EQ(storage_->Events(kType, 1).size(), 2u);
  EXPECT_EQ(storage_->Events(kType, 2).size(), 3u);
  EXPECT_EQ(storage_->Events(kType, 3).size(), 2u);
}

// A batch planned before another partition of the same turn found the
// session broken (and answered 503) is not stored on what it planned: the
// outage may have lost commits, so it reads its head again, as a batch
// planned after the outage does.
TEST_P(GroupCommitTest, ABatchPlannedBeforeAnOutageOfTheTurnIsPlannedAgain) {
  MakeThreads(1);
  MakeWorkers(4);
  CacheHeads({1, 2, 3});
  std::promise<Reply> p1, p2, p3;
  uint64_t heads = 0;
  BehindAHeldBatch(0, [&] {
    workers_[1]->Submit(Put("a", "second", 2, &p1));  // planned on its cached head
    workers_[2]->Submit(Put("new", "second", 2, &p2));  // its read of "new" finds the session lost
    workers_[3]->Submit(Put("a", "second", 2, &p3));
    storage_->FailNext(MemoryStorage::Op::kLatestOf, Unavailable("connection lost"));
    heads = storage_->calls(MemoryStorage::Op::kHead);
  });
  EXPECT_EQ(p2.get_future().get().status, 503);
  for (auto* d : {&p1, &p3}) {
    const Reply r = d->get_future().get();
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Json::parse(r.body)["version"], 2);
  }
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kHead), heads + 2)
      << "partition 1 stored a batch planned on its head from before the outage";
  StopAll();
  for (uint32_t p = 1; p <= 3; ++p) ExpectDense(p);
}

// A batch left out of its turn by another partition's outage is planned
// again without using up an attempt: with no retry left (conflict_retries
// 0) it is still stored.
TEST_P(GroupCommitTest, ABatchLeftOutOfItsTurnDoesNotUseUpAnAttempt) {
  conflict_retries_ = 0;  // below the config's 1..1000: one attempt, so a counted one shows as a 503
  MakeThreads(1);
  MakeWorkers(4);
  CacheHeads({1, 2});
  std::promise<Reply> p1, p2;
  BehindAHeldBatch(0, [&] {
    workers_[1]->Submit(Put("a", "second", 2, &p1));  // planned on its cached head
    workers_[2]->Submit(Put("new", "second", 2, &p2));  // its read of "new" finds the session lost
    storage_->FailNext(MemoryStorage::Op::kLatestOf, Unavailable("connection lost"));
  });
  EXPECT_EQ(p2.get_future().get().status, 503);
  const Reply r = p1.get_future().get();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["version"], 2);
  StopAll();
  ExpectDense(1);
}

// Two batches of a turn conflict, one after the other: the third, rolled
// back with them twice, is planned again without using up an attempt.
TEST_P(GroupCommitTest, ABatchRolledBackForOthersConflictsDoesNotUseUpAnAttempt) {
  conflict_retries_ = 0;  // below the config's 1..1000: one attempt, so a counted one shows as a 503
  MakeThreads(1);
  MakeWorkers(4);
  CacheHeads({1, 2, 3});
  OtherWriterStores(*storage_, 1, 2);
  OtherWriterStores(*storage_, 2, 2);
  std::vector<std::promise<Reply>> done(3);
  BehindAHeldBatch(0, [&] {
    for (uint32_t p = 1; p <= 3; ++p) workers_[p]->Submit(Put("a", "second", 2, &done[p - 1]));
  });
  EXPECT_EQ(done[0].get_future().get().status, 503);  // its own conflict, and no retry left
  EXPECT_EQ(done[1].get_future().get().status, 503);
  const Reply r = done[2].get_future().get();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["version"], 2);
  StopAll();
  EXPECT_EQ(storage_->Events(kType, 3).size(), 2u);
  for (uint32_t p = 1; p <= 3; ++p) ExpectDense(p);
}

// With two storage servers, a group's INSERT that finds one server's session
// lost is an outage: nothing of the turn is stored on what was planned
// before it, and every batch reads its head again before it is stored
// alone, also on the server that did not fail (a session per server: the
// event log stays healthy while the other answers).
TEST_P(GroupCommitTest, AnOutageAtTheGroupsInsertMakesEveryBatchOfTheTurnReadAgain) {
  MakeTwoServers({0, 0, 1, 1});  // partitions 0 and 1 on main, 2 and 3 on second
  CacheHeads({0, 1, 3});
  storage_ = second_;  // the blocker, partition 2, is there
  std::vector<std::promise<Reply>> done(3);
  uint64_t main_heads = 0, second_heads = 0;
  BehindAHeldBatch(2, [&] {
    workers_[0]->Submit(Put("a", "second", 2, &done[0]));
    workers_[1]->Submit(Put("a", "second", 2, &done[1]));
    workers_[3]->Submit(Put("a", "second", 2, &done[2]));
    main_->FailNext(MemoryStorage::Op::kAppend, Unavailable("connection lost"));
    main_heads = main_->calls(MemoryStorage::Op::kHead);
    second_heads = second_->calls(MemoryStorage::Op::kHead);
  });
  ExpectStored(done, 2);
  EXPECT_EQ(main_->calls(MemoryStorage::Op::kHead), main_heads + 2) << "partitions 0 and 1 kept their heads";
  EXPECT_EQ(second_->calls(MemoryStorage::Op::kHead), second_heads + 1) << "partition 3 kept its head";
  StopAll();
  EXPECT_EQ(main_->Events(kType, 0).size(), 2u);
  EXPECT_EQ(main_->Events(kType, 1).size(), 2u);
  EXPECT_EQ(second_->Events(kType, 3).size(), 2u);
}

// A batch committed in a turn that then met an outage (another partition's
// read found its server's session lost and answered 503) keeps its reply,
// but its partition reads its head again before its next batch: the caches
// it leaves were read before the outage.
TEST_P(GroupCommitTest, ABatchCommittedBeforeAnOutageOfTheTurnReadsItsHeadAgainNextTime) {
  MakeTwoServers({0, 1, 0});  // the blocker 0 and partition 2 on main, 1 on second
  CacheHeads({1, 2});
  OtherWriterStores(*second_, 1, 2);  // partition 1's next event_id is taken
  storage_ = main_;
  std::promise<Reply> c, a;
  BehindAHeldBatch(0, [&] {
    workers_[1]->Submit(Put("a", "second", 2, &c));  // conflicts, then its head read finds the session lost
    workers_[2]->Submit(Put("a", "second", 2, &a));  // committed alone
    second_->FailNext(MemoryStorage::Op::kHead, Unavailable("connection lost"));
  });
  EXPECT_EQ(c.get_future().get().status, 503);
  const Reply r = a.get_future().get();
  ASSERT_EQ(r.status, 200) << r.body;
  const uint64_t heads = main_->calls(MemoryStorage::Op::kHead);
  std::promise<Reply> next;
  workers_[2]->Submit(Put("a", "third", 3, &next));
  ASSERT_EQ(next.get_future().get().status, 200);
  EXPECT_EQ(main_->calls(MemoryStorage::Op::kHead), heads + 1)
      << "partition 2 kept the head it committed before the outage";
  StopAll();
}

// A COMMIT lost with the session: the commands may have been stored, so each
// is answered 503 (as a failed single INSERT is); retried with the same
// Idempotency-Key they are stored once.
TEST_P(GroupCommitTest, ACommitWithAnUnknownOutcomeAnswers503AndTheRetriesAreStoredOnce) {
  MakeThreads(1);
  MakeWorkers(4);
  storage_->FailNext(MemoryStorage::Op::kCommit, Unavailable("connection lost"));
  std::vector<std::promise<Reply>> lost(3), retried(3);
  BehindAHeldBatch(0, [&] {
    for (uint32_t p = 1; p <= 3; ++p) workers_[p]->Submit(Put("a", "k", 1, &lost[p - 1]));
  });
  for (auto& d : lost) EXPECT_EQ(d.get_future().get().status, 503);
  for (uint32_t p = 1; p <= 3; ++p) workers_[p]->Submit(Put("a", "k", 1, &retried[p - 1]));
  ExpectStored(retried, 1);
  StopAll();
  ExpectEachOfThreeHolds(1);
}

// A COMMIT refused as a conflict (a deadlock; Galera's certification) stored
// nothing: each batch is planned again and stored alone, answered 200.
TEST_P(GroupCommitTest, ACommitRefusedAsAConflictIsStoredAloneAfterwards) {
  MakeThreads(1);
  MakeWorkers(4);
  storage_->FailNext(MemoryStorage::Op::kCommit, Aborted("MySQL error 1213 (40001): Deadlock found"));
  std::vector<std::promise<Reply>> done(3);
  BehindAHeldBatch(0, [&] {
    for (uint32_t p = 1; p <= 3; ++p) workers_[p]->Submit(Put("a", "k", 1, &done[p - 1]));
  });
  ExpectStored(done);
  StopAll();
  ExpectEachOfThreeHolds(1);
}

// Partitions on two storage servers: one transaction per server, and the
// only batch of its server is stored alone (one INSERT, no COMMIT).
TEST_P(GroupCommitTest, OneTransactionPerStorageServer) {
  MakeTwoServers({0, 0, 0, 1});  // partitions 0-2 on main, 3 on second
  storage_ = main_;
  const uint64_t second_appends = second_->calls(MemoryStorage::Op::kAppend);
  std::vector<std::promise<Reply>> done(3);
  BehindAHeldBatch(0, [&] {
    for (uint32_t p = 1; p <= 3; ++p) workers_[p]->Submit(Put("a", "k", 1, &done[p - 1]));
  });
  ExpectStored(done);
  StopAll();
  EXPECT_EQ(main_->calls(MemoryStorage::Op::kCommit), 1u) << "partitions 1 and 2 not in one transaction";
  EXPECT_EQ(second_->calls(MemoryStorage::Op::kCommit), 0u);
  EXPECT_EQ(second_->calls(MemoryStorage::Op::kAppend), second_appends + 1);
  EXPECT_EQ(main_->Events(kType, 1).size(), 1u);
  EXPECT_EQ(main_->Events(kType, 2).size(), 1u);
  EXPECT_EQ(second_->Events(kType, 3).size(), 1u);
}

// A client that only counts how the caches it drops are destroyed: with the
// thread's lock free (another worker's Ready() goes on meanwhile) or held.
class DroppingClient : public BatchThreads::Client {
 public:
  explicit DroppingClient(BatchThreads& threads) : threads_(threads) {}
  ~DroppingClient() override {
    for (auto& t : checkers_) t.join();
  }
  bool Serve(BatchThreads::Lane&) override { return false; }
  sql::EventAppend* PlanBatch(BatchThreads::Lane&) override { return nullptr; }
  void Resume(BatchThreads::Lane&, Stored, const Status&) override {}
  bool EndTurn() override { return false; }
  std::shared_ptr<void> DropIfIdleSince(std::chrono::steady_clock::time_point) override {
    return std::shared_ptr<void>(new int(0), [this](void* p) {
      delete static_cast<int*>(p);
      // running() takes every thread's lock: answered at once unless the
      // lock is held by whoever destroys this.
      auto answered = std::make_shared<std::promise<void>>();
      auto future = answered->get_future();
      std::lock_guard lock(mu_);
      checkers_.emplace_back([this, answered] {
        threads_.running();
        answered->set_value();
      });
      (future.wait_for(2s) == std::future_status::ready ? freed_unlocked : freed_locked)++;
    });
  }
  std::atomic<int> freed_unlocked{0};
  std::atomic<int> freed_locked{0};

 private:
  BatchThreads& threads_;
  std::mutex mu_;
  std::vector<std::thread> checkers_;
};

// A sweep hands the caches it dropped over and the thread destroys them
// after releasing its lock, at each of its three sweeps: after serving a
// worker (the thread's first sweep comes after its first worker), when it
// ends idle, and between a busy worker's batches (AfterBatch). A large
// cache's destruction holds up no Ready() of the thread's other workers.
// (The client drops something at every sweep.)
TEST(BatchThreadsSweep, DroppedCachesAreDestroyedOutsideTheThreadsLock) {
  BatchThreads threads(BatchThreads::Options{
      .storage = MemoryStorage::Create(), .threads = 1, .overlap_commits = false, .idle_exit = 50ms});
  DroppingClient idle(threads);
  threads.Add(0, &idle);
  threads.Ready(0, &idle);  // served at once and swept, then the thread ends idle after a sweep
  ASSERT_TRUE(Eventually([&] { return idle.freed_unlocked + idle.freed_locked >= 2; }));
  ASSERT_TRUE(Eventually([&] { return threads.running() == 0; }));
  std::this_thread::sleep_for(60ms);
  threads.AfterBatch(0);  // as a busy worker of the thread does after each batch
  ASSERT_TRUE(Eventually([&] { return idle.freed_unlocked + idle.freed_locked >= 3; }));
  EXPECT_EQ(idle.freed_locked, 0);
  EXPECT_EQ(idle.freed_unlocked, 3);
  threads.Stop();
  threads.Remove(0, &idle);
}

// A client whose dropped caches take `slow` to destroy (a large cache).
class SlowDropClient : public BatchThreads::Client {
 public:
  explicit SlowDropClient(std::chrono::milliseconds slow) : slow_(slow) {}
  bool Serve(BatchThreads::Lane&) override { return false; }
  sql::EventAppend* PlanBatch(BatchThreads::Lane&) override { return nullptr; }
  void Resume(BatchThreads::Lane&, Stored, const Status&) override {}
  bool EndTurn() override { return false; }
  std::shared_ptr<void> DropIfIdleSince(std::chrono::steady_clock::time_point) override {
    return std::shared_ptr<void>(new int(0), [this](void* p) {
      delete static_cast<int*>(p);
      ++frees_started;
      std::this_thread::sleep_for(slow_);
      ++frees_done;
    });
  }
  std::atomic<int> frees_started{0};
  std::atomic<int> frees_done{0};

 private:
  const std::chrono::milliseconds slow_;
};

// A thread that ended idle may still be freeing what it dropped (or closing
// its sessions) when a command starts another; the Ready() that started it
// joins the ended one outside the lock, and Stop() returns only once that
// join is done: no thread of the writer outlives Stop().
TEST(BatchThreadsSweep, StopWaitsForAnEndedThreadThatAReadyIsJoining) {
  BatchThreads threads(BatchThreads::Options{
      .storage = MemoryStorage::Create(), .threads = 1, .overlap_commits = false, .idle_exit = 50ms});
  SlowDropClient client(400ms);
  threads.Add(0, &client);
  threads.Ready(0, &client);
  // The thread served it (and swept: its first sweep), then, idle, swept
  // again and ended; it now frees what that second sweep dropped.
  ASSERT_TRUE(Eventually([&] { return threads.running() == 0 && client.frees_started == 2; }));
  std::thread command([&] { threads.Ready(0, &client); });  // starts another, joins the ended one
  ASSERT_TRUE(Eventually([&] { return threads.running() == 1; }));
  threads.Stop();
  EXPECT_EQ(client.frees_done.load(), client.frees_started.load())
      << "Stop() returned while the ended thread still ran";
  command.join();
  threads.Remove(0, &client);
}

}  // namespace
}  // namespace sluice::writer
