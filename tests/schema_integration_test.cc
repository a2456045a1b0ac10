// `sluice init`, `sluice config check` and the start-up checks, against a real MariaDB.
#include <gtest/gtest.h>

#include "sql/schema.h"
#include "tests/support/private_mariadb.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

int64_t CountTables(TestDatabase& db) {
  return db.Scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema=DATABASE()");
}

TEST(Init, CreatesEveryPartitionTableAndIsIdempotent) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("init");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 16}, {"order_line", 3}};
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  EXPECT_NE(out.find("19 event tables created"), std::string::npos) << out;
  EXPECT_EQ(CountTables(db), 19 + 11);  // + schema, entity types, offsets, dead letters, leases, lease holders,
                                       //   lease log, members, server, placement, archive segments
  EXPECT_EQ(db.Scalar("SELECT partitions FROM sluice_entity_types WHERE entity_type='account'"), 16);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema=DATABASE() AND "
                      "table_name='ev_account_p015'"),
            1);
  // Twice: nothing changes.
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  EXPECT_NE(out.find("already up to date"), std::string::npos) << out;
  EXPECT_EQ(CountTables(db), 30);
}

TEST(Init, RefusesAPartitionCountThatDisagreesAndChangesNothing) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("initmismatch");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 4}};
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", cfg.Write()}, &out), 0) << out;
  cfg.entities = {{"account", 8}, {"extra", 2}};
  EXPECT_EQ(RunSluice({"init", "--config", cfg.Write()}, &out), 1);
  EXPECT_NE(out.find("entity type 'account' was created with 4 partitions but the config says 8"), std::string::npos)
      << out;
  EXPECT_EQ(CountTables(db), 4 + 11);  // not even the new type's tables
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM sluice_entity_types"), 1);
  // The writer refuses to start on it too.
  std::string why;
  cfg.entities = {{"account", 8}};
  cfg.port = FreePort();
  SluiceProcess writer({"writer", "--config", cfg.Write()}, cfg.port);
  EXPECT_FALSE(writer.Start(&why, std::chrono::seconds(10)));
  EXPECT_NE(why.find("created with 4 partitions"), std::string::npos) << why;
}

// A database of schema version 1 (whole states only, from a sluice before
// deltas) with events in it: the writer refuses it until `sluice init`
// upgrades it; then the old events read as before and new ones may be deltas.
TEST(Init, UpgradesASchemaOfVersionOneInPlace) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("initupgrade");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"doc", 1}};
  cfg.entity_yaml["doc"] = "deltas: {snapshot_every: 10, snapshot_percent: 100}";
  cfg.port = FreePort();
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  // What a version-1 writer left: whole states, and version 1 recorded.
  const std::string body = std::string(R"({"body":")") + std::string(2000, 'a') + "\"";
  auto row = [&](int v) {
    return "(" + std::to_string(v) + ", 'd', " + std::to_string(v) + ", 'c" + std::to_string(v) +
           "', 'patch', '{}', '{}', '" + body + ",\"n\":" + std::to_string(v) + "}')";
  };
  auto inserted = db.conn().Execute("INSERT INTO ev_doc_p000 (event_id, entity_id, version, command_id, command_name, "
                                    "request, response, state) VALUES " + row(1) + "," + row(2));
  ASSERT_TRUE(inserted.ok()) << inserted.status().ToString();
  // Version 1 had no archive tables either.
  ASSERT_TRUE(db.conn().Execute("DROP TABLE sluice_archive_segments").ok());
  ASSERT_TRUE(db.conn().Execute("ALTER TABLE ev_doc_p000 DROP COLUMN archived").ok());
  ASSERT_TRUE(db.conn().Execute("UPDATE sluice_schema SET version=1").ok());
  std::string why;
  {
    SluiceProcess writer({"writer", "--config", path}, cfg.port);
    EXPECT_FALSE(writer.Start(&why, std::chrono::seconds(10)));
    EXPECT_NE(why.find("schema version 1; run `sluice init --config FILE` to upgrade it to 4"), std::string::npos)
        << why;
  }
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  EXPECT_NE(out.find("schema upgraded from version 1 to 4"), std::string::npos) << out;
  EXPECT_EQ(db.Scalar("SELECT version FROM sluice_schema"), 4);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema=DATABASE() AND "
                      "table_name='sluice_archive_segments'"),
            1);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema=DATABASE() AND "
                      "table_name='ev_doc_p000' AND column_name='archived'"),
            1);
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  EXPECT_NE(out.find("already up to date"), std::string::npos) << out;

  SluiceProcess writer({"writer", "--config", path}, cfg.port);
  ASSERT_TRUE(writer.Start(&why)) << why;
  HttpClient http(cfg.port);
  const auto patched = http.Post("/v1/entities/doc/d/commands/patch", R"({"n":3})");
  ASSERT_EQ(patched.status, 200) << patched.body << writer.Log();
  // The new event is a delta after the old whole states, and reads whole.
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE version=3 AND delta IS NOT NULL AND state IS NULL"), 1);
  const std::string got = http.Get("/v1/entities/doc/d").body;
  EXPECT_NE(got.find(R"("n":3)"), std::string::npos) << got.substr(0, 200);
  EXPECT_NE(got.find(std::string(2000, 'a')), std::string::npos);
  const std::string events = http.Get("/v1/entities/doc/d/events").body;
  EXPECT_NE(events.find(R"("n":1})"), std::string::npos);
  EXPECT_NE(events.find(R"("n":2})"), std::string::npos);
  EXPECT_EQ(writer.Terminate(), 0);
}

TEST(Init, ReportsAnUnreachableServerClearly) {
  SluiceConfig cfg;
  cfg.database = "unreachable";
  cfg.entities = {{"account", 1}};
  cfg.mysql_port = FreePort();  // nothing listens there
  std::string out;
  EXPECT_EQ(RunSluice({"init", "--config", cfg.Write()}, &out), 1);
  EXPECT_NE(out.find("cannot connect to MySQL at 127.0.0.1:" + std::to_string(cfg.mysql_port)), std::string::npos)
      << out;
  EXPECT_EQ(out.find(MysqlParams().password + "\n"), std::string::npos);
}

TEST(ConfigCheck, ReportsFileLineAndColumn) {
  const std::string path = ::testing::TempDir() + "/broken.yaml";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("storage:\n  mysql: {host: 127.0.0.1}\nentities:\n  account: {partitions: 0}\nwriter:\n  batch_mx: 5\n", f);
  std::fclose(f);
  std::string out;
  EXPECT_EQ(RunSluice({"config", "check", path}, &out), 1);
  EXPECT_NE(out.find(path + ":4:"), std::string::npos) << out;
  EXPECT_NE(out.find(path + ":6:3: writer.batch_mx: unknown key"), std::string::npos) << out;
  EXPECT_EQ(RunSluice({"config", "check"}, &out), 2);
  EXPECT_EQ(RunSluice({"--help"}, &out), 0);
  EXPECT_NE(out.find("usage: sluice"), std::string::npos);
  for (const char* cmd : {"serve", "writer", "init"}) {
    EXPECT_EQ(RunSluice({cmd, "--help"}, &out), 0) << cmd;
    EXPECT_NE(out.find("--config"), std::string::npos) << cmd;
  }
  EXPECT_EQ(RunSluice({"frobnicate"}, &out), 2);
}

// The writer refuses MySQL settings that can lose committed commands, unless
// allowed. On a server of its own: weakening the shared test server's
// settings, even for a moment, would fail every other test starting a writer
// then.
TEST(Durability, WeakSettingsAreRefusedUnlessAllowed) {
  SLUICE_REQUIRE_MYSQL();
  PrivateMariaDb server;
  std::string started;
  ASSERT_TRUE(server.Start(&started)) << started;
  sql::ConnectParams params = MysqlParams();
  params.host = "127.0.0.1";
  params.port = server.port();
  TestDatabase db("durability", params);
  ASSERT_TRUE(db.conn().Execute("SET GLOBAL innodb_flush_log_at_trx_commit=2").ok());
  SluiceConfig cfg;
  cfg.mysql_host = "127.0.0.1";
  cfg.mysql_port = server.port();
  cfg.database = db.name();
  cfg.entities = {{"account", 1}};
  cfg.port = FreePort();
  const std::string path = cfg.Write();
  SluiceProcess refused({"serve", "--config", path}, cfg.port);
  std::string why;
  EXPECT_FALSE(refused.Start(&why, std::chrono::seconds(15)));
  EXPECT_NE(why.find("innodb_flush_log_at_trx_commit=2"), std::string::npos) << why;
  SluiceProcess allowed({"serve", "--config", path, "--allow-weak-durability"}, cfg.port);
  ASSERT_TRUE(allowed.Start(&why)) << why;
  EXPECT_NE(allowed.Log().find("WARNING"), std::string::npos);
}

}  // namespace
}  // namespace sluice::testing
