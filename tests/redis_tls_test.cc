// TLS and ACL users to Redis (issue 22, items 1 and 4): a redis-server of the
// test's own serves TLS with certificates the test makes. The sink connects
// with the right CA (and with a client certificate when the server demands
// one); it refuses a server whose certificate is for another host,
// self-signed or expired, with an error that names the server and says why;
// and while it is refused the engine writes and skips nothing: the sink's
// lag grows, and it catches up once the server shows a good certificate.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "connectors/redis/redis_sink.h"
#include "connectors/sink.h"
#include "tests/support/certs.h"
#include "tests/support/config_support.h"
#include "tests/support/private_redis.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using connectors::ChangeEvent;
using connectors::Outcome;
using connectors::Sink;
using namespace std::chrono_literals;

// A redis-server with a TLS port whose certificate Present() swaps (CONFIG
// SET tls-cert-file reloads it), besides the plain port the test reads on.
class TlsRedis {
 public:
  explicit TlsRedis(const TestCerts& certs) : certs_(certs), tls_port_(FreePort()) {
    server_.AddConfig("tls-port " + std::to_string(tls_port_) + "\ntls-cert-file " + certs_.Path("server.pem") +
                      "\ntls-key-file " + certs_.Path("server.key") + "\ntls-ca-cert-file " + certs_.Path("ca.pem") +
                      "\ntls-auth-clients optional\n");
  }
  bool Start(std::string* why) { return server_.Start(why); }
  void Present(const std::string& kind) { Set({"tls-cert-file", certs_.Path(kind + ".pem"), "tls-key-file", certs_.Path(kind + ".key")}); }
  // Whether a client must show a certificate signed by the CA.
  void DemandClientCertificates(bool demand) { Set({"tls-auth-clients", demand ? "yes" : "optional"}); }
  void Set(const std::vector<std::string>& pairs) {
    std::vector<std::string> args = {"CONFIG", "SET"};
    args.insert(args.end(), pairs.begin(), pairs.end());
    std::string out;
    ASSERT_EQ(server_.Cli(args, &out), 0) << out;
    ASSERT_NE(out.find("OK"), std::string::npos) << out;
  }
  PrivateRedis& server() { return server_; }
  uint16_t tls_port() const { return tls_port_; }
  std::string Where() const { return "rediss://127.0.0.1:" + std::to_string(tls_port_) + "/0"; }

 private:
  const TestCerts& certs_;
  uint16_t tls_port_;
  PrivateRedis server_;
};

ChangeEvent Event(const std::string& id, uint64_t version) {
  ChangeEvent e;
  e.entity_type = "account";
  e.entity_id = id;
  e.version = version;
  e.state = R"({"n":)" + std::to_string(version) + "}";
  return e;
}

class RedisTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TestCerts();
    if (!certs_->ok()) return;
    server_ = new TlsRedis(*certs_);
    std::string why;
    if (!server_->Start(&why)) {
      delete server_;
      server_ = nullptr;
      start_error_ = why;
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    delete certs_;
    server_ = nullptr;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(certs_->ok()) << certs_->error();
    ASSERT_NE(server_, nullptr) << start_error_;
    server_->Present("server");
    server_->DemandClientCertificates(false);
  }

  // A redis sink from config text: `url` and more keys, each "    key: value\n".
  std::unique_ptr<Sink> MakeSink(const std::string& url, const std::string& keys, const std::string& key_prefix) {
    const std::string text = std::string(kValid) + "sinks:\n  - name: cache\n    type: redis\n    entity: account\n" +
                             "    url: \"" + url + "\"\n    key: \"" + key_prefix + ":{id}\"\n" + keys;
    auto cfg = LoadConfigFromString(text, certs_->Path("t.yaml"));
    EXPECT_TRUE(cfg.ok()) << cfg.status().message();
    if (!cfg.ok()) return nullptr;
    auto sink = connectors::redis::MakeRedisSink(cfg->sinks.at(0), *cfg);
    EXPECT_TRUE(sink.ok()) << sink.status().message();
    return sink.ok() ? std::move(sink).value() : nullptr;
  }
  std::string CaKey() const { return "    tls_ca: " + certs_->Path("ca.pem") + "\n"; }
  std::string ClientKeys() const {
    return "    tls_cert: " + certs_->Path("client.pem") + "\n    tls_key: " + certs_->Path("client.key") + "\n";
  }
  std::string Get(const std::string& key) {
    std::string out;
    server_->server().Cli({"GET", key}, &out);
    return out;
  }

  static TestCerts* certs_;
  static TlsRedis* server_;
  static std::string start_error_;
};

TestCerts* RedisTls::certs_ = nullptr;
TlsRedis* RedisTls::server_ = nullptr;
std::string RedisTls::start_error_;

TEST_F(RedisTls, TheRightCaConnectsAndWritesOverTls) {
  auto sink = MakeSink(server_->Where(), CaKey(), "ok");
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(sink->Open().ok());
  std::vector<ChangeEvent> events = {Event("a", 1), Event("b", 1), Event("a", 2)};
  auto applied = sink->Apply(events);
  ASSERT_TRUE(applied.status.ok()) << applied.status.message();
  EXPECT_EQ(applied.results[0].outcome, Outcome::kApplied);
  EXPECT_NE(Get("ok:a").find(R"("n":2)"), std::string::npos) << Get("ok:a");
  EXPECT_NE(Get("ok:b").find(R"("n":1)"), std::string::npos) << Get("ok:b");
  // The plain port of the same server is not TLS: a rediss:// url to it fails the handshake.
  auto plain = MakeSink("rediss://127.0.0.1:" + std::to_string(server_->server().port()) + "/0", CaKey(), "ok");
  ASSERT_NE(plain, nullptr);
  const Status st = plain->Open();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.message();
  EXPECT_NE(st.message().find("TLS"), std::string::npos) << st.message();
}

// 3 refusals with the default verification, 2 more with tls_verify: ca, and
// what tls_verify: ca lets through (a certificate for another host).
TEST_F(RedisTls, ACertificateForAnotherHostSelfSignedOrExpiredIsRefusedWithTheServerAndTheReason) {
  struct Case {
    std::string kind;
    bool verify_ca_only;
    std::string reason;  // empty: connects
  };
  const Case cases[] = {
      {"wrong_host", false, "IP address mismatch"},
      {"wrong_host", true, ""},
      {"self_signed", false, "self-signed certificate"},
      {"self_signed", true, "self-signed certificate"},
      {"expired", false, "certificate has expired"},
      {"expired", true, "certificate has expired"},
  };
  int refusals = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind + (c.verify_ca_only ? " with tls_verify: ca" : ""));
    server_->Present(c.kind);
    auto sink = MakeSink(server_->Where(), CaKey() + (c.verify_ca_only ? "    tls_verify: ca\n" : ""), "refusal");
    ASSERT_NE(sink, nullptr);
    const Status st = sink->Open();
    if (c.reason.empty()) {
      EXPECT_TRUE(st.ok()) << st.message();
      continue;
    }
    ++refusals;
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kUnavailable);  // the engine retries: the server may be fixed
    EXPECT_NE(st.message().find("sink 'cache' (redis " + server_->Where() + ")"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.reason), std::string::npos) << st.message();
  }
  EXPECT_EQ(refusals, 5);
  // By name: the certificate is for 127.0.0.1 and localhost, not for another name of this machine.
  server_->Present("server");
  auto by_name = MakeSink("rediss://localhost:" + std::to_string(server_->tls_port()) + "/0", CaKey(), "refusal");
  ASSERT_NE(by_name, nullptr);
  EXPECT_TRUE(by_name->Open().ok());
}

TEST_F(RedisTls, AServerThatDemandsAClientCertificateGetsOneAndAnAclUserLogsIn) {
  server_->DemandClientCertificates(true);
  auto without = MakeSink(server_->Where(), CaKey(), "mtls");
  ASSERT_NE(without, nullptr);
  const Status refused = without->Open();
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.message();
  auto with = MakeSink(server_->Where(), CaKey() + ClientKeys(), "mtls");
  ASSERT_NE(with, nullptr);
  ASSERT_TRUE(with->Open().ok());
  std::vector<ChangeEvent> events = {Event("m", 1)};
  ASSERT_TRUE(with->Apply(events).status.ok());
  EXPECT_NE(Get("mtls:m").find(R"("n":1)"), std::string::npos);

  // A Redis 6 ACL user over the same mutual TLS; a wrong password is refused without being shown.
  std::string out;
  ASSERT_EQ(server_->server().Cli({"ACL", "SETUSER", "app", "on", ">app-pw-9", "~mtls:*", "+@all"}, &out), 0) << out;
  auto user = MakeSink("rediss://app:app-pw-9@127.0.0.1:" + std::to_string(server_->tls_port()) + "/0",
                       CaKey() + ClientKeys(), "mtls");
  ASSERT_NE(user, nullptr);
  ASSERT_TRUE(user->Open().ok());
  events = {Event("m", 2)};
  ASSERT_TRUE(user->Apply(events).status.ok());
  EXPECT_NE(Get("mtls:m").find(R"("n":2)"), std::string::npos);
  auto wrong = MakeSink("rediss://app:not-it-7@127.0.0.1:" + std::to_string(server_->tls_port()) + "/0",
                        CaKey() + ClientKeys(), "mtls");
  ASSERT_NE(wrong, nullptr);
  const Status denied = wrong->Open();
  EXPECT_EQ(denied.code(), StatusCode::kFailedPrecondition) << denied.message();
  EXPECT_NE(denied.message().find("AUTH"), std::string::npos) << denied.message();
  EXPECT_EQ(denied.message().find("not-it-7"), std::string::npos) << denied.message();
}

// Through the sluice binary: while the server shows an expired certificate
// the sink writes nothing and skips nothing (its lag is every event); once
// the server shows a good one the sink catches up and `verify` finds the
// view equal to storage. tls_verify: ca is logged as a WARNING at start.
TEST_F(RedisTls, WhileRefusedTheSinkLagsAndWritesNothingThenCatchesUp) {
  SLUICE_REQUIRE_MYSQL();
  server_->Present("expired");
  const std::string prefix = UniquePrefix("rtls");
  SluiceConfig cfg;
  cfg.database = prefix;
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  cfg.extra_yaml = "engine:\n  retry_backoff_max: 300ms\n  idle_poll_max: 20ms\nsinks:\n"
                   "  - {name: cache, type: redis, entity: account, url: \"" + server_->Where() + "\", key: \"" +
                   prefix + ":{id}\", tls_ca: " + certs_->Path("ca.pem") + ", tls_verify: ca}\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto sluice = StartSluice("serve", path, cfg.port);
  ASSERT_TRUE(sluice && sluice->running());
  HttpClient http(cfg.port);
  constexpr int kCommands = 20;
  for (int i = 0; i < kCommands; ++i) {
    ASSERT_EQ(http.Post("/v1/entities/account/e" + std::to_string(i % 5) + "/commands/patch",
                        R"({"n":)" + std::to_string(i) + "}").status, 200);
  }
  // Refused: the lag is every event, and nothing reached Redis.
  int lag = 0;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    lag = 0;
    if (RunSluice({"status", "--config", path, "--json"}, &out) == 0) {
      const auto j = nlohmann::json::parse(out.substr(out.find('{')), nullptr, false);
      if (!j.is_discarded()) {
        for (const auto& s : j["sinks"]) for (const auto& p : s["partitions"]) lag += p["lag_events"].get<int>();
      }
    }
    if (lag == kCommands && sluice->Log().find("certificate has expired") != std::string::npos) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(lag, kCommands) << out;
  EXPECT_NE(sluice->Log().find("certificate has expired"), std::string::npos) << sluice->Log();
  EXPECT_NE(sluice->Log().find("WARNING: sink 'cache' has tls_verify: ca"), std::string::npos) << sluice->Log();
  server_->server().Cli({"KEYS", prefix + ":*"}, &out);
  EXPECT_EQ(out.find(prefix), std::string::npos) << out;
  // Fixed: the sink catches up with every event, and the view equals storage.
  server_->Present("server");
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out << sluice->Log();
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  for (int e = 0; e < 5; ++e) {
    EXPECT_NE(Get(prefix + ":e" + std::to_string(e)).find(R"("n":)" + std::to_string(15 + e)), std::string::npos)
        << Get(prefix + ":e" + std::to_string(e));
  }
  EXPECT_EQ(sluice->Terminate(), 0);
}

}  // namespace
}  // namespace sluice::testing
