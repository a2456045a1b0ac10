// The access layer's contract (sql/tables.h), written once and run on each
// implementation: on the in-memory fake by memory_tables_test.cc (unit), on
// MariaDB by tests/tables_test.cc (integration), so that the fake keeps the
// semantics of the SQL that the logic above it is tested against.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "sql/tables.h"

namespace sluice::sql {

// An empty storage with sluice's tables and the event tables of type
// "account", partitions 0 and 1. `keep` holds whatever must outlive the
// test (a database to drop). A null storage skips the test.
struct ContractStorage {
  std::shared_ptr<Storage> storage;
  std::shared_ptr<void> keep;
};

struct StorageKind {
  std::string name;
  std::function<ContractStorage()> make;
};
// How gtest prints a StorageKind: its name.
inline void PrintTo(const StorageKind& kind, std::ostream* os) { *os << kind.name; }

class TablesContractTest : public ::testing::TestWithParam<StorageKind> {
 protected:
  void SetUp() override;

  ContractStorage made_;
  Storage* storage_ = nullptr;
};

// For INSTANTIATE_TEST_SUITE_P(..., ::testing::Values(...), KindName).
inline std::string KindName(const ::testing::TestParamInfo<StorageKind>& info) { return info.param.name; }

}  // namespace sluice::sql
