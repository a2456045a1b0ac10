// The operations of an aggregate view: what ParseOps accepts and refuses,
// and the statements OpFold makes of a batch.
#include "connectors/aggregate/aggregate_ops.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace sluice::connectors::aggregate {
namespace {

AggregateSinkOptions Options() {
  AggregateSinkOptions o;
  o.tables.push_back({"owner_balance", {{"owner", "VARCHAR(64)"}}, {{"total", "BIGINT"}, {"accounts", "BIGINT"}}});
  o.tables.push_back({"names", {{"id", "VARCHAR(64)"}}, {{"name", "VARCHAR(64)"}}});
  return o;
}

void Quote(std::string& out, std::string_view s) {
  out += '\'';
  out += s;
  out += '\'';
}

TEST(AggregateOps, ParseChecksEveryOperationAgainstTheDeclaredTables) {
  const AggregateSinkOptions o = Options();
  auto ok = ParseOps(R"([{"table":"owner_balance","key":{"owner":"o1"},"add":{"total":5,"accounts":1}},
                         {"table":"names","key":{"id":"c1"},"set":{"name":"Ada"}},
                         {"table":"names","key":{"id":"c2"},"delete":true}])",
                     o);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[0].kind, Op::Kind::kAdd);
  EXPECT_EQ((*ok)[1].kind, Op::Kind::kSet);
  EXPECT_EQ((*ok)[2].kind, Op::Kind::kDelete);
  EXPECT_TRUE(ParseOps("null", o).ok());
  EXPECT_TRUE(ParseOps("[]", o)->empty());
  const std::pair<const char*, const char*> bad[] = {
      {"42", "must return an array"},
      {R"([{"table":"nope","key":{"owner":"o"},"add":{"total":1}}])", "not declared"},
      {R"([{"table":"owner_balance","key":{},"add":{"total":1}}])", "lacks column 'owner'"},
      {R"([{"table":"owner_balance","key":{"owner":"o","x":1},"add":{"total":1}}])", "columns the table's key does not"},
      {R"([{"table":"owner_balance","key":{"owner":"o"},"add":{"total":"one"}}])", "must be a number or a decimal string"},
      {R"([{"table":"owner_balance","key":{"owner":"o"},"add":{"total":"1e"}}])", "must be a number or a decimal string"},
      {R"([{"table":"owner_balance","key":{"owner":"o"},"add":{"nope":1}}])", "is not declared in table"},
      {R"([{"table":"owner_balance","key":{"owner":"o"}}])", "exactly one of"},
      {R"([{"table":"owner_balance","key":{"owner":"o"},"add":{"total":1},"delete":true}])", "exactly one of"},
      {R"([{"table":"owner_balance","key":{"owner":null},"add":{"total":1}}])", "lacks column 'owner'"},
      {R"([{"table":"owner_balance","key":{"owner":{"a":1}},"add":{"total":1}}])", "string or a number"},
  };
  for (const auto& [json, want] : bad) {
    auto r = ParseOps(json, o);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << json << ": " << r.status().message();
  }
}

TEST(AggregateOps, AFoldSumsAddsPerRowAndKeepsTheOrderOfDeletesAndSets) {
  const AggregateSinkOptions o = Options();
  OpFold fold(o);
  auto add = [&](const char* json) {
    auto ops = ParseOps(json, o);
    ASSERT_TRUE(ops.ok()) << ops.status().ToString();
    ASSERT_TRUE(fold.Add(*ops).ok());
  };
  add(R"([{"table":"owner_balance","key":{"owner":"o1"},"add":{"total":5,"accounts":1}}])");
  add(R"([{"table":"owner_balance","key":{"owner":"o1"},"add":{"total":-2,"accounts":0}},
          {"table":"owner_balance","key":{"owner":"o2"},"add":{"total":7,"accounts":1}}])");
  add(R"([{"table":"names","key":{"id":"c1"},"set":{"name":"Ada"}}])");
  add(R"([{"table":"names","key":{"id":"c1"},"delete":true},{"table":"names","key":{"id":"c1"},"set":{"name":"Bo"}}])");
  add(R"([{"table":"names","key":{"id":"c2"},"set":{"name":"X"}},{"table":"names","key":{"id":"c2"},"delete":true}])");
  EXPECT_EQ(fold.rows(), 4u);
  const std::vector<std::string> s = fold.Statements(Quote);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0], "DELETE FROM `names` WHERE `id`='c1'");
  EXPECT_EQ(s[1], "DELETE FROM `names` WHERE `id`='c2'");
  EXPECT_EQ(s[2],
            "INSERT INTO `owner_balance` (`owner`,`total`,`accounts`) VALUES ('o1',3,1),('o2',7,1) "
            "ON DUPLICATE KEY UPDATE `total`=COALESCE(`total`,0)+VALUES(`total`),"
            "`accounts`=COALESCE(`accounts`,0)+VALUES(`accounts`)");
  EXPECT_EQ(s[3], "INSERT INTO `names` (`id`,`name`) VALUES ('c1','Bo') ON DUPLICATE KEY UPDATE `name`=VALUES(`name`)");
}

// Tables with every kind of number a fold sums.
AggregateSinkOptions Numbers() {
  AggregateSinkOptions o;
  o.tables.push_back({"money",
                      {{"id", "VARCHAR(64)"}},
                      {{"amount", "DECIMAL(18,2)"},
                       {"huge", "DECIMAL(38, 4)"},
                       {"count", "BIGINT"},
                       {"ratio", "DOUBLE"},
                       {"small", "TINYINT UNSIGNED"}}});
  o.tables.push_back({"docs", {{"id", "VARCHAR(64)"}}, {{"body", "TEXT"}, {"n", "BIGINT"}}});
  return o;
}

std::vector<Op> Parse(const AggregateSinkOptions& o, const std::string& json) {
  auto ops = ParseOps(json, o);
  EXPECT_TRUE(ops.ok()) << json << ": " << ops.status().ToString();
  return ops.ok() ? *ops : std::vector<Op>{};
}

// The add operation of `value` (JSON text) to column `column` of row "a" in money.
std::vector<Op> AddOne(const AggregateSinkOptions& o, const std::string& column, const std::string& value) {
  return Parse(o, R"([{"table":"money","key":{"id":"a"},"add":{")" + column + R"(":)" + value + "}}]");
}

// The value the fold's single statement writes to its single row: "('a',X)".
std::string Written(const OpFold& fold) {
  const auto s = fold.Statements(Quote);
  if (s.size() != 1) return "statements: " + std::to_string(s.size());
  const size_t from = s[0].find("('a',"), to = s[0].find(") ON DUPLICATE");
  if (from == std::string::npos || to == std::string::npos) return s[0];
  return s[0].substr(from + 5, to - from - 5);
}

TEST(AggregateOps, ASetThenAnAddIsTheSumAndDecimalsStayDecimal) {
  const AggregateSinkOptions o = Numbers();
  OpFold fold(o);
  ASSERT_TRUE(fold.Add(Parse(o, R"([{"table":"money","key":{"id":"a"},"set":{"amount":10}},
                                     {"table":"money","key":{"id":"a"},"add":{"amount":2.25}},
                                     {"table":"money","key":{"id":"a"},"add":{"amount":0.5}}])"))
                  .ok());
  const auto s = fold.Statements(Quote);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0], "INSERT INTO `money` (`id`,`amount`) VALUES ('a',12.75) ON DUPLICATE KEY UPDATE "
                  "`amount`=VALUES(`amount`)");
  // A set value is stored rounded to the scale, as MySQL stores it, before adds.
  OpFold rounded(o);
  ASSERT_TRUE(rounded.Add(Parse(o, R"([{"table":"money","key":{"id":"a"},"set":{"amount":"1.005"}},
                                        {"table":"money","key":{"id":"a"},"add":{"amount":0.01}}])"))
                  .ok());
  EXPECT_EQ(Written(rounded), "1.02");
}

TEST(AggregateOps, AThousandAddsOfACentToADecimalAreExactlyTen) {
  const AggregateSinkOptions o = Numbers();
  OpFold fold(o);
  double as_double = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(fold.Add(AddOne(o, "amount", "0.01")).ok());
    as_double += 0.01;
  }
  ASSERT_NE(as_double, 10.0);  // what summing doubles did
  EXPECT_EQ(Written(fold), "10.00");
  // Ten cents less than nothing, a tenth at a time.
  OpFold negative(o);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(negative.Add(AddOne(o, "amount", "-0.01")).ok());
  EXPECT_EQ(Written(negative), "-0.10");
  // DOUBLE columns still sum doubles.
  OpFold ratio(o);
  ASSERT_TRUE(ratio.Add(AddOne(o, "ratio", "0.1")).ok());
  ASSERT_TRUE(ratio.Add(AddOne(o, "ratio", "0.2")).ok());
  EXPECT_EQ(Written(ratio), Json(0.1 + 0.2).dump());
}

TEST(AggregateOps, LargeDecimalsAndIntegersSumExactly) {
  const AggregateSinkOptions o = Numbers();
  // 34 integer digits: far beyond a double's 15 to 17 significant digits.
  OpFold huge(o);
  ASSERT_TRUE(huge.Add(AddOne(o, "huge", R"("1234567890123456789012345678901234.5678")")).ok());
  ASSERT_TRUE(huge.Add(AddOne(o, "huge", R"("0.0001")")).ok());
  ASSERT_TRUE(huge.Add(AddOne(o, "huge", "1e3")).ok());
  EXPECT_EQ(Written(huge), "1234567890123456789012345678902234.5679");
  // JSON numbers whose double sum is off by 29 cents.
  OpFold many(o);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(many.Add(AddOne(o, "amount", "12345678901.23")).ok());
  EXPECT_EQ(Written(many), "12345678901230.00");
  // 18 significant digits in DECIMAL(18,2), its largest value.
  OpFold amount(o);
  ASSERT_TRUE(amount.Add(AddOne(o, "amount", R"("9999999999999999.98")")).ok());
  ASSERT_TRUE(amount.Add(AddOne(o, "amount", "0.01")).ok());
  EXPECT_EQ(Written(amount), "9999999999999999.99");
  // BIGINT sums stay integers to the last unit.
  OpFold count(o);
  ASSERT_TRUE(count.Add(AddOne(o, "count", "9223372036854775000")).ok());
  ASSERT_TRUE(count.Add(AddOne(o, "count", "807")).ok());
  EXPECT_EQ(Written(count), "9223372036854775807");
}

TEST(AggregateOps, AValueTheColumnCannotHoldExactlyRejectsTheEventAndLeavesTheFold) {
  const AggregateSinkOptions o = Numbers();
  OpFold fold(o);
  ASSERT_TRUE(fold.Add(AddOne(o, "amount", "1")).ok());
  const std::pair<const char*, const char*> bad[] = {
      {R"({"amount":0.001})", "is 0.001, which DECIMAL(18,2) cannot hold exactly (2 decimals)"},
      {R"({"amount":"12345678901234567.5"})", "beyond what DECIMAL(18,2) holds"},
      {R"({"amount":1e300})", "beyond what DECIMAL(18,2) holds"},
      {R"({"count":1.5})", "is 1.5, which BIGINT cannot hold exactly (0 decimals)"},
      {R"({"count":9223372036854775808})", "beyond what BIGINT holds"},
      {R"({"small":-1})", "beyond what TINYINT UNSIGNED holds"},
      {R"({"small":256})", "beyond what TINYINT UNSIGNED holds"},
  };
  for (const auto& [add, want] : bad) {
    // The first operation alone would fit: the event is all or nothing.
    const auto ops = Parse(o, R"([{"table":"money","key":{"id":"a"},"add":{"amount":5}},
                                   {"table":"money","key":{"id":"a"},"add":)" + std::string(add) + "}]");
    const Status st = fold.Add(ops);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << add << ": " << st.ToString();
    EXPECT_NE(st.message().find(want), std::string::npos) << add << ": " << st.message();
  }
  EXPECT_EQ(Written(fold), "1.00");
}

TEST(AggregateOps, ASumBeyondTheColumnAsksForTheFoldToBeWrittenFirst) {
  const AggregateSinkOptions o = Numbers();
  OpFold fold(o);
  ASSERT_TRUE(fold.Add(AddOne(o, "count", "9223372036854775807")).ok());
  // With the batch's earlier adds it overflows: write them, then fold it anew.
  const Status more = fold.Add(AddOne(o, "count", "1"));
  EXPECT_EQ(more.code(), StatusCode::kResourceExhausted) << more.ToString();
  EXPECT_NE(more.message().find("the adds to 'count' in table money sum beyond what BIGINT holds"), std::string::npos)
      << more.message();
  EXPECT_EQ(Written(fold), "9223372036854775807");  // not wrapped, not changed
  fold.Clear();
  ASSERT_TRUE(fold.Add(AddOne(o, "count", "1")).ok());
  EXPECT_EQ(Written(fold), "1");
  // Going down past the minimum is the same.
  OpFold low(o);
  ASSERT_TRUE(low.Add(AddOne(o, "amount", R"("-9999999999999999.99")")).ok());
  EXPECT_EQ(low.Add(AddOne(o, "amount", "-0.01")).code(), StatusCode::kResourceExhausted);
  // One event whose own adds overflow is its own fault.
  OpFold alone(o);
  const Status own = alone.Add(Parse(o, R"([{"table":"money","key":{"id":"a"},"add":{"count":9223372036854775807}},
                                             {"table":"money","key":{"id":"a"},"add":{"count":1}}])"));
  EXPECT_EQ(own.code(), StatusCode::kInvalidArgument) << own.ToString();
  EXPECT_TRUE(alone.empty());
}

TEST(AggregateOps, MultiRowStatementsKeepEachStatementWithinTheBudget) {
  std::vector<std::string> rows;
  for (int i = 0; i < 100; ++i) rows.push_back("(" + std::to_string(i) + ")");
  rows.push_back("(" + std::string(80, 'x') + ")");  // beyond the budget alone
  const auto s = MultiRowStatements("INSERT INTO t VALUES ", rows, " ON X", 60);
  ASSERT_GT(s.size(), 10u);
  std::string all;
  for (const std::string& one : s) {
    ASSERT_EQ(one.rfind("INSERT INTO t VALUES ", 0), 0u) << one;
    ASSERT_EQ(one.substr(one.size() - 5), " ON X") << one;
    if (one.find('x') == std::string::npos) {
      EXPECT_LE(one.size(), 60u) << one;
    }
    all += (all.empty() ? "" : ",") + one.substr(21, one.size() - 26);
  }
  std::string want;
  for (const std::string& r : rows) want += (want.empty() ? "" : ",") + r;
  EXPECT_EQ(all, want);
  EXPECT_TRUE(MultiRowStatements("h", {}, "t").empty());
}

TEST(AggregateOps, ABigFoldIsSplitIntoStatementsWithinTheBudgetThatCarryEveryRow) {
  const AggregateSinkOptions o = Numbers();
  OpFold fold(o);
  const std::string body(1000, 'b');
  constexpr int kRows = 5000;  // about 5 MB of text
  for (int i = 0; i < kRows; ++i) {
    const std::string key = R"("key":{"id":"r)" + std::to_string(i) + R"("})";
    ASSERT_TRUE(fold.Add(Parse(o, R"([{"table":"docs",)" + key + R"(,"set":{"body":")" + body + R"("}},
                                      {"table":"docs",)" + key + R"(,"add":{"n":1}}])"))
                    .ok());
  }
  const auto s = fold.Statements(Quote);
  ASSERT_GE(s.size(), 5u);
  std::set<std::string> keys;
  for (const std::string& one : s) {
    EXPECT_LE(one.size(), kMaxStatementBytes);
    EXPECT_EQ(one.rfind("INSERT INTO `docs` (`id`,`body`,`n`) VALUES ('r", 0), 0u);
    EXPECT_NE(one.find(" ON DUPLICATE KEY UPDATE `body`=VALUES(`body`),`n`=COALESCE(`n`,0)+VALUES(`n`)"),
              std::string::npos);
    for (size_t at = one.find("('r"); at != std::string::npos; at = one.find("('r", at + 1)) {
      const size_t end = one.find('\'', at + 2);
      const std::string want = "','" + body + "',1)";
      EXPECT_TRUE(one.compare(end, want.size(), want) == 0) << "row " << keys.size();
      EXPECT_TRUE(keys.insert(one.substr(at + 2, end - at - 2)).second);
    }
  }
  EXPECT_EQ(keys.size(), static_cast<size_t>(kRows));
}

}  // namespace
}  // namespace sluice::connectors::aggregate
