#include "config/redact.h"

#include <algorithm>
#include <array>

namespace sluice::config {
namespace {

// Lower case without the separators people use between words.
std::string Folded(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '.' || c == '-' || c == '_') continue;
    out += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  return out;
}

// "user:pw" -> "***:***", ":pw" -> ":***", "token" -> "***".
std::string RedactUserInfo(std::string_view info) {
  const size_t colon = info.find(':');
  if (colon == std::string_view::npos) return std::string(kRedactedValue);
  std::string out = colon == 0 ? "" : std::string(kRedactedValue);
  out += ':';
  out += kRedactedValue;
  return out;
}

// "a=1&b" -> "a=***&***".
std::string RedactQuery(std::string_view query) {
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t amp = query.find('&', at);
    const std::string_view param = query.substr(at, amp == std::string_view::npos ? std::string_view::npos : amp - at);
    if (!param.empty()) {
      const size_t eq = param.find('=');
      if (eq != std::string_view::npos) out += param.substr(0, eq + 1);
      out += kRedactedValue;
    }
    if (amp == std::string_view::npos) break;
    out += '&';
    at = amp + 1;
  }
  return out;
}

}  // namespace

bool IsSecretName(std::string_view name) {
  static constexpr std::array<std::string_view, 14> kParts = {
      "password", "passwd",     "passphrase", "secret", "token",   "credential",       "apikey",
      "privatekey", "accesskey", "sslkey",    "keytab", "sasljaas", "oauthbearerconfig", "authorization"};
  const std::string folded = Folded(name);
  for (std::string_view part : kParts) {
    if (folded.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string RedactUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  std::string out(url.substr(0, start));
  std::string_view rest = url.substr(start);
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    out += RedactUserInfo(rest.substr(0, at));
    out += '@';
    rest = rest.substr(at + 1);
  }
  const size_t fragment = rest.find('#');
  const size_t query = rest.substr(0, fragment).find('?');
  out += rest.substr(0, std::min(query, fragment));
  if (query != std::string_view::npos) {
    const size_t end = fragment == std::string_view::npos ? rest.size() : fragment;
    out += '?';
    out += RedactQuery(rest.substr(query + 1, end - query - 1));
  }
  if (fragment != std::string_view::npos) {
    out += '#';
    out += kRedactedValue;
  }
  return out;
}

}  // namespace sluice::config
