// The redis sink's keys as the config loader reads them (redis_options.cc):
// the messages, with FILE:LINE:COL, that `sluice config check` prints.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::redis {
namespace {

// A valid file with one redis sink whose url is on line 14, column 10.
std::string WithUrl(const std::string& url) {
  return "storage:\n"
         "  mysql:\n"
         "    host: 127.0.0.1\n"
         "    port: 13306\n"
         "    user: sluice\n"
         "    password: literal-pw\n"
         "    database: sluice_demo\n"
         "entities:\n"
         "  account: {partitions: 4}\n"
         "sinks:\n"
         "  - name: account_cache\n"
         "    type: redis\n"
         "    entity: account\n"
         "    url: " + url + "\n";
}

// The error message for `yaml`, or "" when it loads.
std::string Errors(const std::string& yaml) {
  Result<config::Config> r = config::LoadConfigFromString(yaml, "t.yaml", BuiltinSinkTypes());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

// Moved from config/config_test.cc (SinkErrors.BadRedisUrl) when the two
// parsers of this grammar became one (redis_url.h): the form now shows the
// optional ACL user, a user name with a password is accepted, and so is a
// database above 15 (a server may have more than 16).
TEST(RedisConfig, BadUrl) {
  const std::string prefix =
      "t.yaml:14:10: sinks[0].url: must be a URL of the form "
      "redis://[[user]:password@]host[:port][/db]: ";
  const std::string kDb = "the database after / must be a number (0 to the server's databases setting - 1)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://127.0.0.1:6379/0", "the scheme must be redis://"},
      {"rediss://127.0.0.1", "the scheme must be redis://"},
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
                                "redis://app%3A1:p%40ss@h:1/0"}) {
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
            "redis://[[user]:password@]host[:port][/db]: the scheme must be redis://");
  EXPECT_EQ(errors.find(kPassword), std::string::npos);
  ::unsetenv("SLUICE_TEST_REDIS_URL");
  EXPECT_EQ(Errors(WithUrl("\"${env:SLUICE_TEST_REDIS_URL}\"")),
            "t.yaml:14:10: sinks[0].url: environment variable SLUICE_TEST_REDIS_URL is not set");
  EXPECT_EQ(Errors(WithUrl("[a]")), "t.yaml:14:10: sinks[0].url: must be a string, got a sequence");
}

}  // namespace
}  // namespace sluice::connectors::redis
