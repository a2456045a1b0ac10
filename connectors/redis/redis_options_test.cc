// The redis sink's keys as the config loader reads them (redis_options.cc):
// the messages, with FILE:LINE:COL, that `sluice config check` prints. The
// fixtures (kValid, kSinks) are shared with config/config_test.cc
// (tests/support/config_support.h).
#include "connectors/redis/redis_options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "tests/support/config_support.h"

namespace sluice::connectors::redis {
namespace {

using config::Config;
using testing::Errors;
using testing::kFile;
using testing::kValid;
using testing::LoadConfigFromString;
using testing::ScopedEnv;
using testing::SinksWith;
using testing::WithSinks;

// A valid file with one redis sink whose url is on line 14, column 10.
std::string WithUrl(const std::string& url) {
  return WithSinks("  - name: account_cache\n"
                   "    type: redis\n"
                   "    entity: account\n"
                   "    url: " + url + "\n");
}

// Moved from config/config_test.cc (SinkErrors.BadRedisUrl) when the two
// parsers of this grammar became one (redis_url.h): the form now shows the
// optional ACL user, a user name with a password is accepted, and so is a
// database above 15 (a server may have more than 16).
TEST(RedisConfig, BadUrl) {
  const std::string prefix =
      "t.yaml:14:10: sinks[0].url: must be a URL of the form "
      "redis[s]://[[user]:password@]host[:port][/db], redis[s]-sentinel://[[user]:password@]host[:port][,...]/MASTER[/db] "
      "or redis[s]-cluster://[[user]:password@]host[:port][,...]: ";
  const std::string kDb = "the database after / must be a number (0 to the server's databases setting - 1)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://127.0.0.1:6379/0", "the scheme must be redis://, rediss:// (TLS), redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://"},
      {"redis+tls://127.0.0.1", "the scheme must be redis://, rediss:// (TLS), redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://"},
      {"redis://127.0.0.1:0/0", "the port must be between 1 and 65535"},
      {"redis://127.0.0.1:65536/0", "the port must be between 1 and 65535"},
      {"redis://127.0.0.1:/0", "the port must be between 1 and 65535"},
      {"redis://:6379/0", "the host is empty"},
      {"redis:///0", "the host is empty"},
      {"redis://127.0.0.1/", kDb},
      {"redis://127.0.0.1/0?timeout=1", kDb},
      {"redis://127.0.0.1/2147483648", kDb},
      {"redis://user@127.0.0.1",
       "a user name needs a password: write user:password@, or :password@ without a user"},
      {"redis://:@127.0.0.1", "the password after ':' is empty"},
      {"redis://:50%@127.0.0.1",
       "the user name or password has a % that is not followed by two hex digits (write a literal % as %25)"},
      {"redis://[::1:6379", "the IPv6 host has no closing ]"},
      {"redis://a b:6379", "the host is not a valid host name or IP address"},
  };
  for (const auto& [url, why] : cases) {
    EXPECT_EQ(Errors(WithUrl("\"" + url + "\"")), prefix + why) << url;
  }
  for (const std::string url : {"redis://localhost", "redis://[::1]:6380/2", "redis://[::1]",
                                "redis://:a@b@h_1.example:1/0", "redis://default:pw@127.0.0.1/16",
                                "redis://app%3A1:p%40ss@h:1/0", "rediss://app:pw@cache.example.com:6380/1"}) {
    EXPECT_EQ(Errors(WithUrl("\"" + url + "\"")), "") << url;
  }
  // The URL is never quoted back: it may hold a password.
  EXPECT_EQ(Errors(WithUrl("\"redis://:hunter2@h:99999/0\"")), prefix + "the port must be between 1 and 65535");
}

// Moved from config/config_test.cc (Secrets.BadRedisUrlFromASecretIsNotShown).
TEST(RedisConfig, BadUrlFromASecretIsNotShown) {
  constexpr char kPassword[] = "s3cr3t-Redis-8";
  const std::string url = std::string("http://:") + kPassword + "@cache";
  ::setenv("SLUICE_TEST_REDIS_URL", url.c_str(), 1);
  const std::string errors = Errors(WithUrl("\"${env:SLUICE_TEST_REDIS_URL}\""));
  EXPECT_EQ(errors,
            "t.yaml:14:10: sinks[0].url: must be a URL of the form "
            "redis[s]://[[user]:password@]host[:port][/db], redis[s]-sentinel://[[user]:password@]host[:port][,...]/MASTER[/db] "
      "or redis[s]-cluster://[[user]:password@]host[:port][,...]: the scheme must be redis://, rediss:// (TLS), redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://");
  EXPECT_EQ(errors.find(kPassword), std::string::npos);
  ::unsetenv("SLUICE_TEST_REDIS_URL");
  EXPECT_EQ(Errors(WithUrl("\"${env:SLUICE_TEST_REDIS_URL}\"")),
            "t.yaml:14:10: sinks[0].url: environment variable SLUICE_TEST_REDIS_URL is not set");
  EXPECT_EQ(Errors(WithUrl("[a]")), "t.yaml:14:10: sinks[0].url: must be a string, got a sequence");
}

// Moved from config/config_test.cc.
TEST(SinkErrors, RedisKeyNeedsId) {
  EXPECT_EQ(Errors(SinksWith("key: \"account:{id}\"", "key: \"account:\"")),
            "t.yaml:15:10: sinks[0].key: must contain {id}, got \"account:\"");
  EXPECT_EQ(Errors(SinksWith("key: \"account:{id}\"", "key: \"{type}:{name}\"")),
            "t.yaml:15:10: sinks[0].key: unknown placeholder \"{name}\" (only {id} and {type} are "
            "replaced), got \"{type}:{name}\"");
  EXPECT_EQ(Errors(SinksWith("key: \"account:{id}\"", "key: \"a:{id\"")),
            "t.yaml:15:10: sinks[0].key: unknown placeholder \"{id\" (only {id} and {type} are "
            "replaced), got \"a:{id\"");
  EXPECT_EQ(Errors(SinksWith("key: \"account:{id}\"", "key: \"a}:{id}\"")),
            "t.yaml:15:10: sinks[0].key: has a } without a matching {, got \"a}:{id}\"");
}

TEST(SinkErrors, FieldsOnlyWithHashFormat) {
  EXPECT_EQ(Errors(SinksWith("format: hash", "format: json")),
            "t.yaml:24:5: sinks[1].fields: only for format: hash (this sink stores each entity "
            "as one JSON string)");
  EXPECT_EQ(Errors(SinksWith("    format: hash\n", "")),
            "t.yaml:23:5: sinks[1].fields: only for format: hash (this sink stores each entity "
            "as one JSON string)");
  // A bad format is reported once, not also at fields.
  EXPECT_EQ(Errors(SinksWith("format: hash", "format: hashes")),
            "t.yaml:23:13: sinks[1].format: must be json or hash, got \"hashes\"");
  EXPECT_EQ(Errors(SinksWith("fields: {owner: /owner/name, balance: /balance, Total_2: \"\"}",
                             "fields: {}")),
            "t.yaml:24:13: sinks[1].fields: must be a mapping from field name to JSON pointer "
            "with at least one entry, got an empty mapping");
}

// TLS keys: only with rediss://, a certificate with its key, PEM files that
// exist, tls_verify identity or ca; printed back, and weak settings warned of.
TEST(RedisConfig, TlsKeys) {
  const std::string dir = ::testing::TempDir();  // ends with /
  const std::string ca = dir + "redis_tls_ca.pem", cert = dir + "redis_tls_cert.pem", key = dir + "redis_tls.key";
  for (const std::string& f : {ca, cert, key}) {
    std::ofstream(f) << "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  }
  const std::string tls_url = "\"rediss://cache.example.com:6380/0\"\n";
  EXPECT_EQ(Errors(WithUrl(tls_url + "    tls_ca: " + ca + "\n    tls_cert: " + cert + "\n    tls_key: " + key +
                           "\n    tls_verify: identity\n")),
            "");
  EXPECT_EQ(Errors(WithUrl("redis://h:1/0\n    tls_ca: " + ca + "\n")),
            "t.yaml:15:5: sinks[0].tls_ca: only with a rediss:// or rediss-sentinel:// url");
  EXPECT_EQ(Errors(WithUrl(tls_url + "    tls_cert: " + cert + "\n")),
            "t.yaml:15:5: sinks[0].tls_cert: needs tls_key, the certificate's private key");
  EXPECT_EQ(Errors(WithUrl(tls_url + "    tls_key: " + key + "\n")),
            "t.yaml:15:5: sinks[0].tls_key: needs tls_cert, the certificate of this key");
  EXPECT_EQ(Errors(WithUrl(tls_url + "    tls_verify: none\n")),
            "t.yaml:15:17: sinks[0].tls_verify: must be identity or ca, got \"none\"");
  EXPECT_EQ(Errors(WithUrl(tls_url + "    tls_ca: " + dir + "no-such.pem\n")).find("t.yaml:15:13: sinks[0].tls_ca: cannot read CA file "),
            0u);
  std::ofstream(dir + "not-pem.txt") << "hello";
  EXPECT_NE(Errors(WithUrl(tls_url + "    tls_ca: " + dir + "not-pem.txt\n")).find("is not a PEM file"), std::string::npos);

  Result<Config> r = LoadConfigFromString(WithUrl(tls_url + "    tls_ca: " + ca + "\n    tls_verify: ca\n"), kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const config::TlsClientOptions& tls = r->sinks[0].Options<RedisSinkOptions>().tls;
  EXPECT_EQ(tls.ca, ca);
  EXPECT_EQ(tls.verify, config::TlsClientOptions::Verify::kCa);
  EXPECT_NE(r->Redacted().find("    tls_ca: " + ca + "\n    tls_verify: ca\n"), std::string::npos) << r->Redacted();
  const config::SinkType& type = RedisSinkType().config;
  ASSERT_TRUE(type.warnings);
  const auto warnings = type.warnings(r->sinks[0]);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "WARNING: sink 'account_cache' has tls_verify: ca: any server with a certificate from " + ca +
                             " is accepted, whatever host it was issued to; remove tls_verify to check the host name too");
  r = LoadConfigFromString(WithUrl(tls_url), kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(type.warnings(r->sinks[0]).empty());
}

TEST(Secrets, RedisUrlFromTheEnvironmentIsResolvedAndRedacted) {
  constexpr char kPassword[] = "s3cr3t-Redis-7";
  const std::string url = std::string("redis://:") + kPassword + "@cache:6379/1";
  ScopedEnv env("SLUICE_TEST_REDIS_URL", url.c_str());
  Result<Config> r = LoadConfigFromString(
      SinksWith("url: redis://127.0.0.1:16379/0", "url: \"${env:SLUICE_TEST_REDIS_URL}\""), kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sinks[0].Options<RedisSinkOptions>().url, url);
  EXPECT_EQ(r->secret_references, (std::map<std::string, std::string>{{"sinks[0].url", "${env:SLUICE_TEST_REDIS_URL}"}}));
  const std::string redacted = r->Redacted();
  EXPECT_EQ(redacted.find(kPassword), std::string::npos) << redacted;
  EXPECT_EQ(redacted.find("cache:6379"), std::string::npos) << redacted;
  // The first Redis sink's url as written; the second one's without its password.
  EXPECT_NE(redacted.find("    url: ${env:SLUICE_TEST_REDIS_URL}\n"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("    url: redis://:***@cache.internal:6380/15\n"), std::string::npos) << redacted;
  EXPECT_EQ(redacted.find("p@ss:w/rd"), std::string::npos) << redacted;

  // A literal url without a password is shown as it is.
  r = LoadConfigFromString(
      std::string(kValid) + "sinks:\n"
          "  - {name: b, type: redis, entity: account, url: \"redis://cache:6379/2\"}\n",
      kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->Redacted().find("url: redis://cache:6379/2\n"), std::string::npos) << r->Redacted();
}

}  // namespace
}  // namespace sluice::connectors::redis
