// Several sync engines on one config (issue 21, items 1 and 5a/5b): the
// sinks' partitions are shared through leases in MySQL, each applied by one
// engine at a time, with a fencing token that grows on every takeover.
//   (a) three engines under load; one is killed with SIGKILL, one frozen with
//       SIGSTOP past its lease and then resumed: its offset writes are
//       refused and it lets go, the survivors take its partitions over, the
//       point views equal main storage, the aggregate view is exact to the
//       cent, and the Kafka topic holds every event exactly once (the
//       frozen engine's producers were fenced by the partitions' new owners)
//   (b) engines join and leave (SIGTERM, SIGKILL) repeatedly under load: the
//       lease log shows no partition held by two engines at once, nothing is
//       lost, and the Kafka topic holds every event exactly once
//   (c) an engine that hands partitions over closes their Kafka producers
// Loads are small (CI); the lease TTL is 2 s so that takeovers are quick.
#include <signal.h>

#include <atomic>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/thread_name.h"
#include "tests/support/config_support.h"
#include "tests/support/kafka_support.h"
#include "tests/support/owner_views.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kPartitions = 8;
constexpr auto kTtl = 2s;

struct Stack {
  std::unique_ptr<TestDatabase> db;
  ScratchDir dir;
  SluiceConfig cfg;
  std::string path;
  std::string prefix;
  std::string topic;
};

// Redis and MySQL point views, the per-owner aggregate view and a Kafka
// topic, all of account.
std::unique_ptr<Stack> MakeStack(const std::string& name, bool kafka) {
  auto s = std::make_unique<Stack>();
  s->db = std::make_unique<TestDatabase>(name);
  s->prefix = UniquePrefix(name);
  s->topic = s->prefix + "_feed";
  s->cfg.database = s->db->name();
  s->cfg.entities = {{"account", kPartitions}};
  s->cfg.port = FreePort();
  const std::string code = s->dir.Write("per_owner.js", kPerOwnerJs).string();
  s->cfg.extra_yaml =
      "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n  retry_backoff_max: 500ms\n"
      "  lease_ttl: " + std::to_string(kTtl.count()) + "s\n"
      "sinks:\n"
      "  - name: cache\n    type: redis\n    entity: account\n"
      "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
      "    key: \"" + s->prefix + ":{id}\"\n"
      "  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n"
      "    columns: {owner: /owner, balance: {pointer: /balance, type: 'DECIMAL(20,2)'}}\n"
      "  - name: per_owner\n    type: aggregate\n    entity: account\n    code: " + code + "\n" + kPerOwnerTables;
  if (kafka) {
    s->cfg.extra_yaml += "  - name: feed\n    type: kafka\n    entity: account\n"
                         "    brokers: \"" + KafkaBrokers() + "\"\n"
                         "    topic: " + s->topic + "\n    create_topic: true\n    delivery_timeout: 5s\n";
  }
  s->path = s->cfg.Write();
  return s;
}

std::unique_ptr<SluiceProcess> StartEngine(const Stack& s, const std::string& id) {
  auto p = std::make_unique<SluiceProcess>(std::vector<std::string>{"sync", "--config", s.path, "--id", id},
                                           s.cfg.port);
  std::string why;
  EXPECT_TRUE(p->StartNoHttp(&why, "syncing")) << why;
  return p;
}

// Owner per partition of a sink's live leases, from `sluice status --json`.
std::map<int, std::string> Owners(const Stack& s, const std::string& sink) {
  std::map<int, std::string> out;
  const auto status = StatusJson(s.path);
  if (!status.is_object()) return out;
  for (const auto& js : status["sinks"]) {
    if (js["name"] != sink) continue;
    for (const auto& p : js["partitions"]) {
      if (!p["owner"].get<std::string>().empty()) out[p["partition"].get<int>()] = p["owner"].get<std::string>();
    }
  }
  return out;
}

// Polls until no live lease of any sink names `engine`, up to `within`.
bool WaitUntilNotOwning(const Stack& s, const std::string& engine, std::chrono::seconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    bool owns = false;
    for (const std::string sink : {"cache", "table", "per_owner"}) {
      for (const auto& [p, owner] : Owners(s, sink)) owns = owns || owner == engine;
    }
    if (!owns) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

// The lease log: per (scope, partition), holds in token order never overlap
// in time and tokens grow by one. Returns the number of holds.
int64_t ExpectNoTwoOwnersAtOnce(TestDatabase& db) {
  const auto rows = db.Query(
      "SELECT scope, partition_id, token, owner, CAST(FLOOR(UNIX_TIMESTAMP(taken_at) * 1000) AS CHAR), "
      "CAST(FLOOR(UNIX_TIMESTAMP(ended_at) * 1000) AS CHAR) FROM sluice_lease_log "
      "ORDER BY scope, entity_type, partition_id, token");
  for (size_t i = 1; i < rows.size(); ++i) {
    const auto& a = rows[i - 1];
    const auto& b = rows[i];
    if (*a[0] != *b[0] || *a[1] != *b[1]) continue;
    EXPECT_EQ(std::stoull(*b[2]), std::stoull(*a[2]) + 1) << *b[0] << " partition " << *b[1];
    EXPECT_LE(std::stoll(*a[5]), std::stoll(*b[4]))
        << *b[0] << " partition " << *b[1] << ": " << *a[3] << " (token " << *a[2] << ") held it until " << *a[5]
        << " but " << *b[3] << " (token " << *b[2] << ") took it at " << *b[4];
  }
  return static_cast<int64_t>(rows.size());
}

// The topic holds one record per event of main storage, versions 1, 2, ...
// per entity in order.
void ExpectTopicExactlyOnce(const Stack& s, int64_t events) {
  std::string error;
  const auto records = ReadTopic(s.topic, &error);
  ASSERT_TRUE(error.empty()) << error;
  const auto problems = CheckVersionsPerKey(records);
  std::string text;
  for (const auto& p : problems) text += p + "\n";
  EXPECT_TRUE(problems.empty()) << text;
  EXPECT_EQ(static_cast<int64_t>(records.size()), events);
}

TEST(SeveralEngines, ThreeEnginesShareTheSinksThroughAKillAndAFreeze) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  SLUICE_REQUIRE_KAFKA();
  auto s = MakeStack("engines3", true);
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s->path}, &out), 0) << out;
  auto writer = StartSluice("writer", s->path, s->cfg.port);
  auto e1 = StartEngine(*s, "e1");
  auto e2 = StartEngine(*s, "e2");
  auto e3 = StartEngine(*s, "e3");
  std::atomic<bool> done{false};
  std::thread load([&] {
    OwnerLoad(s->cfg.port, 12000, 600, 3);
    done = true;
  });
  // Every engine gets a share: 32 partitions (4 sinks x 8) over 3 engines.
  std::this_thread::sleep_for(kTtl * 2);
  std::map<std::string, int> shares;
  for (const std::string sink : {"cache", "table", "per_owner", "feed"}) {
    for (const auto& [p, owner] : Owners(*s, sink)) ++shares[owner];
  }
  EXPECT_EQ(shares.size(), 3u) << "owners: " << shares.size();

  e1->Kill();  // SIGKILL: its leases expire, the others take them
  const auto killed = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitUntilNotOwning(*s, "e1", 30s));
  std::cout << "e1's partitions taken over "
            << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count()
            << " ms after SIGKILL (lease TTL " << kTtl.count() << " s)\n";

  ASSERT_EQ(::kill(e2->pid(), SIGSTOP), 0);  // frozen past its lease
  EXPECT_TRUE(WaitUntilNotOwning(*s, "e2", 30s));
  std::this_thread::sleep_for(kTtl);
  ASSERT_EQ(::kill(e2->pid(), SIGCONT), 0);
  load.join();
  ASSERT_TRUE(done);
  ASSERT_TRUE(WaitCaughtUp(s->path, 300s, &out)) << out;
  // The resumed engine found its leases gone and let go; it holds a share again.
  const std::string e2_log = e2->Log();
  EXPECT_NE(e2_log.find("lease lost"), std::string::npos) << e2_log.substr(e2_log.size() > 4000 ? e2_log.size() - 4000 : 0);
  for (size_t at = e2_log.find("lease lost"), shown = 0; at != std::string::npos && shown < 8;
       at = e2_log.find("lease lost", at + 1), ++shown) {
    const size_t begin = e2_log.rfind('\n', at);
    std::cout << "e2: " << e2_log.substr(begin == std::string::npos ? 0 : begin + 1,
                                         e2_log.find('\n', at) - (begin == std::string::npos ? 0 : begin + 1))
              << "\n";
  }
  EXPECT_EQ(e2->Terminate(), 0);
  EXPECT_EQ(e3->Terminate(), 0);

  const int64_t events = ExpectDenseEventIds(*s->db);
  ASSERT_GT(events, 6000);
  EXPECT_EQ(RunSluice({"verify", "--config", s->path}, &out), 0) << out;
  ExpectPerOwnerExact(*s->db, kPartitions, events);
  // Exactly once, although the frozen engine may have resumed with a batch
  // in an open transaction: the new owners' producers aborted it (its
  // records stay on the broker, unseen by read_committed consumers).
  ExpectTopicExactlyOnce(*s, events);
  std::string error;
  std::cout << "Kafka: " << events << " events; records on the broker in aborted transactions: "
            << static_cast<int64_t>(ReadTopic(s->topic, &error, /*uncommitted=*/true).size()) - events << "\n";
  EXPECT_GT(ExpectNoTwoOwnersAtOnce(*s->db), 32);
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM sluice_dead_letters"), 0);
}

TEST(SeveralEngines, EnginesJoiningAndLeavingNeverOwnAPartitionTogetherAndLoseNothing) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  SLUICE_REQUIRE_KAFKA();
  auto s = MakeStack("enginesjoin", true);
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s->path}, &out), 0) << out;
  auto writer = StartSluice("writer", s->path, s->cfg.port);
  auto e1 = StartEngine(*s, "e1");
  // Commands flow during every join and leave, until the last.
  std::atomic<bool> stop{false};
  std::thread load([&] { OwnerLoad(s->cfg.port, 1000000, 500, 4, &stop); });
  std::mt19937 rng(11);
  for (int round = 0; round < 4; ++round) {
    auto e2 = StartEngine(*s, "e2");
    std::this_thread::sleep_for(std::chrono::milliseconds(800 + rng() % 1200));
    auto e3 = StartEngine(*s, "e3");
    std::this_thread::sleep_for(std::chrono::milliseconds(800 + rng() % 1200));
    EXPECT_EQ(e2->Terminate(), 0);  // leaves cleanly: hands its partitions over
    std::this_thread::sleep_for(std::chrono::milliseconds(500 + rng() % 1000));
    if (round % 2 == 0) {
      e3->Kill();  // leaves by crashing: its leases expire
    } else {
      EXPECT_EQ(e3->Terminate(), 0);
    }
  }
  stop = true;
  load.join();
  ASSERT_TRUE(WaitCaughtUp(s->path, 300s, &out)) << out;
  EXPECT_EQ(e1->Terminate(), 0);
  const int64_t events = ExpectDenseEventIds(*s->db);
  ASSERT_GT(events, 2000);
  EXPECT_EQ(VerifyViews(s->path, &out), 0) << out;
  ExpectPerOwnerExact(*s->db, kPartitions, events);
  // A handover flushes before it releases, and a crashed engine's records
  // are read back by the one that takes its partitions: exactly once.
  ExpectTopicExactlyOnce(*s, events);
  EXPECT_GT(ExpectNoTwoOwnersAtOnce(*s->db), 4 * kPartitions);
}

// librdkafka threads of a process (named "rdk:...").
int KafkaThreadsOf(pid_t pid) {
  int n = 0;
  for (const auto& [name, count] : ThreadNamesOf(pid)) {
    if (name.rfind("rdk:", 0) == 0) n += count;
  }
  return n;
}

// An engine that hands partitions over to one that joins closes their
// transactional Kafka producers at once (Sink::Released), not after
// producer_idle (a minute): each held librdkafka threads and broker
// connections, and the new owner fenced it anyway.
TEST(SeveralEngines, AnEngineClosesTheKafkaProducersOfThePartitionsItHandsOver) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  SLUICE_REQUIRE_KAFKA();
  auto s = MakeStack("enginesrelease", true);
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s->path}, &out), 0) << out;
  auto writer = StartSluice("writer", s->path, s->cfg.port);
  auto e1 = StartEngine(*s, "e1");
  OwnerLoad(s->cfg.port, 200, 100, 5);  // events on every partition: a producer each
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &out)) << out;
  const int held = KafkaThreadsOf(e1->pid());
  auto e2 = StartEngine(*s, "e2");
  int moved = 0;
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < until) {
    moved = 0;
    for (const auto& [p, owner] : Owners(*s, "feed")) moved += owner == "e2" ? 1 : 0;
    // Each producer closed takes at least three threads (main, internal, a broker's).
    if (moved > 0 && KafkaThreadsOf(e1->pid()) <= held - 3 * moved) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_GT(moved, 0) << "e2 took none of the feed's partitions";
  EXPECT_LE(KafkaThreadsOf(e1->pid()), held - 3 * moved)
      << held << " librdkafka threads in e1 before e2 took " << moved << " partitions";
  EXPECT_EQ(e2->Terminate(), 0);
  EXPECT_EQ(e1->Terminate(), 0);
}

}  // namespace
}  // namespace sluice::testing
