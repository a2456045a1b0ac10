// The redis sink's `url`: redis[s]://[[user]:password@]host[:port][/db], the one
// parser of that grammar (the config check and the sink both call it).
// Pure functions, safe from any thread.
//
// The rules, after the Redis docs ("Connection URLs", AUTH, SELECT):
//  - a user name is accepted: Redis 6 ACL users authenticate with
//    AUTH user password (redis://default:PASSWORD@host is the docs' own
//    example); without one, AUTH takes the password alone;
//  - the database is any number from 0: a server has `databases` of them
//    (16 by default, but configurable), and SELECT of one it does not have
//    fails when the sink connects, saying so;
//  - user and password may be percent-encoded (core/percent_decode.h); the
//    last '@' ends them, so an unencoded '@', ':' or '/' in a password works;
//  - rediss:// is the same over TLS (the sink's tls_* keys say how the
//    server is checked; docs/security.md);
//  - redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[/db]
//    (rediss-sentinel:// over TLS) lists Redis Sentinels (port 26379 by
//    default) and the name of the master they watch, as Lettuce and
//    go-redis name them; the user and password are the master's;
//  - redis-cluster://[[user]:password@]host[:port][,host[:port]...][/0]
//    (rediss-cluster:// over TLS) lists nodes of a Redis Cluster to learn
//    its slots from (CLUSTER SLOTS); a cluster has database 0 only;
//  - no unix sockets, query or fragment.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sluice::connectors::redis {

// How the grammar is shown in messages.
inline constexpr std::string_view kRedisUrlForm =
    "redis[s]://[[user]:password@]host[:port][/db], redis[s]-sentinel://[[user]:password@]host[:port][,...]/MASTER[/db] "
    "or redis[s]-cluster://[[user]:password@]host[:port][,...]";
inline constexpr uint16_t kSentinelPort = 26379;

// Where and how to connect, taken apart from a URL.
struct RedisEndpoint {
  std::string host;      // a name, an IPv4 address or an IPv6 address without brackets
  uint16_t port = 6379;  // default when the URL gives none
  std::string username;  // Redis 6 ACL user; empty: AUTH with the password only
  std::string password;  // secret: never put it in a message; empty: no AUTH
  int db = 0;            // SELECTed after connecting when not 0
  bool tls = false;      // rediss://, rediss-sentinel://
  // Sentinel: where to ask for the master's address (host and port above are
  // then unused); empty: host and port are the server.
  std::vector<std::pair<std::string, uint16_t>> sentinels;
  std::string master;  // the master's name among the sentinels
  // Cluster: nodes to learn the slots from (host, port and db unused).
  std::vector<std::pair<std::string, uint16_t>> cluster_nodes;

  // "host:port/db" for messages ("rediss://host:port/db" over TLS,
  // "redis-sentinel://s1:26379,s2:26379/MASTER/db" with sentinels,
  // "redis-cluster://n1:7000,n2:7001" for a cluster): never
  // includes the user or the password.
  std::string Describe() const;
};

// The endpoint of a URL of the form above; otherwise InvalidArgument whose
// message says what is wrong (e.g. "the port must be between 1 and 65535")
// and never quotes the URL, which may hold a password.
Result<RedisEndpoint> ParseRedisUrl(std::string_view url);

}  // namespace sluice::connectors::redis
