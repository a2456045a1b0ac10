// The mysql sink's keys as the config loader reads them (mysql_options.cc):
// the messages, with FILE:LINE:COL, that `sluice config check` prints, and
// the check across sinks (no two write one table). Moved from
// config/config_test.cc; the fixtures (kValid, kSinks) are shared with it
// (tests/support/config_support.h).
#include "connectors/mysql/mysql_options.h"

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "config/config.h"
#include "tests/support/config_support.h"

namespace sluice::config {
namespace {

using connectors::mysql::MysqlSinkOptions;
using testing::Errors;
using testing::kFile;
using testing::LoadConfigFromString;
using testing::SinksWith;
using testing::WithSinks;

TEST(Sinks, SinksMayComeBeforeTheEntitiesAndStorageTheyReferTo) {
  Result<Config> r = LoadConfigFromString(R"(sinks:
  - {name: a, type: mysql, entity: order, table: t, columns: {x: /x}}
  - {name: b, type: mysql, entity: order, database: other, table: t, columns: {x: /x}}
entities: {order: {partitions: 1}}
storage: {mysql: {database: main}}
)",
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sinks[0].Options<MysqlSinkOptions>().database, "");  // the storage database
  EXPECT_EQ(r->sinks[1].Options<MysqlSinkOptions>().database, "other");
}

TEST(SinkErrors, MysqlTableNames) {
  EXPECT_EQ(Errors(SinksWith("table: account_view", "table: ev_account_0")),
            "t.yaml:31:12: sinks[2].table: table names starting with ev_ or sluice_ are reserved "
            "for sluice's own tables, got \"ev_account_0\"");
  EXPECT_EQ(Errors(SinksWith("table: account_view", "table: Sluice_offsets")),
            "t.yaml:31:12: sinks[2].table: table names starting with ev_ or sluice_ are reserved "
            "for sluice's own tables, got \"Sluice_offsets\"");
  EXPECT_EQ(Errors(SinksWith("table: account_view", "table: 1view")),
            "t.yaml:31:12: sinks[2].table: must be a table name matching "
            "[A-Za-z_][A-Za-z0-9_]{0,63}, got \"1view\"");
  EXPECT_EQ(Errors(SinksWith("database: other_db", "database: other-db")),
            "t.yaml:30:15: sinks[2].database: must be a name matching [A-Za-z0-9_]{1,64}, got "
            "\"other-db\"");
}

TEST(SinkErrors, TwoMysqlSinksOnOneTable) {
  // No database means the storage database, sluice_demo; names ignore case.
  EXPECT_EQ(Errors(WithSinks(
                "  - {name: a, type: mysql, entity: account, table: View, columns: {x: /x}}\n"
                "  - {name: b, type: mysql, entity: account, table: view, database: sluice_demo,\n"
                "     columns: {x: /x}}\n")),
            "t.yaml:12:52: sinks[1].table: table sluice_demo.view is already written by sink "
            "\"a\" (line 11)");
  EXPECT_EQ(Errors(WithSinks(
                "  - {name: a, type: mysql, entity: account, table: view, columns: {x: /x}}\n"
                "  - {name: b, type: mysql, entity: account, table: view, database: other,\n"
                "     columns: {x: /x}}\n")),
            "");
}

TEST(SinkErrors, BadColumnType) {
  const std::string prefix =
      "t.yaml:34:36: sinks[2].columns.note.type: must be one of TEXT, MEDIUMTEXT, LONGTEXT, "
      "JSON, VARCHAR(N), CHAR(N), [TINY|SMALL|BIG]INT [UNSIGNED], DECIMAL(M,D), DOUBLE, "
      "BOOLEAN, DATETIME[(N)], got ";
  for (const std::string bad : {"VARCHAR(8); DROP TABLE x", "VARCHAR", "varchar(123456)",
                                "DECIMAL(2,5)", "DATETIME(7)", "INT  UNSIGNED", "BLOB"}) {
    EXPECT_EQ(Errors(SinksWith("type: \"varchar(8)\"", "type: \"" + bad + "\"")),
              prefix + "\"" + bad + "\"");
  }
  for (const std::string good : {"text", "JSON", "bigint unsigned", "TinyInt", "char(3)",
                                 "DOUBLE", "boolean", "DATETIME", "decimal(5,5)", "LONGTEXT"}) {
    Result<Config> r =
        LoadConfigFromString(SinksWith("type: \"varchar(8)\"", "type: \"" + good + "\""), kFile);
    ASSERT_TRUE(r.ok()) << good << ": " << r.status().ToString();
    std::string upper = good;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(r->sinks[2].Options<MysqlSinkOptions>().columns[1].sql_type, upper);
  }
}

}  // namespace
}  // namespace sluice::config
