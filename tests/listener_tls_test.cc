// TLS on sluice's own listeners (issue 22, items 3 and 4), with certificates
// the test makes: the HTTP server behind the writer API, the admin endpoint
// and the metrics listener serves TLS, swaps a renewed certificate in
// without a restart (and keeps the old one when the new files do not load),
// demands client certificates when told to; sluice's own clients of those
// listeners (a writer forwarding to another, the operator commands reaching
// the admin endpoint) refuse a certificate for another host, a self-signed
// one and an expired one, naming the listener and the reason. curl, an
// independent client, checks what the server serves.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "http/forwarder.h"
#include "http/server.h"
#include "tests/support/certs.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class ListenerTls : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.error();
    Present("server");
  }
  // The listener's files live.pem/live.key take `kind`'s certificate (a
  // renewal as cert-manager or certbot does it: new files renamed in).
  void Present(const std::string& kind) {
    for (const char* ext : {".pem", ".key"}) {
      fs::copy_file(certs_.Path(kind + ext), certs_.Path(std::string("next") + ext), fs::copy_options::overwrite_existing);
      fs::rename(certs_.Path(std::string("next") + ext), certs_.Path(std::string("live") + ext));
    }
  }
  http::ServerTls LiveTls(bool client_certificates = false) const {
    return http::ServerTls{certs_.Path("live.pem"), certs_.Path("live.key"),
                           client_certificates ? certs_.Path("ca.pem") : ""};
  }
  // curl against the listener: its exit code; body or error in *out.
  int Curl(uint16_t port, const std::string& options, std::string* out, const std::string& host = "127.0.0.1") {
    return RunCommand("curl -sS --max-time 10 --cacert " + certs_.Path("ca.pem") + " " + options + " https://" + host +
                          ":" + std::to_string(port) + "/hello",
                      out);
  }
  TestCerts certs_;
};

std::unique_ptr<http::Server> HelloServer(http::ServerOptions o, std::atomic<int>* tls_failures = nullptr) {
  if (tls_failures != nullptr) {
    o.on_close = [tls_failures](http::CloseReason r) {
      if (r == http::CloseReason::kTlsHandshake) ++*tls_failures;
    };
  }
  return std::make_unique<http::Server>(std::move(o), [](http::Request&& req, http::Responder respond) {
    http::Response r;
    r.content_type = "text/plain";
    r.body = "hello " + req.target;
    respond(std::move(r));
  });
}

TEST_F(ListenerTls, ServesTlsAndSwapsARenewedCertificateInWithoutARestart) {
  http::ServerOptions o;
  o.tls = LiveTls();
  std::atomic<int> tls_failures{0};
  auto server = HelloServer(o, &tls_failures);
  ASSERT_TRUE(server->Start().ok());
  std::string out;
  ASSERT_EQ(Curl(server->port(), "", &out), 0) << out;
  EXPECT_EQ(out, "hello /hello");
  // Keep-alive over TLS: two requests on one connection.
  ASSERT_EQ(RunCommand("curl -sS --max-time 10 --cacert " + certs_.Path("ca.pem") + " https://127.0.0.1:" +
                           std::to_string(server->port()) + "/a https://127.0.0.1:" + std::to_string(server->port()) +
                           "/b",
                       &out),
            0)
      << out;
  EXPECT_EQ(out, "hello /ahello /b");
  // Plain HTTP to the TLS port is a failed handshake, counted as such.
  EXPECT_NE(RunCommand("curl -sS --max-time 10 http://127.0.0.1:" + std::to_string(server->port()) + "/", &out), 0);
  for (int i = 0; i < 50 && tls_failures.load() == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_GE(tls_failures.load(), 1);

  // Renewed to an expired certificate (the files are looked at once a second): curl refuses it.
  Present("expired");
  std::this_thread::sleep_for(1100ms);
  EXPECT_NE(Curl(server->port(), "", &out), 0);
  EXPECT_NE(out.find("expired"), std::string::npos) << out;
  // Renewed to a good one: served without a restart.
  Present("server");
  std::this_thread::sleep_for(1100ms);
  ASSERT_EQ(Curl(server->port(), "", &out), 0) << out;
  // A key that is not the certificate's (a renewal caught half way): the previous pair stays in use.
  fs::copy_file(certs_.Path("expired.key"), certs_.Path("live.key"), fs::copy_options::overwrite_existing);
  std::this_thread::sleep_for(1100ms);
  EXPECT_EQ(Curl(server->port(), "", &out), 0) << out;
  EXPECT_EQ(out, "hello /hello");
}

TEST_F(ListenerTls, AStartWithFilesThatDoNotLoadFailsNamingTheFile) {
  http::ServerOptions o;
  o.tls = LiveTls();
  o.tls->key = certs_.Path("expired.key");  // not the key of live.pem
  auto server = HelloServer(o);
  const Status st = server->Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("is not the key of " + certs_.Path("live.pem")), std::string::npos) << st.message();
  o.tls = LiveTls();
  o.tls->cert = certs_.Path("missing.pem");
  auto missing = HelloServer(o);
  const Status gone = missing->Start();
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.message().find("cannot load the certificate " + certs_.Path("missing.pem")), std::string::npos)
      << gone.message();
}

TEST_F(ListenerTls, ClientCertificatesWhenDemanded) {
  http::ServerOptions o;
  o.tls = LiveTls(/*client_certificates=*/true);
  std::atomic<int> tls_failures{0};
  auto server = HelloServer(o, &tls_failures);
  ASSERT_TRUE(server->Start().ok());
  std::string out;
  EXPECT_NE(Curl(server->port(), "", &out), 0) << out;  // no certificate
  EXPECT_NE(Curl(server->port(), "--cert " + certs_.Path("self_signed.pem") + " --key " + certs_.Path("self_signed.key"), &out), 0)
      << out;  // one the CA did not sign
  ASSERT_EQ(Curl(server->port(), "--cert " + certs_.Path("client.pem") + " --key " + certs_.Path("client.key"), &out), 0)
      << out;
  EXPECT_EQ(out, "hello /hello");
  for (int i = 0; i < 50 && tls_failures.load() < 2; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(tls_failures.load(), 2);
}

// A writer forwarding a command to another over https: the right CA (and a
// client certificate when asked for one) gets through; a certificate for
// another host, a self-signed one and an expired one are refused, each with
// libcurl's reason.
TEST_F(ListenerTls, AForwardingWriterRefusesACertificateForAnotherHostSelfSignedOrExpired) {
  http::ServerOptions o;
  o.tls = LiveTls(/*client_certificates=*/true);
  auto server = HelloServer(o);
  ASSERT_TRUE(server->Start().ok());
  http::ForwarderOptions fo;
  fo.tls_ca = certs_.Path("ca.pem");
  fo.tls_cert = certs_.Path("client.pem");
  fo.tls_key = certs_.Path("client.key");
  // A forwarder per request: a kept-alive connection would skip the handshake.
  const auto send = [&](const std::string& host) {
    http::Forwarder forwarder(fo);
    EXPECT_TRUE(forwarder.Start().ok());
    std::promise<Result<http::Response>> done;
    forwarder.Send("https://" + host + ":" + std::to_string(server->port()) + "/v1/x", "GET", {}, "",
                   [&done](Result<http::Response> r) { done.set_value(std::move(r)); });
    return done.get_future().get();
  };
  auto ok = send("127.0.0.1");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->body, "hello /v1/x");
  struct Case {
    std::string kind;
    std::string reason;
  };
  int refusals = 0;
  for (const Case& c : {Case{"wrong_host", "matches target host name"}, Case{"self_signed", "self-signed certificate"},
                        Case{"expired", "certificate has expired"}}) {
    SCOPED_TRACE(c.kind);
    Present(c.kind);
    std::this_thread::sleep_for(1100ms);
    auto refused = send("127.0.0.1");
    ASSERT_FALSE(refused.ok());
    ++refusals;
    EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(refused.status().message().find("127.0.0.1:" + std::to_string(server->port())), std::string::npos)
        << refused.status().message();
    EXPECT_NE(refused.status().message().find(c.reason), std::string::npos) << refused.status().message();
  }
  EXPECT_EQ(refusals, 3);
}

// Through the sluice binary: the writer API, the metrics listener and the
// admin endpoint over TLS (the admin endpoint demanding client
// certificates); the operator commands reach it with admin.tls.ca and
// refuse it, naming it and the reason, when it shows a certificate for
// another host, a self-signed one or an expired one.
TEST_F(ListenerTls, EveryListenerOfServeOverTlsAndTheOperatorCommandsRefuseABadCertificate) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  const std::string prefix = UniquePrefix("ltls");
  SluiceConfig cfg;
  cfg.database = prefix;
  cfg.entities = {{"account", 1}};
  cfg.port = FreePort();
  const uint16_t admin_port = FreePort();
  const uint16_t metrics_port = FreePort();
  const std::string tls_files = "cert: " + certs_.Path("live.pem") + ", key: " + certs_.Path("live.key");
  cfg.extra_writer_yaml = "  tls: {" + tls_files + ", ca: " + certs_.Path("ca.pem") + "}\n";
  cfg.extra_yaml = "admin:\n  listen: 127.0.0.1:" + std::to_string(admin_port) + "\n  token: adm-tok-3\n  tls: {" +
                   tls_files + ", client_ca: " + certs_.Path("ca.pem") + ", ca: " + certs_.Path("ca.pem") +
                   "}\nmetrics:\n  listen: 127.0.0.1:" + std::to_string(metrics_port) + "\n  tls: {" + tls_files +
                   "}\nsinks:\n  - {name: cache, type: redis, entity: account, url: \"" + RedisUrl() + "\", key: \"" +
                   prefix + ":{id}\"}\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  SluiceProcess sluice({"serve", "--config", path}, metrics_port);
  // Started by its log line: SluiceProcess's own readiness probe speaks plain HTTP.
  std::string why;
  ASSERT_TRUE(sluice.StartNoHttp(&why, "listening on https://")) << why;
  EXPECT_NE(sluice.Log().find("metrics on https://"), std::string::npos) << sluice.Log();
  EXPECT_NE(sluice.Log().find("admin endpoint on https://"), std::string::npos) << sluice.Log();

  // The writer API over TLS.
  ASSERT_EQ(RunCommand("curl -sS --max-time 10 --cacert " + certs_.Path("ca.pem") +
                           " -X POST -H 'Content-Type: application/json' -d '{\"n\":1}' https://127.0.0.1:" +
                           std::to_string(cfg.port) + "/v1/entities/account/a1/commands/patch",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("\"version\":1"), std::string::npos) << out;
  // The metrics listener over TLS.
  ASSERT_EQ(RunCommand("curl -sS --max-time 10 --cacert " + certs_.Path("ca.pem") + " https://127.0.0.1:" +
                           std::to_string(metrics_port) + "/metrics",
                       &out),
            0)
      << out.substr(0, 500);
  EXPECT_NE(out.find("sluice_"), std::string::npos);
  // The admin endpoint wants a client certificate: curl without one is refused, the operator command gets through.
  EXPECT_NE(RunCommand("curl -sS --max-time 10 --cacert " + certs_.Path("ca.pem") +
                           " -H 'Authorization: Bearer adm-tok-3' https://127.0.0.1:" + std::to_string(admin_port) +
                           "/v1/sinks",
                       &out),
            0)
      << out;
  ASSERT_EQ(RunSluice({"pause", "--config", path, "--sink", "cache"}, &out), 0) << out;
  ASSERT_EQ(RunSluice({"resume", "--config", path, "--sink", "cache"}, &out), 0) << out;

  struct Case {
    std::string kind;
    std::string reason;
  };
  int refusals = 0;
  for (const Case& c : {Case{"wrong_host", "IP address mismatch"}, Case{"self_signed", "self-signed certificate"},
                        Case{"expired", "certificate has expired"}}) {
    SCOPED_TRACE(c.kind);
    Present(c.kind);
    std::this_thread::sleep_for(1100ms);
    EXPECT_NE(RunSluice({"pause", "--config", path, "--sink", "cache"}, &out), 0) << out;
    ++refusals;
    EXPECT_NE(out.find("TLS with the admin endpoint 127.0.0.1:" + std::to_string(admin_port) + " failed"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find(c.reason), std::string::npos) << out;
    EXPECT_EQ(out.find("adm-tok-3"), std::string::npos) << out;
  }
  EXPECT_EQ(refusals, 3);
  Present("server");
  std::this_thread::sleep_for(1100ms);
  EXPECT_EQ(RunSluice({"pause", "--config", path, "--sink", "cache"}, &out), 0) << out;
  EXPECT_EQ(sluice.Terminate(), 0) << sluice.Log();
}

}  // namespace
}  // namespace sluice::testing
