// The 3-node MariaDB Galera cluster of `scripts/services up galera`, for
// the tests that run on it: its nodes (SLUICE_TEST_GALERA_HOST and
// SLUICE_TEST_GALERA_PORTS) and the check that it is up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sql/connection.h"
#include "tests/support/test_support.h"

namespace sluice::testing {

// The nodes' ports (14306,14307,14308 unless SLUICE_TEST_GALERA_PORTS says otherwise).
std::vector<uint16_t> GaleraPorts();
// The test server's user and password at a node.
sql::ConnectParams NodeParams(uint16_t port);
// The cluster answers on every node and has 3 members; otherwise false with *why.
bool GaleraReady(std::string* why);

}  // namespace sluice::testing

// Skips the test when the cluster is not up; fails it with CI=true.
#define SLUICE_REQUIRE_GALERA()                                                                  \
  do {                                                                                           \
    std::string why_galera;                                                                      \
    if (!::sluice::testing::GaleraReady(&why_galera)) {                                          \
      if (::sluice::testing::InCi()) FAIL() << "the Galera cluster is not reachable (CI=true): " << why_galera; \
      GTEST_SKIP() << "the Galera cluster is not reachable (scripts/services up galera): " << why_galera;      \
    }                                                                                            \
  } while (0)
