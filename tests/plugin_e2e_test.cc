// The example JSON-lines plugin used exactly like a built-in sink, end to
// end: `sluice serve` with the plugin under `plugins:` writes commands to the
// real MariaDB, the engine pulls them into the plugin's file, and `sluice
// verify` compares that file with main storage. Plus the errors a user sees
// from `sluice config check` and `sluice serve` for broken plugins.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct View {
  uint64_t version = 0;
  bool deleted = false;
  nlohmann::json state;
};

// The file's fold: the highest version of each id.
std::map<std::string, View> ReadView(const std::string& path) {
  std::map<std::string, View> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    View v{j.at("version").get<uint64_t>(), j.at("deleted").get<bool>(), j.at("state")};
    View& slot = out[j.at("id").get<std::string>()];
    if (v.version > slot.version) slot = v;
  }
  return out;
}

struct PluginStack {
  std::unique_ptr<TestDatabase> db;
  SluiceConfig cfg;
  std::string dir;
  std::string view;  // the jsonl file
  std::string path;  // the config
};

PluginStack MakeStack(const std::string& name, const std::string& sink_extra = "",
                      const std::string& plugin = JSONL_PLUGIN) {
  PluginStack s;
  s.db = std::make_unique<TestDatabase>(name);
  s.dir = (fs::temp_directory_path() / ("sluice_" + s.db->name())).string();
  fs::create_directories(s.dir);
  s.view = s.dir + "/accounts.jsonl";
  s.cfg.database = s.db->name();
  s.cfg.entities = {{"account", 4}};
  s.cfg.port = FreePort();
  s.cfg.extra_yaml = "sinks:\n"
                     "  - name: audit\n"
                     "    type: jsonl\n"
                     "    entity: account\n"
                     "    path: " + s.view + "\n" + sink_extra +
                     "plugins:\n  - " + plugin + "\n";
  s.path = s.cfg.Write();
  return s;
}

HttpReply Command(HttpClient& c, const std::string& id, const std::string& name, const std::string& body) {
  return c.Post("/v1/entities/account/" + id + "/commands/" + name, body, {{"Idempotency-Key", id + name + body}});
}

TEST(PluginEndToEnd, ServeKeepsTheJsonlViewThatVerifyChecks) {
  SLUICE_REQUIRE_MYSQL();
  PluginStack s = MakeStack("plugin_e2e");
  std::string out;
  ASSERT_EQ(RunSluice({"config", "check", s.path}, &out), 0) << out;

  SluiceProcess serve({"serve", "--config", s.path}, s.cfg.port);
  std::string why;
  ASSERT_TRUE(serve.Start(&why)) << why;
  HttpClient c(s.cfg.port);
  for (int i = 0; i < 40; ++i) {
    const std::string id = "a" + std::to_string(i);
    ASSERT_EQ(Command(c, id, "put", R"({"n":)" + std::to_string(i) + "}").status, 200);
    if (i % 3 == 0) {
      ASSERT_EQ(Command(c, id, "patch", R"({"tag":"third"})").status, 200);
    }
    if (i % 10 == 0) {
      ASSERT_EQ(Command(c, id, "delete", "{}").status, 200);
    }
  }
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &out)) << out;
  EXPECT_EQ(RunSluice({"verify", "--config", s.path}, &out), 0) << out;

  // The file says the same as storage: live entities with their last state,
  // deleted ones as tombstones.
  auto view = ReadView(s.view);
  ASSERT_EQ(view.size(), 40u);
  EXPECT_TRUE(view["a10"].deleted);
  EXPECT_EQ(view["a10"].version, 2u);  // put, delete
  EXPECT_TRUE(view["a30"].deleted);
  EXPECT_EQ(view["a30"].version, 3u);  // put, patch, delete
  EXPECT_FALSE(view["a3"].deleted);
  EXPECT_EQ(view["a3"].version, 2u);
  EXPECT_EQ(view["a3"].state, nlohmann::json::parse(R"({"n":3,"tag":"third"})"));
  EXPECT_EQ(view["a7"].state, nlohmann::json::parse(R"({"n":7})"));
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();

  // A view changed behind sluice's back is a difference verify reports.
  std::ofstream(s.view, std::ios::app)
      << R"({"id":"a7","version":9,"deleted":false,"event_id":0,"state":{"n":-1}})" << "\n";
  EXPECT_EQ(RunSluice({"verify", "--config", s.path}, &out), 1) << out;
  EXPECT_NE(out.find("a7"), std::string::npos) << out;
}

TEST(PluginEndToEnd, SyncPushToThePluginSinkIsReadYourWrites) {
  SLUICE_REQUIRE_MYSQL();
  PluginStack s = MakeStack("plugin_push", "    push: true\n    push_mode: sync\n    push_timeout: 5s\n");
  SluiceProcess serve({"serve", "--config", s.path}, s.cfg.port);
  std::string why;
  ASSERT_TRUE(serve.Start(&why)) << why;
  HttpClient c(s.cfg.port);
  for (int i = 1; i <= 5; ++i) {
    const HttpReply r = Command(c, "p", "put", R"({"n":)" + std::to_string(i) + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.headers.count("sluice-push") ? r.headers.at("sluice-push") : "", "audit=updated");
    // The reply came after the push: the file already holds this version.
    auto view = ReadView(s.view);
    EXPECT_EQ(view["p"].version, static_cast<uint64_t>(i));
    EXPECT_EQ(view["p"].state, nlohmann::json::parse(R"({"n":)" + std::to_string(i) + "}"));
  }
  // The pull path then finds every event already applied (stale), and the view verifies.
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &out)) << out;
  EXPECT_EQ(RunSluice({"verify", "--config", s.path}, &out), 0) << out;
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

TEST(PluginEndToEnd, ConfigCheckAndServeReportBrokenPlugins) {
  SLUICE_REQUIRE_MYSQL();
  std::string out;
  {
    PluginStack s = MakeStack("plugin_init", "", INIT_FAILS_PLUGIN);
    EXPECT_EQ(RunSluice({"config", "check", s.path}, &out), 1) << out;
    EXPECT_NE(out.find(std::string("plugin library ") + INIT_FAILS_PLUGIN +
                       ": plugin init failed: licence file /etc/example/licence is missing"),
              std::string::npos)
        << out;
    // serve refuses to start, with the same message.
    EXPECT_EQ(RunSluice({"serve", "--config", s.path}, &out), 1) << out;
    EXPECT_NE(out.find("plugin init failed"), std::string::npos) << out;
  }
  {
    PluginStack s = MakeStack("plugin_opts", "    fsnyc: false\n");
    EXPECT_EQ(RunSluice({"config", "check", s.path}, &out), 1) << out;
    EXPECT_NE(out.find(s.path + ":15:5: sink 'audit' (plugin jsonl_sink): unknown option 'fsnyc' "
                                "(expected: path, fsync)"),
              std::string::npos)
        << out;
  }
}

}  // namespace
}  // namespace sluice::testing
