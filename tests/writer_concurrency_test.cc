// The writer's guarantees under concurrency, against a real MariaDB:
//   (a) 64 clients increment one entity's counter with optimistic versioning
//   (b) every command sent three times with one key: one event, three identical replies
//   (c) two writer processes on the same partitions lose no update
//   (d) a writer of 512 busy partitions holds writer.batch_threads batch
//       threads and sessions, not one per partition
// Each test also checks I1 (dense versions) and I3 (dense event_ids).
#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/thread_name.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;

std::unique_ptr<SluiceProcess> StartServe(const SluiceConfig& cfg, const std::string& mode = "serve") {
  auto p = std::make_unique<SluiceProcess>(std::vector<std::string>{mode, "--config", cfg.Write()}, cfg.port);
  std::string why;
  EXPECT_TRUE(p->Start(&why)) << why;
  return p;
}

// (a) JSON merge patch cannot add, so each client does what any client of a
// document store does: read-modify-write guarded by If-Match, retrying on 409
// (with a new key) and on 503 (with the same key). A lost update would show
// as a counter below the version. `failpoints`, when set, makes commits fail.
// `writer_yaml`: lines under writer: (overlap_commits).
void HotCounterLosesNoUpdate(const std::string& failpoints, int per_client, const std::string& writer_yaml = "") {
  TestDatabase db("hot");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"counter", 4}};
  cfg.port = FreePort();
  cfg.extra_writer_yaml = writer_yaml;
  if (!failpoints.empty()) ::setenv("SLUICE_FAILPOINTS", failpoints.c_str(), 1);
  auto writer = StartServe(cfg);
  ::unsetenv("SLUICE_FAILPOINTS");
  ASSERT_TRUE(writer->running());

  constexpr int kClients = 64;
  const int kPerClient = per_client;
  std::atomic<int> failures{0};
  std::atomic<int64_t> attempts{0};
  std::atomic<int64_t> unavailable{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      HttpClient client(cfg.port);
      uint64_t expected = 0;  // version 0: the entity does not exist yet
      int done = 0;
      int key_number = 0;
      for (int attempt = 0; done < kPerClient && failures == 0; ++attempt) {
        attempts.fetch_add(1, std::memory_order_relaxed);
        const std::string key = "a-" + std::to_string(t) + "-" + std::to_string(key_number);
        auto r = client.Post("/v1/entities/counter/hot/commands/patch",
                             R"({"counter":)" + std::to_string(expected + 1) + "}",
                             {{"Idempotency-Key", key}, {"If-Match", std::to_string(expected)}});
        if (r.status == 200) {
          const auto v = Json::parse(r.body)["version"].get<uint64_t>();
          if (v != expected + 1) {
            ADD_FAILURE() << "applied at version " << v << " while If-Match was " << expected;
            ++failures;
          }
          expected = v;
          ++done;
          ++key_number;
        } else if (r.status == 409) {
          expected = Json::parse(r.body)["error"]["current_version"].get<uint64_t>();
          ++key_number;
        } else if (r.status == 503 && !failpoints.empty()) {
          ++unavailable;  // the same command again, with the same key
        } else {
          ADD_FAILURE() << "status " << r.status << " " << r.error << " " << r.body;
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures, 0);
  ::testing::Test::RecordProperty("attempts", std::to_string(attempts.load()));
  if (!failpoints.empty()) {
    EXPECT_GT(unavailable.load(), 0) << "the failpoint never fired";
  }

  HttpClient client(cfg.port);
  auto state = Json::parse(client.Get("/v1/entities/counter/hot").body);
  EXPECT_EQ(state["version"], kClients * kPerClient);
  EXPECT_EQ(state["state"]["counter"], kClients * kPerClient);
  const int64_t events = ExpectDenseEventIds(db);
  EXPECT_EQ(events, kClients * kPerClient);
  ExpectDenseVersions(db);
  // Every event's counter equals its version: no two events claimed the same increment.
  int64_t matching = 0;
  for (uint32_t p = 0; p < 4; ++p) {
    matching += db.Scalar("SELECT COUNT(*) FROM ev_counter_p00" + std::to_string(p) +
                          " WHERE JSON_VALUE(state, '$.counter') = version");
  }
  EXPECT_EQ(matching, kClients * kPerClient);
}

// Each increment takes about one attempt per client racing for it, so the
// default run stops at 64 x 60 increments (about 250,000 requests); the soak
// variant (label soak) does 64 x 500.
TEST(WriterConcurrency, HotEntityCounterLosesNoUpdate) {
  SLUICE_REQUIRE_MYSQL();
#ifdef SLUICE_SOAK
  HotCounterLosesNoUpdate("", 500);
#else
  HotCounterLosesNoUpdate("", 60);
#endif
}

// A fifth of the commits fail (by failpoint) while 64 If-Match clients race
// on one entity: each failed batch is answered 503 as a whole, its commands
// come back with the same key, and still no update is lost or applied twice.
TEST(WriterConcurrency, FailedCommitsUnderContentionLoseNoUpdate) {
  SLUICE_REQUIRE_MYSQL();
  HotCounterLosesNoUpdate("writer.before_commit=error@0.2", 100);
}

// The same with overlapping commits: a batch whose COMMIT fails has the next
// one staged on it, which is rolled back and planned again.
TEST(WriterConcurrency, FailedOverlappingCommitsUnderContentionLoseNoUpdate) {
  SLUICE_REQUIRE_MYSQL();
  HotCounterLosesNoUpdate("writer.before_commit=error@0.2", 40, "  overlap_commits: true\n");
}

// (b) Three copies of each of 10,000 commands race from three groups of
// clients in different orders: within one batch, through the cache, and from
// storage after a restart, every copy gets the same bytes.
TEST(WriterConcurrency, EveryRetryGetsTheIdenticalReplyAndOneEvent) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("idem");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 8}};
  cfg.port = FreePort();
  auto writer = StartServe(cfg);
  ASSERT_TRUE(writer->running());

  constexpr int kCommands = 10000;
  constexpr int kEntities = 1000;
  auto path = [](int i) { return "/v1/entities/account/e" + std::to_string(i % kEntities) + "/commands/patch"; };
  auto body = [](int i) { return R"({"f)" + std::to_string(i) + R"(":)" + std::to_string(i) + "}"; };
  auto key = [](int i) { return "b-" + std::to_string(i); };

  constexpr int kGroups = 3;
  constexpr int kThreadsPerGroup = 8;
  std::vector<std::vector<HttpReply>> replies(kGroups + 1, std::vector<HttpReply>(kCommands));
  auto send_all = [&](int group, std::vector<int> order) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreadsPerGroup; ++t) {
      threads.emplace_back([&, t] {
        HttpClient client(cfg.port);
        for (size_t k = t; k < order.size(); k += kThreadsPerGroup) {
          const int i = order[k];
          replies[group][i] = client.Post(path(i), body(i), {{"Idempotency-Key", key(i)}});
        }
      });
    }
    for (auto& t : threads) t.join();
  };
  std::vector<int> ascending(kCommands);
  for (int i = 0; i < kCommands; ++i) ascending[i] = i;
  std::vector<int> descending(ascending.rbegin(), ascending.rend());
  std::vector<int> shuffled = ascending;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(42));
  {
    std::thread g0([&] { send_all(0, ascending); });
    std::thread g1([&] { send_all(1, descending); });
    std::thread g2([&] { send_all(2, shuffled); });
    g0.join();
    g1.join();
    g2.join();
  }
  // A restart empties every cache: the fourth copy is answered from storage.
  EXPECT_EQ(writer->Terminate(), 0);
  writer = StartServe(cfg);
  send_all(3, shuffled);

  int first_replies = 0;
  for (int i = 0; i < kCommands; ++i) {
    int not_replayed = 0;
    for (int g = 0; g <= kGroups; ++g) {
      const HttpReply& r = replies[g][i];
      ASSERT_EQ(r.status, 200) << "command " << i << " copy " << g << ": " << r.error << r.body;
      ASSERT_EQ(r.body, replies[0][i].body) << "command " << i << " copy " << g << " differs";
      if (r.headers.count("idempotent-replayed") == 0) ++not_replayed;
    }
    EXPECT_EQ(replies[3][i].headers["idempotent-replayed"], "true");
    EXPECT_EQ(not_replayed, 1) << "command " << i << ": exactly one copy is the original";
    first_replies += not_replayed;
  }
  EXPECT_EQ(first_replies, kCommands);
  EXPECT_EQ(ExpectDenseEventIds(db), kCommands);
  ExpectDenseVersions(db);
  int64_t distinct = 0;
  for (uint32_t p = 0; p < 8; ++p) {
    distinct += db.Scalar("SELECT COUNT(DISTINCT entity_id, command_id) FROM ev_account_p00" + std::to_string(p));
  }
  EXPECT_EQ(distinct, kCommands);
  // Each entity's state holds all ten of its fields.
  HttpClient client(cfg.port);
  for (int e = 0; e < kEntities; e += 97) {
    auto s = Json::parse(client.Get("/v1/entities/account/e" + std::to_string(e)).body);
    EXPECT_EQ(s["version"], kCommands / kEntities);
    EXPECT_EQ(s["state"].size(), static_cast<size_t>(kCommands / kEntities));
  }
}

// (c) Two writer processes share a database and its partitions; commands
// for the same entities alternate between them. Unique keys catch every
// stale head and stale cache (I4), so no update is lost.
void TwoWritersLoseNoUpdate(const std::string& writer_yaml) {
  TestDatabase db("twowriters");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 4}};
  cfg.extra_writer_yaml = writer_yaml;
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", cfg.Write()}, &out), 0) << out;
  cfg.port = FreePort();
  auto writer_a = StartServe(cfg, "writer");
  const uint16_t port_a = cfg.port;
  cfg.port = FreePort();
  auto writer_b = StartServe(cfg, "writer");
  const uint16_t port_b = cfg.port;
  ASSERT_TRUE(writer_a->running() && writer_b->running());

  constexpr int kCommands = 8000;
  constexpr int kEntities = 40;
  constexpr int kThreads = 16;
  std::atomic<int> failures{0};
  std::atomic<int> retries{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HttpClient a(port_a), b(port_b);
      for (int i = t; i < kCommands && failures == 0; i += kThreads) {
        const std::string path = "/v1/entities/account/e" + std::to_string(i % kEntities) + "/commands/patch";
        const std::string body = R"({"f)" + std::to_string(i) + R"(":)" + std::to_string(i) + "}";
        // Alternate writers per command; on a 503 retry the same key on the other one.
        for (int attempt = 0;; ++attempt) {
          HttpClient& c = (i + attempt) % 2 == 0 ? a : b;
          auto r = c.Post(path, body, {{"Idempotency-Key", "c-" + std::to_string(i)}});
          if (r.status == 200) break;
          if (r.status == 503 && attempt < 20) {
            ++retries;
            continue;
          }
          ADD_FAILURE() << "command " << i << ": " << r.status << " " << r.error << r.body;
          ++failures;
          break;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures, 0);
  ::testing::Test::RecordProperty("retries_503", std::to_string(retries.load()));

  EXPECT_EQ(ExpectDenseEventIds(db), kCommands);
  ExpectDenseVersions(db);
  // The run must have exercised the conflict path, or it proved nothing.
  EXPECT_EQ(writer_a->Terminate(), 0);
  const std::string log = writer_a->Log();
  EXPECT_EQ(log.find("PRIMARY=0 "), std::string::npos) << log;
  EXPECT_NE(log.find("writer stopped: "), std::string::npos) << log;
  HttpClient client(port_b);
  for (int e = 0; e < kEntities; ++e) {
    auto s = Json::parse(client.Get("/v1/entities/account/e" + std::to_string(e)).body);
    std::set<std::string> fields;
    for (auto& [k, v] : s["state"].items()) fields.insert(k);
    for (int i = e; i < kCommands; i += kEntities) {
      EXPECT_TRUE(fields.count("f" + std::to_string(i))) << "update " << i << " of e" << e << " was lost";
    }
    EXPECT_EQ(s["version"], kCommands / kEntities);
  }
}

TEST(WriterConcurrency, TwoWritersOnTheSamePartitionsLoseNoUpdate) {
  SLUICE_REQUIRE_MYSQL();
  TwoWritersLoseNoUpdate("");
}

TEST(WriterConcurrency, TwoOverlappingWritersOnTheSamePartitionsLoseNoUpdate) {
  SLUICE_REQUIRE_MYSQL();
  TwoWritersLoseNoUpdate("  overlap_commits: true\n");
}

// (d) Commands spread over 512 partitions by 32 clients: the writer runs
// them on writer.batch_threads (4) threads with one MySQL session each
// (before, a thread and a session per busy partition: 512 sessions, past
// MariaDB's max_connections at 1,024 partitions). Every command is answered
// and stored once, event_ids and versions dense.
TEST(WriterConcurrency, BatchThreadsAndSessionsDoNotGrowWithThePartitions) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("parts");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 512}};
  cfg.port = FreePort();
  cfg.extra_writer_yaml = "  batch_threads: 4\n  read_threads: 2\n";
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", cfg.Write()}, &out), 0) << out;
  auto writer = StartServe(cfg, "writer");
  ASSERT_TRUE(writer->running());
  const std::string sessions =
      "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB='" + db.name() + "'";
  const int64_t before = db.Scalar(sessions);  // the writer's own (routes, notices) and this test's

  std::atomic<bool> done{false};
  int most_threads = 0;
  int64_t most_sessions = 0;
  std::thread sampler([&] {
    auto watch = sql::Connection::Open(MysqlParams());  // no database: not counted
    ASSERT_TRUE(watch.ok()) << watch.status().ToString();
    while (!done) {
      most_threads = std::max(most_threads, ThreadNamesOf(writer->pid())["sluice-commit"]);
      auto rows = (*watch)->Query(sessions);
      ASSERT_TRUE(rows.ok()) << rows.status().ToString();
      most_sessions = std::max<int64_t>(most_sessions, std::stoll(*rows->at(0).at(0)));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const int64_t answered = MixedLoad(cfg.port, 4000, 3000, 32, 11);
  done = true;
  sampler.join();
  EXPECT_EQ(answered, 4000);
  EXPECT_GT(most_threads, 0) << "the sampler saw no batch thread";
  EXPECT_LE(most_threads, 4) << "batch threads beyond writer.batch_threads";
  // The batch threads' 4 sessions and the readers' 2 (the load reads too).
  EXPECT_LE(most_sessions - before, 4 + 2) << "MySQL sessions beyond batch_threads + read_threads";
  EXPECT_EQ(writer->Terminate(), 0) << writer->Log();
  ExpectDenseEventIds(db);
  ExpectDenseVersions(db);
}

// Each duplicate key, provoked on purpose by two writers on one partition:
// the stale head (PRIMARY), a stale cached entity (uk_entity_version) and a
// retry that reached the other writer (uk_entity_command).
TEST(WriterConcurrency, EachDuplicateKeyIsClassifiedAndRecoveredFrom) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("dupkeys");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 1}};
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", cfg.Write()}, &out), 0) << out;
  cfg.port = FreePort();
  auto a = StartServe(cfg, "writer");
  HttpClient ca(cfg.port);
  cfg.port = FreePort();
  auto b = StartServe(cfg, "writer");
  HttpClient cb(cfg.port);
  auto patch = [](HttpClient& c, const std::string& id, const std::string& body, const std::string& key) {
    return c.Post("/v1/entities/account/" + id + "/commands/patch", body, {{"Idempotency-Key", key}});
  };
  auto first = patch(ca, "e1", R"({"x":1})", "k1");  // A: event 1, caches e1@1
  ASSERT_EQ(first.status, 200);
  ASSERT_EQ(patch(cb, "e1", R"({"y":2})", "k2").status, 200);  // B: event 2, e1@2
  // A's head is stale: PRIMARY; it reloads the head (and e2) and writes event 3.
  auto r = patch(ca, "e2", R"({"z":3})", "k3");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Json::parse(r.body)["event_id"], 3);
  // A's head is fresh but its e1 is stale: uk_entity_version; reload e1, write version 3.
  r = patch(ca, "e1", R"({"w":4})", "k4");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Json::parse(r.body)["version"], 3);
  // The first command retried on B (whose head is stale too: PRIMARY first),
  // then uk_entity_command: B answers from storage.
  auto retry = patch(cb, "e1", R"({"x":1})", "k1");
  ASSERT_EQ(retry.status, 200);
  EXPECT_EQ(retry.body, first.body);
  EXPECT_EQ(retry.headers["idempotent-replayed"], "true");

  auto state = Json::parse(ca.Get("/v1/entities/account/e1").body);
  EXPECT_EQ(state["state"], Json::parse(R"({"x":1,"y":2,"w":4})"));
  EXPECT_EQ(ExpectDenseEventIds(db), 4);
  ExpectDenseVersions(db);
  EXPECT_EQ(a->Terminate(), 0);
  EXPECT_EQ(b->Terminate(), 0);
  EXPECT_NE(a->Log().find("PRIMARY=1 uk_entity_version=1 uk_entity_command=0"), std::string::npos) << a->Log();
  EXPECT_NE(b->Log().find("PRIMARY=1 uk_entity_version=0 uk_entity_command=1"), std::string::npos) << b->Log();
}

}  // namespace
}  // namespace sluice::testing
