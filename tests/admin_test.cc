// Operator commands against a running `sluice serve` with real MariaDB and
// Redis (issue 6, item 5):
//   rewind   a partition (and a whole sink) back to 0: every re-applied event
//            counts as stale and the views do not change
//   pause    writes continue, the paused view does not move, its lag grows;
//            resume catches up and verify is clean
//   rebuild  a MySQL view while commands flow: the table is swapped for a
//            fresh one, which repairs damage a replay cannot; the same for an
//            Elasticsearch index (an alias), Redis keys and the example
//            plugin's file; a rebuild whose process dies between the replay
//            and the switch leaves the live view served and correct, and the
//            next rebuild replaces what it left; kafka is refused
//   auth     requests without the token or with another get 401/403 and
//            change nothing; a bad sink name is a clear error with exit 1
#include <stdlib.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <cstdlib>

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

// The header the admin endpoint needs for reads and changes alike.
std::vector<std::pair<std::string, std::string>> AdminAuth() {
  const char* token = std::getenv("SLUICE_TEST_ADMIN_TOKEN");
  return {{"Authorization", std::string("Bearer ") + (token ? token : "")}};
}

// Starts `sluice serve` for the stack (again, after a stop).
void Serve(Stack& s) {
  s.serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s.path}, s.cfg.port);
  std::string why;
  EXPECT_TRUE(s.serve->Start(&why)) << why;
}

// A serve process whose sinks are `sinks_yaml` (each "  - name: ..." block;
// `prefix` is unique to the test, for keys, indices and files) plus `extra_yaml`.
std::unique_ptr<Stack> MakeStackWith(const std::string& name, uint32_t partitions,
                                     const std::function<std::string(const std::string& prefix)>& sinks_yaml,
                                     const std::string& extra_yaml = "") {
  ::setenv("SLUICE_TEST_ADMIN_TOKEN", ("tok-" + UniquePrefix("admin")).c_str(), 1);
  auto s = std::make_unique<Stack>();
  s->db = std::make_unique<TestDatabase>(name);
  s->prefix = UniquePrefix(name);
  s->admin_port = FreePort();
  s->cfg.database = s->db->name();
  s->cfg.entities = {{"account", partitions}};
  s->cfg.port = FreePort();
  s->cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n"
                      "sinks:\n" + sinks_yaml(s->prefix) + extra_yaml +
                      AdminYaml(s->admin_port, "\"${env:SLUICE_TEST_ADMIN_TOKEN}\"");
  s->path = s->cfg.Write();
  Serve(*s);
  return s;
}

std::string RedisSinkYaml(const std::string& name, const std::string& prefix) {
  return "  - name: " + name + "\n    type: redis\n    entity: account\n"
         "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
         "    key: \"" + prefix + ":{id}\"\n";
}

std::unique_ptr<Stack> MakeStack(const std::string& name, uint32_t partitions) {
  return MakeStackWith(name, partitions, [](const std::string& prefix) {
    return RedisSinkYaml("cache", prefix) +
           "  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n"
           "    columns: {owner: /owner, balance: /balance, note: /note}\n";
  });
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

// `sluice rebuild --sink sink` while `threads` clients send commands to
// `entities` entities: it succeeds, showing its progress, and commands were
// answered meanwhile.
void RebuildUnderLoad(Stack& s, const std::string& sink, int entities, int threads) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> answered{0};
  std::thread load([&] { answered = MixedLoad(s.cfg.port, 1000000, entities, threads, 3, &stop); });
  std::string out;
  const int rc = Sluice({"rebuild", "--config", s.path, "--sink", sink}, &out);
  stop = true;
  load.join();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("rebuild " + sink + ": replaying"), std::string::npos) << out;
  EXPECT_NE(out.find("events/s, ETA"), std::string::npos) << out;
  EXPECT_NE(out.find("the rebuilt view is live"), std::string::npos) << out;
  EXPECT_GT(answered.load(), 0);
}

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
  auto live = admin.Get("/v1/status", AdminAuth());
  ASSERT_EQ(live.status, 200) << live.body;
  EXPECT_TRUE(SinkStatus(Json::parse(live.body), "table")["paused"].get<bool>()) << live.body;

  // The pause outlives a restart.
  EXPECT_EQ(s->serve->Terminate(), 0);
  s->serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s->path}, s->cfg.port);
  std::string why;
  ASSERT_TRUE(s->serve->Start(&why)) << why;
  HttpClient restarted(s->admin_port);
  live = restarted.Get("/v1/status", AdminAuth());
  ASSERT_EQ(live.status, 200) << live.body;
  EXPECT_TRUE(SinkStatus(Json::parse(live.body), "table")["paused"].get<bool>()) << live.body;
  EXPECT_EQ(SinkStatus(StatusJson(s->path), "table")["partitions"][0]["state"], "paused");
  // Paused also once it holds its partitions again (a resume before that is
  // refused: the pause lives in their offsets).
  for (int i = 0; i < 300; ++i) {
    live = restarted.Get("/v1/status", AdminAuth());
    ASSERT_EQ(live.status, 200) << live.body;
    if (!SinkStatus(Json::parse(live.body), "table")["partitions"].empty()) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(SinkStatus(Json::parse(live.body), "table")["partitions"].size(), 4u) << live.body;
  EXPECT_TRUE(SinkStatus(Json::parse(live.body), "table")["paused"].get<bool>()) << live.body;
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

  ASSERT_NO_FATAL_FAILURE(RebuildUnderLoad(*s, "table", 500, 4));

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

  // Reads need the token too.
  EXPECT_EQ(admin.Get("/v1/status").status, 401);
  EXPECT_EQ(admin.Get("/v1/status", {{"Authorization", "Bearer not-the-token"}}).status, 403);
  auto status = admin.Get("/v1/status", AdminAuth());
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

// ---- rebuilding the other kinds of view ----

// A view that can be rebuilt, seen from outside: its sink (named "view"),
// how to damage it in a way a replay cannot repair (an entry of no entity),
// and what a rebuild leaves beside it.
// The functions share the target's state (the index, key prefix or file,
// known once sinks_yaml has run), which also cleans up when the last goes.
struct RebuildTarget {
  std::function<std::string(const std::string& prefix)> sinks_yaml;
  std::string extra_yaml;                       // e.g. plugins:
  std::function<void()> plant_ghost;            // writes the entry "ghost" into the live view
  std::function<bool()> has_ghost;              // whether the live view holds it
  std::function<size_t()> leftovers;            // shadow data beside the live view
  std::function<void()> check_swapped = [] {};  // after a rebuild: the view is the rebuilt one
};

// The rebuild finished and took the damage with it; nothing of the shadow is left.
void ExpectRebuilt(Stack& s, RebuildTarget& t) {
  std::string status_text, out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &status_text)) << status_text;
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
  EXPECT_FALSE(t.has_ghost());
  EXPECT_EQ(t.leftovers(), 0u);
  t.check_swapped();
  EXPECT_EQ(s.db->Scalar("SELECT COUNT(*) FROM sluice_offsets WHERE sink='view__rebuild'"), 0);
  EXPECT_EQ(SinkTotal(StatusJson(s.path), "view", "dead_lettered"), 0u);
}

// Damage, then a rebuild while commands flow: it shows its progress, swaps
// the fresh view in, and the view equals main storage afterwards.
void RebuildWhileCommandsFlow(Stack& s, RebuildTarget& t) {
  EXPECT_EQ(MixedLoad(s.cfg.port, 4000, 300, 4, 1), 4000);
  std::string status_text, out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &status_text)) << status_text;
  t.plant_ghost();
  ASSERT_TRUE(t.has_ghost());
  ASSERT_EQ(VerifyViews(s.path, &out), 1) << out;
  EXPECT_NE(out.find("ghost"), std::string::npos) << out;

  ASSERT_NO_FATAL_FAILURE(RebuildUnderLoad(s, "view", 300, 2));
  ExpectRebuilt(s, t);
}

// The process dies between the replay and the switch (failpoint): the
// shadow is left behind, the live view goes on being served and updated,
// and the next rebuild replaces the leftover and succeeds.
void AbandonedRebuildThenAnotherOne(Stack& s, RebuildTarget& t) {
  EXPECT_EQ(MixedLoad(s.cfg.port, 2000, 200, 4, 1), 2000);
  std::string status_text, out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &status_text)) << status_text;
  t.plant_ghost();

  EXPECT_EQ(s.serve->Terminate(), 0);
  ::setenv("SLUICE_FAILPOINTS", "admin.rebuild.before_switch=crash", 1);
  Serve(s);
  ::unsetenv("SLUICE_FAILPOINTS");
  EXPECT_EQ(Sluice({"rebuild", "--config", s.path, "--sink", "view"}, &out), 1) << out;
  EXPECT_NE(out.find("lost the process"), std::string::npos) << out;
  EXPECT_EQ(s.serve->Terminate(), 128 + SIGKILL) << "the failpoint should have killed it";
  EXPECT_GT(t.leftovers(), 0u) << "the replay should have written the shadow";

  // The live view is untouched (the ghost is still there) and keeps up.
  Serve(s);
  EXPECT_EQ(MixedLoad(s.cfg.port, 1000, 200, 4, 2), 1000);
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &status_text)) << status_text;
  EXPECT_TRUE(t.has_ghost());
  EXPECT_EQ(VerifyViews(s.path, &out), 1) << out;
  EXPECT_NE(out.find("entities checked, 1 differences"), std::string::npos) << out;
  EXPECT_NE(out.find("ghost"), std::string::npos) << out;

  ASSERT_EQ(Sluice({"rebuild", "--config", s.path, "--sink", "view"}, &out), 0) << out;
  ExpectRebuilt(s, t);
}

// The swap fails while both runners are paused (failpoint `error`): the
// command says so, the process carries on, the live sink is resumed and
// keeps the view equal to main storage.
void FailedRebuildLeavesTheLiveViewRunning(Stack& s) {
  EXPECT_EQ(s.serve->Terminate(), 0);
  ::setenv("SLUICE_FAILPOINTS", "admin.rebuild.promote=error", 1);
  Serve(s);
  ::unsetenv("SLUICE_FAILPOINTS");
  EXPECT_EQ(MixedLoad(s.cfg.port, 1000, 100, 4, 1), 1000);
  std::string status_text, out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &status_text)) << status_text;
  EXPECT_EQ(Sluice({"rebuild", "--config", s.path, "--sink", "view"}, &out), 1) << out;
  EXPECT_NE(out.find("failed: failpoint admin.rebuild.promote (the live view is still served)"),
            std::string::npos)
      << out;
  ASSERT_TRUE(s.serve->running());
  HttpClient admin(s.admin_port);
  const HttpReply status = admin.Get("/v1/status", AdminAuth());
  ASSERT_EQ(status.status, 200) << status.body;
  const Json parsed = Json::parse(status.body);
  const Json& view = SinkStatus(parsed, "view");
  EXPECT_FALSE(view["paused"].get<bool>()) << status.body;
  EXPECT_EQ(view["rebuild"]["phase"], "failed") << status.body;
  EXPECT_EQ(MixedLoad(s.cfg.port, 500, 100, 4, 2), 500);
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &status_text)) << status_text;
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
  EXPECT_EQ(s.serve->Terminate(), 0);
}

RebuildTarget ElasticsearchTarget() {
  struct State {
    std::string index;
    IndexDeleter deleter;
  };
  auto st = std::make_shared<State>();
  RebuildTarget t;
  t.sinks_yaml = [st](const std::string& prefix) {
    st->index = prefix + "_account";
    st->deleter.Set(st->index);
    return "  - name: view\n    type: elasticsearch\n    entity: account\n"
           "    url: http://127.0.0.1:" + std::to_string(OpenSearchPort()) + "\n"
           "    index: \"" + st->index + "\"\n    request_timeout: 10s\n";
  };
  t.plant_ghost = [st] {
    HttpClient c(OpenSearchPort());
    EXPECT_EQ(c.Post("/" + st->index + "/_doc/ghost?refresh=true", R"({"owner":"nobody"})").status, 201);
  };
  t.has_ghost = [st] { return HttpClient(OpenSearchPort()).Get("/" + st->index + "/_doc/ghost").status == 200; };
  // Indices "<index>__rebuild_*" that the alias does not point at.
  t.leftovers = [st] {
    const HttpReply r = HttpClient(OpenSearchPort()).Get("/" + st->index + "__rebuild_*/_alias");
    EXPECT_EQ(r.status, 200) << r.body;
    const Json indices = Json::parse(r.body, nullptr, false);
    size_t n = 0;
    for (const auto& [name, aliases] : indices.items()) n += aliases["aliases"].contains(st->index) ? 0 : 1;
    return n;
  };
  // The configured name is now an alias of exactly one rebuilt index.
  t.check_swapped = [st] {
    const HttpReply r = HttpClient(OpenSearchPort()).Get("/_alias/" + st->index);
    ASSERT_EQ(r.status, 200) << r.body;
    const Json j = Json::parse(r.body, nullptr, false);
    ASSERT_EQ(j.size(), 1u) << r.body;
    EXPECT_EQ(j.begin().key().rfind(st->index + "__rebuild_", 0), 0u) << r.body;
  };
  return t;
}

RebuildTarget RedisTarget() {
  struct State {
    std::string prefix;
    ~State() {
      // A key outside the template's pattern, which the rebuild must leave alone.
      if (!prefix.empty()) RedisClient(RedisPort()).Run({"DEL", "other:" + prefix});
    }
  };
  auto st = std::make_shared<State>();
  RebuildTarget t;
  t.sinks_yaml = [st](const std::string& prefix) {
    st->prefix = prefix;
    return RedisSinkYaml("view", prefix);
  };
  t.plant_ghost = [st] {
    RedisClient redis(RedisPort());
    EXPECT_TRUE(redis.Run({"SET", st->prefix + ":ghost", R"({"_version":1,"owner":"nobody"})"}).has_value());
    EXPECT_TRUE(redis.Run({"SET", "other:" + st->prefix, "not the view's"}).has_value());
  };
  t.has_ghost = [st] { return RedisClient(RedisPort()).Get(st->prefix + ":ghost").has_value(); };
  t.leftovers = [st] { return RedisClient(RedisPort()).Dump("__rebuild:" + st->prefix + ":*").size(); };
  t.check_swapped = [st] { EXPECT_EQ(RedisClient(RedisPort()).Get("other:" + st->prefix), "not the view's"); };
  return t;
}

RebuildTarget JsonlTarget() {
  struct State {
    std::string file;
    ~State() {
      std::error_code ec;
      std::filesystem::remove(file, ec);
      std::filesystem::remove(file + ".rebuild", ec);
    }
  };
  auto st = std::make_shared<State>();
  RebuildTarget t;
  t.sinks_yaml = [st](const std::string& prefix) {
    st->file = (std::filesystem::temp_directory_path() / (prefix + ".jsonl")).string();
    return "  - name: view\n    type: jsonl\n    entity: account\n    path: " + st->file + "\n    fsync: false\n";
  };
  t.extra_yaml = std::string("plugins:\n  - ") + JSONL_PLUGIN + "\n";
  t.plant_ghost = [st] {
    std::ofstream(st->file, std::ios::app)
        << R"({"id":"ghost","version":1,"deleted":false,"event_id":0,"state":{}})" << "\n";
  };
  t.has_ghost = [st] {
    std::ifstream in(st->file);
    for (std::string line; std::getline(in, line);) {
      if (line.find(R"("id":"ghost")") != std::string::npos) return true;
    }
    return false;
  };
  t.leftovers = [st] { return static_cast<size_t>(std::filesystem::exists(st->file + ".rebuild") ? 1 : 0); };
  return t;
}

// One stack per test with a sink "view" of the parameter's type.
class AdminRebuild : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_MYSQL();
    const std::string& type = GetParam();
    if (type == "elasticsearch") {
      SLUICE_REQUIRE_OPENSEARCH();
      target_ = ElasticsearchTarget();
    } else if (type == "redis") {
      SLUICE_REQUIRE_REDIS();
      target_ = RedisTarget();
    } else {
      target_ = JsonlTarget();
    }
    stack_ = MakeStackWith("rebuild_" + type, 4, target_.sinks_yaml, target_.extra_yaml);
  }

  RebuildTarget target_;
  std::unique_ptr<Stack> stack_;  // stopped before the target's state cleans up
};

TEST_P(AdminRebuild, SwapsInAFreshViewWhileCommandsFlow) { RebuildWhileCommandsFlow(*stack_, target_); }

TEST_P(AdminRebuild, AbandonedAttemptLeavesTheViewServedAndTheNextOneSucceeds) {
  AbandonedRebuildThenAnotherOne(*stack_, target_);
}

TEST_P(AdminRebuild, FailedSwapLeavesTheLiveSinkRunning) { FailedRebuildLeavesTheLiveViewRunning(*stack_); }

INSTANTIATE_TEST_SUITE_P(Sinks, AdminRebuild, ::testing::Values("elasticsearch", "redis", "jsonl"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(Admin, KafkaSinksAreRefusedForRebuildWithWhatToDoInstead) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStackWith("rebuild_kafka", 2, [](const std::string& prefix) {
    const char* brokers = ::getenv("SLUICE_TEST_KAFKA_BROKERS");
    return "  - name: feed\n    type: kafka\n    entity: account\n    brokers: \"" +
           std::string(brokers != nullptr ? brokers : "127.0.0.1:19092") + "\"\n    topic: " + prefix + "\n";
  });
  std::string out;
  EXPECT_EQ(Sluice({"rebuild", "--config", s->path, "--sink", "feed"}, &out), 1) << out;
  EXPECT_NE(out.find("cannot be rebuilt: a kafka topic is a log that consumers replay"), std::string::npos) << out;
  EXPECT_NE(out.find("a sink with a new name and topic"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::testing
