// The operations of an aggregate view: what ParseOps accepts and refuses,
// and the statements OpFold makes of a batch.
#include "connectors/aggregate/aggregate_ops.h"

#include <gtest/gtest.h>

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
      {R"([{"table":"owner_balance","key":{"owner":"o"},"add":{"total":"1"}}])", "must be a number"},
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
    fold.Add(*ops);
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

TEST(AggregateOps, ASetThenAnAddIsTheSumAndDecimalsStayDecimal) {
  const AggregateSinkOptions o = Options();
  OpFold fold(o);
  auto ops = ParseOps(R"([{"table":"owner_balance","key":{"owner":"o"},"set":{"total":10}},
                          {"table":"owner_balance","key":{"owner":"o"},"add":{"total":2.25}},
                          {"table":"owner_balance","key":{"owner":"o"},"add":{"total":0.5}}])",
                      o);
  ASSERT_TRUE(ops.ok());
  fold.Add(*ops);
  const auto s = fold.Statements(Quote);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0], "INSERT INTO `owner_balance` (`owner`,`total`) VALUES ('o',12.75) ON DUPLICATE KEY UPDATE "
                  "`total`=VALUES(`total`)");
}

}  // namespace
}  // namespace sluice::connectors::aggregate
