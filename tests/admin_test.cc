// Operator commands against a running `sluice serve` with real MariaDB and
// Redis (issue 6, item 5):
//   rewind   a partition (and a whole sink) back to 0: every re-applied event
//            counts as stale and the views do not change
//   pause    writes continue, the paused view does not move, its lag grows;
//            resume catches up and verify is clean
//   rebuild  a MySQL view while commands flow: the table is swapped for a
//            fresh one, which repairs damage a replay cannot
//   auth     requests without the token or with another get 401/403 and
//            change nothing; a bad sink name is a clear error with exit 1
#include <stdlib.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

struct Stack {
  std::unique_ptr<TestDatabase> db;
  SluiceConfig cfg;
  std::string path;
  std::string prefix;
  uint16_t admin_port = 0;
  std::unique_ptr<SluiceProcess> serve;
};

// A config whose admin token comes from SLUICE_TEST_ADMIN_TOKEN (set here,
// inherited by every sluice the test runs).
std::string AdminYaml(uint16_t port, const std::string& token_yaml) {
  return "admin:\n  listen: 127.0.0.1:" + std::to_string(port) + "\n  token: " + token_yaml + "\n";
}

std::unique_ptr<Stack> MakeStack(const std::string& name, uint32_t partitions) {
  ::setenv("SLUICE_TEST_ADMIN_TOKEN", ("tok-" + UniquePrefix("admin")).c_str(), 1);
  auto s = std::make_unique<Stack>();
  s->db = std::make_unique<TestDatabase>(name);
  s->prefix = UniquePrefix(name);
  s->admin_port = FreePort();
  s->cfg.database = s->db->name();
  s->cfg.entities = {{"account", partitions}};
  s->cfg.port = FreePort();
  s->cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n"
                      "sinks:\n"
                      "  - name: cache\n    type: redis\n    entity: account\n"
                      "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
                      "    key: \"" + s->prefix + ":{id}\"\n"
                      "  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n"
                      "    columns: {owner: /owner, balance: /balance, note: /note}\n" +
                      AdminYaml(s->admin_port, "\"${env:SLUICE_TEST_ADMIN_TOKEN}\"");
  s->path = s->cfg.Write();
  s->serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s->path}, s->cfg.port);
  std::string why;
  EXPECT_TRUE(s->serve->Start(&why)) << why;
  return s;
}

int Sluice(const std::vector<std::string>& args, std::string* out) { return RunSluice(args, out); }

// Every row of the MySQL view, as text.
std::vector<std::string> TableRows(TestDatabase& db) {
  std::vector<std::string> out;
  for (const auto& r : db.Query("SELECT id, _version, _deleted, owner, balance, note FROM account_view ORDER BY id")) {
    std::string line;
    for (const auto& c : r) line += c.value_or("NULL") + "|";
    out.push_back(line);
  }
  return out;
}

const Json& SinkStatus(const Json& status, const std::string& sink) {
  for (const auto& s : status["sinks"]) {
    if (s["name"] == sink) return s;
  }
  static const Json kNone;
  return kNone;
}

uint64_t LagEvents(const Json& status, const std::string& sink) { return SinkTotal(status, sink, "lag_events"); }

TEST(Admin, RewindReappliesEveryEventAsStaleAndLeavesTheViewsUnchanged) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("rewind", 4);
  EXPECT_EQ(MixedLoad(s->cfg.port, 8000, 400, 8, 1), 8000);
  std::string status_text;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &status_text)) << status_text;
  RedisClient redis(RedisPort());
  const auto redis_before = redis.Dump(s->prefix + ":*");
  const auto table_before = TableRows(*s->db);
  ASSERT_FALSE(redis_before.empty());
  const Json before = StatusJson(s->path);
  const uint64_t cache_p1 = SinkStatus(before, "cache")["partitions"][1]["offset"].get<uint64_t>();
  ASSERT_GT(cache_p1, 0u);

  std::string out;
  ASSERT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "cache", "--partition", "1", "--to", "0"}, &out), 0)
      << out;
  EXPECT_NE(out.find("partition 1: offset " + std::to_string(cache_p1) + " -> 0"), std::string::npos) << out;
  ASSERT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "table", "--to", "beginning"}, &out), 0) << out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &status_text)) << status_text;

  const Json after = StatusJson(s->path);
  const uint64_t events = static_cast<uint64_t>(ExpectDenseEventIds(*s->db));
  // Only partition 1 of the cache was replayed; the whole table was.
  EXPECT_EQ(SinkTotal(after, "cache", "applied"), SinkTotal(before, "cache", "applied"));
  EXPECT_EQ(SinkTotal(after, "cache", "stale"), SinkTotal(before, "cache", "stale") + cache_p1);
  EXPECT_EQ(SinkTotal(after, "table", "applied"), SinkTotal(before, "table", "applied"));
  EXPECT_EQ(SinkTotal(after, "table", "stale"), SinkTotal(before, "table", "stale") + events);
  EXPECT_EQ(redis.Dump(s->prefix + ":*"), redis_before);
  EXPECT_EQ(TableRows(*s->db), table_before);
  EXPECT_EQ(VerifyViews(s->path, &out), 0) << out;

  // Forward is refused and changes nothing.
  const uint64_t head_p0 = SinkStatus(after, "table")["partitions"][0]["head"].get<uint64_t>();
  EXPECT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "table", "--partition", "0", "--to",
                    std::to_string(head_p0 + 5)},
                   &out),
            1)
      << out;
  EXPECT_NE(out.find("only moves offsets back"), std::string::npos) << out;
  EXPECT_EQ(SinkStatus(StatusJson(s->path), "table")["partitions"][0]["offset"].get<uint64_t>(), head_p0);
}

TEST(Admin, PausedViewHoldsStillWhileWritesContinueThenResumeCatchesUp) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("pause", 4);
  EXPECT_EQ(MixedLoad(s->cfg.port, 2000, 200, 4, 1), 2000);
  std::string status_text, out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &status_text)) << status_text;

  ASSERT_EQ(Sluice({"pause", "--config", s->path, "--sink", "table"}, &out), 0) << out;
  Json st = StatusJson(s->path);
  EXPECT_TRUE(SinkStatus(st, "table")["paused"].get<bool>()) << st.dump();
  EXPECT_FALSE(SinkStatus(st, "cache")["paused"].get<bool>()) << st.dump();
  for (const auto& p : SinkStatus(st, "table")["partitions"]) EXPECT_EQ(p["state"], "paused");
  const auto table_paused = TableRows(*s->db);
  const uint64_t offsets_paused = SinkTotal(st, "table", "offset");
  EXPECT_EQ(LagEvents(st, "table"), 0u);

  EXPECT_EQ(MixedLoad(s->cfg.port, 3000, 200, 4, 2), 3000);
  // The cache keeps up (wait for it), the paused table does not move.
  for (int i = 0; i < 600 && LagEvents(StatusJson(s->path), "cache") > 0; ++i) std::this_thread::sleep_for(100ms);
  st = StatusJson(s->path);
  EXPECT_EQ(LagEvents(st, "cache"), 0u);
  // The writes went on; the paused view and its offsets did not move.
  EXPECT_EQ(SinkTotal(st, "table", "head"), SinkTotal(st, "cache", "head"));
  EXPECT_GT(SinkTotal(st, "table", "head"), offsets_paused);
  EXPECT_EQ(SinkTotal(st, "table", "offset"), offsets_paused);
  EXPECT_EQ(LagEvents(st, "table"), SinkTotal(st, "table", "head") - offsets_paused);
  EXPECT_EQ(TableRows(*s->db), table_paused);
  // A second pause is harmless; status over the admin endpoint says paused too.
  ASSERT_EQ(Sluice({"pause", "--config", s->path, "--sink", "table"}, &out), 0) << out;
  HttpClient admin(s->admin_port);
  auto live = admin.Get("/v1/status");
  ASSERT_EQ(live.status, 200) << live.body;
  EXPECT_TRUE(SinkStatus(Json::parse(live.body), "table")["paused"].get<bool>()) << live.body;

  // The pause outlives a restart.
  EXPECT_EQ(s->serve->Terminate(), 0);
  s->serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s->path}, s->cfg.port);
  std::string why;
  ASSERT_TRUE(s->serve->Start(&why)) << why;
  HttpClient restarted(s->admin_port);
  live = restarted.Get("/v1/status");
  ASSERT_EQ(live.status, 200) << live.body;
  EXPECT_TRUE(SinkStatus(Json::parse(live.body), "table")["paused"].get<bool>()) << live.body;
  EXPECT_EQ(SinkStatus(StatusJson(s->path), "table")["partitions"][0]["state"], "paused");
  EXPECT_EQ(TableRows(*s->db), table_paused);

  ASSERT_EQ(Sluice({"resume", "--config", s->path, "--sink", "table"}, &out), 0) << out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &status_text)) << status_text;
  EXPECT_FALSE(SinkStatus(StatusJson(s->path), "table")["paused"].get<bool>());
  EXPECT_EQ(VerifyViews(s->path, &out), 0) << out;
}

TEST(Admin, RebuildSwapsInAFreshMysqlTableWhileCommandsFlow) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("rebuild", 4);
  EXPECT_EQ(MixedLoad(s->cfg.port, 10000, 500, 8, 1), 10000);
  std::string status_text, out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &status_text)) << status_text;
  // Damage a replay cannot repair: a row of no entity, and content changed
  // without a version change (the version check would keep both).
  ASSERT_TRUE(s->db->conn()
                  .Execute("INSERT INTO account_view (id, _version, _deleted, owner) VALUES ('ghost', 1, 0, 'nobody')")
                  .ok());
  ASSERT_TRUE(
      s->db->conn().Execute("UPDATE account_view SET note='tampered' WHERE _deleted=0 ORDER BY id LIMIT 1").ok());
  ASSERT_EQ(VerifyViews(s->path, &out), 1) << out;
  const auto created_before =
      s->db->Scalar("SELECT UNIX_TIMESTAMP(CREATE_TIME) FROM information_schema.TABLES WHERE TABLE_SCHEMA=DATABASE() "
                    "AND TABLE_NAME='account_view'");
  std::this_thread::sleep_for(1100ms);  // CREATE_TIME has one-second resolution

  std::atomic<bool> stop{false};
  std::atomic<int64_t> answered{0};
  std::thread load([&] { answered = MixedLoad(s->cfg.port, 1000000, 500, 4, 3, &stop); });
  const int rc = Sluice({"rebuild", "--config", s->path, "--sink", "table"}, &out);
  stop = true;
  load.join();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("rebuild table: replaying"), std::string::npos) << out;
  EXPECT_NE(out.find("events/s, ETA"), std::string::npos) << out;
  EXPECT_NE(out.find("the rebuilt view is live"), std::string::npos) << out;
  EXPECT_GT(answered.load(), 0);

  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &status_text)) << status_text;
  EXPECT_EQ(VerifyViews(s->path, &out), 0) << out;
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM account_view WHERE id='ghost'"), 0);
  EXPECT_GT(s->db->Scalar("SELECT UNIX_TIMESTAMP(CREATE_TIME) FROM information_schema.TABLES WHERE "
                          "TABLE_SCHEMA=DATABASE() AND TABLE_NAME='account_view'"),
            created_before);
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=DATABASE() AND "
                          "TABLE_NAME IN ('account_view__rebuild','account_view__old')"),
            0);
  // The live runner carried on from the rebuilt offsets: nothing left behind
  // under the shadow's name, nothing dead-lettered.
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM sluice_offsets WHERE sink='table__rebuild'"), 0);
  EXPECT_EQ(SinkTotal(StatusJson(s->path), "table", "dead_lettered"), 0u);

  // A Redis view has no atomic switch-over: refused, with what to do instead.
  EXPECT_EQ(Sluice({"rebuild", "--config", s->path, "--sink", "cache"}, &out), 1) << out;
  EXPECT_NE(out.find("cannot be rebuilt"), std::string::npos) << out;
  EXPECT_NE(out.find("rewind"), std::string::npos) << out;
}

TEST(Admin, UnauthorizedRequestsGet401Or403AndChangeNothing) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("auth", 2);
  HttpClient admin(s->admin_port);
  auto none = admin.Post("/v1/sinks/table/pause", "{}");
  EXPECT_EQ(none.status, 401) << none.body;
  auto wrong = admin.Post("/v1/sinks/table/pause", "{}", {{"Authorization", "Bearer not-the-token"}});
  EXPECT_EQ(wrong.status, 403) << wrong.body;
  auto rewind = admin.Post("/v1/sinks/table/rewind", "{\"to\":0}", {{"Authorization", "Bearer x"}});
  EXPECT_EQ(rewind.status, 403) << rewind.body;

  // The CLI with a config holding another token: refused, exit 1.
  SluiceConfig other = s->cfg;
  other.extra_yaml = s->cfg.extra_yaml.substr(0, s->cfg.extra_yaml.find("admin:")) +
                     AdminYaml(s->admin_port, "wrong-token");
  std::string out;
  EXPECT_EQ(Sluice({"pause", "--config", other.Write(), "--sink", "table"}, &out), 1) << out;
  EXPECT_NE(out.find("403"), std::string::npos) << out;

  auto status = admin.Get("/v1/status");
  ASSERT_EQ(status.status, 200) << status.body;
  for (const auto& sink : Json::parse(status.body)["sinks"]) EXPECT_FALSE(sink["paused"].get<bool>()) << status.body;
  const Json st = StatusJson(s->path);
  EXPECT_FALSE(SinkStatus(st, "table")["paused"].get<bool>()) << st.dump();
}

TEST(Admin, BadSinkNamesAndMissingProcessAreClearErrors) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("errors", 2);
  EXPECT_EQ(MixedLoad(s->cfg.port, 500, 50, 2, 1), 500);
  std::string status_text, out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &status_text)) << status_text;
  for (const char* cmd : {"pause", "resume", "rebuild"}) {
    EXPECT_EQ(Sluice({cmd, "--config", s->path, "--sink", "nope"}, &out), 1) << cmd << out;
    EXPECT_NE(out.find("no sink named 'nope'"), std::string::npos) << out;
  }
  EXPECT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "nope", "--to", "0"}, &out), 1) << out;
  EXPECT_NE(out.find("no sink named 'nope' in " + s->path + " (sinks: cache, table)"), std::string::npos) << out;
  EXPECT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "table", "--to", "soon"}, &out), 2) << out;
  EXPECT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "table", "--partition", "7", "--to", "0"}, &out), 1)
      << out;
  // The endpoint answers unknown sinks too.
  HttpClient admin(s->admin_port);
  auto r = admin.Post("/v1/sinks/nope/pause", "{}",
                      {{"Authorization", std::string("Bearer ") + ::getenv("SLUICE_TEST_ADMIN_TOKEN")}});
  EXPECT_EQ(r.status, 404) << r.body;
  // An offline rewind is refused while the process runs...
  EXPECT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "table", "--to", "0", "--offline"}, &out), 1) << out;

  // ... and once it has stopped, the online commands say nothing listens,
  // while --offline writes the offsets for the next start.
  EXPECT_EQ(s->serve->Terminate(), 0);
  EXPECT_EQ(Sluice({"pause", "--config", s->path, "--sink", "table"}, &out), 1) << out;
  EXPECT_NE(out.find("nothing listens on the admin endpoint"), std::string::npos) << out;
  ASSERT_EQ(Sluice({"rewind", "--config", s->path, "--sink", "table", "--to", "0", "--offline"}, &out), 0) << out;
  for (const auto& p : SinkStatus(StatusJson(s->path), "table")["partitions"]) EXPECT_EQ(p["offset"], 0);
  EXPECT_GT(SinkTotal(StatusJson(s->path), "cache", "offset"), 0u);
}

}  // namespace
}  // namespace sluice::testing
