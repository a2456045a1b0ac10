// The ObjectStore contract (object_store.h), written once and run on each
// store: on the file store by file_store_test.cc (unit), on a real S3 server
// (SeaweedFS from scripts/services) by tests/s3_store_test.cc (integration).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "objectstore/object_store.h"

namespace sluice::objectstore {

// A fresh, empty store for one test: a new directory, or a prefix of its own
// in the test bucket. `keep` holds whatever must outlive the test and cleans
// up when released. A null store skips the test (the maker reports a
// failure itself when a missing server must fail, under CI=true).
struct ContractStore {
  std::unique_ptr<ObjectStore> store;
  std::shared_ptr<void> keep;
};

struct StoreKind {
  std::string name;
  std::function<ContractStore()> make;
};
// How gtest prints a StoreKind: its name.
inline void PrintTo(const StoreKind& kind, std::ostream* os) { *os << kind.name; }

class ObjectStoreContractTest : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override;
  void TearDown() override;

  ContractStore made_;
  ObjectStore* store_ = nullptr;
};

// For INSTANTIATE_TEST_SUITE_P(..., ::testing::Values(...), StoreKindName).
inline std::string StoreKindName(const ::testing::TestParamInfo<StoreKind>& info) { return info.param.name; }

}  // namespace sluice::objectstore
