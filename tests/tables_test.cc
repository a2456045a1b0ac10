// The access-layer contract (sql/tables_test.h) on MariaDB: the SQL of
// sql/mariadb_tables.cc keeps the semantics the in-memory fake is tested with.
#include <gtest/gtest.h>

#include "sql/mariadb_tables.h"
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

INSTANTIATE_TEST_SUITE_P(MariaDb, TablesContractTest, ::testing::Values(sql::StorageKind{"MariaDb", MakeMariaDb}),
                         sql::KindName);

}  // namespace
}  // namespace sluice::testing
