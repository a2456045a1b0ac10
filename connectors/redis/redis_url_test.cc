#include "connectors/redis/redis_url.h"

#include <gtest/gtest.h>

namespace sluice::connectors::redis {
namespace {

TEST(ParseRedisUrl, HostPortDb) {
  auto ep = ParseRedisUrl("redis://127.0.0.1:16379/3");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 16379);
  EXPECT_EQ(ep->db, 3);
  EXPECT_EQ(ep->password, "");
  EXPECT_EQ(ep->username, "");
}

TEST(ParseRedisUrl, DefaultsPortAndDb) {
  for (const char* url : {"redis://cache.local"}) {
    auto ep = ParseRedisUrl(url);
    ASSERT_TRUE(ep.ok()) << url;
    EXPECT_EQ(ep->host, "cache.local");
    EXPECT_EQ(ep->port, 6379);
    EXPECT_EQ(ep->db, 0);
  }
}

TEST(ParseRedisUrl, PasswordAndUser) {
  auto ep = ParseRedisUrl("redis://:s3cr%40t@h:1/0");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->username, "");
  EXPECT_EQ(ep->password, "s3cr@t");
  EXPECT_EQ(ep->host, "h");

  ep = ParseRedisUrl("redis://app:p:w@h");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->username, "app");
  EXPECT_EQ(ep->password, "p:w");

  // An unencoded '@' in the password: the last '@' ends the user info.
  ep = ParseRedisUrl("redis://:a@b@h:2");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->password, "a@b");
  EXPECT_EQ(ep->host, "h");
  EXPECT_EQ(ep->port, 2);
}

TEST(ParseRedisUrl, Ipv6) {
  auto ep = ParseRedisUrl("redis://[::1]:7000/1");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->port, 7000);
  EXPECT_EQ(ep->db, 1);
  EXPECT_EQ(ep->Describe(), "[::1]:7000/1");
}

TEST(ParseRedisUrl, DescribeNeverShowsThePassword) {
  auto ep = ParseRedisUrl("redis://u:hunter2@h:1/2");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->Describe(), "h:1/2");
}

TEST(ParseRedisUrl, RejectsMalformed) {
  for (const char* url : {"", "http://h:1", "redis+tls://h:1", "rediss://", "redis://", "redis://:1", "redis://h:", "redis://h:0",
                          "redis://h:65536", "redis://h:12x", "redis://h:1/x", "redis://h:1/-1", "redis://h:1/0?x=1",
                          "redis://h:1/0#f", "redis://pw@h:1", "redis://[::1", "redis://[::1]x", "redis://:%zz@h",
                          "redis://:%4@h", "redis://h:1/0/1", "redis://cache.local/",
                          "redis://a b:1", "redis://:@h"}) {
    auto ep = ParseRedisUrl(url);
    EXPECT_FALSE(ep.ok()) << url;
    if (!ep.ok()) {
      EXPECT_EQ(ep.status().code(), StatusCode::kInvalidArgument) << url;
    }
  }
}

// Redis 6 ACL users log in with AUTH user password, and a server may have
// more than the default 16 databases (its `databases` setting).
TEST(ParseRedisUrl, AcceptsAnAclUserAndAnyDatabaseNumber) {
  auto ep = ParseRedisUrl("redis://default:pw@h:1/16");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(ep->username, "default");
  EXPECT_EQ(ep->password, "pw");
  EXPECT_EQ(ep->db, 16);
  EXPECT_TRUE(ParseRedisUrl("redis://h/2147483647").ok());
  EXPECT_FALSE(ParseRedisUrl("redis://h/2147483648").ok());
}

// rediss:// is the same grammar over TLS, and says so in messages.
TEST(ParseRedisUrl, RedissMeansTls) {
  auto ep = ParseRedisUrl("rediss://app:pw@cache.example.com:6380/2");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(ep->tls);
  EXPECT_EQ(ep->host, "cache.example.com");
  EXPECT_EQ(ep->port, 6380);
  EXPECT_EQ(ep->username, "app");
  EXPECT_EQ(ep->db, 2);
  EXPECT_EQ(ep->Describe(), "rediss://cache.example.com:6380/2");
  EXPECT_FALSE(ParseRedisUrl("redis://h")->tls);
}

// Sentinels: a list of host[:port] (26379 by default), then the master's name.
TEST(ParseRedisUrl, SentinelsAndTheirMaster) {
  auto ep = ParseRedisUrl("redis-sentinel://app:pw@s1,s2:26380,[::1]/mymaster/3");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_FALSE(ep->tls);
  ASSERT_EQ(ep->sentinels.size(), 3u);
  EXPECT_EQ(ep->sentinels[0], (std::pair<std::string, uint16_t>{"s1", 26379}));
  EXPECT_EQ(ep->sentinels[1], (std::pair<std::string, uint16_t>{"s2", 26380}));
  EXPECT_EQ(ep->sentinels[2], (std::pair<std::string, uint16_t>{"::1", 26379}));
  EXPECT_EQ(ep->master, "mymaster");
  EXPECT_EQ(ep->db, 3);
  EXPECT_EQ(ep->username, "app");
  EXPECT_EQ(ep->Describe(), "redis-sentinel://s1:26379,s2:26380,[::1]:26379/mymaster/3");
  auto tls = ParseRedisUrl("rediss-sentinel://s1/m");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->db, 0);
  const std::string no_master = "a sentinel url names the master after the sentinels: /MASTER_NAME[/db]";
  EXPECT_EQ(ParseRedisUrl("redis-sentinel://s1").status().message(), no_master);
  EXPECT_EQ(ParseRedisUrl("redis-sentinel://s1/").status().message(), no_master);
  EXPECT_EQ(ParseRedisUrl("redis-sentinel://s1,,s2/m").status().message(), "the host is empty");
  EXPECT_EQ(ParseRedisUrl("redis-sentinel://s1:0/m").status().message(), "the port must be between 1 and 65535");
  EXPECT_FALSE(ParseRedisUrl("redis-sentinel://s1/m/x").ok());
  EXPECT_FALSE(ParseRedisUrl("redis-sentinel://s1/m%20x").ok());
}

TEST(ParseRedisUrl, ClusterNodes) {
  auto ep = ParseRedisUrl("redis-cluster://app:pw@n1:7000,n2,[::1]:7002");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_FALSE(ep->tls);
  ASSERT_EQ(ep->cluster_nodes.size(), 3u);
  EXPECT_EQ(ep->cluster_nodes[0], (std::pair<std::string, uint16_t>{"n1", 7000}));
  EXPECT_EQ(ep->cluster_nodes[1], (std::pair<std::string, uint16_t>{"n2", 6379}));
  EXPECT_EQ(ep->cluster_nodes[2], (std::pair<std::string, uint16_t>{"::1", 7002}));
  EXPECT_EQ(ep->username, "app");
  EXPECT_EQ(ep->password, "pw");
  EXPECT_TRUE(ep->sentinels.empty());
  EXPECT_EQ(ep->Describe(), "redis-cluster://n1:7000,n2:6379,[::1]:7002");
  auto tls = ParseRedisUrl("rediss-cluster://n1/0");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->Describe(), "rediss-cluster://n1:6379");
  EXPECT_EQ(ParseRedisUrl("redis-cluster://n1/1").status().message(),
            "a Redis Cluster has database 0 only: end the url with the nodes or with /0");
  EXPECT_EQ(ParseRedisUrl("redis-cluster://n1,/0").status().message(), "the host is empty");
}

TEST(ParseRedisUrl, SaysWhatIsWrong) {
  EXPECT_EQ(ParseRedisUrl("http://h").status().message(),
            "the scheme must be redis://, rediss:// (TLS), redis-sentinel://, rediss-sentinel://, redis-cluster:// or "
            "rediss-cluster://");
  EXPECT_EQ(ParseRedisUrl("redis://h:0").status().message(), "the port must be between 1 and 65535");
  EXPECT_EQ(ParseRedisUrl("redis://:6379/0").status().message(), "the host is empty");
  EXPECT_EQ(ParseRedisUrl("redis://[::1:6379").status().message(), "the IPv6 host has no closing ]");
}

TEST(ParseRedisUrl, ErrorsDoNotEchoThePassword) {
  auto ep = ParseRedisUrl("redis://:topsecret@h:99999");
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().message().find("topsecret"), std::string::npos);
}

}  // namespace
}  // namespace sluice::connectors::redis
