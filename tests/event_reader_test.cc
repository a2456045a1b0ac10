// engine/event_reader against a real MariaDB: one partition at a time and
// several partitions in one statement give the same events, in event_id
// order, cut before a gap, within the limit.
#include "engine/event_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sql/mariadb_tables.h"
#include "sql/schema.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

class EventReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_MYSQL();
    db_ = std::make_unique<TestDatabase>("reader");
    log_ = sql::EventLogOn(db_->conn());
    for (uint32_t p = 0; p < 4; ++p) Exec(sql::EventTableDdl("account", p));
    // p0: 1..5; p1: 1, 2, 4 (3 is missing); p2: nothing; p3: 1..3, 2 a delete.
    for (uint64_t id = 1; id <= 5; ++id) Insert(0, id, "a" + std::to_string(id % 2), id, false);
    for (uint64_t id : {1, 2, 4}) Insert(1, id, "b", id, false);
    for (uint64_t id = 1; id <= 3; ++id) Insert(3, id, "d", id, id == 2);
  }

  void Insert(uint32_t p, uint64_t id, const std::string& entity, uint64_t version, bool deleted) {
    const std::string state = deleted ? "NULL" : "'{\"n\":" + std::to_string(id) + "}'";
    Exec("INSERT INTO " + sql::QuoteIdent(sql::EventTableName("account", p)) + " " + sql::kEventInsertColumns +
               " VALUES (" + std::to_string(id) + ",'" + entity + "'," + std::to_string(version) + ",'c" +
               std::to_string(p) + "-" + std::to_string(id) + "','" + (deleted ? "delete" : "patch") +
               "',NULL,'{}','{}'," + state + ",NULL," + (deleted ? "1" : "0") + ")");
  }

  void Exec(const std::string& statement) {
    auto done = db_->conn().Execute(statement);
    ASSERT_TRUE(done.ok()) << statement << ": " << done.status().ToString();
  }

  static std::vector<uint64_t> Ids(const engine::ReadResult& r) {
    std::vector<uint64_t> ids;
    for (const auto& e : r.events) ids.push_back(e.event_id);
    return ids;
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<sql::EventLog> log_;
};

TEST_F(EventReaderTest, SeveralPartitionsInOneStatementMatchOneByOne) {
  auto many = engine::ReadEventsOfPartitions(*log_, "account", {{0, 0}, {1, 0}, {2, 0}, {3, 1}}, 10);
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  ASSERT_EQ(many->size(), 4u);
  EXPECT_EQ(Ids(many->at(0)), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_FALSE(many->at(0).gap);
  EXPECT_EQ(Ids(many->at(1)), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(many->at(1).gap);
  EXPECT_TRUE(many->at(2).events.empty());
  EXPECT_FALSE(many->at(2).gap);
  EXPECT_EQ(Ids(many->at(3)), (std::vector<uint64_t>{2, 3}));

  for (const auto& [p, after] : std::vector<std::pair<uint32_t, uint64_t>>{{0, 0}, {1, 0}, {2, 0}, {3, 1}}) {
    auto one = engine::ReadEvents(*log_, "account", p, after, 10);
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    const auto& a = one->events;
    const auto& b = many->at(p).events;
    ASSERT_EQ(a.size(), b.size()) << p;
    EXPECT_EQ(one->gap, many->at(p).gap) << p;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].partition, p);
      EXPECT_EQ(b[i].partition, p);
      EXPECT_EQ(a[i].entity_type, "account");
      EXPECT_EQ(b[i].entity_type, "account");
      EXPECT_EQ(a[i].event_id, b[i].event_id);
      EXPECT_EQ(a[i].entity_id, b[i].entity_id);
      EXPECT_EQ(a[i].version, b[i].version);
      EXPECT_EQ(a[i].deleted, b[i].deleted);
      EXPECT_EQ(a[i].state, b[i].state);
      EXPECT_EQ(a[i].command_name, b[i].command_name);
      EXPECT_EQ(a[i].command_id, b[i].command_id);
      EXPECT_EQ(a[i].committed_at_us, b[i].committed_at_us);
      EXPECT_GT(b[i].committed_at_us, 0);
    }
  }
  const auto& d = many->at(3).events;
  EXPECT_TRUE(d[0].deleted);
  EXPECT_EQ(d[0].state, "");
  EXPECT_EQ(d[1].state, R"({"n":3})");
  EXPECT_EQ(d[1].command_id, "c3-3");
}

TEST_F(EventReaderTest, TheLimitHoldsPerPartition) {
  auto r = engine::ReadEventsOfPartitions(*log_, "account", {{0, 2}, {3, 0}, {1, 3}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Ids(r->at(0)), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(Ids(r->at(3)), (std::vector<uint64_t>{1, 2}));
  // After 3 in p1 comes 4: the gap is behind the position, so nothing is cut.
  EXPECT_EQ(Ids(r->at(1)), (std::vector<uint64_t>{4}));
  EXPECT_FALSE(r->at(1).gap);
}

TEST_F(EventReaderTest, AMissingTableFailsTheWholeRead) {
  auto r = engine::ReadEventsOfPartitions(*log_, "account", {{0, 0}, {7, 0}}, 10);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace sluice::testing
