// Validation of the names that reach storage (entity ids, entity type names,
// command names and command ids) and of configured host names. Pure functions, safe from any thread.
#pragma once

#include <string_view>

namespace sluice {

inline constexpr size_t kMaxEntityIdBytes = 64;
inline constexpr size_t kMaxCommandIdBytes = 128;
inline constexpr size_t kMaxTypeNameBytes = 48;
inline constexpr size_t kMaxCommandNameBytes = 64;

// 1..64 bytes of visible ASCII (0x21..0x7e): no spaces, no control bytes, no UTF-8.
bool IsValidEntityId(std::string_view id);
// 1..128 bytes of visible ASCII.
bool IsValidCommandId(std::string_view id);
// [a-z][a-z0-9_]* up to 48 bytes: it becomes part of a table name.
bool IsValidTypeName(std::string_view name);
// [a-z][a-z0-9_]* up to 64 bytes.
bool IsValidCommandName(std::string_view name);

// A host name or IPv4 address as configured: 1..253 of [A-Za-z0-9._-].
bool IsValidHostName(std::string_view host);
// This machine's host name as a member name (engine.id, writer.id): at most
// 128 characters, anything but letters, digits, '.' and '_' made '-';
// `fallback` when it has none.
std::string MemberHostName(std::string_view fallback);
// An IPv6 address without brackets: hex digits, ':' (at least one) and '.'.
bool IsIpv6Literal(std::string_view host);

}  // namespace sluice
