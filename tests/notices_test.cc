// Commit notices against real MariaDB and Redis (issue 24, item 3): a writer
// in another process announces each commit to the engine, which reads that
// partition at once instead of finding the commit at its next head look.
// Each test asserts through the engine's own counters, not through time:
//   - with notices, no commit is found unannounced and the engine does not
//     look at the heads for them;
//   - without notices (engine.notices.enabled: false), the looks still find
//     every commit (the fallback) and count them as unannounced;
//   - hostile datagrams on the notice port change nothing and the engine stays up.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

struct Stack {
  std::unique_ptr<TestDatabase> db;
  SluiceConfig cfg;
  std::string path;
  std::string prefix;
  uint16_t sync_metrics = 0;
};

Stack MakeStack(const std::string& name, bool notices) {
  Stack s;
  s.db = std::make_unique<TestDatabase>(name);
  s.prefix = UniquePrefix(name);
  s.cfg.database = s.db->name();
  s.cfg.entities = {{"account", 8}};
  s.cfg.port = FreePort();
  s.sync_metrics = FreePort();
  // The looks back off to 10 s: a commit found by a look would wait for it.
  s.cfg.extra_yaml = std::string("engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 10s\n") +
                     (notices ? "" : "  notices: {enabled: false}\n") +
                     "metrics:\n  writer_listen: 127.0.0.1:" + std::to_string(FreePort()) +
                     "\n  sync_listen: 127.0.0.1:" + std::to_string(s.sync_metrics) + "\n"
                     "sinks:\n"
                     "  - name: cache\n    type: redis\n    entity: account\n"
                     "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
                     "    key: \"" + s.prefix + ":{id}\"\n";
  s.path = s.cfg.Write();
  return s;
}

// The value of an unlabelled counter in the engine's /metrics.
double Counter(uint16_t port, const std::string& name) {
  HttpClient c(port, 10s);
  const HttpReply r = c.Get("/metrics");
  EXPECT_EQ(r.status, 200) << r.error;
  std::smatch m;
  if (!std::regex_search(r.body, m, std::regex("\n" + name + " ([0-9.e+]+)"))) return -1;
  return std::stod(m[1]);
}

// Sends `n` commands one at a time, each waiting until the view has it.
void CommandsOneByOne(const Stack& s, int n) {
  HttpClient c(s.cfg.port);
  RedisClient redis(RedisPort());
  for (int i = 0; i < n; ++i) {
    const std::string id = "n" + std::to_string(i);
    const HttpReply r = c.Post("/v1/entities/account/" + id + "/commands/put", R"({"owner":"o"})",
                               {{"Idempotency-Key", "k" + std::to_string(i)}});
    ASSERT_EQ(r.status, 200) << r.body;
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (!redis.Get(s.prefix + ":" + id) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_TRUE(redis.Get(s.prefix + ":" + id)) << "command " << i << " never reached the view";
  }
}

TEST(Notices, AWriterInAnotherProcessWakesTheEngineForEachCommit) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("notices", true);
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s.path}, &out), 0) << out;
  auto engine = StartSluice("sync", s.path, s.sync_metrics);
  // The engine publishes its notice address with its first heartbeat; the
  // writer reads it when it starts.
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (s.db->Query("SELECT address FROM sluice_members WHERE member_group='engine' AND address LIKE 'udp:%'")
             .empty() &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(20ms);
  }
  auto writer = StartSluice("writer", s.path, s.cfg.port);
  std::this_thread::sleep_for(3s);  // the writer has the engines' addresses; the looks back off
  const double looks = Counter(s.sync_metrics, "sluice_engine_head_looks_total");
  ASSERT_GE(looks, 1);
  CommandsOneByOne(s, 40);
  EXPECT_EQ(Counter(s.sync_metrics, "sluice_engine_unannounced_commits_total"), 0)
      << "a commit reached the view through a look, not through its notice";
  // 40 commands, each waited for: the looks, seconds apart by now, did not drive them.
  EXPECT_LE(Counter(s.sync_metrics, "sluice_engine_head_looks_total") - looks, 3);
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
}

TEST(Notices, WithoutNoticesTheLooksStillFindEveryCommit) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("nonotices", false);
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s.path}, &out), 0) << out;
  auto engine = StartSluice("sync", s.path, s.sync_metrics);
  auto writer = StartSluice("writer", s.path, s.cfg.port);
  CommandsOneByOne(s, 10);
  EXPECT_GE(Counter(s.sync_metrics, "sluice_engine_unannounced_commits_total"), 1);
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
}

TEST(Notices, HostileDatagramsChangeNothing) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  auto s = MakeStack("hostile", true);
  auto serve = StartSluice("serve", s.path, s.cfg.port);
  CommandsOneByOne(s, 5);
  const auto rows = s.db->Query("SELECT address FROM sluice_members WHERE member_group='engine'");
  ASSERT_EQ(rows.size(), 1u);
  const std::string address = rows[0][0].value_or("");
  ASSERT_TRUE(address.starts_with("udp:127.0.0.1:")) << address;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  std::vector<std::string> hostile = {
      "", "\xff\xfe\x00garbage", "sluice-commits 1\n", "sluice-commits 1\naccount 0 18446744073709551615\n",
      "sluice-commits 1\naccount 4000000000 5\n", "sluice-commits 1\nnosuchtype 0 5\n", std::string(65000, 'x'),
      "sluice-commits 1\naccount 1 99999999\naccount 2 99999999\n"};
  for (int i = 0; i < 2000; ++i) hostile.push_back("sluice-commits 1\nt" + std::to_string(i) + " 0 1\n");
  for (const std::string& d : hostile) {
    (void)sendto(fd, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  }
  close(fd);
  // Still up, still applying, and the view still equals main storage.
  CommandsOneByOne(s, 5);
  std::string out;
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
  EXPECT_EQ(serve->Terminate(), 0);
}

}  // namespace
}  // namespace sluice::testing
