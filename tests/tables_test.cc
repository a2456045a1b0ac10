// The access-layer contract (sql/tables_test.h) on MariaDB: the SQL of
// sql/mariadb_tables.cc keeps the semantics the in-memory fake is tested with.
#include <gtest/gtest.h>

#include "sql/layout.h"
#include "sql/layout_schema.h"
#include "sql/mariadb_tables.h"
#include "sql/routed_tables.h"
#include "sql/schema.h"
#include "sql/tables_test.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using sql::TablesContractTest;

sql::ContractStorage MakeMariaDb() {
  if (!Connect()) {
    if (InCi()) ADD_FAILURE() << "MariaDB is not reachable (CI=true)";
    return {};
  }
  auto db = std::make_shared<TestDatabase>("tables");
  auto init = sql::InitSchema(db->conn(), db->name(), {{"account", 2}});
  if (!init.ok()) {
    ADD_FAILURE() << init.status().ToString();
    return {};
  }
  sql::ConnectParams params = MysqlParams();
  params.database = db->name();
  return {std::make_shared<sql::MariaDbStorage>(params), db};
}

// The contract through the layout code on two databases: partition 0 of
// account on "main", partition 1 on "b", both set up by sql::InitLayout.
sql::ContractStorage MakeTwoServers() {
  if (!Connect()) {
    if (InCi()) ADD_FAILURE() << "MariaDB is not reachable (CI=true)";
    return {};
  }
  auto main_db = std::make_shared<TestDatabase>("tables");
  auto b_db = std::make_shared<TestDatabase>("tables_b");
  sql::StorageLayout layout = sql::StorageLayout::Single(MysqlParams());
  layout.servers[0].params.database = main_db->name();
  layout.servers.push_back({"b", MysqlParams()});
  layout.servers[1].params.database = b_db->name();
  layout.placement["account"] = {0, 1};
  auto init = sql::InitLayout(layout, {{"account", 2}}, false);
  if (!init.ok()) {
    ADD_FAILURE() << init.status().ToString();
    return {};
  }
  if (Status st = sql::CheckLayout(layout, {{"account", 2}}); !st.ok()) {
    ADD_FAILURE() << st.ToString();
    return {};
  }
  return {sql::OpenStorage(layout), std::make_shared<std::pair<std::shared_ptr<TestDatabase>, std::shared_ptr<TestDatabase>>>(
                                        main_db, b_db)};
}

INSTANTIATE_TEST_SUITE_P(MariaDb, TablesContractTest,
                         ::testing::Values(sql::StorageKind{"MariaDb", MakeMariaDb},
                                           sql::StorageKind{"TwoMariaDbServers", MakeTwoServers}),
                         sql::KindName);

// The writer's GET .../events prints committed_at from committed_at_us
// through TimestampText: byte for byte what MariaDB prints for the column.
TEST(MariaDbTables, TimestampTextOfCommittedAtIsWhatMariaDbPrints) {
  SLUICE_REQUIRE_MYSQL();
  sql::ContractStorage made = MakeMariaDb();
  ASSERT_NE(made.storage, nullptr);
  auto& db = *static_cast<TestDatabase*>(made.keep.get());
  const std::string table = sql::QuoteIdent(sql::EventTableName("account", 0));
  // A fraction with trailing zeros, one without any, and the server's own clock.
  const auto exec = [&db](const std::string& statement) {
    auto done = db.conn().Execute(statement);
    ASSERT_TRUE(done.ok()) << statement << ": " << done.status().ToString();
  };
  exec("INSERT INTO " + table + " " + sql::kEventInsertColumns +
           " VALUES (1,'a',1,'c1','put',NULL,'{}','{}','{}',NULL,0),(2,'a',2,'c2','put',NULL,'{}','{}','{}',NULL,0),"
           "(3,'a',3,'c3','delete',NULL,'{}','{}',NULL,NULL,1)");
  exec("UPDATE " + table + " SET committed_at='2026-11-21 12:00:00.120000' WHERE event_id=1");
  exec("UPDATE " + table + " SET committed_at='2026-01-02 03:04:05' WHERE event_id=2");
  auto history = made.storage->OpenEventLog()->History("account", 0, "a", 0, 10);
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  ASSERT_EQ(history->size(), 3u);
  const auto printed = db.Query("SELECT committed_at FROM " + table + " ORDER BY version");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sql::TimestampText(history->at(i).committed_at_us), printed.at(i).at(0).value_or("")) << i;
  }
  EXPECT_EQ(sql::TimestampText(history->at(0).committed_at_us), "2026-11-21 12:00:00.120000");
  EXPECT_EQ(sql::TimestampText(history->at(1).committed_at_us), "2026-01-02 03:04:05.000000");
}

}  // namespace
}  // namespace sluice::testing
