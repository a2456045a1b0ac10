// The example JSON-lines plugin used exactly like a built-in sink, end to
// end: `sluice serve` with the plugin under `plugins:` writes commands to the
// real MariaDB, the engine pulls them into the plugin's file, and `sluice
// verify` compares that file with main storage. Plus the errors a user sees
// from `sluice config check` and `sluice serve` for broken plugins. And the
// durability contract with a plugin that buffers until flush()
// (connectors/plugin/testdata/buffered_plugin.cc): a crash after an offset
// save loses nothing, a failing flush holds the offsets back, shutdown() is
// called once at the end of every command.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

// A stack whose sink `audit` is a buffered_file plugin sink writing
// <dir>/view.tsv and recording its calls in <dir>/calls; offsets are saved
// every 50 ms.
PluginStack MakeBufferedStack(const std::string& name, const std::string& sink_extra = "") {
  PluginStack s;
  s.db = std::make_unique<TestDatabase>(name);
  s.dir = (fs::temp_directory_path() / ("sluice_" + s.db->name())).string();
  fs::create_directories(s.dir);
  s.view = s.dir + "/view.tsv";
  s.cfg.database = s.db->name();
  s.cfg.entities = {{"account", 4}};
  s.cfg.port = FreePort();
  s.cfg.extra_yaml = "engine:\n  offset_flush_interval: 50ms\n"
                     "sinks:\n"
                     "  - name: audit\n"
                     "    type: buffered_file\n"
                     "    entity: account\n"
                     "    path: " + s.view + "\n"
                     "    calls: " + s.dir + "/calls\n" + sink_extra +
                     "plugins:\n  - " + BUFFERED_PLUGIN + "\n";
  s.path = s.cfg.Write();
  return s;
}

// The buffered_file view: the highest version of each id in the file.
std::map<std::string, uint64_t> ReadBufferedView(const std::string& path) {
  std::map<std::string, uint64_t> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    const uint64_t version = std::stoull(line.substr(tab + 1));
    uint64_t& slot = out[line.substr(0, tab)];
    slot = std::max(slot, version);
  }
  return out;
}

// The calls a buffered_file plugin recorded in process `pid` (every process
// that loaded it: 0), without the pid. Every sluice command loads the plugins,
// `sluice status` too.
std::vector<std::string> Calls(const std::string& path, pid_t pid = 0) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    if (pid == 0 || line.substr(0, space) == std::to_string(pid)) out.push_back(line.substr(space + 1));
  }
  return out;
}

// shutdown() came once, last, after every sink the process made was destroyed.
void ExpectShutdownOnceAtTheEnd(const std::vector<std::string>& calls) {
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "shutdown"), 1);
  EXPECT_EQ(calls.back(), "shutdown");
  const auto starting = [&](const std::string& prefix) {
    return std::count_if(calls.begin(), calls.end(), [&](const std::string& c) { return c.starts_with(prefix); });
  };
  EXPECT_GE(starting("create "), 1);
  EXPECT_EQ(starting("create "), starting("destroy "));
  EXPECT_EQ(starting("open "), starting("close "));
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

TEST(PluginDurability, AKillAfterAnOffsetSaveLosesNothingTheSinkBuffered) {
  SLUICE_REQUIRE_MYSQL();
  PluginStack s = MakeBufferedStack("plugin_buf_kill");
  auto serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s.path}, s.cfg.port);
  std::string why;
  ASSERT_TRUE(serve->Start(&why)) << why;
  {
    HttpClient c(s.cfg.port);
    for (int i = 0; i < 30; ++i) {
      const std::string id = "b" + std::to_string(i);
      ASSERT_EQ(Command(c, id, "put", R"({"n":)" + std::to_string(i) + "}").status, 200);
      if (i % 4 == 0) {
        ASSERT_EQ(Command(c, id, "patch", R"({"tag":"x"})").status, 200);
      }
    }
  }
  // The saved offsets reach every head; then the process dies at once.
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &out)) << out;
  serve->Kill();
  // A restart starts from the saved offsets: whatever they passed must be in
  // the file already.
  serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s.path}, s.cfg.port);
  ASSERT_TRUE(serve->Start(&why)) << why;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &out)) << out;
  EXPECT_EQ(RunSluice({"verify", "--config", s.path}, &out), 0) << out;
  const auto view = ReadBufferedView(s.view);
  EXPECT_EQ(view.size(), 30u);
  EXPECT_EQ(view.count("b8") ? view.at("b8") : 0, 2u);
  EXPECT_EQ(serve->Terminate(), 0) << serve->Log();
}

TEST(PluginDurability, AFailingFlushHoldsTheOffsetsBackUntilItSucceeds) {
  SLUICE_REQUIRE_MYSQL();
  PluginStack s = MakeBufferedStack("plugin_buf_fail", "    fail_flush_while: flush_fails\n");
  const std::string switch_file = fs::path(s.path).parent_path() / "flush_fails";
  std::ofstream(switch_file) << "flushes fail while this file exists\n";
  SluiceProcess serve({"serve", "--config", s.path}, s.cfg.port);
  std::string why;
  ASSERT_TRUE(serve.Start(&why)) << why;
  {
    HttpClient c(s.cfg.port);
    for (int i = 0; i < 10; ++i) ASSERT_EQ(Command(c, "f" + std::to_string(i), "put", "{}").status, 200);
  }
  // The engine applied them, but could not flush: the sink reports backoff
  // with the plugin's message, and no offset moved.
  nlohmann::json sink;
  const auto until = std::chrono::steady_clock::now() + 60s;
  bool backoff = false;
  while (!backoff && std::chrono::steady_clock::now() < until) {
    const nlohmann::json status = StatusJson(s.path);
    for (const auto& each : status.value("sinks", nlohmann::json::array())) {
      if (each.value("name", "") != "audit") continue;
      sink = each;
      for (const auto& p : each["partitions"]) {
        backoff = backoff || (p.value("state", "") == "backoff" &&
                              p.value("last_error", "").find("flushes fail while") != std::string::npos);
      }
    }
    if (!backoff) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(backoff) << sink.dump();
  uint64_t lag = 0;
  for (const auto& p : sink["partitions"]) {
    EXPECT_EQ(p.value("offset", uint64_t{1}), 0u) << sink.dump();
    lag += p.value("lag_events", uint64_t{0});
  }
  EXPECT_EQ(lag, 10u) << sink.dump();
  EXPECT_TRUE(ReadBufferedView(s.view).empty());

  // Once flushes work again the same process catches up, and the view is whole.
  fs::remove(switch_file);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &out)) << out;
  EXPECT_EQ(RunSluice({"verify", "--config", s.path}, &out), 0) << out;
  EXPECT_EQ(ReadBufferedView(s.view).size(), 10u);
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

TEST(PluginDurability, DeadLetterRetryFlushesBeforeItMarksOneResolved) {
  SLUICE_REQUIRE_MYSQL();
  PluginStack s = MakeBufferedStack("plugin_buf_dl", "    reject: poison\n");
  {
    SluiceProcess serve({"serve", "--config", s.path}, s.cfg.port);
    std::string why;
    ASSERT_TRUE(serve.Start(&why)) << why;
    HttpClient c(s.cfg.port);
    ASSERT_EQ(Command(c, "d1", "put", R"({"n":"poison"})").status, 200);
    ASSERT_EQ(Command(c, "d2", "put", R"({"n":2})").status, 200);
    std::string out;
    ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &out)) << out;
    EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
  }
  EXPECT_EQ(ReadBufferedView(s.view).count("d1"), 0u);
  // The sink accepts it now: the retry applies it, and the view keeps it.
  const std::string reject_line = "    reject: poison\n";
  s.cfg.extra_yaml.erase(s.cfg.extra_yaml.find(reject_line), reject_line.size());
  const std::string fixed = s.cfg.Write();
  std::string out;
  EXPECT_EQ(RunSluice({"deadletters", "retry", "--config", fixed}, &out), 0) << out;
  EXPECT_NE(out.find("(audit, entity d1): applied"), std::string::npos) << out;
  const auto view = ReadBufferedView(s.view);
  EXPECT_EQ(view.count("d1") ? view.at("d1") : 0, 1u) << "the retried dead letter was resolved but not flushed";
  EXPECT_EQ(RunSluice({"verify", "--config", fixed}, &out), 0) << out;
}

TEST(PluginLifecycle, ShutdownIsCalledOnceAtTheEndOfEveryCommandFailingOrNot) {
  SLUICE_REQUIRE_MYSQL();
  std::string out;
  {
    // serve, stopped by SIGTERM.
    PluginStack s = MakeBufferedStack("plugin_shutdown");
    SluiceProcess serve({"serve", "--config", s.path}, s.cfg.port);
    std::string why;
    ASSERT_TRUE(serve.Start(&why)) << why;
    HttpClient c(s.cfg.port);
    ASSERT_EQ(Command(c, "s1", "put", "{}").status, 200);
    ASSERT_TRUE(WaitCaughtUp(s.path, 120s, &out)) << out;
    const pid_t pid = serve.pid();
    EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
    const auto calls = Calls(s.dir + "/calls", pid);
    ExpectShutdownOnceAtTheEnd(calls);
    EXPECT_EQ(calls.front(), "init");
    EXPECT_NE(std::find(calls.begin(), calls.end(), "flush audit"), calls.end());
  }
  {
    // config check refusing another sink's options (the only process here).
    PluginStack s = MakeBufferedStack("plugin_shutdown_check");
    s.cfg.extra_yaml.replace(s.cfg.extra_yaml.find("plugins:"), 0,
                             "  - {name: broken, type: buffered_file, entity: account, pth: x}\n");
    const std::string path = s.cfg.Write();
    EXPECT_EQ(RunSluice({"config", "check", path}, &out), 1) << out;
    EXPECT_NE(out.find("unknown option 'pth'"), std::string::npos) << out;
    ExpectShutdownOnceAtTheEnd(Calls(s.dir + "/calls"));
  }
  {
    // serve failing after its engine started: the writer's port is taken.
    PluginStack s = MakeBufferedStack("plugin_shutdown_port");
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(s.cfg.port);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(fd, 1), 0);
    EXPECT_EQ(RunSluice({"serve", "--config", s.path}, &out), 1) << out;
    ::close(fd);
    const auto calls = Calls(s.dir + "/calls");
    ExpectShutdownOnceAtTheEnd(calls);
    // The engine's sink was made (and destroyed) besides config check's.
    EXPECT_GE(std::count(calls.begin(), calls.end(), "create audit"), 2) << out;
  }
}

}  // namespace
}  // namespace sluice::testing
