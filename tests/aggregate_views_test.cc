// Aggregate views against real MariaDB (issue 20, items 3 and 6a, 6c): the
// operations of a batch and the view's offsets commit in one transaction on
// the view's server, so killing the engine with SIGKILL at any moment
// neither loses nor double-counts an event.
//   (a) "total balance and count per owner" (owners change, entities are
//       deleted and created again) and "events per minute per command"
//       equal the same aggregates computed from the event tables, to the
//       cent, after a load with the engine killed repeatedly
//   (b) "orders per customer", fed by two entity types (order and
//       customer), is exact after a kill/restart load
//   (c) moving the engine's offsets back to 0 re-delivers every event and
//       changes nothing: the view's own offsets make them stale
//   (d) a changed definition (a new column and new code for an aggregate
//       view; a new column for a MySQL point view) is rebuilt into a correct
//       view while commands flow
//   (e) the sink alone: a live table whose column types or key differ from
//       the declared ones makes it wait; decimal sums are exact, integer
//       sums are refused rather than wrapped beyond the column, and a batch
//       larger than one statement's budget is written whole
// The default run is small (CI); `scripts/test -L soak` runs (a) with
// 200,000 commands over 10,000 accounts and 20 kills.
#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "connectors/aggregate/aggregate_sink.h"
#include "connectors/sink.h"
#include "tests/support/config_support.h"
#include "tests/support/owner_views.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using connectors::ChangeEvent;

#ifdef SLUICE_SOAK
constexpr int kCommands = 200000, kAccounts = 10000, kKills = 20;
#else
constexpr int kCommands = 20000, kAccounts = 1000, kKills = 5;
#endif

struct Stack {
  std::unique_ptr<TestDatabase> db;
  ScratchDir dir;
  SluiceConfig cfg;
  std::string path;
};

std::unique_ptr<Stack> MakeStack(const std::string& name, const std::map<std::string, uint32_t>& entities,
                                 const std::string& sinks) {
  auto s = std::make_unique<Stack>();
  s->db = std::make_unique<TestDatabase>(name);
  s->cfg.database = s->db->name();
  s->cfg.entities = entities;
  s->cfg.port = FreePort();
  s->cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n  retry_backoff_max: 500ms\n"
                      "sinks:\n" + sinks;
  s->path = s->cfg.Write();
  return s;
}

std::string PerOwnerSink(const Stack& s) {
  const std::string code = s.dir.Write("per_owner.js", kPerOwnerJs).string();
  return "  - name: per_owner\n    type: aggregate\n    entity: account\n    code: " + code + "\n" + kPerOwnerTables;
}

using Rows = std::vector<sql::Row>;

TEST(AggregateViews, PerOwnerAndPerMinuteAreExactAfterTheEngineIsKilledRepeatedly) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStack("aggkill", {{"account", 8}}, "");
  s->cfg.extra_yaml += PerOwnerSink(*s);
  s->path = s->cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s->path}, &out), 0) << out;
  auto writer = StartSluice("writer", s->path, s->cfg.port);
  auto engine = StartSluice("sync", s->path, s->cfg.port);
  std::atomic<bool> done{false};
  std::thread load([&] {
    OwnerLoad(s->cfg.port, kCommands, kAccounts, 1);
    done = true;
  });
  std::mt19937 rng(5);
  for (int kill = 0; kill < kKills; ++kill) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 700));
    engine->Kill();  // SIGKILL at a random moment
    engine = StartSluice("sync", s->path, s->cfg.port);
  }
  load.join();
  ASSERT_TRUE(WaitCaughtUp(s->path, 300s, &out)) << out;
  EXPECT_EQ(engine->Terminate(), 0);
  const int64_t events = ExpectDenseEventIds(*s->db);
  ASSERT_GT(events, kCommands / 2);

  ExpectPerOwnerExact(*s->db, 8, events);
  // The view's own offsets reached every partition's head.
  EXPECT_EQ(s->db->Scalar("SELECT SUM(event_id) FROM sluice_vo_per_owner"), events);
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM sluice_dead_letters"), 0);
  // `sluice verify` says it does not compare an aggregate view, and passes.
  EXPECT_EQ(VerifyViews(s->path, &out), 0) << out;
  EXPECT_NE(out.find("per_owner: not compared: an aggregate view"), std::string::npos) << out;
}

#ifndef SLUICE_SOAK
TEST(AggregateViews, OrdersPerCustomerFromTwoEntityTypesIsExactAfterKills) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStack("aggtwo", {{"order", 4}, {"customer", 2}}, "");
  // One file for both types: it looks at event.type.
  const std::string code = s->dir.Write("per_customer.js", R"JS(
function aggregate(event) {
  if (event.type === 'customer') {
    return [{table: 'customer_orders', key: {customer: event.id},
             set: {name: event.state ? event.state.name : null}}];
  }
  var ops = [];
  if (event.before) {
    ops.push({table: 'customer_orders', key: {customer: event.before.customer},
              add: {orders: -1, amount: -event.before.amount}});
  }
  if (event.state) {
    ops.push({table: 'customer_orders', key: {customer: event.state.customer},
              add: {orders: 1, amount: event.state.amount}});
  }
  return ops;
}
)JS").string();
  const std::string table =
      "    tables: {customer_orders: {key: {customer: VARCHAR(32)}, "
      "columns: {name: VARCHAR(64), orders: BIGINT, amount: 'DECIMAL(20,2)'}}}\n";
  s->cfg.extra_yaml += "  - name: per_customer_orders\n    type: aggregate\n    entity: order\n    code: " + code +
                       "\n" + table + "  - name: per_customer_names\n    type: aggregate\n    entity: customer\n"
                       "    code: " + code + "\n" + table;
  s->path = s->cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s->path}, &out), 0) << out;
  auto writer = StartSluice("writer", s->path, s->cfg.port);
  auto engine = StartSluice("sync", s->path, s->cfg.port);
  std::thread load([&] {
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; ++t) {
      ts.emplace_back([&, t] {
        HttpClient c(s->cfg.port);
        std::mt19937 rng(40 + t);
        for (int i = t; i < 8000; i += 8) {
          if (rng() % 5 == 0) {
            const std::string body = R"({"name":"n)" + std::to_string(rng() % 1000) + R"("})";
            c.Post("/v1/entities/customer/c" + std::to_string(rng() % 40) + "/commands/patch", body,
                   {{"Idempotency-Key", "oc" + std::to_string(i)}});
          } else {
            const int dice = static_cast<int>(rng() % 10);
            const std::string cmd = dice < 8 ? "patch" : "delete";
            const std::string body = R"({"customer":"c)" + std::to_string(rng() % 40) + R"(","amount":)" +
                                     std::to_string(rng() % 100000) + "." + std::to_string(10 + rng() % 90) + "}";
            c.Post("/v1/entities/order/r" + std::to_string(rng() % 600) + "/commands/" + cmd, body,
                   {{"Idempotency-Key", "oc" + std::to_string(i)}});
          }
        }
      });
    }
    for (auto& t : ts) t.join();
  });
  for (int kill = 0; kill < 3; ++kill) {
    std::this_thread::sleep_for(700ms);
    engine->Kill();
    engine = StartSluice("sync", s->path, s->cfg.port);
  }
  load.join();
  ASSERT_TRUE(WaitCaughtUp(s->path, 180s, &out)) << out;
  EXPECT_EQ(engine->Terminate(), 0);
  const Rows want = s->db->Query(
      "SELECT JSON_VALUE(state, '$.customer') c, CAST(COUNT(*) AS CHAR), "
      "CAST(SUM(CAST(JSON_VALUE(state, '$.amount') AS DECIMAL(20,2))) AS CHAR) FROM " + LatestLive("order", 4) +
      " l GROUP BY c ORDER BY c");
  const Rows got = s->db->Query(
      "SELECT customer, CAST(orders AS CHAR), CAST(amount AS CHAR) FROM customer_orders WHERE orders <> 0 ORDER BY "
      "customer");
  ASSERT_GT(want.size(), 10u);
  EXPECT_EQ(got, want);
  const Rows want_names = s->db->Query("SELECT entity_id, JSON_VALUE(state, '$.name') FROM " +
                                       LatestLive("customer", 2) + " l ORDER BY entity_id");
  const Rows got_names = s->db->Query("SELECT customer, name FROM customer_orders WHERE name IS NOT NULL ORDER BY customer");
  ASSERT_GT(want_names.size(), 10u);
  EXPECT_EQ(got_names, want_names);
}

TEST(AggregateViews, MovingTheEnginesOffsetsBackDoesNotCountAnythingTwice) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStack("aggrewind", {{"account", 4}}, "");
  s->cfg.extra_yaml += PerOwnerSink(*s);
  s->path = s->cfg.Write();
  auto serve = StartSluice("serve", s->path, s->cfg.port);
  OwnerLoad(s->cfg.port, 5000, 300, 9);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);
  const Rows before = s->db->Query("SELECT * FROM owner_balance ORDER BY owner");
  const Rows minutes = s->db->Query("SELECT * FROM events_per_minute ORDER BY minute, command");
  ASSERT_TRUE(s->db->conn().Execute("UPDATE sluice_offsets SET event_id=0").ok());
  serve = StartSluice("serve", s->path, s->cfg.port);
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);
  EXPECT_EQ(s->db->Query("SELECT * FROM owner_balance ORDER BY owner"), before);
  EXPECT_EQ(s->db->Query("SELECT * FROM events_per_minute ORDER BY minute, command"), minutes);
  const auto st = StatusJson(s->path);
  EXPECT_GE(SinkTotal(st, "per_owner", "stale"), static_cast<uint64_t>(ExpectDenseEventIds(*s->db)));
}

// The admin section `sluice rebuild` needs, its token from the environment.
std::string AdminYaml() {
  ::setenv("SLUICE_TEST_ADMIN_TOKEN", ("tok-" + UniquePrefix("agg")).c_str(), 1);
  return "admin:\n  listen: 127.0.0.1:" + std::to_string(FreePort()) +
         "\n  token: \"${env:SLUICE_TEST_ADMIN_TOKEN}\"\n";
}

// Runs `sluice rebuild --sink sink` while OwnerLoad sends commands.
void RebuildUnderLoad(const Stack& s, const std::string& sink) {
  std::atomic<bool> stop{false};
  std::thread load([&] { OwnerLoad(s.cfg.port, 1000000, 300, 77, &stop); });
  std::string out;
  const int rc = RunSluice({"rebuild", "--config", s.path, "--sink", sink}, &out);
  stop = true;
  load.join();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("the rebuilt view is live"), std::string::npos) << out;
}

TEST(ViewDefinitions, AnAggregateViewWithANewColumnAndNewCodeIsRebuiltWhileCommandsFlow) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStack("aggdef", {{"account", 4}}, "");
  const std::string admin = AdminYaml();
  const std::string sinks = s->cfg.extra_yaml;
  s->cfg.extra_yaml = sinks + PerOwnerSink(*s) + admin;
  s->path = s->cfg.Write();
  auto serve = StartSluice("serve", s->path, s->cfg.port);
  OwnerLoad(s->cfg.port, 3000, 300, 21);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);

  // Version 2 of the view: per owner also the number of events that left an
  // account with that owner, from new code.
  const std::string code = s->dir.Write("per_owner_v2.js", R"JS(
function aggregate(event) {
  var ops = [];
  if (event.before) {
    ops.push({table: 'owner_balance', key: {owner: event.before.owner},
              add: {total: -event.before.balance, accounts: -1}});
  }
  if (event.state) {
    ops.push({table: 'owner_balance', key: {owner: event.state.owner},
              add: {total: event.state.balance, accounts: 1, touched: 1}});
  }
  return ops;
}
)JS").string();
  s->cfg.extra_yaml = sinks + "  - name: per_owner\n    type: aggregate\n    entity: account\n    code: " + code +
                      "\n    tables:\n      owner_balance: {key: {owner: VARCHAR(32)}, "
                      "columns: {total: 'DECIMAL(20,2)', accounts: BIGINT, touched: BIGINT}}\n" + admin;
  s->path = s->cfg.Write();
  serve = StartSluice("serve", s->path, s->cfg.port);
  // The live view waits for the rebuild (its table lacks `touched`), saying so.
  OwnerLoad(s->cfg.port, 200, 300, 24);
  bool waiting = false;
  for (int i = 0; i < 100 && !waiting; ++i) {
    const nlohmann::json status = StatusJson(s->path);
    for (const auto& sink : status["sinks"]) {
      if (sink["name"] == "per_owner" && sink["partitions"][0]["state"] == "backoff" &&
          sink.dump().find("sluice rebuild --sink per_owner") != std::string::npos) {
        waiting = true;
      }
    }
    if (!waiting) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(waiting) << StatusJson(s->path).dump();
  ASSERT_NO_FATAL_FAILURE(RebuildUnderLoad(*s, "per_owner"));
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);
  const Rows want = s->db->Query(
      "SELECT JSON_VALUE(state, '$.owner') o, CAST(SUM(CAST(JSON_VALUE(state, '$.balance') AS DECIMAL(20,2))) AS "
      "CHAR), CAST(COUNT(*) AS CHAR) FROM " + LatestLive("account", 4) + " l GROUP BY o ORDER BY o");
  const Rows got = s->db->Query(
      "SELECT owner, CAST(total AS CHAR), CAST(accounts AS CHAR) FROM owner_balance WHERE accounts <> 0 OR total <> 0 "
      "ORDER BY owner");
  ASSERT_GT(want.size(), 10u);
  EXPECT_EQ(got, want);
  const Rows want_touched = s->db->Query(
      "SELECT JSON_VALUE(state, '$.owner') o, CAST(COUNT(*) AS CHAR) FROM " +
      AllEvents("account", 4, "state, deleted") + " x WHERE deleted=0 GROUP BY o ORDER BY o");
  const Rows got_touched =
      s->db->Query("SELECT owner, CAST(touched AS CHAR) FROM owner_balance WHERE touched > 0 ORDER BY owner");
  EXPECT_EQ(got_touched, want_touched);
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM sluice_dead_letters"), 0);
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=DATABASE() AND "
                          "TABLE_NAME LIKE '%\\_\\_rebuild' OR TABLE_NAME LIKE '%\\_\\_old'"),
            0);
}

TEST(ViewDefinitions, AMysqlViewGainsAColumnAndARebuildFillsItWhileCommandsFlow) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStack("mysqldef", {{"account", 4}}, "");
  const std::string admin = AdminYaml();
  const std::string sinks = s->cfg.extra_yaml;
  const std::string view = "  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n";
  s->cfg.extra_yaml = sinks + view + "    columns: {owner: /owner}\n" + admin;
  s->path = s->cfg.Write();
  auto serve = StartSluice("serve", s->path, s->cfg.port);
  OwnerLoad(s->cfg.port, 3000, 300, 22);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);
  // The definition gains a column: the live view adds it and goes on.
  s->cfg.extra_yaml = sinks + view + "    columns: {owner: /owner, balance: {pointer: /balance, type: 'DECIMAL(20,2)'}}\n" + admin;
  s->path = s->cfg.Write();
  serve = StartSluice("serve", s->path, s->cfg.port);
  OwnerLoad(s->cfg.port, 200, 300, 23);  // the sink opens with the first events
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;
  EXPECT_GT(s->db->Scalar("SELECT COUNT(*) FROM account_view WHERE _deleted=0 AND balance IS NOT NULL"), 0);
  EXPECT_GT(s->db->Scalar("SELECT COUNT(*) FROM account_view WHERE _deleted=0 AND balance IS NULL"), 0)
      << "rows written before the column existed hold NULL until the rebuild";
  ASSERT_NO_FATAL_FAILURE(RebuildUnderLoad(*s, "table"));
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &out)) << out;
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM account_view WHERE _deleted=0 AND balance IS NULL"), 0);
  EXPECT_EQ(VerifyViews(s->path, &out), 0) << out;
  EXPECT_EQ(serve->Terminate(), 0);
}

TEST(ViewDefinitions, RewindOfAnAggregateViewRebuildsItAndSaysSo) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStack("aggrewind2", {{"account", 2}}, "");
  s->cfg.extra_yaml += PerOwnerSink(*s) + AdminYaml();
  s->path = s->cfg.Write();
  auto serve = StartSluice("serve", s->path, s->cfg.port);
  OwnerLoad(s->cfg.port, 1000, 100, 31);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;
  const Rows before = s->db->Query("SELECT * FROM owner_balance ORDER BY owner");
  // Damage a rewind could never repair: the rebuild recomputes it.
  ASSERT_TRUE(s->db->conn().Execute("UPDATE owner_balance SET total = total + 1").ok());
  ASSERT_EQ(RunSluice({"rewind", "--config", s->path, "--sink", "per_owner", "--to", "beginning"}, &out), 0) << out;
  EXPECT_NE(out.find("is an aggregate view, kept exactly once: a rewind would re-apply nothing, so it is rebuilt"),
            std::string::npos) << out;
  EXPECT_NE(out.find("the rebuilt view is live"), std::string::npos) << out;
  EXPECT_EQ(s->db->Query("SELECT * FROM owner_balance ORDER BY owner"), before);
  EXPECT_EQ(RunSluice({"rewind", "--config", s->path, "--sink", "per_owner", "--to", "0", "--offline"}, &out), 1);
  EXPECT_EQ(serve->Terminate(), 0);
}

TEST(AggregateViews, AViewThatLostItsOffsetsStopsInsteadOfSkippingEvents) {
  SLUICE_REQUIRE_MYSQL();
  auto s = MakeStack("agglost", {{"account", 2}}, "");
  s->cfg.extra_yaml += PerOwnerSink(*s);
  s->path = s->cfg.Write();
  auto serve = StartSluice("serve", s->path, s->cfg.port);
  OwnerLoad(s->cfg.port, 500, 50, 41);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0);
  // The view's own offsets are gone (dropped by hand); the engine's remain.
  ASSERT_TRUE(s->db->conn().Execute("DROP TABLE sluice_vo_per_owner").ok());
  const Rows before = s->db->Query("SELECT * FROM owner_balance ORDER BY owner");
  serve = StartSluice("serve", s->path, s->cfg.port);
  OwnerLoad(s->cfg.port, 50, 50, 42);
  bool stopped = false;
  for (int i = 0; i < 100 && !stopped; ++i) {
    const nlohmann::json status = StatusJson(s->path);
    for (const auto& sink : status["sinks"]) {
      for (const auto& p : sink["partitions"]) {
        if (p["state"] == "stopped" && p.dump().find("the view's offsets lost events") != std::string::npos) {
          stopped = true;
        }
      }
    }
    if (!stopped) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(stopped) << StatusJson(s->path).dump();
  // Nothing was applied past the gap.
  EXPECT_EQ(s->db->Query("SELECT * FROM owner_balance ORDER BY owner"), before);
  EXPECT_EQ(serve->Terminate(), 0);
}

// The sink alone (no engine) on the test server: its code returns the
// operations each event's state carries ({"ops": [...]}), so a test says
// exactly what each event does.
struct DirectSink {
  std::unique_ptr<Stack> stack;
  std::unique_ptr<connectors::Sink> sink;
};

std::unique_ptr<DirectSink> MakeDirectSink(const std::string& name) {
  auto d = std::make_unique<DirectSink>();
  d->stack = MakeStack(name, {{"account", 1}}, "");
  const std::string code = d->stack->dir.Write("ops.js", "function aggregate(e) { return e.state.ops; }\n").string();
  d->stack->cfg.extra_yaml += "  - name: agg\n    type: aggregate\n    entity: account\n    code: " + code + "\n"
                              "    tables:\n"
                              "      money: {key: {id: VARCHAR(32)}, columns: {amount: 'DECIMAL(20,2)', n: BIGINT, "
                              "body: TEXT}}\n";
  d->stack->path = d->stack->cfg.Write();
  auto cfg = LoadConfig(d->stack->path);
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return nullptr;
  auto sink = connectors::aggregate::MakeAggregateSink(cfg->sinks.back(), *cfg);
  EXPECT_TRUE(sink.ok()) << sink.status().ToString();
  if (!sink.ok()) return nullptr;
  d->sink = std::move(sink).value();
  return d;
}

// Event `id` of partition 0, whose code returns `ops` (JSON text).
ChangeEvent OpsEvent(uint64_t id, const std::string& ops) {
  ChangeEvent e;
  e.entity_type = "account";
  e.event_id = id;
  e.entity_id = "a" + std::to_string(id);
  e.version = 1;
  e.state = R"({"ops":)" + ops + "}";
  e.command_name = "c";
  return e;
}

std::string MoneyAdd(const std::string& id, const std::string& column, const std::string& value) {
  return R"([{"table":"money","key":{"id":")" + id + R"("},"add":{")" + column + R"(":)" + value + "}}]";
}

// Issue 21, item 1: run by an engine, the view writes a partition only while
// the engine's lease of it is the one it was given (Sink::TakeOver). A
// former owner (paused past its lease, then resumed) writes nothing once
// another engine took the partition over.
TEST(AggregateSinkOnMariaDB, AFormerOwnersTransactionWritesNothingOnceItsLeaseMoved) {
  SLUICE_REQUIRE_MYSQL();
  auto d = MakeDirectSink("aggfence");
  ASSERT_TRUE(d);
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", d->stack->path}, &out), 0) << out;
  TestDatabase& db = *d->stack->db;
  const auto lease = [&](const std::string& owner, int token) {
    ASSERT_TRUE(db.conn()
                    .Execute("REPLACE INTO sluice_leases (scope, entity_type, partition_id, owner, token, expires_at) "
                             "VALUES ('sink/agg', 'account', 0, '" + owner + "', " + std::to_string(token) +
                             ", NOW(6) + INTERVAL 1 HOUR)")
                    .ok());
  };
  lease("e1", 1);
  ASSERT_TRUE(d->sink->Open().ok());
  ASSERT_TRUE(d->sink->TakeOver({"sink/agg", "e1", {{0, 1}}}).ok());
  connectors::ApplyResult r = d->sink->Apply(std::vector<ChangeEvent>{OpsEvent(1, MoneyAdd("x", "n", "1"))});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  lease("e2", 2);  // e2 took partition 0 over
  r = d->sink->Apply(std::vector<ChangeEvent>{OpsEvent(2, MoneyAdd("x", "n", "10"))});
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  EXPECT_NE(r.status.message().find("partition 0's lease is not this engine's any more (held by 'e2' under token 2, "
                                    "this engine's token is 1): nothing written"),
            std::string::npos)
      << r.status.message();
  EXPECT_EQ(db.Scalar("SELECT n FROM money WHERE id = 'x'"), 1);
  EXPECT_EQ(db.Scalar("SELECT event_id FROM sluice_vo_agg WHERE partition_id = 0"), 1);
  // e2's sink, with e2's token, applies it.
  auto cfg = LoadConfig(d->stack->path);
  ASSERT_TRUE(cfg.ok());
  auto next = connectors::aggregate::MakeAggregateSink(cfg->sinks.back(), *cfg);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_TRUE((*next)->Open().ok());
  ASSERT_TRUE((*next)->TakeOver({"sink/agg", "e2", {{0, 2}}}).ok());
  r = (*next)->Apply(std::vector<ChangeEvent>{OpsEvent(2, MoneyAdd("x", "n", "10"))});
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(db.Scalar("SELECT n FROM money WHERE id = 'x'"), 11);
  (*next)->Close();
  d->sink->Close();
}

TEST(AggregateSinkOnMariaDB, ATableWhoseColumnTypesOrKeyDifferFromTheDeclaredOnesMakesTheViewWait) {
  SLUICE_REQUIRE_MYSQL();
  auto d = MakeDirectSink("aggtypes");
  ASSERT_TRUE(d);
  // The tables it made match the declaration (BIGINT is bigint(20) there).
  ASSERT_TRUE(d->sink->Open().ok());
  d->sink->Close();
  ASSERT_TRUE(d->stack->db->conn().Execute("ALTER TABLE money MODIFY amount DECIMAL(18,2) NULL").ok());
  Status st = d->sink->Open();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("table money has column amount as decimal(18,2), declared DECIMAL(20,2)"),
            std::string::npos) << st.message();
  EXPECT_NE(st.message().find("`sluice rebuild --sink agg`"), std::string::npos) << st.message();
  ASSERT_TRUE(d->stack->db->conn().Execute("ALTER TABLE money MODIFY amount DECIMAL(20,2) NULL").ok());
  ASSERT_TRUE(d->sink->Open().ok());
  d->sink->Close();
  ASSERT_TRUE(d->stack->db->conn().Execute("ALTER TABLE money DROP PRIMARY KEY, ADD PRIMARY KEY (id, n)").ok());
  st = d->sink->Open();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("table money has column n in its primary key, declared a plain column"),
            std::string::npos) << st.message();
}

TEST(AggregateSinkOnMariaDB, DecimalSumsAreExactAndAValueTheColumnCannotHoldIsADeadLetter) {
  SLUICE_REQUIRE_MYSQL();
  auto d = MakeDirectSink("aggexact");
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->sink->Open().ok());
  std::vector<ChangeEvent> events;
  // Summed as doubles, these made 10.00 (after MySQL's rounding) and
  // 12345678901230.29: a double holds about 16 significant digits.
  for (uint64_t i = 1; i <= 1000; ++i) {
    events.push_back(OpsEvent(i, R"([{"table":"money","key":{"id":"c"},"add":{"amount":0.01}},
                                     {"table":"money","key":{"id":"x"},"add":{"amount":12345678901.23}}])"));
  }
  events.push_back(OpsEvent(1001, MoneyAdd("x", "amount", "0.001")));
  // 20 significant digits, as a decimal string.
  events.push_back(OpsEvent(1002, MoneyAdd("s", "amount", R"("123456789012345678.91")")));
  events.push_back(OpsEvent(1003, MoneyAdd("s", "amount", "0.09")));
  const connectors::ApplyResult r = d->sink->Apply(events);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_EQ(r.results.size(), events.size());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(r.results[i].outcome, connectors::Outcome::kApplied) << i;
  EXPECT_EQ(r.results[1000].outcome, connectors::Outcome::kRejected);
  EXPECT_NE(r.results[1000].reason.find("is 0.001, which DECIMAL(20,2) cannot hold exactly"), std::string::npos)
      << r.results[1000].reason;
  EXPECT_EQ(r.results[1001].outcome, connectors::Outcome::kApplied) << r.results[1001].reason;
  EXPECT_EQ(r.results[1002].outcome, connectors::Outcome::kApplied) << r.results[1002].reason;
  EXPECT_EQ(d->stack->db->Query("SELECT id, CAST(amount AS CHAR) FROM money ORDER BY id"),
            (Rows{{std::string("c"), std::string("10.00")},
                  {std::string("s"), std::string("123456789012345679.00")},
                  {std::string("x"), std::string("12345678901230.00")}}));
  EXPECT_EQ(d->stack->db->Scalar("SELECT COUNT(*) FROM sluice_vr_agg"), 1);
}

TEST(AggregateSinkOnMariaDB, AnIntegerSumBeyondTheColumnIsRefusedNotWrapped) {
  SLUICE_REQUIRE_MYSQL();
  auto d = MakeDirectSink("aggover");
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->sink->Open().ok());
  // Beyond a double's integers, so as a string; the second add overflows BIGINT.
  const std::vector<ChangeEvent> events = {OpsEvent(1, MoneyAdd("x", "n", R"("9223372036854775807")")),
                                           OpsEvent(2, MoneyAdd("x", "n", "1")),
                                           OpsEvent(3, MoneyAdd("y", "n", "1"))};
  const connectors::ApplyResult r = d->sink->Apply(events);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.results[0].outcome, connectors::Outcome::kApplied) << r.results[0].reason;
  EXPECT_EQ(r.results[1].outcome, connectors::Outcome::kRejected);
  EXPECT_NE(r.results[1].reason.find("out of range"), std::string::npos) << r.results[1].reason;
  EXPECT_EQ(r.results[2].outcome, connectors::Outcome::kApplied) << r.results[2].reason;
  EXPECT_EQ(d->stack->db->Query("SELECT id, CAST(n AS CHAR) FROM money ORDER BY id"),
            (Rows{{std::string("x"), std::string("9223372036854775807")}, {std::string("y"), std::string("1")}}));
}

TEST(AggregateSinkOnMariaDB, ABatchBeyondOneStatementIsWrittenWhole) {
  SLUICE_REQUIRE_MYSQL();
  auto d = MakeDirectSink("aggbig");
  ASSERT_TRUE(d);
  ASSERT_TRUE(d->sink->Open().ok());
  const std::string body(1000, 'b');
  std::vector<ChangeEvent> events;
  for (uint64_t i = 1; i <= 1500; ++i) {  // about 1.5 MB of text: two statements at least
    events.push_back(OpsEvent(i, R"([{"table":"money","key":{"id":"r)" + std::to_string(i) + R"("},"set":{"body":")" +
                                     body + R"("}}])"));
  }
  const connectors::ApplyResult r = d->sink->Apply(events);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  for (const auto& one : r.results) ASSERT_EQ(one.outcome, connectors::Outcome::kApplied) << one.reason;
  EXPECT_EQ(d->stack->db->Scalar("SELECT COUNT(*) FROM money"), 1500);
  EXPECT_EQ(d->stack->db->Scalar("SELECT SUM(LENGTH(body)) FROM money"), 1500 * 1000);
  EXPECT_EQ(d->stack->db->Scalar("SELECT event_id FROM sluice_vo_agg"), 1500);
}
#endif

}  // namespace
}  // namespace sluice::testing
