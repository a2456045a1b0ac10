#include "connectors/redis/redis_url.h"

#include <charconv>

namespace sluice::connectors::redis {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool PercentDecode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    int hi = HexValue(in[i + 1]);
    int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

template <typename T>
bool ParseDecimal(std::string_view s, T& value) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string RedisEndpoint::Describe() const {
  std::string out = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  out += ':' + std::to_string(port) + '/' + std::to_string(db);
  return out;
}

Result<RedisEndpoint> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    if (url.substr(0, 9) == "rediss://") return InvalidArgument("redis url: TLS (rediss://) is not supported");
    return InvalidArgument("redis url must start with redis://");
  }
  std::string_view rest = url.substr(kScheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return InvalidArgument("redis url: a query or fragment is not supported");
  }
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);

  RedisEndpoint ep;
  // The last '@' ends the user info, so an unencoded '@' in a password still works.
  if (size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument("redis url: put the password after a colon, as redis://:PASSWORD@host:port/db");
    }
    if (!PercentDecode(userinfo.substr(0, colon), ep.username) ||
        !PercentDecode(userinfo.substr(colon + 1), ep.password)) {
      return InvalidArgument("redis url: bad percent-encoding in the user or password");
    }
  }

  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return InvalidArgument("redis url: unterminated [IPv6] host");
    ep.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return InvalidArgument("redis url: unexpected text after the [IPv6] host");
      port_text = after.substr(1);
      if (port_text.empty()) return InvalidArgument("redis url: empty port");
    }
  } else {
    size_t colon = authority.find(':');
    ep.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return InvalidArgument("redis url: empty port");
    }
  }
  if (ep.host.empty()) return InvalidArgument("redis url: missing host");
  if (!port_text.empty()) {
    uint32_t port = 0;
    if (!ParseDecimal(port_text, port) || port == 0 || port > 65535) {
      return InvalidArgument("redis url: port must be a number from 1 to 65535");
    }
    ep.port = static_cast<uint16_t>(port);
  }
  if (!path.empty()) {
    int db = 0;
    if (!ParseDecimal(path, db)) return InvalidArgument("redis url: the path must be a database number, as /0");
    ep.db = db;
  }
  return ep;
}

}  // namespace sluice::connectors::redis
