#include "tests/support/owner_views.h"

#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace sluice::testing {

const char* const kPerOwnerJs = R"JS(
// Total balance and number of accounts per owner, and events per minute per
// command. An account that changes owner leaves the old owner's row.
function aggregate(event) {
  var ops = [];
  if (event.before) {
    ops.push({table: 'owner_balance', key: {owner: event.before.owner},
              add: {total: -event.before.balance, accounts: -1}});
  }
  if (event.state) {
    ops.push({table: 'owner_balance', key: {owner: event.state.owner},
              add: {total: event.state.balance, accounts: 1}});
  }
  ops.push({table: 'events_per_minute', key: {minute: Math.floor(event.committed_at_ms / 60000), command: event.command},
            add: {events: 1}});
  return ops;
}
)JS";

const char* const kPerOwnerTables =
    "    tables:\n"
    "      owner_balance: {key: {owner: VARCHAR(32)}, columns: {total: 'DECIMAL(20,2)', accounts: BIGINT}}\n"
    "      events_per_minute: {key: {minute: BIGINT, command: VARCHAR(64)}, columns: {events: BIGINT}}\n";

void OwnerLoad(uint16_t port, int count, int accounts, uint32_t seed, const std::atomic<bool>* stop) {
  std::vector<std::thread> ts;
  const int threads = 16;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      HttpClient c(port);
      std::mt19937 rng(seed * 1000 + t);
      for (int i = t; i < count; i += threads) {
        if (stop && *stop) return;
        const int a = static_cast<int>(rng() % accounts);
        const int dice = static_cast<int>(rng() % 100);
        const std::string cmd = dice < 85 ? "patch" : dice < 93 ? "delete" : "create";
        const unsigned cents = rng() % 10000000;
        char balance[32];
        std::snprintf(balance, sizeof balance, "%u.%02u", cents / 100, cents % 100);
        const std::string body = R"({"owner":"o)" + std::to_string(rng() % 50) + R"(","balance":)" + balance + "}";
        c.Post("/v1/entities/account/a" + std::to_string(a) + "/commands/" + cmd, body,
               {{"Idempotency-Key", "k" + std::to_string(seed) + "-" + std::to_string(i)}});
      }
    });
  }
  for (auto& t : ts) t.join();
}

std::string AllEvents(const std::string& type, int partitions, const std::string& columns) {
  std::string q;
  for (int p = 0; p < partitions; ++p) {
    char table[64];
    std::snprintf(table, sizeof table, "ev_%s_p%03d", type.c_str(), p);
    q += (p ? " UNION ALL " : "") + std::string("SELECT ") + columns + " FROM " + table;
  }
  return "(" + q + ")";
}

std::string LatestLive(const std::string& type, int partitions) {
  const std::string all = AllEvents(type, partitions, "entity_id, version, deleted, state");
  return "(SELECT e.entity_id, e.state FROM " + all + " e JOIN (SELECT entity_id, MAX(version) v FROM " + all +
         " x GROUP BY entity_id) m ON e.entity_id=m.entity_id AND e.version=m.v WHERE e.deleted=0)";
}


void ExpectPerOwnerExact(TestDatabase& db, int partitions, int64_t events) {
  using Rows = std::vector<sql::Row>;
  // Per owner, from the latest live states, to the cent.
  const Rows want = db.Query(
      "SELECT JSON_VALUE(state, '$.owner') o, CAST(SUM(CAST(JSON_VALUE(state, '$.balance') AS DECIMAL(20,2))) AS "
      "CHAR), CAST(COUNT(*) AS CHAR) FROM " + LatestLive("account", partitions) + " l GROUP BY o ORDER BY o");
  const Rows got = db.Query(
      "SELECT owner, CAST(total AS CHAR), CAST(accounts AS CHAR) FROM owner_balance WHERE accounts <> 0 OR total <> 0 "
      "ORDER BY owner");
  ASSERT_GT(want.size(), 10u);
  EXPECT_EQ(got, want);
  // Events per minute and command, from every event.
  const Rows want_minutes = db.Query(
      "SELECT CAST(FLOOR(UNIX_TIMESTAMP(committed_at) / 60) AS CHAR) m, command_name, CAST(COUNT(*) AS CHAR) FROM " +
      AllEvents("account", partitions, "committed_at, command_name") +
      " x GROUP BY m, command_name ORDER BY m, command_name");
  const Rows got_minutes = db.Query(
      "SELECT CAST(minute AS CHAR), command, CAST(events AS CHAR) FROM events_per_minute ORDER BY minute, command");
  EXPECT_EQ(got_minutes, want_minutes);
  EXPECT_EQ(db.Scalar("SELECT SUM(events) FROM events_per_minute"), events);
}

}  // namespace sluice::testing
