// The S3 store against a real S3 server: SeaweedFS from `scripts/services up
// s3` (SLUICE_TEST_S3_* in .local/env). The store contract
// (objectstore/object_store_test.h) runs here as it runs on the file store,
// each test under a prefix of its own in the test bucket; then what only a
// server shows: refused credentials, a missing bucket, a port nobody
// answers on, a server that never replies.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "objectstore/object_store.h"
#include "objectstore/object_store_test.h"
#include "tests/support/s3_settings.h"

namespace sluice::objectstore {
namespace {

// This test needs only the S3 server, so it keeps to these few helpers
// rather than tests/support (which builds all of sluice first).
std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// With CI=true a server that is not there fails the test instead of skipping it.
bool InCi() { return Env("CI", "") == "true"; }

// A prefix no other test run uses: "t<pid>_<what>_<random>".
std::string UniquePrefix(const std::string& what) {
  static std::mt19937_64 rng(std::random_device{}());
  return "t" + std::to_string(::getpid()) + "_" + what + "_" + std::to_string(rng() % 1000000);
}

// A loopback port nothing listens on now (bound, then released).
uint16_t ClosedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

// The test server's settings.
ObjectStoreOptions ServerOptions(const std::string& prefix = "") { return testing::S3TestOptions(prefix); }

std::unique_ptr<ObjectStore> Open(const ObjectStoreOptions& o) {
  auto store = OpenObjectStore(o);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

// Why the test server cannot be used, or "" when it can.
std::string ServerProblem() {
  auto store = Open(ServerOptions());
  if (store == nullptr) return "bad test settings";
  Status st = CheckObjectStore(*store);
  return st.ok() ? "" : st.ToString();
}

#define SLUICE_REQUIRE_S3()                                                                      \
  do {                                                                                           \
    if (std::string why = ServerProblem(); !why.empty()) {                                       \
      if (InCi()) FAIL() << "the S3 test server is not usable (CI=true): " << why;               \
      GTEST_SKIP() << "the S3 test server is not usable (" << why << "); run scripts/services up s3"; \
    }                                                                                            \
  } while (0)

ContractStore MakeS3Store() {
  if (std::string why = ServerProblem(); !why.empty()) {
    if (InCi()) ADD_FAILURE() << "the S3 test server is not usable (CI=true): " << why;
    return {};
  }
  auto store = Open(ServerOptions(UniquePrefix("objstore")));
  if (store == nullptr) return {};
  return {std::move(store), nullptr};
}

INSTANTIATE_TEST_SUITE_P(S3, ObjectStoreContractTest, ::testing::Values(StoreKind{"SeaweedFs", MakeS3Store}),
                         StoreKindName);

// True when the text holds neither the access key id nor either secret.
::testing::AssertionResult NoSecretIn(const std::string& text, const std::vector<std::string>& secrets) {
  for (const std::string& s : secrets) {
    if (text.find(s) != std::string::npos) {
      return ::testing::AssertionFailure() << "a secret appears in: " << text;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(S3Store, CheckAcceptsTheTestBucket) {
  SLUICE_REQUIRE_S3();
  auto store = Open(ServerOptions(UniquePrefix("check")));
  ASSERT_NE(store, nullptr);
  Status st = CheckObjectStore(*store);
  EXPECT_TRUE(st.ok()) << st.ToString();
  const ObjectStoreOptions o = ServerOptions();
  EXPECT_TRUE(NoSecretIn(store->Describe(), {o.access_key, o.secret_key}));
}

TEST(S3Store, AWrongSecretKeyIsPermissionDeniedAndNamesNoKey) {
  SLUICE_REQUIRE_S3();
  ObjectStoreOptions o = ServerOptions(UniquePrefix("badsecret"));
  const std::string right_secret = o.secret_key;
  o.secret_key = "not-the-secret-key-but-a-long-wrong-one";
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  const std::vector<std::string> secrets = {o.access_key, o.secret_key, right_secret};
  std::vector<Status> results = {store->Put("a/b.seg", "x"), store->Get("a/b.seg").status(),
                                 store->List("").status(), store->Delete("a/b.seg"),
                                 CheckObjectStore(*store)};
  for (const Status& st : results) {
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
    EXPECT_TRUE(NoSecretIn(st.message(), secrets));
  }
  // S3's own Code and Message say what is wrong.
  EXPECT_NE(results[0].message().find("SignatureDoesNotMatch"), std::string::npos) << results[0].message();
  EXPECT_NE(results[0].message().find("HTTP 403"), std::string::npos) << results[0].message();
}

TEST(S3Store, AnUnknownAccessKeyIsPermissionDeniedAndNamesNoKey) {
  SLUICE_REQUIRE_S3();
  ObjectStoreOptions o = ServerOptions(UniquePrefix("badaccess"));
  o.access_key = "NOSUCHACCESSKEYID999";
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  Status st = store->Put("a/b.seg", "x");
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("InvalidAccessKeyId"), std::string::npos) << st.message();
  EXPECT_TRUE(NoSecretIn(st.message(), {o.access_key, o.secret_key}));
  Status check = CheckObjectStore(*store);
  EXPECT_EQ(check.code(), StatusCode::kPermissionDenied) << check.ToString();
}

TEST(S3Store, AMissingBucketIsAFailedPreconditionNamingIt) {
  SLUICE_REQUIRE_S3();
  ObjectStoreOptions o = ServerOptions();
  const std::string bucket = "sluice-missing-" + std::to_string(::getpid());
  o.url = "s3://" + bucket + "/archive";
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  std::vector<Status> results = {store->Put("a/b.seg", "x"), store->Get("a/b.seg").status(),
                                 store->List("").status(), CheckObjectStore(*store)};
  for (const Status& st : results) {
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("\"" + bucket + "\""), std::string::npos) << st.message();
    EXPECT_TRUE(NoSecretIn(st.message(), {o.access_key, o.secret_key}));
  }
  // Putting did not create the bucket.
  EXPECT_EQ(CheckObjectStore(*store).code(), StatusCode::kFailedPrecondition);
}

TEST(S3Store, APortNobodyListensOnIsUnavailableQuickly) {
  ObjectStoreOptions o = ServerOptions();
  const uint16_t closed = ClosedPort();
  ASSERT_NE(closed, 0);
  o.endpoint = "http://127.0.0.1:" + std::to_string(closed);
  o.timeout_ms = 3000;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Status> results = {store->Put("a/b.seg", "x"), store->Get("a/b.seg").status(),
                                 store->List("").status(), store->Delete("a/b.seg"),
                                 CheckObjectStore(*store)};
  const auto took = std::chrono::steady_clock::now() - start;
  for (const Status& st : results) {
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find(o.endpoint), std::string::npos) << st.message();
    EXPECT_TRUE(NoSecretIn(st.message(), {o.access_key, o.secret_key}));
  }
  EXPECT_LT(took, std::chrono::seconds(3)) << "refused connections should fail at once";
}

// A listener that accepts connections (the kernel does, from its backlog)
// but never answers: a hung server.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
  }
  ~SilentServer() { ::close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(S3Store, AServerThatNeverAnswersIsUnavailableAfterTheTimeout) {
  SilentServer silent;
  ASSERT_NE(silent.port(), 0);
  ObjectStoreOptions o = ServerOptions();
  o.endpoint = "http://127.0.0.1:" + std::to_string(silent.port());
  o.timeout_ms = 1000;
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  const auto start = std::chrono::steady_clock::now();
  auto got = store->Get("a/b.seg");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_LT(took, std::chrono::seconds(5));
}

// The gateway's TLS port, with the certificate of scripts/services (.local/tls/).
ObjectStoreOptions TlsOptions(const std::string& prefix) {
  ObjectStoreOptions o = ServerOptions(prefix);
  o.endpoint = Env("SLUICE_TEST_S3_TLS_ENDPOINT", "https://127.0.0.1:18337");
  o.tls_ca = Env("SLUICE_TEST_TLS_CA", SLUICE_SOURCE_DIR "/.local/tls/ca.pem");
  return o;
}

TEST(S3Store, TlsWithTheServersCaCarriesTheWholeContract) {
  SLUICE_REQUIRE_S3();
  auto store = Open(TlsOptions(UniquePrefix("tls")));
  ASSERT_NE(store, nullptr);
  Status check = CheckObjectStore(*store);
  ASSERT_TRUE(check.ok()) << check.ToString();
  std::string bytes(1 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31 % 251);
  ASSERT_TRUE(store->Put("seg/one.seg", bytes).ok());
  auto got = store->Get("seg/one.seg");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == bytes);
  auto listed = store->List("seg/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].size, bytes.size());
  EXPECT_TRUE(store->Delete("seg/one.seg").ok());
}

TEST(S3Store, TlsRefusesACertificateNoTrustedCaSigned) {
  SLUICE_REQUIRE_S3();
  ObjectStoreOptions o = TlsOptions(UniquePrefix("tls"));
  o.tls_ca.clear();  // the system's CAs, which never signed the test CA
  auto store = Open(o);
  ASSERT_NE(store, nullptr);
  Status st = CheckObjectStore(*store);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("tls_ca"), std::string::npos) << st.message();
  EXPECT_TRUE(NoSecretIn(st.message(), {o.access_key, o.secret_key}));
  // Unless told not to check.
  o.tls_verify = false;
  store = Open(o);
  ASSERT_NE(store, nullptr);
  st = CheckObjectStore(*store);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST(S3Store, PrefixesKeepStoresApartInOneBucket) {
  SLUICE_REQUIRE_S3();
  const std::string prefix = UniquePrefix("apart");
  auto inner = Open(ServerOptions(prefix + "/archive"));
  auto other = Open(ServerOptions(prefix + "/other"));
  auto outer = Open(ServerOptions(prefix));
  ASSERT_TRUE(inner && other && outer);
  ASSERT_TRUE(inner->Put("seg/1.seg", "one").ok());
  ASSERT_TRUE(other->Put("seg/1.seg", "uno").ok());
  auto listed = inner->List("");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, "seg/1.seg");
  auto all = outer->List("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "archive/seg/1.seg");
  EXPECT_EQ((*all)[1].key, "other/seg/1.seg");
  auto got = outer->Get("other/seg/1.seg");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "uno");
  ASSERT_TRUE(inner->Delete("seg/1.seg").ok());
  ASSERT_TRUE(other->Delete("seg/1.seg").ok());
}

}  // namespace
}  // namespace sluice::objectstore
