#include "config/config_text.h"

#include <algorithm>
#include <charconv>
#include <system_error>

#include "config/config.h"
#include "config/sink_type.h"
#include "core/names.h"

namespace sluice::config {

namespace {
constexpr size_t kMaxQuotedChars = 60;
}  // namespace

void AppendPrintable(unsigned char c, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  if (c < 0x20 || c == 0x7f) {
    *out += "\\x";
    *out += kHex[c >> 4];
    *out += kHex[c & 0xf];
  } else {
    *out += static_cast<char>(c);
  }
}

std::string QuoteValue(std::string_view s) {
  std::string out = "\"";
  size_t shown = 0;
  for (unsigned char c : s) {
    if (shown++ == kMaxQuotedChars) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      AppendPrintable(c, &out);
    }
  }
  out += '"';
  return out;
}

std::string JoinPath(std::string_view parent, std::string_view key) {
  std::string out(parent);
  if (!out.empty()) out += '.';
  out += key;
  return out;
}

bool HasSecretReference(std::string_view s) {
  return s.find("${env:") != std::string_view::npos || s.find("${file:") != std::string_view::npos;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string_view ClosestName(std::string_view name, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  size_t best_distance = 3;
  for (std::string_view c : candidates) {
    const size_t d = EditDistance(name, c);
    if (d < best_distance && d < name.size()) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string JoinNames(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

std::string JoinWords(const std::vector<std::string_view>& words, std::string_view last) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? std::string(last) : std::string(", ");
    out += words[i];
  }
  return out;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string ToUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || s.size() > 64 || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), IsWordChar);
}

bool IsDatabaseName(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), IsWordChar);
}

std::optional<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<NumberWithUnit> SplitNumberUnit(std::string_view s, std::span<const UnitScale> units) {
  const size_t digits = std::min(s.find_first_not_of("0123456789"), s.size());
  if (digits == 0) return std::nullopt;
  const std::string_view unit = s.substr(digits);
  for (const UnitScale& u : units) {
    if (u.unit == unit) return NumberWithUnit{ParseDecimal(s.substr(0, digits)), u.scale};
  }
  return std::nullopt;
}

std::string FormatDuration(std::chrono::microseconds d) {
  const auto us = d.count();
  if (us == 0) return "0s";
  if (us % 1000 != 0) return std::to_string(us) + "us";
  const auto ms = us / 1000;
  if (ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

bool ParseHostPort(std::string_view s, std::string* host, uint16_t* port) {
  std::string_view h;
  std::string_view p;
  if (!s.empty() && s.front() == '[') {
    const size_t close = s.find("]:");
    if (close == std::string_view::npos) return false;
    h = s.substr(1, close - 1);
    p = s.substr(close + 2);
    const bool ipv6 = !h.empty() && h.find_first_not_of("0123456789abcdefABCDEF:.") == std::string_view::npos;
    if (!ipv6) return false;
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string_view::npos) return false;
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (!IsValidHostName(h)) return false;
  }
  const auto n = p.size() <= 5 ? ParseDecimal(p) : std::nullopt;
  if (!n || *n > 65535) return false;
  *host = std::string(h);
  *port = static_cast<uint16_t>(*n);
  return true;
}

bool SameListenAddress(const std::string& h1, uint16_t p1, const std::string& h2, uint16_t p2) {
  if (p1 == 0 || p1 != p2) return false;
  auto wildcard = [](const std::string& h) { return h == "0.0.0.0" || h == "::" || h == "0:0:0:0:0:0:0:0"; };
  return h1 == h2 || wildcard(h1) || wildcard(h2);
}

Result<std::pair<std::string, uint16_t>> ParseListenAddress(std::string_view text) {
  std::pair<std::string, uint16_t> out;
  if (!ParseHostPort(text, &out.first, &out.second)) {
    return InvalidArgument("must be " + std::string(kListenAddressExpected) + ", got " + QuoteValue(text));
  }
  return out;
}

std::string FormatListenAddress(const std::string& host, uint16_t port) {
  return (host.find(':') == std::string::npos ? host : "[" + host + "]") + ":" + std::to_string(port);
}

}  // namespace sluice::config
