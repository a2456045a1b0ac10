// Redis Cluster (issue 22, item 2): three masters, real redis-server
// processes in cluster mode on loopback. The sink learns the slots from one
// node of the url, writes each key to the master of its slot (one EVALSHA
// per slot, the version check atomic per key) and keeps each tombstone in
// its value key's slot. While commands (patches, deletes, re-creations)
// stream in, redis-cli moves a third of the slots, keys and all, from one
// master to another (MIGRATE: the sink meets ASK and MOVED). Once caught up,
// `sluice verify` finds the view equal to storage, every key is on the
// master that owns its slot, and nothing was written twice out of order.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/certs.h"
#include "tests/support/private_redis.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

template <typename F>
bool WaitFor(F check, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (check()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

// The id in a URL path: '{' and '}' percent-encoded.
std::string PathSegment(const std::string& id) {
  std::string out;
  for (char c : id) {
    if (c == '{') out += "%7B";
    else if (c == '}') out += "%7D";
    else out += c;
  }
  return out;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCluster(""); }

  // Three masters; `config` is added to each one's redis.conf.
  void StartCluster(const std::string& config) {
    std::string why, out;
    for (PrivateRedis& n : nodes_) {
      // The bus port is given: port + 10000 (the default) may be past 32767,
      // where the kernel hands out ports to outgoing connections.
      n.AddConfig("cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 3000\ncluster-port " +
                  std::to_string(FreePort()) + "\n" + config);
      ASSERT_TRUE(n.Start(&why)) << why;
    }
    std::vector<std::string> create = {"--cluster", "create"};
    for (PrivateRedis& n : nodes_) create.push_back("127.0.0.1:" + std::to_string(n.port()));
    create.insert(create.end(), {"--cluster-replicas", "0", "--cluster-yes"});
    ASSERT_EQ(nodes_[0].Cli(create, &out), 0) << out;
    for (PrivateRedis& n : nodes_) {
      ASSERT_TRUE(WaitFor(
          [&] {
            n.Cli({"CLUSTER", "INFO"}, &out);
            return out.find("cluster_state:ok") != std::string::npos;
          },
          30s))
          << out;
    }
  }

  std::string Id(PrivateRedis& n) {
    std::string out;
    n.Cli({"CLUSTER", "MYID"}, &out);
    return Trim(out);
  }

  PrivateRedis nodes_[3];
};

TEST_F(RedisClusterTest, KeysGoByHashSlotAndFollowAReshardUnderLoad) {
  SLUICE_REQUIRE_MYSQL();
  std::string out;
  const std::string prefix = UniquePrefix("clu");
  SluiceConfig cfg;
  cfg.database = prefix;
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  // One node in the url: the others are learnt from it.
  const std::string url = "redis-cluster://127.0.0.1:" + std::to_string(nodes_[1].port());
  cfg.extra_yaml = "engine:\n  retry_backoff_max: 300ms\n  idle_poll_max: 20ms\nsinks:\n"
                   "  - {name: cache, type: redis, entity: account, url: \"" + url + "\", key: \"" + prefix +
                   ":j:{id}\"}\n"
                   "  - {name: fields, type: redis, entity: account, url: \"" + url + "\", key: \"" + prefix +
                   ":h:{id}\", format: hash}\n";
  const std::string path = cfg.Write();
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto sluice = StartSluice("serve", path, cfg.port);
  ASSERT_TRUE(sluice && sluice->running());

  // Ids with braces too: "{t}..." share a hash tag; "a}..." hold a '}'
  // without one (their tombstones need a tag of the same slot).
  std::vector<std::string> ids;
  for (int i = 0; i < 120; ++i) ids.push_back("e" + std::to_string(i));
  for (int i = 0; i < 10; ++i) ids.push_back("{t}" + std::to_string(i));
  for (int i = 0; i < 10; ++i) ids.push_back("a}" + std::to_string(i));
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::atomic<int> deletes{0};
  std::thread client([&] {
    HttpClient http(cfg.port);
    for (int i = 0; !stop; ++i) {
      const std::string& id = ids[i % ids.size()];
      // Every 7th command of an entity deletes it; the next one re-creates it.
      const bool del = (i / ids.size()) % 7 == 3;
      const std::string base = "/v1/entities/account/" + PathSegment(id) + "/commands/";
      const auto r = http.Post(base + (del ? "delete" : "patch"), del ? "{}" : R"({"n":)" + std::to_string(i) + "}");
      if (r.status == 200) {
        ++ok;
        if (del) ++deletes;
      }
    }
  });
  ASSERT_TRUE(WaitFor([&] { return ok.load() >= 600; }, 90s));

  // A third of the slots (and their keys) move from node 0 to node 2 under load.
  std::vector<std::string> reshard = {"--cluster", "reshard", "127.0.0.1:" + std::to_string(nodes_[0].port()),
                                      "--cluster-from", Id(nodes_[0]), "--cluster-to", Id(nodes_[2]),
                                      "--cluster-slots", "2000", "--cluster-yes", "--cluster-pipeline", "10"};
  ASSERT_EQ(nodes_[0].Cli(reshard, &out), 0) << out;
  const int before = ok.load();
  ASSERT_TRUE(WaitFor([&] { return ok.load() >= before + 600; }, 90s));
  stop = true;
  client.join();
  EXPECT_GT(deletes.load(), 0);
  // The last command of some entities deletes them (their tombstones stay).
  {
    HttpClient http(cfg.port);
    for (size_t i = 0; i < ids.size(); i += 5) {
      const auto r = http.Post("/v1/entities/account/" + PathSegment(ids[i]) + "/commands/delete", "{}");
      EXPECT_TRUE(r.status == 200 || r.status == 404) << r.status << " " << r.body;
    }
  }

  ASSERT_TRUE(WaitCaughtUp(path, 120s, &out)) << out << sluice->Log();
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;

  // Keys are spread over the three masters (verify read each from the
  // master of its slot), and no key was left behind on another node.
  int64_t keys = 0;
  for (PrivateRedis& n : nodes_) {
    n.Cli({"DBSIZE"}, &out);
    const int64_t here = std::stoll(Trim(out));
    EXPECT_GT(here, 0) << "node " << n.port() << " holds no key";
    keys += here;
  }
  for (const std::string& id : ids) {
    for (const std::string& key : {prefix + ":j:" + id, prefix + ":h:" + id}) {
      int64_t holders = 0;
      for (PrivateRedis& n : nodes_) {
        std::string exists;
        n.Cli({"EXISTS", key}, &exists);
        if (Trim(exists) == "1") ++holders;
      }
      EXPECT_LE(holders, 1) << key << " is on more than one node";
    }
  }
  // Tombstones: an entity deleted last has none of its value keys and a
  // tombstone in the value key's slot, on the same node.
  int tombstones = 0;
  for (PrivateRedis& n : nodes_) {
    n.Cli({"--scan", "--pattern", "*:_tomb"}, &out);
    for (size_t at = out.find(":_tomb"); at != std::string::npos; at = out.find(":_tomb", at + 1)) ++tombstones;
  }
  EXPECT_GT(tombstones, 0) << "no delete left a tombstone";
  EXPECT_GT(keys, 0);
  EXPECT_EQ(sluice->Terminate(), 0);
}

// rediss-cluster://: the nodes speak TLS to clients and to each other
// (tls-cluster), CLUSTER SLOTS names their TLS ports to a TLS client, and
// the sink checks each node's certificate against tls_ca.
class RedisClusterTlsTest : public RedisClusterTest {
 protected:
  void SetUp() override {
    certs_ = std::make_unique<TestCerts>();
    ASSERT_TRUE(certs_->ok()) << certs_->error();
    for (size_t i = 0; i < 3; ++i) {
      tls_ports_[i] = FreePort();
      nodes_[i].AddConfig("tls-port " + std::to_string(tls_ports_[i]) + "\ntls-cert-file " +
                          certs_->Path("server.pem") + "\ntls-key-file " + certs_->Path("server.key") +
                          "\ntls-ca-cert-file " + certs_->Path("ca.pem") +
                          "\ntls-cluster yes\ntls-auth-clients optional\n");
    }
    StartCluster("");
  }
  std::unique_ptr<TestCerts> certs_;
  uint16_t tls_ports_[3] = {};
};

TEST_F(RedisClusterTlsTest, TheSinkWritesToEveryMasterOverTls) {
  SLUICE_REQUIRE_MYSQL();
  std::string out;
  const std::string prefix = UniquePrefix("clt");
  SluiceConfig cfg;
  cfg.database = prefix;
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  cfg.extra_yaml = "engine:\n  idle_poll_max: 20ms\nsinks:\n  - {name: cache, type: redis, entity: account, "
                   "url: \"rediss-cluster://127.0.0.1:" + std::to_string(tls_ports_[2]) + "\", key: \"" + prefix +
                   ":{id}\", tls_ca: \"" + certs_->Path("ca.pem") + "\"}\n";
  const std::string path = cfg.Write();
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto sluice = StartSluice("serve", path, cfg.port);
  ASSERT_TRUE(sluice && sluice->running());
  HttpClient http(cfg.port);
  for (int i = 0; i < 300; ++i) {
    const auto r = http.Post("/v1/entities/account/e" + std::to_string(i % 60) + "/commands/patch",
                             R"({"n":)" + std::to_string(i) + "}");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out << sluice->Log();
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  for (PrivateRedis& n : nodes_) {
    n.Cli({"DBSIZE"}, &out);
    EXPECT_GT(std::stoll(Trim(out)), 0) << "node " << n.port() << " holds no key";
    // The sink is a client of every master, reached at the TLS port that
    // CLUSTER SLOTS named (the url is rediss-cluster://, so a plain port
    // would have failed the handshake).
    n.Cli({"CLIENT", "LIST"}, &out);
    EXPECT_NE(out.find("name=sluice:cache"), std::string::npos) << out;
  }
  EXPECT_EQ(sluice->Terminate(), 0);
}

// A cluster url pointed at nodes that do not answer: a clear error naming
// them, and the sink's lag grows (nothing skipped); `verify` says why too.
TEST(RedisClusterUrl, NoNodeAnsweringIsAClearError) {
  SLUICE_REQUIRE_MYSQL();
  std::string out;
  const std::string prefix = UniquePrefix("cld");
  SluiceConfig cfg;
  cfg.database = prefix;
  cfg.entities = {{"account", 1}};
  cfg.port = FreePort();
  const uint16_t dead = FreePort();
  cfg.extra_yaml = "sinks:\n  - {name: cache, type: redis, entity: account, url: \"redis-cluster://127.0.0.1:" +
                   std::to_string(dead) + "\", key: \"" + prefix + ":{id}\"}\n";
  const std::string path = cfg.Write();
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  EXPECT_NE(VerifyViews(path, &out), 0);
  EXPECT_NE(out.find("no node of the cluster gave its slots"), std::string::npos) << out;
  EXPECT_NE(out.find("127.0.0.1:" + std::to_string(dead)), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::testing
