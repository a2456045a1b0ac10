#include "core/names.h"

#include <unistd.h>

#include <cctype>
#include <string>

namespace sluice {
namespace {

bool VisibleAscii(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (unsigned char c : s) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

bool Identifier(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max) return false;
  if (s[0] < 'a' || s[0] > 'z') return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool IsValidEntityId(std::string_view id) { return VisibleAscii(id, kMaxEntityIdBytes); }
bool IsValidCommandId(std::string_view id) { return VisibleAscii(id, kMaxCommandIdBytes); }
bool IsValidTypeName(std::string_view name) { return Identifier(name, kMaxTypeNameBytes); }
bool IsValidCommandName(std::string_view name) { return Identifier(name, kMaxCommandNameBytes); }

std::string MemberHostName(std::string_view fallback) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return std::string(fallback);
  std::string out;
  for (const char* c = name; *c && out.size() < 128; ++c) {
    out += std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '_' ? *c : '-';
  }
  return out;
}

bool IsValidHostName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool IsIpv6Literal(std::string_view h) {
  return !h.empty() && h.find(':') != std::string_view::npos &&
         h.find_first_not_of("0123456789abcdefABCDEF:.") == std::string_view::npos;
}

}  // namespace sluice
