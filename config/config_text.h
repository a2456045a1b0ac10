// Small pure text functions of the config loader: how a value is quoted in a
// message, the did-you-mean suggestion, numbers with units (durations and
// byte sizes), host:port, and lists of names in prose.
//
// Internal to config/: not part of the module's API (config.h and
// sink_type.h are). No function here reads the YAML tree, the file system or
// the environment; each may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

// Appends c, or "\xNN" when it is a control character.
void AppendPrintable(unsigned char c, std::string* out);

// "parent.key", or "key" when parent is empty.
std::string JoinPath(std::string_view parent, std::string_view key);

// Whether s holds "${env:" or "${file:" anywhere.
bool HasSecretReference(std::string_view s);

// Edit distance counting an adjacent swap as one edit ("hots" -> "host").
size_t EditDistance(std::string_view a, std::string_view b);

// The candidate within two edits of `name` (and not a whole rewrite of it),
// closest first; empty when there is none.
std::string_view ClosestName(std::string_view name, const std::vector<std::string_view>& candidates);

// "a, b, c".
std::string JoinNames(const std::vector<std::string_view>& names);
// "a", "a and b", "a, b and c" (with `last` = " and ").
std::string JoinWords(const std::vector<std::string_view>& words, std::string_view last);

// ASCII case mapping; other bytes are kept.
std::string ToLower(std::string_view s);
std::string ToUpper(std::string_view s);

// [A-Za-z0-9_].
bool IsWordChar(char c);

// A decimal number of at most 19 digits, nothing else; nullopt otherwise.
std::optional<uint64_t> ParseDecimal(std::string_view s);

// A unit a number may carry, and what one of it is worth.
struct UnitScale {
  std::string_view unit;
  uint64_t scale;
};
// Microseconds per unit: the durations every duration key takes, and those
// with "us" for the keys finer than a millisecond.
inline constexpr UnitScale kDurationUnits[] = {
    {"ms", 1000}, {"s", 1000000}, {"m", 60000000}, {"h", 3600000000}, {"d", 86400000000}};
inline constexpr UnitScale kFineDurationUnits[] = {
    {"us", 1}, {"ms", 1000}, {"s", 1000000}, {"m", 60000000}, {"h", 3600000000}, {"d", 86400000000}};
// Bytes per unit: a plain byte count, B, KiB, MiB and GiB.
inline constexpr UnitScale kByteUnits[] = {
    {"", 1}, {"B", 1}, {"KiB", uint64_t{1} << 10}, {"MiB", uint64_t{1} << 20}, {"GiB", uint64_t{1} << 30}};

// A number written as leading digits and one of `units` ("500ms", "1MiB").
struct NumberWithUnit {
  std::optional<uint64_t> count;  // empty: too many digits for 64 bits
  uint64_t scale;                 // what one of the unit is worth
};
// nullopt when s does not start with a digit or what follows the digits is
// not one of `units`.
std::optional<NumberWithUnit> SplitNumberUnit(std::string_view s, std::span<const UnitScale> units);

// A duration as the file would write it: "0s", "100us", "500ms", "2s", "1m", "24h".
std::string FormatDuration(std::chrono::microseconds d);

// What a listen key must be, completing "must be ...".
inline constexpr std::string_view kListenAddressExpected = "host:port with a port between 0 and 65535";

// "host:port" or "[ipv6]:port"; false (and the outputs untouched) when it is neither.
bool ParseHostPort(std::string_view s, std::string* host, uint16_t* port);

// Two listen addresses one process cannot both bind: the same port (not 0)
// on the same host, or on a wildcard host.
bool SameListenAddress(const std::string& h1, uint16_t p1, const std::string& h2, uint16_t p2);

}  // namespace sluice::config
