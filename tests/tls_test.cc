// TLS to MySQL (issue 22, items 1 and 4), against a MariaDB server of the
// test's own that presents certificates the test makes: each ssl_mode
// connects with the right CA, and the modes that verify refuse a server
// whose certificate is for another host, self-signed or expired, with an
// error that names the server and says why.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "sql/connection.h"
#include "tests/support/certs.h"
#include "tests/support/private_mariadb.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

namespace fs = std::filesystem;

// A MariaDB whose certificate is "live.pem", a copy of one of the test's
// kinds, swapped with Present() (FLUSH SSL reloads it).
class TlsMariaDb {
 public:
  explicit TlsMariaDb(const TestCerts& certs) : certs_(certs) {
    Copy("server");
    server_.AddConfig("ssl-ca = " + certs_.Path("ca.pem") + "\nssl-cert = " + certs_.Path("live.pem") +
                      "\nssl-key = " + certs_.Path("live.key") + "\n");
  }
  bool Start(std::string* why) { return server_.Start(why); }
  // The server presents `kind`'s certificate to the next connections.
  void Present(const std::string& kind) {
    Copy(kind);
    std::string out;
    ASSERT_TRUE(server_.Sql("FLUSH SSL", &out)) << out;
  }
  PrivateMariaDb& server() { return server_; }
  sql::ConnectParams Params(sql::SslMode mode) const {
    sql::ConnectParams p;  // the user PrivateMariaDb makes
    p.host = "127.0.0.1";
    p.port = server_.port();
    p.user = "sluice";
    p.password = "sluice";
    p.ssl_mode = mode;
    if (mode != sql::SslMode::kDisabled && mode != sql::SslMode::kRequired) p.ssl_ca = certs_.Path("ca.pem");
    return p;
  }

 private:
  void Copy(const std::string& kind) {
    fs::copy_file(certs_.Path(kind + ".pem"), certs_.Path("live.pem"), fs::copy_options::overwrite_existing);
    fs::copy_file(certs_.Path(kind + ".key"), certs_.Path("live.key"), fs::copy_options::overwrite_existing);
  }
  const TestCerts& certs_;
  PrivateMariaDb server_;
};

// The cipher of the session: empty when it is not encrypted.
std::string Cipher(sql::Connection& c) {
  auto rows = c.Query("SHOW SESSION STATUS LIKE 'Ssl_cipher'");
  return rows.ok() && !rows->empty() ? rows->at(0).at(1).value_or("") : "";
}

class MysqlTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new TestCerts();
    if (!certs_->ok()) return;
    server_ = new TlsMariaDb(*certs_);
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
  }

  static TestCerts* certs_;
  static TlsMariaDb* server_;
  static std::string start_error_;
};

TestCerts* MysqlTls::certs_ = nullptr;
TlsMariaDb* MysqlTls::server_ = nullptr;
std::string MysqlTls::start_error_;

TEST_F(MysqlTls, EveryModeConnectsToTheRightCertificateAndEncryptsWhenAsked) {
  auto plain = sql::Connection::Open(server_->Params(sql::SslMode::kDisabled));
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(Cipher(**plain), "");
  for (const sql::SslMode mode : {sql::SslMode::kRequired, sql::SslMode::kVerifyCa, sql::SslMode::kVerifyIdentity}) {
    auto c = sql::Connection::Open(server_->Params(mode));
    ASSERT_TRUE(c.ok()) << static_cast<int>(mode) << ": " << c.status().message();
    EXPECT_NE(Cipher(**c), "") << static_cast<int>(mode);
  }
}

// 3 x 2 refusals (and what the weaker modes let through, as documented).
TEST_F(MysqlTls, ACertificateForAnotherHostSelfSignedOrExpiredIsRefusedWithTheServerAndTheReason) {
  const std::string where = "127.0.0.1:" + std::to_string(server_->server().port());
  struct Case {
    std::string kind;
    sql::SslMode mode;
    std::string reason;  // empty: connects
  };
  const Case cases[] = {
      {"wrong_host", sql::SslMode::kVerifyIdentity, "must be signed by ssl_ca and name the host connected to (127.0.0.1)"},
      {"wrong_host", sql::SslMode::kVerifyCa, ""},  // verify_ca checks the signature only
      {"self_signed", sql::SslMode::kVerifyIdentity, "self-signed certificate"},
      {"self_signed", sql::SslMode::kVerifyCa, "self-signed certificate"},
      {"self_signed", sql::SslMode::kRequired, ""},  // required checks nothing: encrypted only
      {"expired", sql::SslMode::kVerifyIdentity, "certificate has expired"},
      {"expired", sql::SslMode::kVerifyCa, "certificate has expired"},
  };
  int refusals = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.kind + " with mode " + std::to_string(static_cast<int>(c.mode)));
    server_->Present(c.kind);
    auto opened = sql::Connection::Open(server_->Params(c.mode));
    if (c.reason.empty()) {
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      EXPECT_NE(Cipher(**opened), "");
      continue;
    }
    ASSERT_FALSE(opened.ok());
    ++refusals;
    const std::string m = opened.status().message();
    EXPECT_NE(m.find("cannot connect to MySQL at " + where), std::string::npos) << m;
    EXPECT_NE(m.find(c.reason), std::string::npos) << m;
  }
  EXPECT_EQ(refusals, 5);
}

// Mutual TLS (a user that must show a client certificate), and the config
// keys through the sluice binary: init, a writer that stores a command,
// and a refusal that names the server and the reason.
TEST_F(MysqlTls, MutualTlsThroughTheConfigKeysAndARefusalNamesTheServerAndTheReason) {
  std::string out;
  ASSERT_TRUE(server_->server().Sql("CREATE USER IF NOT EXISTS \"x509\"@\"%\" IDENTIFIED BY \"x509-pw\" REQUIRE X509; "
                                    "GRANT ALL PRIVILEGES ON *.* TO \"x509\"@\"%\"",
                                    &out))
      << out;
  sql::ConnectParams p = server_->Params(sql::SslMode::kVerifyIdentity);
  p.user = "x509";
  p.password = "x509-pw";
  auto without = sql::Connection::Open(p);
  ASSERT_FALSE(without.ok());
  EXPECT_NE(without.status().message().find("Access denied"), std::string::npos) << without.status().message();
  p.ssl_cert = certs_->Path("client.pem");
  p.ssl_key = certs_->Path("client.key");
  auto with = sql::Connection::Open(p);
  ASSERT_TRUE(with.ok()) << with.status().message();

  const uint16_t port = FreePort();
  const std::string yaml =
      "storage:\n  mysql:\n    host: 127.0.0.1\n    port: " + std::to_string(server_->server().port()) +
      "\n    user: x509\n    password: x509-pw\n    database: tls_e2e\n    ssl_ca: " + certs_->Path("ca.pem") +
      "\n    ssl_cert: " + certs_->Path("client.pem") + "\n    ssl_key: " + certs_->Path("client.key") +
      "\nentities:\n  account: {partitions: 1}\nwriter:\n  listen: 127.0.0.1:" + std::to_string(port) + "\n";
  const std::string path = certs_->Path("sluice.yaml");
  std::ofstream(path) << yaml;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  {
    SluiceProcess writer({"writer", "--config", path}, port);
    std::string why;
    ASSERT_TRUE(writer.Start(&why)) << why;
    HttpClient http(port);
    EXPECT_EQ(http.Post("/v1/entities/account/a1/commands/create", R"({"owner":"tls"})").status / 100, 2);
    EXPECT_EQ(writer.Log().find("WARNING"), std::string::npos) << writer.Log();  // verify_identity: nothing to warn of
    EXPECT_EQ(writer.Terminate(), 0) << writer.Log();
  }
  ASSERT_TRUE(server_->server().Sql("SELECT COUNT(*) FROM tls_e2e.ev_account_p000", &out)) << out;
  EXPECT_NE(out.find("\n1\n"), std::string::npos) << out;  // the command, stored over mutual TLS
  // The server shows a certificate for another host: every command says which server and why.
  server_->Present("wrong_host");
  EXPECT_EQ(RunSluice({"status", "--config", path}, &out), 1) << out;
  EXPECT_NE(out.find("cannot connect to MySQL at 127.0.0.1:" + std::to_string(server_->server().port())),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("name the host connected to"), std::string::npos) << out;
  EXPECT_EQ(out.find("x509-pw"), std::string::npos) << out;  // no secret in the error
  // ssl_mode required connects to it, and says loudly that nothing is verified.
  std::string weak = yaml;
  weak.replace(weak.find("    ssl_ca: "), 0, "    ssl_mode: required\n");
  std::ofstream(path) << weak;
  SluiceProcess writer({"writer", "--config", path}, port);
  std::string why;
  ASSERT_TRUE(writer.Start(&why)) << why;
  EXPECT_NE(writer.Log().find("WARNING: storage.mysql.ssl_mode is required"), std::string::npos) << writer.Log();
  EXPECT_EQ(writer.Terminate(), 0) << writer.Log();
}

}  // namespace
}  // namespace sluice::testing
