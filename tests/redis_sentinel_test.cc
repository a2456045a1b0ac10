// Redis Sentinel (issue 22, item 2): a master, two replicas and a sentinel,
// real redis-server processes on loopback. The sink finds the master through
// the sentinel; the master is killed -9 while commands stream in; the
// sentinel promotes a replica; the sink follows it, and with wait_replicas: 1
// no write whose offset was saved is lost: once caught up, `sluice verify`
// finds the view equal to storage on the new master.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/private_redis.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

// Polls `check` until it is true or `timeout` passes.
template <typename F>
bool WaitFor(F check, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (check()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

TEST(RedisSentinel, TheSinkFollowsAFailoverAndLosesNothing) {
  SLUICE_REQUIRE_MYSQL();
  PrivateRedis master;
  PrivateRedis replicas[2];
  PrivateRedis sentinel;
  std::string why, out;
  ASSERT_TRUE(master.Start(&why)) << why;
  for (PrivateRedis& r : replicas) {
    r.AddConfig("replicaof 127.0.0.1 " + std::to_string(master.port()) + "\n");
    ASSERT_TRUE(r.Start(&why)) << why;
  }
  sentinel.AsSentinel();
  sentinel.AddConfig("sentinel monitor mymaster 127.0.0.1 " + std::to_string(master.port()) +
                     " 1\nsentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 10000\n");
  ASSERT_TRUE(sentinel.Start(&why)) << why;
  // The sentinel has found both replicas (it learns them from the master).
  ASSERT_TRUE(WaitFor(
      [&] {
        sentinel.Cli({"SENTINEL", "replicas", "mymaster"}, &out);
        return out.find(std::to_string(replicas[0].port())) != std::string::npos &&
               out.find(std::to_string(replicas[1].port())) != std::string::npos;
      },
      30s))
      << out;

  const std::string prefix = UniquePrefix("sent");
  SluiceConfig cfg;
  cfg.database = prefix;
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  cfg.extra_yaml = "engine:\n  retry_backoff_max: 300ms\n  idle_poll_max: 20ms\nsinks:\n"
                   "  - {name: cache, type: redis, entity: account, url: \"redis-sentinel://127.0.0.1:" +
                   std::to_string(sentinel.port()) + "/mymaster/0\", key: \"" + prefix +
                   ":{id}\", wait_replicas: 1}\n";
  const std::string path = cfg.Write();
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto sluice = StartSluice("serve", path, cfg.port);
  ASSERT_TRUE(sluice && sluice->running());

  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::thread client([&] {
    HttpClient http(cfg.port);
    for (int i = 0; !stop; ++i) {
      const auto r = http.Post("/v1/entities/account/e" + std::to_string(i % 40) + "/commands/patch",
                               R"({"n":)" + std::to_string(i) + "}");
      if (r.status == 200) ++sent;
      std::this_thread::sleep_for(5ms);
    }
  });
  ASSERT_TRUE(WaitFor([&] { return sent.load() >= 200; }, 60s));
  // Some of it is in Redis; then the master dies.
  ASSERT_TRUE(WaitFor(
      [&] {
        master.Cli({"DBSIZE"}, &out);
        return out != "0\n" && !out.empty();
      },
      30s));
  master.Kill();
  ASSERT_TRUE(WaitFor(
      [&] {
        sentinel.Cli({"SENTINEL", "get-master-addr-by-name", "mymaster"}, &out);
        return out.find(std::to_string(replicas[0].port())) != std::string::npos ||
               out.find(std::to_string(replicas[1].port())) != std::string::npos;
      },
      60s))
      << out;
  const int before = sent.load();
  ASSERT_TRUE(WaitFor([&] { return sent.load() >= before + 200; }, 60s));
  stop = true;
  client.join();

  ASSERT_TRUE(WaitCaughtUp(path, 120s, &out)) << out << sluice->Log();
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  // The view is on the promoted replica.
  sentinel.Cli({"SENTINEL", "get-master-addr-by-name", "mymaster"}, &out);
  const bool first = out.find(std::to_string(replicas[0].port())) != std::string::npos;
  (first ? replicas[0] : replicas[1]).Cli({"GET", prefix + ":e1"}, &out);
  EXPECT_NE(out.find("\"n\":"), std::string::npos) << out;
  EXPECT_EQ(sluice->Terminate(), 0);
}

}  // namespace
}  // namespace sluice::testing
