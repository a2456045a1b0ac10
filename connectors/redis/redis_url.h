// Parsing of the redis sink's `url` (redis://[[user]:password@]host[:port][/db]).
// Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace sluice::connectors::redis {

// Where and how to connect, taken apart from a URL.
struct RedisEndpoint {
  std::string host;      // a name, an IPv4 address or an IPv6 address without brackets
  uint16_t port = 6379;  // default when the URL gives none
  std::string username;  // Redis 6 ACL user; empty: AUTH with the password only
  std::string password;  // secret: never put it in a message; empty: no AUTH
  int db = 0;            // SELECTed after connecting when not 0

  // "host:port/db" for messages: never includes the user or the password.
  std::string Describe() const;
};

// Accepts redis://[[user]:password@]host[:port][/db], host optionally an
// [IPv6] literal; user and password may be percent-encoded. InvalidArgument
// (never echoing the password) for anything else: other schemes (rediss://,
// unix://), a missing host, a bad port or db, a query or fragment.
Result<RedisEndpoint> ParseRedisUrl(std::string_view url);

}  // namespace sluice::connectors::redis
