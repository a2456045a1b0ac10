// Storage across several MySQL servers (issue 21, items 3 and 5c): an
// entity type's partitions split over the shared test server ("main"), a
// MariaDB server of the test's own ("b") and the Galera cluster ("g").
// Each server holds its partitions' event tables, offsets and leases; init
// records the placement on main; every command works across servers; a
// changed placement is refused until it is migrated explicitly.
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/partitioner.h"
#include "sql/schema.h"
#include "tests/support/galera.h"
#include "tests/support/private_mariadb.h"
#include "tests/support/test_support.h"
#include "tests/support/writer_load.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// The server "b" of every test here (started once: it takes seconds).
PrivateMariaDb& ServerB() {
  static PrivateMariaDb* server = [] {
    auto* s = new PrivateMariaDb();
    std::string why;
    if (!s->Start(&why)) ADD_FAILURE() << "the private MariaDB did not start: " << why;
    return s;
  }();
  return *server;
}

sql::ConnectParams ParamsB() {
  sql::ConnectParams p = MysqlParams();
  p.host = "127.0.0.1";
  p.port = ServerB().port();
  return p;
}

std::string ServerYaml(const std::string& name, const std::string& host, uint16_t port, const std::string& database) {
  return "    " + name + ":\n      host: " + host + "\n      port: " + std::to_string(port) +
         "\n      database: " + database + "\n";
}

bool HasTable(TestDatabase& db, const std::string& table) {
  return db.Scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '" +
                   table + "'") == 1;
}

// Copies one event table from one database to another (a migration step
// that an operator does with mysqldump): the same DDL, every row.
void CopyEventTable(TestDatabase& from, TestDatabase& to, const std::string& type, uint32_t partition) {
  const std::string table = sql::EventTableName(type, partition);
  ASSERT_TRUE(to.conn().Execute(sql::EventTableDdl(type, partition)).ok());
  for (const auto& r : from.Query("SELECT event_id, entity_id, version, command_id, command_name, expected_version, "
                                  "request, response, state, delta, deleted, committed_at FROM " + table)) {
    std::string ins = "INSERT INTO " + table + " " + sql::kEventInsertColumns + " VALUES (";
    for (size_t i = 0; i + 1 < r.size(); ++i) {
      if (i) ins += ",";
      if (r[i]) {
        to.conn().AppendQuoted(ins, *r[i]);
      } else {
        ins += "NULL";
      }
    }
    ASSERT_TRUE(to.conn().Execute(ins + ")").ok()) << ins;
  }
}

// 5c: three writers with routing, on main, b and the Galera cluster (each
// writer at another node of it); clients send to random writers; a writer
// is killed and restarted. Every acknowledged command is stored exactly
// once, on the server of its partition, in dense tables.
TEST(StorageServers, ThreeWritersOnTwoServersAndAGaleraClusterStoreEveryAcknowledgedCommandOnce) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_GALERA();
  const auto nodes = GaleraPorts();
  ASSERT_EQ(nodes.size(), 3u);
  TestDatabase main_db("servers");
  TestDatabase b_db("servers_b", ParamsB());
  TestDatabase g_db("servers_g", NodeParams(nodes[0]));
  constexpr uint32_t kPartitions = 6;
  std::vector<SluiceConfig> cfgs(3);
  std::vector<std::string> paths;
  for (int n = 0; n < 3; ++n) {
    cfgs[n].database = main_db.name();
    cfgs[n].entities = {{"account", kPartitions}};
    cfgs[n].entity_yaml["account"] = "servers: {main: 0-1, b: 2-3, g: 4-5}";
    cfgs[n].extra_storage_yaml = "  servers:\n" + ServerYaml("b", "127.0.0.1", ServerB().port(), b_db.name()) +
                                 ServerYaml("g", NodeParams(nodes[n]).host, nodes[n], g_db.name());
    cfgs[n].port = FreePort();
    cfgs[n].extra_writer_yaml = "  id: w" + std::to_string(n) + "\n  lease_ttl: 2s\n";
    paths.push_back(cfgs[n].Write());
  }
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", paths[0]}, &out), 0) << out;
  EXPECT_NE(out.find("storage server b"), std::string::npos) << out;
  // Each partition's table is on its server only.
  TestDatabase* server_of[kPartitions] = {&main_db, &main_db, &b_db, &b_db, &g_db, &g_db};
  for (uint32_t p = 0; p < kPartitions; ++p) {
    for (TestDatabase* db : {&main_db, &b_db, &g_db}) {
      EXPECT_EQ(HasTable(*db, sql::EventTableName("account", p)), db == server_of[p]) << p << " in " << db->name();
    }
  }
  std::vector<std::unique_ptr<SluiceProcess>> writers;
  for (int n = 0; n < 3; ++n) writers.push_back(StartSluice("writer", paths[n], cfgs[n].port));

  constexpr int kCommands = 3000;
  RandomWriterLoad load({cfgs[0].port, cfgs[1].port, cfgs[2].port}, "account", 8, kCommands, 18);
  RunKillingAWriter(load, kCommands, writers, 1, paths[1], cfgs[1].port);
  std::cout << "answers (status x count):" << load.StatusText() << "\n";
  ExpectEveryCommandAcknowledged(load, kCommands);
  ExpectStoredExactlyOnce([&](uint32_t p) -> TestDatabase& { return *server_of[p]; }, "account", kPartitions,
                          load.acknowledged(), kCommands);
  // Every server took a share, and the writer leases of each partition live on its server.
  for (TestDatabase* db : {&main_db, &b_db, &g_db}) {
    int64_t events = 0;
    for (uint32_t p = 0; p < kPartitions; ++p) {
      if (server_of[p] == db) events += db->Scalar("SELECT COUNT(*) FROM " + sql::EventTableName("account", p));
    }
    EXPECT_GT(events, 0) << db->name();
    for (const auto& r : db->Query("SELECT partition_id FROM sluice_leases WHERE scope = 'writer'")) {
      EXPECT_EQ(server_of[std::stoul(*r[0])], db) << "partition " << *r[0] << "'s lease is on " << db->name();
    }
  }
  for (auto& w : writers) EXPECT_EQ(w->Terminate(), 0) << w->Log();
}

// The engine, status, verify, rewind and deadletters across main and b;
// a server that dies stops only its own partitions; moving partitions is
// refused until the tables are copied and init is told to accept it.
TEST(StorageServers, EveryCommandWorksAcrossServersAndMovingPartitionsIsAnExplicitMigration) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase main_db("servers");
  TestDatabase b_db("servers_b", ParamsB());
  constexpr uint32_t kPartitions = 4;
  SluiceConfig cfg;
  cfg.database = main_db.name();
  cfg.entities = {{"account", kPartitions}, {"ledger", 1}};  // ledger: on main only
  cfg.entity_yaml["account"] = "servers: {main: 0-1, b: 2-3}";
  cfg.extra_storage_yaml = "  servers:\n" + ServerYaml("b", "127.0.0.1", ServerB().port(), b_db.name());
  cfg.port = FreePort();
  ::setenv("SLUICE_TEST_ADMIN_TOKEN", ("tok-" + UniquePrefix("servers")).c_str(), 1);
  cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n  lease_ttl: 2s\n"
                   "sinks:\n  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n"
                   "    columns: {owner: /owner, balance: /balance, note: /note}\n"
                   "  - {name: ledger_table, type: mysql, entity: ledger, table: ledger_view, columns: {note: /note}}\n"
                   "admin:\n  listen: 127.0.0.1:" + std::to_string(FreePort()) +
                   "\n  token: \"${env:SLUICE_TEST_ADMIN_TOKEN}\"\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto serve = StartSluice("serve", path, cfg.port);
  ASSERT_EQ(MixedLoad(cfg.port, 600, 40, 4, 7), 600);
  std::string status;
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &status)) << status;
  // Offsets and engine leases of partitions 2 and 3 are on b, of 0 and 1 on main.
  EXPECT_EQ(b_db.Scalar("SELECT COUNT(*) FROM sluice_offsets WHERE sink = 'table' AND partition_id IN (2, 3)"), 2);
  EXPECT_EQ(b_db.Scalar("SELECT COUNT(*) FROM sluice_offsets WHERE partition_id IN (0, 1)"), 0);
  EXPECT_EQ(main_db.Scalar("SELECT COUNT(*) FROM sluice_offsets WHERE sink = 'table' AND partition_id IN (0, 1)"), 2);
  EXPECT_EQ(b_db.Scalar("SELECT COUNT(*) FROM sluice_leases WHERE scope = 'sink/table' AND partition_id IN (2, 3)"), 2);
  EXPECT_EQ(main_db.Scalar("SELECT COUNT(*) FROM sluice_members WHERE member_group = 'engine'"), 1);
  // The view has every live entity of both servers.
  int64_t live = 0;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const std::string table = sql::EventTableName("account", p);
    live += (p < 2 ? main_db : b_db)
                .Scalar("SELECT COUNT(*) FROM " + table + " e WHERE deleted = 0 AND version = (SELECT MAX(version) FROM " +
                        table + " m WHERE m.entity_id = e.entity_id)");
  }
  EXPECT_GT(live, 0);
  EXPECT_EQ(main_db.Scalar("SELECT COUNT(*) FROM account_view WHERE _deleted = 0"), live);

  // status: every partition, with its head, from both servers.
  const Json st = StatusJson(path);
  ASSERT_TRUE(st.contains("sinks")) << st.dump();
  ASSERT_EQ(st["sinks"][0]["partitions"].size(), kPartitions) << st.dump();
  for (const auto& p : st["sinks"][0]["partitions"]) {
    EXPECT_GT(p["head"].get<uint64_t>(), 0u) << st.dump();
    EXPECT_EQ(p["server"], p["partition"].get<uint32_t>() < 2 ? "main" : "b") << st.dump();
  }
  EXPECT_EQ(st["storage"]["account"], "0-1 on main, 2-3 on b") << st.dump();
  // verify finds a damaged row of an entity stored on b, and repairs it.
  std::string on_b;
  for (const auto& r : b_db.Query("SELECT entity_id FROM ev_account_p002 WHERE deleted = 0 LIMIT 1")) on_b = *r[0];
  ASSERT_FALSE(on_b.empty());
  ASSERT_TRUE(main_db.conn().Execute("UPDATE account_view SET owner = 'tampered' WHERE id = '" + on_b + "'").ok());
  EXPECT_NE(VerifyViews(path, &out), 0) << out;
  EXPECT_NE(out.find(on_b), std::string::npos) << out;
  ASSERT_EQ(RunSluice({"verify", "--config", path, "--repair"}, &out), 0) << out;
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  // rebuild replays both servers' partitions into a new table and swaps it in.
  ASSERT_EQ(RunSluice({"rebuild", "--config", path, "--sink", "table"}, &out), 0) << out;
  EXPECT_NE(out.find("the rebuilt view is live"), std::string::npos) << out;
  EXPECT_EQ(main_db.Scalar("SELECT COUNT(*) FROM account_view WHERE _deleted = 0"), live);
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  // deadletters lists (none) across servers.
  EXPECT_EQ(RunSluice({"deadletters", "list", "--config", path}, &out), 0) << out;

  // b dies: commands on main's partitions go on, b's get 503; the writer stays up.
  std::map<uint32_t, std::string> entity_in;  // partition -> an entity id
  for (int i = 0; entity_in.size() < kPartitions; ++i) {
    const std::string id = "x" + std::to_string(i);
    entity_in.emplace(PartitionOf(id, kPartitions), id);
  }
  ServerB().Kill();
  HttpClient http(cfg.port, 15s);
  for (const auto& [p, id] : entity_in) {
    const auto r = http.Post("/v1/entities/account/" + id + "/commands/patch", R"({"owner":"while b is down"})");
    if (p < 2) {
      EXPECT_EQ(r.status / 100, 2) << p << ": " << r.body;
    } else {
      EXPECT_EQ(r.status, 503) << p << ": " << r.body;
    }
  }
  // The writer stays ready (main answers): a load balancer keeps it, and
  // main's partitions keep taking commands. Readiness says b is down.
  HttpReply ready;
  for (const auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    ready = http.Get("/readyz");
    if (ready.body.find(R"("b":false)") != std::string::npos) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_NE(ready.body.find(R"("b":false)"), std::string::npos) << ready.body;
  // The engine goes on with the sinks of main's types: a ledger entity
  // reaches its view while b is down, past the validity of the leases the
  // account sink could not renew (2/3 of engine.lease_ttl).
  std::this_thread::sleep_for(3s);
  ASSERT_EQ(http.Post("/v1/entities/ledger/l1/commands/create", R"({"note":"while b is down"})").status / 100, 2);
  int64_t seen = 0;
  for (const auto until = std::chrono::steady_clock::now() + 15s;
       seen == 0 && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(100ms)) {
    seen = main_db.Scalar("SELECT COUNT(*) FROM ledger_view WHERE id = 'l1'");
  }
  EXPECT_EQ(seen, 1) << "the ledger sink stopped while another server was down";
  std::string why;
  ASSERT_TRUE(ServerB().Restart(&why)) << why;
  for (const auto& [p, id] : entity_in) {
    HttpReply r;
    for (const auto until = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < until;) {
      r = http.Post("/v1/entities/account/" + id + "/commands/patch", R"({"note":"b is back"})");
      if (r.status / 100 == 2) break;
      std::this_thread::sleep_for(200ms);
    }
    EXPECT_EQ(r.status / 100, 2) << p << ": " << r.body;
  }
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &status)) << status;
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  // rewind --offline resets the offsets on both servers.
  EXPECT_EQ(serve->Terminate(), 0) << serve->Log();
  ASSERT_EQ(RunSluice({"rewind", "--config", path, "--sink", "table", "--to", "beginning", "--offline"}, &out), 0)
      << out;
  EXPECT_EQ(b_db.Scalar("SELECT COALESCE(MAX(event_id), 0) FROM sluice_offsets WHERE sink = 'table'"), 0);
  EXPECT_EQ(main_db.Scalar("SELECT COALESCE(MAX(event_id), 0) FROM sluice_offsets WHERE sink = 'table'"), 0);

  // Moving partitions 2-3 to main: refused by the writer and by init ...
  SluiceConfig moved = cfg;
  moved.entity_yaml["account"] = "server: main";
  const std::string moved_path = moved.Write();
  SluiceProcess refused({"writer", "--config", moved_path}, moved.port);
  EXPECT_FALSE(refused.Start(&why, 15s));
  EXPECT_NE(why.find("moving partitions between servers is a migration"), std::string::npos) << why;
  EXPECT_EQ(RunSluice({"init", "--config", moved_path}, &out), 1) << out;
  EXPECT_NE(out.find("--accept-moves"), std::string::npos) << out;
  EXPECT_EQ(RunSluice({"status", "--config", moved_path}, &out), 1) << out;
  EXPECT_NE(out.find("moving partitions between servers is a migration"), std::string::npos) << out;
  EXPECT_EQ(out.find("`sluice serve` also does it"), std::string::npos) << out;  // it would not
  EXPECT_EQ(RunSluice({"rewind", "--config", moved_path, "--sink", "table", "--to", "0", "--offline"}, &out), 1)
      << out;
  // ... and by init --accept-moves until the tables are on main, complete.
  EXPECT_EQ(RunSluice({"init", "--config", moved_path, "--accept-moves"}, &out), 1) << out;
  EXPECT_NE(out.find("has no table ev_account_p002"), std::string::npos) << out;
  CopyEventTable(b_db, main_db, "account", 2);
  ASSERT_TRUE(main_db.conn().Execute("CREATE TABLE ev_account_p003 LIKE ev_account_p000").ok());  // empty: fewer events than on b
  EXPECT_EQ(RunSluice({"init", "--config", moved_path, "--accept-moves"}, &out), 1) << out;
  EXPECT_NE(out.find("partition 3 of 'account' moves from b to main but its table there ends at event 0"),
            std::string::npos)
      << out;
  ASSERT_TRUE(main_db.conn().Execute("DROP TABLE ev_account_p003").ok());
  CopyEventTable(b_db, main_db, "account", 3);
  // Refused while a writer still runs on the old placement (it would append to b's copies).
  auto old_writer = StartSluice("writer", path, cfg.port);
  EXPECT_EQ(RunSluice({"init", "--config", moved_path, "--accept-moves"}, &out), 1) << out;
  EXPECT_NE(out.find("still run"), std::string::npos) << out;
  EXPECT_EQ(old_writer->Terminate(), 0) << old_writer->Log();
  // A changed partition count is refused too, wherever the type was placed.
  SluiceConfig recounted = moved;
  recounted.entities = {{"account", 8}, {"ledger", 1}};
  EXPECT_EQ(RunSluice({"init", "--config", recounted.Write(), "--accept-moves"}, &out), 1) << out;
  EXPECT_NE(out.find("was created with 4 partitions but the config says 8"), std::string::npos) << out;
  ASSERT_EQ(RunSluice({"init", "--config", moved_path, "--accept-moves"}, &out), 0) << out;
  EXPECT_NE(out.find("moved partition 2 of account: b -> main"), std::string::npos) << out;
  EXPECT_NE(out.find("moved partition 3 of account: b -> main"), std::string::npos) << out;
  // The old placement is refused now; the new one serves every entity with its history.
  EXPECT_EQ(RunSluice({"init", "--config", path}, &out), 1) << out;
  auto writer = StartSluice("writer", moved_path, moved.port);
  HttpClient moved_http(moved.port, 15s);
  for (const auto& [p, id] : entity_in) {
    const auto r = moved_http.Post("/v1/entities/account/" + id + "/commands/patch", R"({"note":"moved"})");
    EXPECT_EQ(r.status / 100, 2) << p << ": " << r.body;
    const auto got = moved_http.Get("/v1/entities/account/" + id);
    EXPECT_EQ(got.status, 200) << got.body;
    EXPECT_NE(got.body.find("moved"), std::string::npos) << got.body;
  }
  EXPECT_EQ(writer->Terminate(), 0) << writer->Log();
  ExpectDenseEventIds(main_db);
}

}  // namespace
}  // namespace sluice::testing
