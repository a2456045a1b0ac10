// JavaScript command handlers end to end, against a real MariaDB
// (docs/handlers.md): the example account rules under 64 concurrent clients,
// idempotent replays, rejections that write nothing, runaway handlers that
// are stopped while their partition carries on, and start-up failing on a
// syntax error with the file and line.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;

// The example rules that ship with sluice (and that the demo uses).
std::string AccountJs() { return std::string(SLUICE_SOURCE_DIR) + "/config/examples/handlers/account.js"; }

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("sluice-js-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path;
}

// SluiceConfig::Write with `handlers:` added to the given entity types.
std::string WriteConfig(const SluiceConfig& cfg, const std::map<std::string, std::string>& handlers) {
  const std::string path = cfg.Write();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  for (const auto& [type, file] : handlers) {
    const std::string from = "  " + type + ": {partitions: " + std::to_string(cfg.entities.at(type)) + "}";
    const size_t at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << yaml;
    if (at == std::string::npos) continue;
    // Whole states in every event: StoredStates reads them back with SQL, an
    // oracle independent of sluice's own reads (which rebuild deltas).
    yaml.replace(at, from.size(),
                 from.substr(0, from.size() - 1) + ", handlers: " + file + ", deltas: {snapshot_every: 1}}");
  }
  std::ofstream(path, std::ios::trunc) << yaml;
  return path;
}

std::unique_ptr<SluiceProcess> StartWriter(const std::string& config_path, uint16_t port) {
  auto p = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", config_path}, port);
  std::string why;
  EXPECT_TRUE(p->Start(&why)) << why;
  return p;
}

// A config of the `account` type alone, on a free port.
SluiceConfig AccountConfig(const TestDatabase& db, uint32_t partitions) {
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", partitions}};
  cfg.port = FreePort();
  return cfg;
}

std::string CommandPath(const std::string& id, const std::string& name) {
  return "/v1/entities/account/" + id + "/commands/" + name;
}

// Every stored event of `id` in partition tables ev_account_p000.. (any partition).
std::vector<Json> StoredStates(TestDatabase& db, const std::string& id, uint32_t partitions) {
  std::vector<Json> states;
  for (uint32_t p = 0; p < partitions; ++p) {
    char table[64];
    std::snprintf(table, sizeof table, "ev_account_p%03u", p);
    for (const auto& row : db.Query(std::string("SELECT state FROM ") + table + " WHERE entity_id='" + id +
                                    "' ORDER BY version")) {
      states.push_back(Json::parse(row.at(0).value_or("null")));
    }
  }
  return states;
}

int64_t EventCount(TestDatabase& db, uint32_t partitions) {
  int64_t n = 0;
  for (uint32_t p = 0; p < partitions; ++p) {
    char table[64];
    std::snprintf(table, sizeof table, "ev_account_p%03u", p);
    n += db.Scalar(std::string("SELECT COUNT(*) FROM ") + table);
  }
  return n;
}

class JsHandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Connect()) {
      if (InCi()) FAIL() << "MariaDB is not reachable (CI=true)";
      GTEST_SKIP() << "MariaDB is not reachable; run scripts/services up";
    }
  }
};

// 64 clients deposit into and withdraw from ONE account at once. The rule
// (no negative balance) must hold in every stored event, and the balance
// must be exactly the sum of the operations that were accepted.
TEST_F(JsHandlersTest, ConcurrentDepositsAndWithdrawalsNeverOverdraw) {
  TestDatabase db("jshot");
  SluiceConfig cfg = AccountConfig(db, 4);
  auto writer = StartWriter(WriteConfig(cfg, {{"account", AccountJs()}}), cfg.port);
  ASSERT_TRUE(writer->running());
  {
    HttpClient c(cfg.port);
    auto r = c.Post(CommandPath("hot", "open"), R"({"owner":"Hot"})", {{"Idempotency-Key", "open"}});
    ASSERT_EQ(r.status, 200) << r.body;
  }

  constexpr int kClients = 64;
  constexpr int kPerClient = 60;
  std::atomic<int64_t> accepted_sum{0};
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> overdrafts{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      HttpClient client(cfg.port);
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int i = 0; i < kPerClient && failures == 0; ++i) {
        // Withdrawals slightly outweigh deposits, so the balance keeps hitting zero.
        const bool deposit = rng() % 100 < 45;
        const int64_t amount = 1 + static_cast<int64_t>(rng() % 50);
        const std::string key = "c" + std::to_string(t) + "-" + std::to_string(i);
        auto r = client.Post(CommandPath("hot", deposit ? "deposit" : "withdraw"),
                             R"({"amount":)" + std::to_string(amount) + "}", {{"Idempotency-Key", key}});
        if (r.status == 200) {
          accepted_sum += deposit ? amount : -amount;
          ++accepted;
          if (Json::parse(r.body)["response"]["balance"].get<int64_t>() < 0) {
            ADD_FAILURE() << "a reply shows a negative balance: " << r.body;
            ++failures;
          }
        } else if (r.status == 422 && !deposit) {
          ++overdrafts;
          if (Json::parse(r.body)["error"]["message"].get<std::string>().rfind("insufficient funds", 0) != 0) {
            ADD_FAILURE() << r.body;
            ++failures;
          }
        } else {
          ADD_FAILURE() << "status " << r.status << " " << r.error << " " << r.body;
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures, 0);
  EXPECT_GT(overdrafts, 0) << "the load never drove the balance to zero; the test proves nothing";
  EXPECT_GT(accepted, kClients * kPerClient / 2);

  const std::vector<Json> states = StoredStates(db, "hot", 4);
  ASSERT_EQ(static_cast<int64_t>(states.size()), 1 + accepted.load());  // open + each accepted command
  for (const Json& s : states) ASSERT_GE(s["balance"].get<int64_t>(), 0) << s.dump();
  EXPECT_EQ(states.back()["balance"].get<int64_t>(), accepted_sum.load());
  HttpClient c(cfg.port);
  auto now = Json::parse(c.Get("/v1/entities/account/hot").body);
  EXPECT_EQ(now["state"]["balance"].get<int64_t>(), accepted_sum.load());
  EXPECT_EQ(now["version"].get<int64_t>(), 1 + accepted.load());
  ExpectDenseVersions(db);
  ExpectDenseEventIds(db);
}

// A JS command retried with its Idempotency-Key gets the stored reply byte
// for byte, from the cache and (after a restart) from storage; the same key
// with another request is refused; a rejected command is evaluated afresh.
TEST_F(JsHandlersTest, CommandsAreIdempotentLikeBuiltins) {
  TestDatabase db("jsidem");
  SluiceConfig cfg = AccountConfig(db, 2);
  const std::string config_path = WriteConfig(cfg, {{"account", AccountJs()}});
  auto writer = StartWriter(config_path, cfg.port);
  ASSERT_TRUE(writer->running());
  HttpClient c(cfg.port);
  ASSERT_EQ(c.Post(CommandPath("ann", "open"), R"({"owner":"Ann"})", {{"Idempotency-Key", "o"}}).status, 200);
  auto first = c.Post(CommandPath("ann", "deposit"), R"({"amount":40})", {{"Idempotency-Key", "d1"}});
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(Json::parse(first.body)["response"], (Json{{"balance", 40}}));
  auto again = c.Post(CommandPath("ann", "deposit"), R"({"amount":40})", {{"Idempotency-Key", "d1"}});
  EXPECT_EQ(again.status, 200);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  auto reused = c.Post(CommandPath("ann", "deposit"), R"({"amount":41})", {{"Idempotency-Key", "d1"}});
  EXPECT_EQ(reused.status, 409) << reused.body;

  // Rejected: nothing stored, so the same key is evaluated afresh later.
  auto refused = c.Post(CommandPath("ann", "withdraw"), R"({"amount":100})", {{"Idempotency-Key", "w1"}});
  EXPECT_EQ(refused.status, 422) << refused.body;
  ASSERT_EQ(c.Post(CommandPath("ann", "deposit"), R"({"amount":60})", {{"Idempotency-Key", "d2"}}).status, 200);
  auto later = c.Post(CommandPath("ann", "withdraw"), R"({"amount":100})", {{"Idempotency-Key", "w1"}});
  ASSERT_EQ(later.status, 200) << later.body;
  EXPECT_EQ(Json::parse(later.body)["response"], (Json{{"balance", 0}}));
  EXPECT_EQ(EventCount(db, 2), 4);

  // After a restart the caches are empty: the replay comes from storage.
  EXPECT_EQ(writer->Terminate(), 0);
  writer = StartWriter(config_path, cfg.port);
  ASSERT_TRUE(writer->running());
  HttpClient c2(cfg.port);
  auto replay = c2.Post(CommandPath("ann", "deposit"), R"({"amount":40})", {{"Idempotency-Key", "d1"}});
  EXPECT_EQ(replay.status, 200);
  EXPECT_EQ(replay.body, first.body);
  EXPECT_EQ(replay.headers["idempotent-replayed"], "true");
  EXPECT_EQ(EventCount(db, 2), 4);
}

// Throwing rejects with 422 and the message, bad input to a rule too; a
// command the file does not define is 404 and lists the ones it does.
TEST_F(JsHandlersTest, ThrowingHandlerWritesNothing) {
  TestDatabase db("jsthrow");
  SluiceConfig cfg = AccountConfig(db, 1);
  auto writer = StartWriter(WriteConfig(cfg, {{"account", AccountJs()}}), cfg.port);
  ASSERT_TRUE(writer->running());
  HttpClient c(cfg.port);
  auto not_open = c.Post(CommandPath("bo", "deposit"), R"({"amount":5})");
  EXPECT_EQ(not_open.status, 422);
  EXPECT_EQ(Json::parse(not_open.body)["error"]["code"], "rejected");
  EXPECT_EQ(Json::parse(not_open.body)["error"]["message"], "the account is not open");
  ASSERT_EQ(c.Post(CommandPath("bo", "open"), R"({"owner":"Bo"})").status, 200);
  ASSERT_EQ(c.Post(CommandPath("bo", "deposit"), R"({"amount":5})").status, 200);
  auto overdraft = c.Post(CommandPath("bo", "transfer_out"), R"({"amount":6,"to":"cy"})");
  EXPECT_EQ(overdraft.status, 422);
  EXPECT_EQ(Json::parse(overdraft.body)["error"]["message"], "insufficient funds: the balance is 5, the debit 6");
  EXPECT_EQ(c.Post(CommandPath("bo", "deposit"), R"({"amount":-3})").status, 422);
  EXPECT_EQ(c.Post(CommandPath("bo", "open"), R"({"owner":"Bo"})").status, 422);
  auto unknown = c.Post(CommandPath("bo", "steal"), "{}");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("transfer_out"), std::string::npos) << unknown.body;
  EXPECT_EQ(EventCount(db, 1), 2);
  auto state = Json::parse(c.Get("/v1/entities/account/bo").body);
  EXPECT_EQ(state["state"]["balance"], 5);
  EXPECT_EQ(state["version"], 2);
  // The transfer that fits goes through and records where the money went.
  auto ok = c.Post(CommandPath("bo", "transfer_out"), R"({"amount":5,"to":"cy"})", {{"Idempotency-Key", "t1"}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  state = Json::parse(c.Get("/v1/entities/account/bo").body);
  EXPECT_EQ(state["state"]["balance"], 0);
  EXPECT_EQ(state["state"]["last_transfer"], (Json{{"to", "cy"}, {"amount", 5}, {"command_id", "t1"}}));
}

// An infinite loop and a memory hog are stopped with 500 and write nothing;
// commands queued behind them on the same partition (the same entity, even
// the same batch) are applied.
TEST_F(JsHandlersTest, RunawayHandlersAreStoppedAndThePartitionCarriesOn) {
  TestDatabase db("jsrun");
  SluiceConfig cfg = AccountConfig(db, 1);
  cfg.extra_writer_yaml = "  handler_timeout: 30ms\n  handler_memory: 4MiB\n";
  const std::string js = WriteTemp("runaway.js",
                                    "function add(s, r) { s.n = (s.n || 0) + 1; return {n: s.n}; }\n"
                                    "function spin(s) { s.n = -1; for (;;) {} }\n"
                                    "function hog(s) { s.n = -2; var a = []; for (;;) a.push('x'.repeat(100000) + a.length); }\n"
                                    "function joins(s) { s.n = -3; for (;;) new Array(1000).join('x'); }\n"
                                    "function regex(s) { s.n = -4; return /^(a+)+$/.test('a'.repeat(40) + '!'); }\n");
  auto writer = StartWriter(WriteConfig(cfg, {{"account", js}}), cfg.port);
  ASSERT_TRUE(writer->running());
  HttpClient c(cfg.port);
  ASSERT_EQ(c.Post(CommandPath("r", "add"), "{}").status, 200);
  auto spin = c.Post(CommandPath("r", "spin"), "{}");
  EXPECT_EQ(spin.status, 500);
  EXPECT_EQ(Json::parse(spin.body)["error"]["code"], "handler_timeout") << spin.body;
  auto hog = c.Post(CommandPath("r", "hog"), "{}");
  EXPECT_EQ(hog.status, 500);
  EXPECT_EQ(Json::parse(hog.body)["error"]["code"], "handler_out_of_memory") << hog.body;
  // Loops over native calls and a backtracking regular expression run little
  // or no bytecode; the timeout stops them all the same.
  for (const char* name : {"joins", "regex"}) {
    auto r = c.Post(CommandPath("r", name), "{}");
    EXPECT_EQ(r.status, 500) << name;
    EXPECT_EQ(Json::parse(r.body)["error"]["code"], "handler_timeout") << name << ": " << r.body;
  }

  // Runaways and ordinary commands at once: every `add` lands, no runaway does.
  constexpr int kClients = 8;
  std::atomic<int> adds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      HttpClient client(cfg.port);
      for (int i = 0; i < 10; ++i) {
        const bool runaway = t < 2 && i < 3;
        auto r = client.Post(CommandPath("r", runaway ? (t == 0 ? "spin" : "hog") : "add"), "{}");
        if (runaway) {
          EXPECT_EQ(r.status, 500) << r.body;
        } else {
          EXPECT_EQ(r.status, 200) << r.body;
          if (r.status == 200) ++adds;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<Json> states = StoredStates(db, "r", 1);
  ASSERT_EQ(static_cast<int>(states.size()), 1 + adds.load());
  for (size_t i = 0; i < states.size(); ++i) EXPECT_EQ(states[i]["n"], i + 1);
  ExpectDenseVersions(db);
}

// Two writer processes on one database (DESIGN I4): a refusal, whether a
// handler's rejection or a 409, may only come from the entity's current
// version. Writer A caches x at balance 0; writer B deposits; A must then
// see the deposit instead of answering "insufficient funds" from its cache,
// and must accept an If-Match of the version a GET just returned.
TEST_F(JsHandlersTest, TwoWritersRefuseOnlyOnCurrentState) {
  TestDatabase db("jstwo");
  SluiceConfig cfg = AccountConfig(db, 1);
  const std::string config_a = WriteConfig(cfg, {{"account", AccountJs()}});
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", config_a}, &out), 0) << out;
  const uint16_t port_a = cfg.port;
  cfg.port = FreePort();
  const std::string config_b = WriteConfig(cfg, {{"account", AccountJs()}});
  SluiceProcess writer_a({"writer", "--config", config_a}, port_a);
  SluiceProcess writer_b({"writer", "--config", config_b}, cfg.port);
  std::string why;
  ASSERT_TRUE(writer_a.Start(&why)) << why;
  ASSERT_TRUE(writer_b.Start(&why)) << why;
  HttpClient a(port_a), b(cfg.port);
  const auto version_of = [](const HttpReply& r) { return Json::parse(r.body)["version"].get<int>(); };

  ASSERT_EQ(a.Post(CommandPath("x", "open"), R"({"owner":"ann"})").status, 200);
  ASSERT_EQ(a.Post(CommandPath("x", "deposit"), R"({"amount":100})").status, 200);
  ASSERT_EQ(a.Post(CommandPath("x", "withdraw"), R"({"amount":100})").status, 200);  // A caches balance 0, v3
  auto deposit = b.Post(CommandPath("x", "deposit"), R"({"amount":50})");
  ASSERT_EQ(deposit.status, 200) << deposit.body;
  ASSERT_EQ(version_of(deposit), 4);
  auto withdraw = a.Post(CommandPath("x", "withdraw"), R"({"amount":30})");
  EXPECT_EQ(withdraw.status, 200) << "writer A refused on its cached state: " << withdraw.body;
  if (withdraw.status == 200) {
    EXPECT_EQ(Json::parse(withdraw.body)["response"]["balance"], 20) << withdraw.body;
  }

  // If-Match with the version a GET (on the other writer) just returned.
  ASSERT_EQ(b.Post(CommandPath("x", "deposit"), R"({"amount":5})").status, 200);
  auto got = b.Get("/v1/entities/account/x");
  ASSERT_EQ(got.status, 200);
  const int current = version_of(got);
  auto guarded = a.Post(CommandPath("x", "deposit"), R"({"amount":1})", {{"If-Match", "\"" + std::to_string(current) + "\""}});
  EXPECT_EQ(guarded.status, 200) << "writer A answered 409 from its cache: " << guarded.body;
  // A stale If-Match is still refused, now with the stored version.
  auto stale = a.Post(CommandPath("x", "deposit"), R"({"amount":1})", {{"If-Match", "\"" + std::to_string(current) + "\""}});
  EXPECT_EQ(stale.status, 409) << stale.body;
  EXPECT_EQ(Json::parse(stale.body)["error"]["current_version"], current + 1) << stale.body;

  // Built-in commands too: A caches y as existing, B deletes it, A's create
  // must not be refused as already_exists (and, the other way, A's delete of
  // an entity B created must not be a 404).
  ASSERT_EQ(a.Post("/v1/entities/account/y/commands/create", R"({"v":1})").status, 200);
  ASSERT_EQ(b.Post("/v1/entities/account/y/commands/delete", "").status, 200);
  auto recreate = a.Post("/v1/entities/account/y/commands/create", R"({"v":2})");
  EXPECT_EQ(recreate.status, 200) << recreate.body;
  ASSERT_EQ(a.Post("/v1/entities/account/z/commands/delete", "").status, 404);  // A caches z as missing
  ASSERT_EQ(b.Post("/v1/entities/account/z/commands/create", R"({"v":1})").status, 200);
  auto del = a.Post("/v1/entities/account/z/commands/delete", "");
  EXPECT_EQ(del.status, 200) << del.body;
  ExpectDenseVersions(db);
}

// A syntax error stops `sluice config check` and the writer's start-up,
// naming the JavaScript file and line.
TEST_F(JsHandlersTest, SyntaxErrorFailsStartupWithFileAndLine) {
  TestDatabase db("jssyntax");
  SluiceConfig cfg = AccountConfig(db, 1);
  const std::string js = WriteTemp("broken.js", "function ok(s) {}\n\nfunction broken(s) {\n  s.x = ;\n}\n");
  const std::string config_path = WriteConfig(cfg, {{"account", js}});
  std::string out;
  EXPECT_EQ(RunSluice({"config", "check", config_path}, &out), 1) << out;
  EXPECT_NE(out.find(js + ":4: SyntaxError"), std::string::npos) << out;
  SluiceProcess writer({"serve", "--config", config_path}, cfg.port);
  std::string why;
  EXPECT_FALSE(writer.Start(&why, std::chrono::seconds(20)));
  EXPECT_NE(why.find(js + ":4: SyntaxError"), std::string::npos) << why;
}

}  // namespace
}  // namespace sluice::testing
