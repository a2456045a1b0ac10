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

std::string RedisEndpoint::Describe() const {
  std::string out = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  out += ':' + std::to_string(port) + '/' + std::to_string(db);
  return out;
}

Result<RedisEndpoint> ParseRedisUrl(std::string_view url) {
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme) return InvalidArgument("the scheme must be redis://");
  std::string_view rest = url.substr(kScheme.size());
  RedisEndpoint ep;
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
  ep.host = std::string(host);
  if (port) {
    const auto n = DecimalAs<uint32_t>(*port);
    if (!n || *n < 1 || *n > 65535) return InvalidArgument("the port must be between 1 and 65535");
    ep.port = static_cast<uint16_t>(*n);
  }
  if (slash != std::string_view::npos) {
    const auto n = DecimalAs<int>(rest.substr(slash + 1));
    if (!n) {
      return InvalidArgument("the database after / must be a number (0 to the server's databases setting - 1)");
    }
    ep.db = *n;
  }
  return ep;
}

}  // namespace sluice::connectors::redis
