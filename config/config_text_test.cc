#include "config/config_text.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "config/sink_type.h"

namespace sluice::config {
namespace {

TEST(ConfigText, QuoteValueEscapesAndCuts) {
  EXPECT_EQ(QuoteValue("abc"), "\"abc\"");
  EXPECT_EQ(QuoteValue(""), "\"\"");
  EXPECT_EQ(QuoteValue("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuoteValue(std::string("a\nb\x7f\0", 5)), "\"a\\x0ab\\x7f\\x00\"");
  const std::string sixty(60, 'x');
  EXPECT_EQ(QuoteValue(sixty), "\"" + sixty + "\"");
  EXPECT_EQ(QuoteValue(sixty + "yz"), "\"" + sixty + "...\"");
}

TEST(ConfigText, AppendPrintableEscapesControlCharacters) {
  std::string out;
  for (unsigned char c : std::string("a\tb\x1f")) AppendPrintable(c, &out);
  EXPECT_EQ(out, "a\\x09b\\x1f");
}

TEST(ConfigText, JoinPath) {
  EXPECT_EQ(JoinPath("", "storage"), "storage");
  EXPECT_EQ(JoinPath("storage.mysql", "port"), "storage.mysql.port");
}

TEST(ConfigText, HasSecretReferenceAnywhere) {
  EXPECT_TRUE(HasSecretReference("${env:X}"));
  EXPECT_TRUE(HasSecretReference("pre ${file:/a} post"));
  EXPECT_FALSE(HasSecretReference("${other:X}"));
  EXPECT_FALSE(HasSecretReference("$env:X"));
}

TEST(ConfigText, EditDistanceCountsASwapAsOneEdit) {
  EXPECT_EQ(EditDistance("host", "host"), 0u);
  EXPECT_EQ(EditDistance("hots", "host"), 1u);
  EXPECT_EQ(EditDistance("hst", "host"), 1u);
  EXPECT_EQ(EditDistance("hoost", "host"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

TEST(ConfigText, ClosestNameWithinTwoEditsAndNotAWholeRewrite) {
  const std::vector<std::string_view> keys = {"host", "port", "user", "password"};
  EXPECT_EQ(ClosestName("hots", keys), "host");
  EXPECT_EQ(ClosestName("pasword", keys), "password");
  EXPECT_EQ(ClosestName("prt", keys), "port");
  EXPECT_EQ(ClosestName("database", keys), "");
  // Replacing every letter is a rewrite, not a suggestion.
  EXPECT_EQ(ClosestName("x", {"y"}), "");
  // The first of equally close candidates.
  EXPECT_EQ(ClosestName("bat", {"cat", "hat"}), "cat");
}

TEST(ConfigText, JoinNamesAndWords) {
  EXPECT_EQ(JoinNames({}), "");
  EXPECT_EQ(JoinNames({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(JoinWords({"a"}, " and "), "a");
  EXPECT_EQ(JoinWords({"a", "b"}, " and "), "a and b");
  EXPECT_EQ(JoinWords({"a", "b", "c"}, " or "), "a, b or c");
}

TEST(ConfigText, CaseMappingIsAsciiOnly) {
  EXPECT_EQ(ToLower("Owner_ID9"), "owner_id9");
  EXPECT_EQ(ToUpper("decimal(12,2)"), "DECIMAL(12,2)");
  EXPECT_EQ(ToLower("\xc3\x89"), "\xc3\x89");
}

TEST(ConfigText, IdentifiersAndDatabaseNames) {
  EXPECT_TRUE(IsIdentifier("_a1"));
  EXPECT_TRUE(IsIdentifier(std::string(64, 'a')));
  EXPECT_FALSE(IsIdentifier(std::string(65, 'a')));
  EXPECT_FALSE(IsIdentifier("1a"));
  EXPECT_FALSE(IsIdentifier("a-b"));
  EXPECT_FALSE(IsIdentifier(""));
  EXPECT_TRUE(IsDatabaseName("1db"));
  EXPECT_FALSE(IsDatabaseName("my-db"));
  EXPECT_FALSE(IsDatabaseName(""));
  EXPECT_FALSE(IsDatabaseName(std::string(65, 'd')));
}

TEST(ConfigText, ParseDecimal) {
  EXPECT_EQ(ParseDecimal("0"), 0u);
  EXPECT_EQ(ParseDecimal("1234567890123456789"), 1234567890123456789u);
  EXPECT_FALSE(ParseDecimal(""));
  EXPECT_FALSE(ParseDecimal("12345678901234567890"));  // 20 digits
  EXPECT_FALSE(ParseDecimal("-1"));
  EXPECT_FALSE(ParseDecimal("+1"));
  EXPECT_FALSE(ParseDecimal("1 "));
}

TEST(ConfigText, SplitNumberUnit) {
  auto n = SplitNumberUnit("500ms", kDurationUnits);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->count, 500u);
  EXPECT_EQ(n->scale, 1000u);
  EXPECT_FALSE(SplitNumberUnit("100us", kDurationUnits));
  n = SplitNumberUnit("100us", kFineDurationUnits);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->scale, 1u);
  EXPECT_FALSE(SplitNumberUnit("500", kDurationUnits));  // a duration needs a unit
  EXPECT_FALSE(SplitNumberUnit("ms", kDurationUnits));   // and a number
  EXPECT_FALSE(SplitNumberUnit("", kDurationUnits));
  EXPECT_FALSE(SplitNumberUnit("1w", kDurationUnits));
  EXPECT_EQ(SplitNumberUnit("7d", kDurationUnits)->scale, 86400000000u);
  n = SplitNumberUnit("1048576", kByteUnits);  // a byte count needs none
  ASSERT_TRUE(n);
  EXPECT_EQ(n->count, 1048576u);
  EXPECT_EQ(n->scale, 1u);
  n = SplitNumberUnit("16MiB", kByteUnits);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->scale, uint64_t{1} << 20);
  EXPECT_FALSE(SplitNumberUnit("16MB", kByteUnits));
  // Too many digits: the unit is known, the count is not.
  n = SplitNumberUnit("99999999999999999999s", kDurationUnits);
  ASSERT_TRUE(n);
  EXPECT_FALSE(n->count);
}

TEST(ConfigText, FormatDurationPicksTheLargestExactUnit) {
  using namespace std::chrono_literals;
  EXPECT_EQ(FormatDuration(0us), "0s");
  EXPECT_EQ(FormatDuration(100us), "100us");
  EXPECT_EQ(FormatDuration(1500us), "1500us");
  EXPECT_EQ(FormatDuration(50ms), "50ms");
  EXPECT_EQ(FormatDuration(2s), "2s");
  EXPECT_EQ(FormatDuration(90s), "90s");
  EXPECT_EQ(FormatDuration(10min), "10m");
  EXPECT_EQ(FormatDuration(48h), "48h");
}

TEST(ConfigText, ParseHostPort) {
  std::string host = "unchanged";
  uint16_t port = 7;
  EXPECT_TRUE(ParseHostPort("127.0.0.1:8080", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8080);
  EXPECT_TRUE(ParseHostPort("[::1]:0", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0);
  EXPECT_TRUE(ParseHostPort("db.internal:65535", &host, &port));
  EXPECT_EQ(port, 65535);
  host = "unchanged";
  port = 7;
  for (const char* bad : {"", "host", "host:", "host:65536", "host:123456", "host:-1", "[::1]8080", "[]:80",
                          "[zz]:80", "::1:80x", "bad host:80"}) {
    EXPECT_FALSE(ParseHostPort(bad, &host, &port)) << bad;
  }
  EXPECT_EQ(host, "unchanged");
  EXPECT_EQ(port, 7);
}

TEST(ConfigText, SameListenAddress) {
  EXPECT_TRUE(SameListenAddress("127.0.0.1", 80, "127.0.0.1", 80));
  EXPECT_TRUE(SameListenAddress("0.0.0.0", 80, "127.0.0.1", 80));
  EXPECT_TRUE(SameListenAddress("127.0.0.1", 80, "::", 80));
  EXPECT_FALSE(SameListenAddress("127.0.0.1", 80, "127.0.0.2", 80));
  EXPECT_FALSE(SameListenAddress("127.0.0.1", 80, "127.0.0.1", 81));
  EXPECT_FALSE(SameListenAddress("127.0.0.1", 0, "127.0.0.1", 0));  // any free port never clashes
}

TEST(ConfigText, ListenAddressRoundTrip) {
  EXPECT_EQ(FormatListenAddress("::1", 9464), "[::1]:9464");
  EXPECT_EQ(FormatListenAddress("127.0.0.1", 80), "127.0.0.1:80");
  auto parsed = ParseListenAddress("[::1]:9464");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(FormatListenAddress(parsed->first, parsed->second), "[::1]:9464");
  auto bad = ParseListenAddress("nope");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "must be host:port with a port between 0 and 65535, got \"nope\"");
}

}  // namespace
}  // namespace sluice::config
