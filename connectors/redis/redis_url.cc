#include "connectors/redis/redis_url.h"

#include <charconv>
#include <cstdint>
#include <optional>

#include "core/names.h"
#include "core/percent_decode.h"

namespace sluice::connectors::redis {
namespace {

// `s` as a T when it is only decimal digits and T holds it.
template <typename T>
std::optional<T> DecimalAs(std::string_view s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

namespace {

// One host[:port] of an authority: a name, an IPv4 address or an IPv6
// address in brackets, with `default_port` when none is given.
Status ParseHostPort(std::string_view authority, uint16_t default_port, std::string* host_out, uint16_t* port_out) {
  std::string_view host = authority;
  std::optional<std::string_view> port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument("the IPv6 host has no closing ]");
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return InvalidArgument("the host is not a valid host name or IP address");
      port = after.substr(1);
    }
    if (!IsIpv6Literal(host)) return InvalidArgument("the host is not a valid host name or IP address");
  } else {
    if (const size_t colon = authority.find(':'); colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
    }
    if (host.empty()) return InvalidArgument("the host is empty");
    if (!IsValidHostName(host)) return InvalidArgument("the host is not a valid host name or IP address");
  }
  *host_out = std::string(host);
  *port_out = default_port;
  if (port) {
    const auto n = DecimalAs<uint32_t>(*port);
    if (!n || *n < 1 || *n > 65535) return InvalidArgument("the port must be between 1 and 65535");
    *port_out = static_cast<uint16_t>(*n);
  }
  return Status::Ok();
}

// host[:port],host[:port]...
Status ParseHostList(std::string_view hosts, uint16_t default_port, std::vector<std::pair<std::string, uint16_t>>* out) {
  while (true) {
    const size_t comma = hosts.find(',');
    std::pair<std::string, uint16_t> one;
    RETURN_IF_ERROR(ParseHostPort(hosts.substr(0, comma), default_port, &one.first, &one.second));
    out->push_back(std::move(one));
    if (comma == std::string_view::npos) return Status::Ok();
    hosts = hosts.substr(comma + 1);
  }
}

std::string HostPort(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ':' + std::to_string(port);
}

}  // namespace

std::string RedisEndpoint::Describe() const {
  std::string out = tls ? "rediss://" : "";
  if (!sentinels.empty()) {
    out = tls ? "rediss-sentinel://" : "redis-sentinel://";
    for (size_t i = 0; i < sentinels.size(); ++i) {
      out += (i == 0 ? "" : ",") + HostPort(sentinels[i].first, sentinels[i].second);
    }
    return out + '/' + master + '/' + std::to_string(db);
  }
  if (!cluster_nodes.empty()) {
    out = tls ? "rediss-cluster://" : "redis-cluster://";
    for (size_t i = 0; i < cluster_nodes.size(); ++i) {
      out += (i == 0 ? "" : ",") + HostPort(cluster_nodes[i].first, cluster_nodes[i].second);
    }
    return out;
  }
  return out + HostPort(host, port) + '/' + std::to_string(db);
}

Result<RedisEndpoint> ParseRedisUrl(std::string_view url) {
  enum class Kind { kServer, kSentinel, kCluster };
  struct Scheme {
    std::string_view prefix;
    bool tls;
    Kind kind;
  };
  static constexpr Scheme kSchemes[] = {
      {"redis://", false, Kind::kServer},           {"rediss://", true, Kind::kServer},
      {"redis-sentinel://", false, Kind::kSentinel}, {"rediss-sentinel://", true, Kind::kSentinel},
      {"redis-cluster://", false, Kind::kCluster},   {"rediss-cluster://", true, Kind::kCluster}};
  RedisEndpoint ep;
  std::string_view rest;
  Kind kind = Kind::kServer;
  bool known = false;
  for (const Scheme& s : kSchemes) {
    if (url.substr(0, s.prefix.size()) != s.prefix) continue;
    rest = url.substr(s.prefix.size());
    ep.tls = s.tls;
    kind = s.kind;
    known = true;
    break;
  }
  if (!known) {
    return InvalidArgument(
        "the scheme must be redis://, rediss:// (TLS), redis-sentinel://, rediss-sentinel://, redis-cluster:// or "
        "rediss-cluster://");
  }
  // Host, port and db never hold '@', so the last one ends the password,
  // which may itself hold '@', ':' or '/'.
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view user_info = rest.substr(0, at);
    const size_t colon = user_info.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument("a user name needs a password: write user:password@, or :password@ without a user");
    }
    if (colon + 1 == user_info.size()) return InvalidArgument("the password after ':' is empty");
    std::optional<std::string> user = PercentDecode(user_info.substr(0, colon));
    std::optional<std::string> password = PercentDecode(user_info.substr(colon + 1));
    if (!user || !password) {
      return InvalidArgument("the user name or password has a % that is not followed by two hex digits "
                             "(write a literal % as %25)");
    }
    ep.username = std::move(*user);
    ep.password = std::move(*password);
    rest = rest.substr(at + 1);
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (kind == Kind::kCluster) {
    // host[:port],host[:port]...[/0]
    RETURN_IF_ERROR(ParseHostList(authority, 6379, &ep.cluster_nodes));
    if (slash != std::string_view::npos && path != "0") {
      return InvalidArgument("a Redis Cluster has database 0 only: end the url with the nodes or with /0");
    }
    return ep;
  }
  if (kind == Kind::kSentinel) {
    // host[:port],host[:port].../MASTER[/db]
    RETURN_IF_ERROR(ParseHostList(authority, kSentinelPort, &ep.sentinels));
    const size_t master_end = path.find('/');
    ep.master = std::string(path.substr(0, master_end));
    if (slash == std::string_view::npos || ep.master.empty()) {
      return InvalidArgument("a sentinel url names the master after the sentinels: /MASTER_NAME[/db]");
    }
    if (ep.master.find_first_of(" \t\r\n%?#") != std::string::npos) {
      return InvalidArgument("the master name has a space or one of % ? #");
    }
    path = master_end == std::string_view::npos ? std::string_view() : path.substr(master_end + 1);
    if (master_end == std::string_view::npos) return ep;
  } else {
    RETURN_IF_ERROR(ParseHostPort(authority, 6379, &ep.host, &ep.port));
    if (slash == std::string_view::npos) return ep;
  }
  const auto n = DecimalAs<int>(path);
  if (!n) return InvalidArgument("the database after / must be a number (0 to the server's databases setting - 1)");
  ep.db = *n;
  return ep;
}

}  // namespace sluice::connectors::redis
