// The sync engine against real MariaDB and Redis (issue 3, item 7):
//   (a) a mixed load leaves both views equal to main storage
//   (b) the engine is SIGKILLed 20 times during a load: views converge and a
//       sampler never sees a version go backwards
//   (c) offsets rewound to 0: the replay changes nothing and counts as stale
//   (d) Redis unreachable for 10 s: its lag grows and recovers, the MySQL
//       view stays current, nothing is dead-lettered
//   (e) an event the MySQL view cannot store is dead-lettered, the partition
//       carries on, verify names exactly that entity; retry after a fix
#include <atomic>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

std::string Sinks(const std::string& prefix, uint16_t redis_port, const std::string& mysql_columns) {
  return "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n"
         "sinks:\n"
         "  - name: cache\n    type: redis\n    entity: account\n"
         "    url: redis://127.0.0.1:" + std::to_string(redis_port) + "/0\n"
         "    key: \"" + prefix + ":{id}\"\n"
         "  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n"
         "    columns: " + mysql_columns + "\n";
}

struct Stack {
  std::unique_ptr<TestDatabase> db;
  SluiceConfig cfg;
  std::string path;
  std::string prefix;
};

Stack MakeStack(const std::string& name, uint32_t partitions, uint16_t redis_port,
                const std::string& columns = "{owner: /owner, balance: /balance, note: /note}") {
  Stack s;
  s.db = std::make_unique<TestDatabase>(name);
  s.prefix = UniquePrefix(name);
  s.cfg.database = s.db->name();
  s.cfg.entities = {{"account", partitions}};
  s.cfg.port = FreePort();
  s.cfg.extra_yaml = Sinks(s.prefix, redis_port, columns);
  s.path = s.cfg.Write();
  return s;
}

std::unique_ptr<SluiceProcess> Start(const Stack& s, const std::string& mode) {
  return StartSluice(mode, s.path, s.cfg.port);
}

int Verify(const Stack& s, std::string* out) { return VerifyViews(s.path, out); }

Json Status(const Stack& s) { return StatusJson(s.path); }

TEST(Engine, MixedLoadLeavesBothViewsEqualToMainStorage) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("mixed", 16, RedisPort());
  auto serve = Start(s, "serve");
  // 30,000 commands over 10,000 entities: patches and deletes of the same
  // entities racing across 16 partitions and 32 connections.
  const int64_t answered = MixedLoad(s.cfg.port, 30000, 10000, 32, 1);
  EXPECT_EQ(answered, 30000);
  std::string status;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &status)) << status;
  std::string out;
  EXPECT_EQ(Verify(s, &out), 0) << out;
  const int64_t events = ExpectDenseEventIds(*s.db);
  // Every event was read once and is applied or stale; nothing dead-lettered.
  auto st = Status(s);
  for (const char* sink : {"cache", "table"}) {
    EXPECT_EQ(SinkTotal(st, sink, "applied") + SinkTotal(st, sink, "stale"), static_cast<uint64_t>(events)) << sink;
    EXPECT_EQ(SinkTotal(st, sink, "dead_lettered"), 0u) << sink;
  }
  // Deleted entities are absent from both views.
  auto deleted = s.db->Query("SELECT COUNT(*) FROM account_view WHERE _deleted=1");
  EXPECT_GT(std::stoll(*deleted[0][0]), 0) << "the load should have deleted some entities";
}

TEST(Engine, KilledTwentyTimesConvergesAndNeverGoesBackwards) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("kill", 16, RedisPort());
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s.path}, &out), 0) << out;
  auto writer = Start(s, "writer");
  auto engine = Start(s, "sync");

  // The sampler reads both views throughout: a view must never show an
  // older version of an entity than it showed before.
  ViewSampler sampler(s.prefix, s.db->name(), 2000, 7);
  std::atomic<bool> stop_load{false};
  std::thread load([&] { MixedLoad(s.cfg.port, 150000, 2000, 16, 2, &stop_load); });
  std::mt19937 rng(11);
  for (int kill = 0; kill < 20; ++kill) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 600));
    engine->Kill();  // SIGKILL at a random moment
    engine = Start(s, "sync");
  }
  // The load covered every kill; it ends here rather than at its 150,000 commands.
  stop_load = true;
  load.join();
  ASSERT_TRUE(WaitCaughtUp(s.path, 180s, &out)) << out;
  sampler.Stop();
  EXPECT_EQ(sampler.backwards(), 0) << "a view went back to an older version";
  EXPECT_GT(sampler.samples(), 1000);
  EXPECT_EQ(Verify(s, &out), 0) << out;
  ExpectDenseEventIds(*s.db);
}

TEST(Engine, RewindToZeroReplaysAsStaleAndChangesNothing) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("rewind", 4, RedisPort());
  auto serve = Start(s, "serve");
  MixedLoad(s.cfg.port, 20000, 1000, 16, 3);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);

  const auto before = Status(s);
  RedisClient redis(RedisPort());
  const auto redis_before = redis.Dump(s.prefix + ":*");
  const auto mysql_before = s.db->Query("SELECT id, _version, _deleted, owner, balance, note FROM account_view ORDER BY id");
  const int64_t events = ExpectDenseEventIds(*s.db);
  ASSERT_GT(redis_before.size(), 100u);

  ASSERT_TRUE(s.db->conn().Execute("UPDATE sluice_offsets SET event_id=0").ok());
  serve = Start(s, "serve");
  ASSERT_TRUE(WaitCaughtUp(s.path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);
  const auto after = Status(s);
  for (const char* sink : {"cache", "table"}) {
    EXPECT_EQ(SinkTotal(after, sink, "stale") - SinkTotal(before, sink, "stale"), static_cast<uint64_t>(events))
        << sink << ": every re-applied event must count as stale";
    EXPECT_EQ(SinkTotal(after, sink, "applied"), SinkTotal(before, sink, "applied")) << sink;
  }
  EXPECT_EQ(redis.Dump(s.prefix + ":*"), redis_before);
  auto mysql_after = s.db->Query("SELECT id, _version, _deleted, owner, balance, note FROM account_view ORDER BY id");
  EXPECT_EQ(mysql_after, mysql_before);
}

TEST(Engine, RedisDownForTenSecondsRecoversWithoutLossWhileMysqlStaysCurrent) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  TcpProxy proxy("127.0.0.1", RedisPort());
  auto s = MakeStack("redisdown", 4, proxy.port());
  auto serve = Start(s, "serve");
  std::atomic<bool> stop{false};
  std::thread load([&] { MixedLoad(s.cfg.port, 1000000, 1000, 4, 4, &stop); });
  std::this_thread::sleep_for(2s);
  proxy.SetEnabled(false);
  uint64_t max_redis_lag = 0, max_mysql_lag_late = 0;
  const auto down_until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < down_until) {
    std::this_thread::sleep_for(1s);
    auto st = Status(s);
    const uint64_t head = SinkTotal(st, "cache", "head");
    const uint64_t redis_lag = head - SinkTotal(st, "cache", "offset");
    const uint64_t mysql_lag = SinkTotal(st, "table", "head") - SinkTotal(st, "table", "offset");
    max_redis_lag = std::max(max_redis_lag, redis_lag);
    if (std::chrono::steady_clock::now() > down_until - 5s) max_mysql_lag_late = std::max(max_mysql_lag_late, mysql_lag);
  }
  // While Redis is down its lag keeps growing; the MySQL view keeps up
  // (its lag stays within about a second of the load).
  EXPECT_GT(max_redis_lag, 1000u);
  EXPECT_LT(max_mysql_lag_late, max_redis_lag / 4);
  proxy.SetEnabled(true);
  std::this_thread::sleep_for(2s);
  stop = true;
  load.join();
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 60s, &out)) << out;
  EXPECT_EQ(Verify(s, &out), 0) << out;
  auto st = Status(s);
  EXPECT_EQ(SinkTotal(st, "cache", "dead_lettered"), 0u);
  EXPECT_EQ(s.db->Scalar("SELECT COUNT(*) FROM sluice_dead_letters"), 0);
}

TEST(Engine, RejectedEventIsDeadLetteredAndThePartitionCarriesOn) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("deadletter", 1, RedisPort(),
                     "{owner: /owner, note: {pointer: /note, type: \"VARCHAR(8)\"}}");
  auto serve = Start(s, "serve");
  HttpClient c(s.cfg.port);
  auto post = [&](const std::string& id, const std::string& body, const std::string& key) {
    return c.Post("/v1/entities/account/" + id + "/commands/patch", body, {{"Idempotency-Key", key}});
  };
  ASSERT_EQ(post("a", R"({"owner":"ann","note":"short"})", "1").status, 200);
  ASSERT_EQ(post("bad", R"({"owner":"bob","note":"far too long for eight"})", "2").status, 200);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(post("c" + std::to_string(i), R"({"owner":"cy","note":"ok"})", "3-" + std::to_string(i)).status, 200);
  }
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 30s, &out)) << out;  // the partition moved past the bad event
  EXPECT_EQ(s.db->Scalar("SELECT COUNT(*) FROM account_view WHERE _deleted=0"), 51);
  EXPECT_EQ(s.db->Scalar("SELECT COUNT(*) FROM sluice_dead_letters WHERE sink='table' AND entity_id='bad'"), 1);
  EXPECT_EQ(s.db->Scalar("SELECT COUNT(*) FROM sluice_dead_letters"), 1);

  EXPECT_EQ(Verify(s, &out), 1);
  EXPECT_NE(out.find("table: 52 entities checked, 1 differences"), std::string::npos) << out;
  EXPECT_NE(out.find("missing bad"), std::string::npos) << out;
  EXPECT_NE(out.find("cache: 52 entities checked, 0 differences"), std::string::npos) << out;

  ASSERT_EQ(RunSluice({"deadletters", "list", "--config", s.path}, &out), 0);
  EXPECT_NE(out.find("1 dead letter(s)"), std::string::npos) << out;
  EXPECT_NE(out.find("bad"), std::string::npos) << out;
  // Still too long: retry leaves it unresolved (exit 1). Widen the column and it applies.
  EXPECT_EQ(RunSluice({"deadletters", "retry", "--config", s.path}, &out), 1) << out;
  ASSERT_TRUE(s.db->conn().Execute("ALTER TABLE account_view MODIFY note VARCHAR(64)").ok());
  EXPECT_EQ(RunSluice({"deadletters", "retry", "--config", s.path}, &out), 0) << out;
  EXPECT_EQ(Verify(s, &out), 0) << out;
  ASSERT_EQ(RunSluice({"deadletters", "list", "--config", s.path}, &out), 0);
  EXPECT_NE(out.find("0 dead letter(s)"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::testing
