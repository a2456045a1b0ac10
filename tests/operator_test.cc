// The operator commands' rough edges a new user hit (issue 18, item 11),
// against a real MariaDB (and Redis for a running serve):
//   - `status`, `verify` and `deadletters` before `init` say to run
//     `sluice init`, not only "Unknown database";
//   - the `status` table stays aligned with elasticsearch sinks and long names;
//   - dead letters: `list --json`, `retry --id N`, `discard --id N` and
//     `discard --sink NAME`;
//   - `rebuild` of a view whose entity type has no events never prints
//     "0/0 (100.0%)".
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(Operator, CommandsBeforeInitSayToRunInit) {
  SLUICE_REQUIRE_MYSQL();
  SluiceConfig cfg;
  cfg.database = UniquePrefix("noinit").substr(0, 40);  // never created
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  cfg.extra_yaml = "sinks:\n  - {name: table, type: mysql, entity: account, table: account_view, columns: {o: /o}}\n";
  const std::string path = cfg.Write();
  const std::vector<std::vector<std::string>> commands = {{"status", "--config", path},
                                                          {"status", "--config", path, "--json"},
                                                          {"verify", "--config", path},
                                                          {"deadletters", "list", "--config", path}};
  for (const auto& args : commands) {
    std::string out;
    EXPECT_EQ(RunSluice(args, &out), 1) << out;
    EXPECT_NE(out.find("the database " + cfg.database + " does not exist yet: run `sluice init --config " + path +
                       "` first"),
              std::string::npos)
        << out;
  }
  // The database exists but holds no sluice tables (created by hand, or another tool's).
  TestDatabase db("noschema");
  cfg.database = db.name();
  const std::string empty_path = cfg.Write();
  std::string out;
  EXPECT_EQ(RunSluice({"status", "--config", empty_path}, &out), 1) << out;
  EXPECT_NE(out.find("the database " + db.name() + " is not set up for this config (the database has no sluice "
                     "schema): run `sluice init --config " + empty_path + "` first"),
            std::string::npos)
      << out;
  ASSERT_EQ(RunSluice({"init", "--config", empty_path}, &out), 0) << out;
  EXPECT_EQ(RunSluice({"status", "--config", empty_path}, &out), 0) << out;
}

TEST(Operator, StatusTableStaysAlignedWithElasticsearchSinksAndLongNames) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("statusalign");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  // Status reads MySQL only: the sinks' servers need not answer.
  cfg.extra_yaml =
      "sinks:\n"
      "  - {name: c, type: redis, entity: account, url: \"redis://127.0.0.1:1/0\"}\n"
      "  - {name: search, type: elasticsearch, entity: account, url: \"http://127.0.0.1:1\"}\n"
      "  - {name: a-sink-name-longer-than-the-old-twenty-column-width, type: mysql, entity: account,"
      " table: account_view, columns: {o: /o}}\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  ASSERT_EQ(RunSluice({"status", "--config", path}, &out), 0) << out;
  auto lines = Lines(out);
  ASSERT_EQ(lines.size(), 9u) << out;  // the header, 3 sinks x 2 partitions, the engines and the writers running
  EXPECT_EQ(lines.back(), "routing writers: none running");
  lines.pop_back();
  EXPECT_EQ(lines.back(), "engines: none running");
  lines.pop_back();
  // Where each column starts in the header; every row has a cell starting there.
  std::vector<size_t> starts;
  for (size_t i = 0; i < lines[0].size(); ++i) {
    if (lines[0][i] != ' ' && (i == 0 || lines[0][i - 1] == ' ')) starts.push_back(i);
  }
  ASSERT_EQ(starts.size(), 12u) << lines[0];  // the last: OWNER
  for (size_t l = 1; l < lines.size(); ++l) {
    for (size_t c = 1; c < starts.size(); ++c) {
      const size_t at = starts[c];
      ASSERT_LT(at, lines[l].size()) << out;
      EXPECT_TRUE(lines[l][at] != ' ' && lines[l][at - 1] == ' ') << "column " << c << " of line " << l << ":\n"
                                                                  << out;
    }
  }
  EXPECT_NE(out.find(" elasticsearch  0 "), std::string::npos) << out;
}

// A serve whose MySQL view refuses notes longer than 8 characters.
struct DeadLetterStack {
  std::unique_ptr<TestDatabase> db;
  std::string path;
  std::unique_ptr<SluiceProcess> serve;
  uint16_t port = 0;
};

std::unique_ptr<DeadLetterStack> StartDeadLetterStack() {
  auto s = std::make_unique<DeadLetterStack>();
  s->db = std::make_unique<TestDatabase>("deadops");
  SluiceConfig cfg;
  cfg.database = s->db->name();
  cfg.entities = {{"account", 2}};
  cfg.port = s->port = FreePort();
  cfg.extra_yaml = "engine:\n  offset_flush_interval: 100ms\n  idle_poll_max: 10ms\n"
                   "sinks:\n  - {name: table, type: mysql, entity: account, table: account_view,"
                   " columns: {note: {pointer: /note, type: \"VARCHAR(8)\"}}}\n";
  s->path = cfg.Write();
  s->serve = StartSluice("serve", s->path, s->port);
  return s;
}

Json DeadLetters(const std::string& path, bool all) {
  std::string out;
  std::vector<std::string> args = {"deadletters", "list", "--config", path, "--json"};
  if (all) args.push_back("--all");
  EXPECT_EQ(RunSluice(args, &out), 0) << out;
  return Json::parse(out, nullptr, false);
}

TEST(Operator, DeadLettersListAsJsonRetryOneAndDiscard) {
  SLUICE_REQUIRE_MYSQL();
  auto s = StartDeadLetterStack();
  HttpClient c(s->port);
  for (const std::string id : {"bad1", "bad2", "bad3"}) {
    ASSERT_EQ(c.Post("/v1/entities/account/" + id + "/commands/create", R"({"note":"far too long for eight"})").status,
              200);
  }
  ASSERT_EQ(c.Post("/v1/entities/account/good/commands/create", R"({"note":"short"})").status, 200);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 60s, &out)) << out;

  Json list = DeadLetters(s->path, false);
  ASSERT_EQ(list["count"], 3) << list.dump();
  std::map<std::string, uint64_t> id_of;
  for (const auto& d : list["dead_letters"]) {
    EXPECT_EQ(d["sink"], "table");
    EXPECT_EQ(d["entity_type"], "account");
    EXPECT_EQ(d["version"], 1);
    EXPECT_TRUE(d["resolved_at"].is_null());
    EXPECT_NE(d["error"].get<std::string>().find("note"), std::string::npos) << d.dump();
    id_of[d["entity_id"].get<std::string>()] = d["id"].get<uint64_t>();
  }
  const std::string bad1 = std::to_string(id_of.at("bad1")), bad2 = std::to_string(id_of.at("bad2")),
                    bad3 = std::to_string(id_of.at("bad3"));

  // Retry of one id: still too long, so exit 1, and only that one was tried.
  EXPECT_EQ(RunSluice({"deadletters", "retry", "--config", s->path, "--id", bad1}, &out), 1) << out;
  EXPECT_NE(out.find("dead letter " + bad1 + " (table, entity bad1): rejected again"), std::string::npos) << out;
  EXPECT_EQ(out.find("bad2"), std::string::npos) << out;
  ASSERT_TRUE(s->db->conn().Execute("ALTER TABLE account_view MODIFY note VARCHAR(64)").ok());
  EXPECT_EQ(RunSluice({"deadletters", "retry", "--config", s->path, "--id", bad1}, &out), 0) << out;
  EXPECT_NE(out.find("dead letter " + bad1 + " (table, entity bad1): applied"), std::string::npos) << out;
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM account_view WHERE id IN ('bad2', 'bad3')"), 0);
  EXPECT_EQ(RunSluice({"deadletters", "retry", "--config", s->path, "--id", bad1}, &out), 0) << out;
  EXPECT_NE(out.find("already resolved (applied); nothing to retry"), std::string::npos) << out;
  EXPECT_EQ(DeadLetters(s->path, false)["count"], 2);

  // Discard one: resolved as discarded, nothing applied, still listed with --all.
  EXPECT_EQ(RunSluice({"deadletters", "discard", "--config", s->path, "--id", bad2}, &out), 0) << out;
  EXPECT_NE(out.find("dead letter " + bad2 + " (table, entity bad2, version 1): discarded"), std::string::npos) << out;
  EXPECT_EQ(RunSluice({"deadletters", "discard", "--config", s->path, "--id", bad2}, &out), 0) << out;
  EXPECT_NE(out.find("already resolved (discarded); nothing to discard"), std::string::npos) << out;
  EXPECT_EQ(RunSluice({"deadletters", "discard", "--config", s->path, "--id", "999999"}, &out), 1) << out;
  EXPECT_NE(out.find("there is no dead letter 999999"), std::string::npos) << out;
  EXPECT_EQ(s->db->Scalar("SELECT COUNT(*) FROM account_view WHERE id='bad2'"), 0);
  list = DeadLetters(s->path, false);
  ASSERT_EQ(list["count"], 1) << list.dump();
  EXPECT_EQ(list["dead_letters"][0]["entity_id"], "bad3");

  // Discard a sink's: the rest go; an unknown sink is an error.
  EXPECT_EQ(RunSluice({"deadletters", "discard", "--config", s->path, "--sink", "nope"}, &out), 1) << out;
  EXPECT_EQ(RunSluice({"deadletters", "discard", "--config", s->path, "--sink", "table"}, &out), 0) << out;
  EXPECT_NE(out.find("1 dead letter(s) of sink table discarded"), std::string::npos) << out;
  EXPECT_EQ(DeadLetters(s->path, false)["count"], 0);
  EXPECT_EQ(RunSluice({"deadletters", "retry", "--config", s->path, "--id", bad3}, &out), 0) << out;
  EXPECT_NE(out.find("already resolved (discarded)"), std::string::npos) << out;
  const Json all = DeadLetters(s->path, true);
  ASSERT_EQ(all["count"], 3) << all.dump();
  std::map<std::string, std::string> resolution;
  for (const auto& d : all["dead_letters"]) {
    resolution[d["entity_id"].get<std::string>()] = d["resolution"].get<std::string>();
    EXPECT_FALSE(d["resolved_at"].is_null());
  }
  EXPECT_EQ(resolution, (std::map<std::string, std::string>{{"bad1", "applied"}, {"bad2", "discarded"},
                                                            {"bad3", "discarded"}}));
  // The table form lists the same.
  ASSERT_EQ(RunSluice({"deadletters", "list", "--config", s->path, "--all"}, &out), 0) << out;
  EXPECT_NE(out.find("3 dead letter(s)"), std::string::npos) << out;
}

TEST(Operator, RebuildOfAViewWithNoEventsNeverShowsZeroOfZero) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("rebuildempty");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  ::setenv("SLUICE_TEST_ADMIN_TOKEN", ("tok-" + UniquePrefix("admin")).c_str(), 1);
  cfg.extra_yaml = "sinks:\n  - {name: table, type: mysql, entity: account, table: account_view, columns: {o: /o}}\n"
                   "admin:\n  listen: 127.0.0.1:" + std::to_string(FreePort()) +
                   "\n  token: \"${env:SLUICE_TEST_ADMIN_TOKEN}\"\n";
  const std::string path = cfg.Write();
  auto serve = StartSluice("serve", path, cfg.port);
  std::string out;
  ASSERT_EQ(RunSluice({"rebuild", "--config", path, "--sink", "table"}, &out), 0) << out;
  EXPECT_EQ(out.find("0/0"), std::string::npos) << out;
  EXPECT_EQ(out.find("100.0%"), std::string::npos) << out;
  // Its first line, whatever phase the rebuild reached by then.
  EXPECT_EQ(out.rfind("rebuild table: ", 0), 0u) << out;
  EXPECT_NE(out.substr(0, out.find('\n')).find("; the entity type has no events yet, so there is nothing to replay"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("the rebuilt view is live"), std::string::npos) << out;

  // With events, the first line already has the total (read before the reply).
  HttpClient c(cfg.port);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(c.Post("/v1/entities/account/e" + std::to_string(i) + "/commands/create", R"({"o":1})").status, 200);
  }
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out;
  ASSERT_EQ(RunSluice({"rebuild", "--config", path, "--sink", "table"}, &out), 0) << out;
  EXPECT_EQ(out.find("0/0"), std::string::npos) << out;
  EXPECT_NE(out.find("/20 events ("), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::testing
