// Several writers on one database (issue 21, items 2 and 5c): each
// partition's lease names the writer that batches it, and a command that
// reaches another writer is forwarded to it once. Routing is a hint: with
// the owner killed, its commands are handled where they arrive, and every
// acknowledged command is still stored exactly once in dense event tables.
#include <signal.h>

#include <atomic>
#include <iostream>
#include <map>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/partitioner.h"
#include "http/server.h"
#include "sql/mariadb_tables.h"
#include "sql/schema.h"
#include "tests/support/test_support.h"
#include "tests/support/writer_load.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kPartitions = 4;

// partition -> owner of the live writer leases; empty until every
// partition has an owner and two writers share them.
std::map<uint32_t, std::string> SplitLeases(TestDatabase& db) {
  std::map<uint32_t, std::string> out;
  sql::ConnectParams params = MysqlParams();
  params.database = db.name();
  auto leases = sql::MariaDbStorage(params).OpenLeases()->List("writer");
  EXPECT_TRUE(leases.ok()) << leases.status().ToString();
  if (!leases.ok()) return out;
  for (const sql::LeaseRow& l : *leases) {
    if (l.entity_type == "account" && !l.owner.empty() && l.expires_in_ms > 0) out[l.partition] = l.owner;
  }
  std::set<std::string> owners;
  for (const auto& [p, o] : out) owners.insert(o);
  if (out.size() != kPartitions || owners.size() != 2) out.clear();
  return out;
}

TEST(SeveralWriters, CommandsAreHandledByTheirPartitionsOwnerAndSurviveItsDeath) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("writers");
  std::vector<SluiceConfig> cfgs(2);
  std::vector<std::string> paths;
  for (int n = 0; n < 2; ++n) {
    cfgs[n].database = db.name();
    cfgs[n].entities = {{"account", kPartitions}};
    cfgs[n].port = FreePort();
    cfgs[n].extra_writer_yaml = "  id: w" + std::to_string(n) + "\n  lease_ttl: 2s\n";
    paths.push_back(cfgs[n].Write());
  }
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", paths[0]}, &out), 0) << out;
  std::vector<std::unique_ptr<SluiceProcess>> writers;
  for (int n = 0; n < 2; ++n) writers.push_back(StartSluice("writer", paths[n], cfgs[n].port));

  // The second writer takes its share within a round or two (TTL/4 each).
  std::map<uint32_t, std::string> owner;
  for (const auto until = std::chrono::steady_clock::now() + 20s;
       owner.empty() && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(100ms);
    owner = SplitLeases(db);
  }
  ASSERT_FALSE(owner.empty()) << "the writers did not split the partitions";
  std::this_thread::sleep_for(1200ms);  // each has read the other's leases since
  // `sluice status` shows both, with their URLs and shares.
  ASSERT_EQ(RunSluice({"status", "--config", paths[0], "--json"}, &out), 0) << out;
  const auto status = nlohmann::json::parse(out);
  ASSERT_EQ(status["writers"].size(), 2u) << out;
  uint32_t shares = 0;
  for (const auto& w : status["writers"]) {
    const std::string id = w["id"];
    const int n = id == "w0" ? 0 : 1;
    EXPECT_EQ(w["url"], "http://127.0.0.1:" + std::to_string(cfgs[n].port)) << out;
    shares += w["partitions"].get<uint32_t>();
  }
  EXPECT_EQ(shares, kPartitions) << out;

  // 1. Steady: whichever writer a command reaches, its partition's owner handles it.
  {
    RandomWriterLoad load({cfgs[0].port, cfgs[1].port}, "account", 4, 600, 8, "steady-");
    load.Start();
    load.Join();
    ASSERT_EQ(load.acknowledged().size(), 600u) << load.StatusText();
    for (const auto& [entity, by] : load.handled_by()) {
      EXPECT_EQ(by, std::set<std::string>{owner.at(PartitionOf(entity, kPartitions))}) << entity;
    }
  }

  // 2. The owner of some partitions is killed in the middle of a load and
  // restarted: the other writer cannot forward to it and handles its
  // commands itself, then takes its leases over; the restarted one gets its
  // share back.
  constexpr int kCommands = 2000;
  RandomWriterLoad load({cfgs[0].port, cfgs[1].port}, "account", 6, kCommands, 6);
  load.Start();
  while (load.started() < kCommands / 4) std::this_thread::sleep_for(5ms);
  writers[0]->Kill();
  std::this_thread::sleep_for(3s);  // past its leases' TTL
  writers[0] = StartSluice("writer", paths[0], cfgs[0].port);
  load.Join();
  const std::string seen = load.StatusText();
  std::cout << "answers (status x count):" << seen << "\n";
  EXPECT_EQ(load.acknowledged().size(), static_cast<size_t>(kCommands)) << seen;
  EXPECT_EQ(load.statuses().count(409), 0u) << seen;
  EXPECT_EQ(load.statuses().count(500), 0u) << seen;
  ExpectStoredExactlyOnce(db, "account", kPartitions, load.acknowledged(), kCommands + 600);  // with the steady 600
  const std::string survivor = writers[1]->Log();
  EXPECT_NE(survivor.find("handled here"), std::string::npos) << survivor.substr(survivor.size() > 3000 ? survivor.size() - 3000 : 0);
  for (auto& w : writers) EXPECT_EQ(w->Terminate(), 0) << w->Log();
}

// A writer that other writers believe owns partitions but that answers 503
// for everything (stopping, overloaded), and then one that is gone: the
// writer a command reaches forwards it, gets no usable answer, and handles
// it itself, so every command is acknowledged once. The "owner" is a fake:
// a member row and leases written by the test, and an HTTP server of its own.
TEST(SeveralWriters, AnOwnerThatAnswers503OrIsGoneIsBypassed) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("writers503");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", kPartitions}};
  cfg.port = FreePort();
  cfg.extra_writer_yaml = "  id: real\n  lease_ttl: 2s\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  std::atomic<int> asked{0};
  http::Server fake({}, [&](http::Request&&, http::Responder respond) {
    ++asked;
    respond(http::JsonError(503, "unavailable", "the writer is stopping"));
  });
  ASSERT_TRUE(fake.Start().ok());
  const auto exec = [&](const std::string& q) {
    auto r = db.conn().Execute(q);
    ASSERT_TRUE(r.ok()) << r.status().message();
  };
  // The fake owner: alive for an hour, holding every partition's lease.
  const auto pretend = [&](const std::string& url) {
    exec("REPLACE INTO sluice_members (member_group, member, address, heartbeat_at) VALUES ('writer', "
               "'fake', '" + url + "', NOW(6) + INTERVAL 1 HOUR)");
  };
  pretend("http://127.0.0.1:" + std::to_string(fake.port()));
  for (uint32_t p = 0; p < kPartitions; ++p) {
    exec("REPLACE INTO sluice_leases (scope, entity_type, partition_id, owner, token, expires_at, taken_at) "
               "VALUES ('writer', 'account', " + std::to_string(p) + ", 'fake', 1, NOW(6) + INTERVAL 1 HOUR, NOW(6))");
  }
  auto writer = StartSluice("writer", path, cfg.port);
  std::this_thread::sleep_for(700ms);  // a lease round has read the fake's leases
  HttpClient client(cfg.port, 10s);
  const auto send_all = [&](const std::string& prefix) {
    for (int i = 0; i < 20; ++i) {
      const HttpReply r = client.Post("/v1/entities/account/e" + std::to_string(i) + "/commands/patch",
                                      R"({"n":1})", {{"Idempotency-Key", prefix + std::to_string(i)}});
      EXPECT_TRUE(r.status == 200 || r.status == 201) << r.status << " " << r.body;
      const auto by = r.headers.find("sluice-writer");
      EXPECT_TRUE(by != r.headers.end() && by->second == "real") << r.body;
    }
  };
  send_all("a-");
  EXPECT_EQ(asked.load(), 20) << "every command was offered to the owner first";
  // The owner is gone (nothing listens at its URL any more).
  uint16_t gone = 0;
  {
    http::Server s({}, [](http::Request&&, http::Responder respond) { respond({}); });
    ASSERT_TRUE(s.Start().ok());
    gone = s.port();
  }
  pretend("http://127.0.0.1:" + std::to_string(gone));
  std::this_thread::sleep_for(1200ms);  // the writer has read the new URL
  send_all("b-");
  EXPECT_EQ(asked.load(), 20);
  // Each command once, none lost.
  int64_t events = 0;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    events += db.Scalar("SELECT COUNT(*) FROM " + sql::EventTableName("account", p));
  }
  EXPECT_EQ(events, 40);
  EXPECT_NE(writer->Log().find("handled here"), std::string::npos) << writer->Log();
  EXPECT_EQ(writer->Terminate(), 0) << writer->Log();
}

}  // namespace
}  // namespace sluice::testing
