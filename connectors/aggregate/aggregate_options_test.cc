// The aggregate sink's keys as the config loader reads them.
#include "connectors/aggregate/aggregate_options.h"

#include <gtest/gtest.h>

#include <string>

#include "config/config.h"
#include "tests/support/config_support.h"

namespace sluice::config {
namespace {

using connectors::aggregate::AggregateSinkOptions;
using connectors::aggregate::CanonicalColumnType;
using connectors::aggregate::IsAggregateColumnType;
using testing::Errors;
using testing::LoadConfigFromString;
using testing::ScratchDir;
using testing::WithSinks;

class AggregateKeysTest : public ::testing::Test {
 protected:
  ScratchDir dir_;
  std::string code_ = dir_.Write("agg.js", "function aggregate(e) { return []; }\n").string();
};

TEST_F(AggregateKeysTest, TablesAreReadWithTheirKeysAndColumns) {
  auto r = LoadConfigFromString(WithSinks("  - name: per_owner\n    type: aggregate\n    entity: account\n"
                                          "    code: " + code_ + "\n"
                                          "    tables:\n"
                                          "      owner_balance:\n"
                                          "        key: {owner: varchar(64)}\n"
                                          "        columns: {total: 'DECIMAL(20,2)', accounts: BIGINT}\n"
                                          "      per_minute: {key: {minute: CHAR(16), command: VARCHAR(64)}, "
                                          "columns: {events: bigint unsigned}}\n"),
                                "t.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& o = r->sinks.back().Options<AggregateSinkOptions>();
  ASSERT_EQ(o.tables.size(), 2u);
  EXPECT_EQ(o.tables[0].name, "owner_balance");
  EXPECT_EQ(o.tables[0].key[0].sql_type, "VARCHAR(64)");
  EXPECT_EQ(o.tables[0].columns[0].sql_type, "DECIMAL(20,2)");
  EXPECT_EQ(o.tables[1].key.size(), 2u);
  EXPECT_EQ(o.tables[1].columns[0].sql_type, "BIGINT UNSIGNED");
  EXPECT_EQ(r->sinks.back().code, code_);
}

TEST_F(AggregateKeysTest, MistakesAreReportedWithTheirLines) {
  const std::string head = "  - name: agg\n    type: aggregate\n    entity: account\n";
  // No code.
  EXPECT_NE(Errors(WithSinks(head + "    tables: {t: {key: {k: INT}, columns: {n: INT}}}\n"))
                .find("an aggregate sink needs code"),
            std::string::npos);
  // A type outside the list; a key type that cannot be a key; reserved and duplicate names.
  const std::string with_code = head + "    code: " + code_ + "\n";
  EXPECT_NE(Errors(WithSinks(with_code + "    tables: {t: {key: {k: INT}, columns: {n: BLOB}}}\n"))
                .find("must be a column type"),
            std::string::npos);
  EXPECT_NE(Errors(WithSinks(with_code + "    tables: {t: {key: {k: TEXT}, columns: {n: INT}}}\n"))
                .find("must be a key column type"),
            std::string::npos);
  EXPECT_NE(Errors(WithSinks(with_code + "    tables: {sluice_x: {key: {k: INT}, columns: {n: INT}}}\n"))
                .find("reserved for sluice's own tables"),
            std::string::npos);
  EXPECT_NE(Errors(WithSinks(with_code + "    tables: {t: {key: {k: INT}, columns: {k: INT}}}\n"))
                .find("column appears twice"),
            std::string::npos);
  EXPECT_NE(Errors(WithSinks(with_code + "    tables: {t: {key: {k: INT}}}\n")).find("needs `columns`"),
            std::string::npos);
  EXPECT_NE(Errors(WithSinks(with_code + "    push: true\n    tables: {t: {key: {k: INT}, columns: {n: INT}}}\n"))
                .find("push"),
            std::string::npos);
}

TEST_F(AggregateKeysTest, SinksThatFeedOneTableMustDeclareItAlike) {
  const std::string a = "  - name: a\n    type: aggregate\n    entity: account\n    code: " + code_ +
                        "\n    tables: {t: {key: {k: INT}, columns: {n: BIGINT}}}\n";
  const std::string same = "  - name: b\n    type: aggregate\n    entity: account\n    code: " + code_ +
                           "\n    tables: {t: {key: {k: INT}, columns: {n: BIGINT}}}\n";
  const std::string other = "  - name: b\n    type: aggregate\n    entity: account\n    code: " + code_ +
                            "\n    tables: {t: {key: {k: INT}, columns: {n: INT}}}\n";
  EXPECT_TRUE(LoadConfigFromString(WithSinks(a + same), "t.yaml").ok());
  EXPECT_NE(Errors(WithSinks(a + other)).find("is declared differently by sink \"a\""), std::string::npos)
      << Errors(WithSinks(a + other));
}

// With storage across servers (docs/deployment.md#storage-servers): the
// view lives on its entity type's server, so the type must be on one.
TEST_F(AggregateKeysTest, AnAggregateViewsTypeMustBeStoredOnOneServer) {
  const std::string a = "  - name: a\n    type: aggregate\n    entity: account\n    code: " + code_ +
                        "\n    tables: {t: {key: {k: INT}, columns: {n: BIGINT}}}\n";
  const auto placed = [&](const std::string& placement) {
    std::string text = WithSinks(a);
    const std::string entities = "entities:\n  account: {partitions: 4}\n";
    const size_t at = text.find(entities);
    EXPECT_NE(at, std::string::npos);
    text.replace(at, entities.size(),
                 "  servers:\n    b: {host: 10.0.0.2}\nentities:\n  account: {partitions: 4, " + placement + "}\n");
    return text;
  };
  EXPECT_TRUE(LoadConfigFromString(placed("server: b"), "t.yaml").ok());
  EXPECT_NE(Errors(placed("servers: {main: 0-1, b: 2-3}")).find("an aggregate view's entity type must be stored on one server"),
            std::string::npos);
}

TEST(AggregateColumnTypes, TheListIsExplicit) {
  std::string n;
  for (const char* ok : {"BIGINT", "int unsigned", "DECIMAL(20,2)", "decimal(10, 4)", "VARCHAR(64)", "DATE",
                         "DATETIME(6)", "CHAR(16)"}) {
    EXPECT_TRUE(IsAggregateColumnType(ok, true, &n)) << ok;
  }
  EXPECT_TRUE(IsAggregateColumnType("JSON", false, &n));
  EXPECT_TRUE(IsAggregateColumnType("DOUBLE", false, &n));
  for (const char* bad : {"JSON", "TEXT", "DOUBLE", "VARCHAR(5000)", "INT; DROP TABLE x", "BLOB"}) {
    EXPECT_FALSE(IsAggregateColumnType(bad, true, &n)) << bad;
  }
}

// Each declared type (as IsAggregateColumnType normalizes it) against the
// COLUMN_TYPE MariaDB 10.11 reports for a table created with it.
TEST(AggregateColumnTypes, ADeclaredTypeMatchesTheLiveColumnTypeMadeFromIt) {
  const std::pair<const char*, const char*> same[] = {
      {"TINYINT", "tinyint(4)"},       {"SMALLINT UNSIGNED", "smallint(5) unsigned"},
      {"INT", "int(11)"},              {"BIGINT", "bigint(20)"},
      {"BIGINT UNSIGNED", "bigint(20) unsigned"}, {"BIGINT", "bigint"},
      {"DECIMAL(18,2)", "decimal(18,2)"}, {"DECIMAL(18, 2)", "decimal(18,2)"},
      {"DOUBLE", "double"},            {"VARCHAR(64)", "varchar(64)"},
      {"VARBINARY(8)", "varbinary(8)"}, {"CHAR(3)", "char(3)"},
      {"DATE", "date"},                {"DATETIME", "datetime"},
      {"DATETIME(0)", "datetime"},     {"DATETIME(6)", "datetime(6)"},
      {"TEXT", "text"},                {"JSON", "longtext"},
      {"JSON", "json"},
  };
  for (const auto& [declared, live] : same) {
    std::string n;
    ASSERT_TRUE(IsAggregateColumnType(declared, false, &n)) << declared;
    EXPECT_EQ(CanonicalColumnType(n), CanonicalColumnType(live)) << declared << " vs " << live;
  }
  const std::pair<const char*, const char*> differ[] = {
      {"BIGINT", "int(11)"},         {"BIGINT", "bigint(20) unsigned"}, {"DECIMAL(18,2)", "decimal(18,3)"},
      {"DECIMAL(20,2)", "decimal(18,2)"}, {"VARCHAR(64)", "varchar(32)"}, {"DATETIME(6)", "datetime"},
      {"DOUBLE", "float"},           {"TEXT", "longtext"},
  };
  for (const auto& [declared, live] : differ) {
    EXPECT_NE(CanonicalColumnType(declared), CanonicalColumnType(live)) << declared << " vs " << live;
  }
}

}  // namespace
}  // namespace sluice::config
