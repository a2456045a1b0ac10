// Integration tests of the mysql sink against the real MariaDB of
// `scripts/services up`; each test gets its own database.
#include "connectors/mysql/mysql_sink.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "connectors/mysql/mysql_options.h"
#include "tests/support/test_support.h"

namespace sluice::connectors::mysql {
namespace {

using Clock = std::chrono::steady_clock;

config::FieldMapping Column(std::string name, std::string pointer, std::string sql_type = "") {
  config::FieldMapping m;
  m.name = std::move(name);
  m.pointer = std::move(pointer);
  m.sql_type = std::move(sql_type);
  return m;
}

ChangeEvent Put(std::string id, uint64_t version, std::string state) {
  static uint64_t next_event_id = 1;
  ChangeEvent e;
  e.entity_type = "order";
  e.event_id = next_event_id++;
  e.entity_id = std::move(id);
  e.version = version;
  e.state = std::move(state);
  e.command_name = "put";
  return e;
}

ChangeEvent Del(std::string id, uint64_t version) {
  ChangeEvent e = Put(std::move(id), version, "");
  e.deleted = true;
  e.command_name = "delete";
  return e;
}

// One letter per event result: A applied, S stale, R rejected; or the status.
std::string Letters(const ApplyResult& r) {
  if (!r.status.ok()) return r.status.ToString();
  std::string out;
  for (const auto& e : r.results) {
    out += e.outcome == Outcome::kApplied ? 'A' : e.outcome == Outcome::kStale ? 'S' : 'R';
  }
  return out;
}

std::string Text(const std::optional<std::string>& v) { return v ? *v : "NULL"; }

class MysqlSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_MYSQL();
    db_ = std::make_unique<testing::TestDatabase>("mysqlsink");
    const sql::ConnectParams p = testing::MysqlParams();
    global_.mysql.host = p.host;
    global_.mysql.port = p.port;
    global_.mysql.user = p.user;
    global_.mysql.password = p.password;
    global_.mysql.database = db_->name();
    global_.mysql.connect_timeout = std::chrono::seconds(2);
    global_.mysql.io_timeout = std::chrono::seconds(10);
    sink_.name = "order-view";
    sink_.type = "mysql";
    sink_.entity = "order";
    sink_.MutableOptions<MysqlSinkOptions>().table = "order_view";
    sink_.MutableOptions<MysqlSinkOptions>().columns = {Column("name", "/name", "VARCHAR(8)"),
                                                        Column("total", "/total", "DECIMAL(10,2)")};
  }

  std::unique_ptr<Sink> Make() {
    auto made = MakeMysqlSink(sink_, global_);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? std::move(made).value() : nullptr;
  }

  std::unique_ptr<Sink> MakeOpen() {
    auto sink = Make();
    if (sink) {
      const Status st = sink->Open();
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    return sink;
  }

  // Runs a statement that returns no rows.
  void Exec(const std::string& statement) {
    auto r = db_->conn().Execute(statement);
    ASSERT_TRUE(r.ok()) << statement << ": " << r.status().ToString();
  }

  // id, _version, _deleted, name, total, _updated_at; one string per row.
  std::vector<std::string> Rows() {
    std::vector<std::string> out;
    for (const auto& row : db_->Query("SELECT id, _version, _deleted, name, total, _updated_at FROM order_view ORDER BY id")) {
      std::string s;
      for (const auto& v : row) s += Text(v) + "|";
      out.push_back(s);
    }
    return out;
  }

  // "version deleted name total" of one row, or "none".
  std::string Row(const std::string& id) {
    const auto rows = db_->Query("SELECT _version, _deleted, name, total FROM order_view WHERE id = '" + id + "'");
    if (rows.empty()) return "none";
    std::string s;
    for (const auto& v : rows[0]) s += (s.empty() ? "" : " ") + Text(v);
    return s;
  }

  std::unique_ptr<testing::TestDatabase> db_;
  config::Config global_;
  config::SinkConfig sink_;
};

TEST_F(MysqlSinkTest, ReapplyingIsStaleAndChangesNothing) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  EXPECT_TRUE(sink->capabilities().can_push);
  EXPECT_TRUE(sink->Health().ok());
  const std::vector<ChangeEvent> events = {Put("a", 1, R"({"name":"ann","total":10})"),
                                           Put("b", 1, R"({"name":"bob","total":2.5,"x":1})"),
                                           Put("c", 4, R"({"name":"cy"})")};
  EXPECT_EQ(Letters(sink->Apply(events)), "AAA");
  EXPECT_EQ(Row("a"), "1 0 ann 10.00");
  EXPECT_EQ(Row("b"), "1 0 bob 2.50");
  EXPECT_EQ(Row("c"), "4 0 cy NULL");
  const auto before = Rows();
  EXPECT_EQ(Letters(sink->Apply(events)), "SSS");
  EXPECT_EQ(Rows(), before);  // _updated_at included: no row was touched

  // A second sink on the existing table opens and agrees.
  auto again = MakeOpen();
  ASSERT_TRUE(again);
  EXPECT_EQ(Letters(again->Apply(events)), "SSS");
  sink->Close();
}

TEST_F(MysqlSinkTest, OlderVersionAfterNewerIsStale) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 5, R"({"name":"five"})")})), "A");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 3, R"({"name":"three"})")})), "S");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 5, R"({"name":"again"})")})), "S");
  EXPECT_EQ(Row("a"), "5 0 five NULL");
}

TEST_F(MysqlSinkTest, DeleteLeavesTombstoneThatOnlyNewerWritesReplace) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, R"({"name":"ann","total":1})")})), "A");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Del("a", 2)})), "A");
  EXPECT_EQ(Row("a"), "2 1 NULL NULL");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, R"({"name":"ann","total":1})"), Del("a", 2)})), "SS");
  EXPECT_EQ(Row("a"), "2 1 NULL NULL");
  // Re-creation.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 3, R"({"name":"new"})")})), "A");
  EXPECT_EQ(Row("a"), "3 0 new NULL");
  // A delete of an entity the view never saw still leaves its tombstone.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Del("z", 7), Put("z", 6, R"({"name":"old"})")})), "AS");
  EXPECT_EQ(Row("z"), "7 1 NULL NULL");
}

TEST_F(MysqlSinkTest, SeveralEventsOfOneEntityInOneBatch) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  const std::vector<ChangeEvent> events = {
      Put("a", 1, R"({"name":"a1"})"), Put("a", 2, R"({"name":"a2","total":2})"), Put("b", 1, R"({"name":"b1"})"),
      Put("a", 3, R"({"name":"a3"})"), Put("a", 2, R"({"name":"a2"})"),        Put("c", 1, R"({"name":"c1"})"),
      Del("c", 2),                     Del("d", 1),                              Put("d", 2, R"({"name":"d2"})")};
  EXPECT_EQ(Letters(sink->Apply(events)), "AAAASAAAA");
  EXPECT_EQ(Row("a"), "3 0 a3 NULL");
  EXPECT_EQ(Row("b"), "1 0 b1 NULL");
  EXPECT_EQ(Row("c"), "2 1 NULL NULL");
  EXPECT_EQ(Row("d"), "2 0 d2 NULL");

  // Only the states of written events are read: a superseded or stale one
  // with an unreadable state is not rejected; a written one is, and the
  // entity's previous applied event of the batch is written instead.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("e", 1, "{never read"), Put("e", 2, R"({"name":"e2"})"),
                                            Put("a", 2, "{stale, never read"), Put("f", 1, R"({"name":"f1"})"),
                                            Put("f", 2, "{unreadable")})),
            "AASAR");
  EXPECT_EQ(Row("e"), "2 0 e2 NULL");
  EXPECT_EQ(Row("f"), "1 0 f1 NULL");
}

// The version hints (mysql.version_cache): an event newer than the version
// the sink last committed for its entity is written without the locking
// read, and every outcome stays what a read would have decided.
TEST_F(MysqlSinkTest, HintsSkipTheReadOfNewerEventsAndOutcomesStayExact) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  std::vector<ChangeEvent> v1, v2;
  for (const char* id : {"a", "b", "c", "d"}) {
    v1.push_back(Put(id, 1, R"({"name":"one"})"));
    v2.push_back(Put(id, 2, R"({"name":"two"})"));
  }
  EXPECT_EQ(Letters(sink->Apply(v1)), "AAAA");
  EXPECT_EQ(HintStatsOf(*sink)->reads_skipped, 0u);  // first sight: read
  EXPECT_EQ(Letters(sink->Apply(v2)), "AAAA");
  EXPECT_EQ(HintStatsOf(*sink)->reads_skipped, 4u);
  EXPECT_EQ(HintStatsOf(*sink)->wrong_guesses, 0u);
  EXPECT_EQ(Row("c"), "2 0 two NULL");
  // A replay is not newer than the hints: read, and stale.
  const auto before = Rows();
  EXPECT_EQ(Letters(sink->Apply(v2)), "SSSS");
  EXPECT_EQ(Letters(sink->Apply(v1)), "SSSS");
  EXPECT_EQ(HintStatsOf(*sink)->reads_skipped, 4u);
  EXPECT_EQ(Rows(), before);
  // Several events of one entity in a chunk are read too.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 3, R"({"name":"a3"})"), Put("a", 4, R"({"name":"a4"})")})), "AA");
  EXPECT_EQ(HintStatsOf(*sink)->reads_skipped, 4u);
  EXPECT_EQ(Row("a"), "4 0 a4 NULL");

  // Off with version_cache: 0.
  sink_.MutableOptions<MysqlSinkOptions>().version_cache = 0;
  auto plain = MakeOpen();
  ASSERT_TRUE(plain);
  EXPECT_EQ(Letters(plain->Apply(std::vector{Put("e", 1, R"({"name":"e1"})")})), "A");
  EXPECT_EQ(Letters(plain->Apply(std::vector{Put("e", 2, R"({"name":"e2"})")})), "A");
  EXPECT_EQ(HintStatsOf(*plain)->reads_skipped, 0u);
}

// Someone else (the push path, a second engine, an operator) moved rows
// behind the sink's back: the write's affected-row count shows the wrong
// guess, and the chunk is rolled back and decided again with every row read.
TEST_F(MysqlSinkTest, AWrongHintIsRolledBackAndDecidedAgainByReading) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  auto other = MakeOpen();
  ASSERT_TRUE(other);
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, R"({"name":"a1"})"), Put("b", 1, R"({"name":"b1"})"),
                                            Put("c", 1, R"({"name":"c1"})")})),
            "AAA");
  // a: newer elsewhere, so v3 is stale; b: deleted by hand, so v2 is applied
  // (re-inserted); c: as the hint says.
  EXPECT_EQ(Letters(other->Apply(std::vector{Put("a", 5, R"({"name":"a5"})")})), "A");
  Exec("DELETE FROM order_view WHERE id = 'b'");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 3, R"({"name":"a3"})"), Put("b", 2, R"({"name":"b2"})"),
                                            Put("c", 2, R"({"name":"c2"})")})),
            "SAA");
  EXPECT_EQ(HintStatsOf(*sink)->reads_skipped, 0u);  // the chunk was read in the end
  EXPECT_EQ(HintStatsOf(*sink)->wrong_guesses, 1u);
  EXPECT_EQ(Row("a"), "5 0 a5 NULL");
  EXPECT_EQ(Row("b"), "2 0 b2 NULL");
  EXPECT_EQ(Row("c"), "2 0 c2 NULL");

  // Each kind of wrong guess alone, then a tombstone written elsewhere.
  EXPECT_EQ(Letters(other->Apply(std::vector{Put("c", 9, R"({"name":"c9"})")})), "A");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("c", 3, R"({"name":"c3"})")})), "S");
  EXPECT_EQ(Row("c"), "9 0 c9 NULL");
  Exec("DELETE FROM order_view WHERE id = 'b'");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("b", 3, R"({"name":"b3"})")})), "A");
  EXPECT_EQ(Row("b"), "3 0 b3 NULL");
  EXPECT_EQ(Letters(other->Apply(std::vector{Del("b", 8)})), "A");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("b", 4, R"({"name":"b4"})")})), "S");
  EXPECT_EQ(Row("b"), "8 1 NULL NULL");
  EXPECT_EQ(HintStatsOf(*sink)->wrong_guesses, 4u);
}

// An entity's first version (1) is inserted without the locking read: a
// view's new entities cost one statement. When the row is there after all
// (a replay, the push path or another engine first) the insert fails on the
// primary key, the chunk is decided again by reading, and the outcomes are
// what a read would have decided: nothing is applied twice, nothing older
// wins, and the other events of the chunk still go in.
TEST_F(MysqlSinkTest, FirstVersionsAreInsertedUnreadAndARowThereAfterAllIsDecidedByReading) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, R"({"name":"a1"})"), Put("b", 1, R"({"name":"b1"})"),
                                            Put("c", 1, R"({"name":"c1"})"), Put("c", 2, R"({"name":"c2"})"),
                                            Put("d", 1, R"({"name":"d1"})"), Put("d", 1, R"({"name":"d1"})")})),
            "AAAAAS");
  EXPECT_EQ(HintStatsOf(*sink)->inserted_unread, 4u);
  EXPECT_EQ(HintStatsOf(*sink)->wrong_inserts, 0u);
  EXPECT_EQ(Row("c"), "2 0 c2 NULL");
  EXPECT_EQ(Row("d"), "1 0 d1 NULL");
  // A replay the sink has a hint for is read, not guessed.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, R"({"name":"a-again"})")})), "S");
  EXPECT_EQ(HintStatsOf(*sink)->wrong_inserts, 0u);

  // A second sink (no hints: another engine, the push path, a restart)
  // replays a's first version among new ones, and meets b at a newer
  // version than its own.
  auto other = MakeOpen();
  ASSERT_TRUE(other);
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("b", 5, R"({"name":"b5"})")})), "A");
  const auto before = Row("a");
  EXPECT_EQ(Letters(other->Apply(std::vector{Put("e", 1, R"({"name":"e1"})"), Put("a", 1, R"({"name":"a-again"})"),
                                             Put("b", 1, R"({"name":"b-old"})"), Put("f", 1, R"({"name":"f1"})")})),
            "ASSA");
  EXPECT_EQ(HintStatsOf(*other)->wrong_inserts, 1u);
  EXPECT_EQ(HintStatsOf(*other)->inserted_unread, 0u);
  EXPECT_EQ(Row("a"), before);
  EXPECT_EQ(Row("b"), "5 0 b5 NULL");
  EXPECT_EQ(Row("e"), "1 0 e1 NULL");
  EXPECT_EQ(Row("f"), "1 0 f1 NULL");

  // After a wrong guess the lane reads for a while (1 chunk, then 2, 4, ...)
  // and a right guess resets that.
  EXPECT_EQ(Letters(other->Apply(std::vector{Put("g", 1, R"({"name":"g1"})")})), "A");  // read
  EXPECT_EQ(HintStatsOf(*other)->inserted_unread, 0u);
  EXPECT_EQ(Letters(other->Apply(std::vector{Put("h", 1, R"({"name":"h1"})")})), "A");  // guessed again
  EXPECT_EQ(HintStatsOf(*other)->inserted_unread, 1u);
  EXPECT_EQ(Row("g"), "1 0 g1 NULL");
  EXPECT_EQ(Row("h"), "1 0 h1 NULL");

  // A refused value among guessed rows rejects only its own event.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("i", 1, R"({"name":"i1"})"), Put("j", 1, R"({"name":"far too long"})"),
                                            Put("k", 1, R"({"name":"k1"})")})),
            "ARA");
  EXPECT_EQ(Row("i"), "1 0 i1 NULL");
  EXPECT_EQ(Row("j"), "none");
  EXPECT_EQ(Row("k"), "1 0 k1 NULL");

  // A guess is never what rejects an event: read, these replays are stale.
  // m: its first version was refused (a name too long), its second applied;
  // n: at version 3, replayed with an unreadable state at version 2; o: at
  // version 1, replayed with an unreadable state.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("m", 1, R"({"name":"far too long"})")})), "R");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("m", 2, R"({"name":"m2"})"), Put("n", 1, R"({"name":"n1"})"),
                                            Put("n", 2, R"({"name":"n2"})"), Put("n", 3, R"({"name":"n3"})"),
                                            Put("o", 1, R"({"name":"o1"})")})),
            "AAAAA");
  for (const auto& replay : {std::vector{Put("m", 1, R"({"name":"far too long"})")},
                             std::vector{Put("n", 1, R"({"name":"n1"})"), Put("n", 2, "not json")},
                             std::vector{Put("o", 1, "not json")}}) {
    auto fresh = MakeOpen();
    ASSERT_TRUE(fresh);
    EXPECT_EQ(Letters(fresh->Apply(replay)), std::string(replay.size(), 'S')) << replay.front().entity_id;
  }
  EXPECT_EQ(Row("m"), "2 0 m2 NULL");
  EXPECT_EQ(Row("n"), "3 0 n3 NULL");
  EXPECT_EQ(Row("o"), "1 0 o1 NULL");

  // Off with version_cache: 0, as the hints are.
  sink_.MutableOptions<MysqlSinkOptions>().version_cache = 0;
  auto plain = MakeOpen();
  ASSERT_TRUE(plain);
  EXPECT_EQ(Letters(plain->Apply(std::vector{Put("l", 1, R"({"name":"l1"})")})), "A");
  EXPECT_EQ(HintStatsOf(*plain)->inserted_unread, 0u);
}

// A unique key the operator added on a mapped column: an event whose value
// is another entity's already is rejected, and that entity's row stays as it
// was (MySQL's ON DUPLICATE KEY UPDATE would update the row it clashed with),
// whether the event's id was read, hinted or guessed new, and in a repair.
TEST_F(MysqlSinkTest, AValueAnotherEntityHoldsInAUniqueKeyIsRejectedAndThatRowUntouched) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  Exec("ALTER TABLE order_view ADD UNIQUE KEY uk_name (name)");
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("y", 1, R"({"name":"dup"})"), Put("x", 1, R"({"name":"x1"})")})),
            "AA");
  // x hinted (v2), then z new (v1, guessed), then w read (two events), then
  // a fresh sink with nothing hinted.
  auto fresh = MakeOpen();
  ASSERT_TRUE(fresh);
  for (auto* s : {sink.get(), fresh.get()}) {
    for (const auto& batch : {std::vector{Put("x", 9, R"({"name":"dup"})"), Put("v", 1, R"({"name":"v1"})")},
                              std::vector{Put("z", 1, R"({"name":"dup"})"), Put("u", 1, R"({"name":"u1"})")},
                              std::vector{Put("w", 3, R"({"name":"w3"})"), Put("w", 4, R"({"name":"dup"})")}}) {
      const ApplyResult r = s->Apply(batch);
      ASSERT_TRUE(r.status.ok()) << r.status.ToString();
      ASSERT_EQ(r.results.size(), 2u);
      const size_t refused = batch[1].state == R"({"name":"dup"})" ? 1 : 0;
      const size_t other = 1 - refused;
      EXPECT_EQ(r.results[refused].outcome, Outcome::kRejected) << batch[refused].entity_id;
      const std::string& why = r.results[refused].reason;
      EXPECT_TRUE(why.find("another entity's row") != std::string::npos || why.find("uk_name") != std::string::npos)
          << why;
      EXPECT_NE(r.results[other].outcome, Outcome::kRejected) << batch[other].entity_id;
    }
  }
  EXPECT_EQ(Row("y"), "1 0 dup NULL");
  EXPECT_EQ(Row("x"), "1 0 x1 NULL");
  EXPECT_EQ(Row("z"), "none");
  EXPECT_EQ(Row("w"), "3 0 w3 NULL");
  EXPECT_EQ(Row("v"), "1 0 v1 NULL");
  EXPECT_EQ(Row("u"), "1 0 u1 NULL");

  for (const RepairGuard guard : {RepairGuard::kAny, RepairGuard::kNotOlder}) {
    const ApplyResult repaired =
        sink->Repair(std::vector{Put("x", 10, R"({"name":"dup"})"), Put("t", 7, R"({"name":"dup"})")}, guard);
    ASSERT_TRUE(repaired.status.ok()) << repaired.status.ToString();
    EXPECT_EQ(Letters(repaired), "RR");
    EXPECT_EQ(Row("y"), "1 0 dup NULL");
    EXPECT_EQ(Row("x"), "1 0 x1 NULL");
    EXPECT_EQ(Row("t"), "none");
  }
}

// Hints per connection, hinted deletes, and a chunk that mixes hinted rows
// with rows that must be read.
TEST_F(MysqlSinkTest, HintsOnSeveralConnectionsWithDeletesAndMixedChunks) {
  sink_.MutableOptions<MysqlSinkOptions>().connections = 3;
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  auto other = MakeOpen();
  ASSERT_TRUE(other);
  std::vector<ChangeEvent> v1, v2;
  for (int i = 0; i < 30; ++i) {
    v1.push_back(Put("k" + std::to_string(i), 1, R"({"name":"one"})"));
    v2.push_back(i % 3 == 0 ? Del("k" + std::to_string(i), 2) : Put("k" + std::to_string(i), 2, R"({"name":"two"})"));
  }
  EXPECT_EQ(Letters(sink->Apply(v1)), std::string(30, 'A'));
  EXPECT_EQ(Letters(sink->Apply(v2)), std::string(30, 'A'));
  EXPECT_EQ(HintStatsOf(*sink)->reads_skipped, 30u);
  EXPECT_EQ(Row("k0"), "2 1 NULL NULL");  // a hinted delete leaves its tombstone
  EXPECT_EQ(Row("k1"), "2 0 two NULL");

  // Someone else writes k1 and k2 ahead; k4 appears in the chunk twice (read);
  // n1 is new (inserted unread); the rest are hinted.
  EXPECT_EQ(Letters(other->Apply(std::vector{Put("k1", 7, R"({"name":"k1"})"), Del("k2", 7)})), "AA");
  std::vector<ChangeEvent> v3;
  std::string want;
  for (int i = 0; i < 30; ++i) {
    v3.push_back(Put("k" + std::to_string(i), 3, R"({"name":"three"})"));
    want += i == 1 || i == 2 ? 'S' : 'A';
  }
  v3.push_back(Put("k4", 4, R"({"name":"four"})"));
  v3.push_back(Put("n1", 1, R"({"name":"new"})"));
  want += "AA";
  const uint64_t skipped = HintStatsOf(*sink)->reads_skipped;
  EXPECT_EQ(Letters(sink->Apply(v3)), want);
  // Written unread: all but k4 and n1, and but the ids of the lanes of k1
  // and k2, whose wrong guesses had their chunks read.
  uint64_t unread = 0;
  for (int i = 0; i < 30; ++i) {
    const std::string id = "k" + std::to_string(i);
    const size_t lane = LaneOf(id, 3);
    if (i != 4 && lane != LaneOf("k1", 3) && lane != LaneOf("k2", 3)) ++unread;
  }
  EXPECT_EQ(HintStatsOf(*sink)->reads_skipped, skipped + unread);
  EXPECT_GE(HintStatsOf(*sink)->wrong_guesses, 1u);  // the lanes of k1 and k2
  EXPECT_EQ(Row("k0"), "3 0 three NULL");  // re-created over its tombstone
  EXPECT_EQ(Row("k1"), "7 0 k1 NULL");
  EXPECT_EQ(Row("k2"), "7 1 NULL NULL");
  EXPECT_EQ(Row("k4"), "4 0 four NULL");
  EXPECT_EQ(Row("n1"), "1 0 new NULL");
  EXPECT_EQ(Row("k29"), "3 0 three NULL");
}

TEST_F(MysqlSinkTest, RefusedValuesRejectOnlyTheirEvents) {
  // One connection: the whole batch is one transaction, whose refusal makes
  // even b's superseded first event go alone (and be refused).
  sink_.MutableOptions<MysqlSinkOptions>().connections = 1;
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  const std::string long_id(70, 'x');  // longer than VARBINARY(64)
  const std::vector<ChangeEvent> events = {
      Put("a", 1, R"({"name":"ann"})"),
      Put("b", 1, R"({"name":"much too long for eight"})"),
      Put("c", 1, R"({"name":"cy","total":3})"),
      Put("b", 2, R"({"name":"bob"})"),
      Put(long_id, 1, R"({"name":"long"})"),
      Put("e", 1, "{not json"),
      Put("f", 1, R"({"total":123456789012})"),  // out of range for DECIMAL(10,2)
      Put("g", 1, R"({"name":"gus"})"),
  };
  const ApplyResult r = sink->Apply(events);
  ASSERT_EQ(Letters(r), "ARAARRRA");
  EXPECT_NE(r.results[1].reason.find("name"), std::string::npos) << r.results[1].reason;
  EXPECT_NE(r.results[4].reason.find("id"), std::string::npos) << r.results[4].reason;
  EXPECT_NE(r.results[5].reason.find("JSON"), std::string::npos) << r.results[5].reason;
  EXPECT_NE(r.results[6].reason.find("total"), std::string::npos) << r.results[6].reason;
  EXPECT_EQ(Row("a"), "1 0 ann NULL");
  EXPECT_EQ(Row("b"), "2 0 bob NULL");
  EXPECT_EQ(Row("c"), "1 0 cy 3.00");
  EXPECT_EQ(Row("e"), "none");
  EXPECT_EQ(Row("f"), "none");
  EXPECT_EQ(Row("g"), "1 0 gus NULL");
  EXPECT_EQ(db_->Scalar("SELECT COUNT(*) FROM order_view"), 4);
  // The sink goes on normally afterwards.
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 2, R"({"name":"ann2"})"), Put("a", 1, "{}")})), "AS");
}

TEST_F(MysqlSinkTest, MissingTableWithoutAutoCreateIsMisconfiguration) {
  sink_.MutableOptions<MysqlSinkOptions>().auto_create = false;
  auto sink = Make();
  ASSERT_TRUE(sink);
  const Status st = sink->Open();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("auto_create"), std::string::npos) << st.ToString();
  const ApplyResult r = sink->Apply(std::vector{Put("a", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition) << r.status.ToString();
  EXPECT_TRUE(r.results.empty());
  EXPECT_EQ(db_->Scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '" + db_->name() + "'"),
            0);
}

TEST_F(MysqlSinkTest, ExistingTableMustHaveTheColumnsAndKey) {
  Exec("CREATE TABLE order_view (id VARBINARY(64) NOT NULL PRIMARY KEY, _version BIGINT UNSIGNED NOT NULL,"
             " _deleted TINYINT(1) NOT NULL DEFAULT 0, name VARCHAR(8) NULL)");
  // Without auto_create, a mapped column the table lacks is misconfiguration.
  config::SinkConfig manual = sink_;
  manual.MutableOptions<MysqlSinkOptions>().auto_create = false;
  auto strict = MakeMysqlSink(manual, global_);
  ASSERT_TRUE(strict.ok());
  Status st = (*strict)->Open();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("total"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.message().find("name"), std::string::npos) << st.ToString();
  // With it (the default), the definition's new column is added.
  auto sink = Make();
  ASSERT_TRUE(sink);
  ASSERT_TRUE(sink->Open().ok());
  EXPECT_EQ(db_->Scalar("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '" + db_->name() +
                        "' AND TABLE_NAME = 'order_view' AND COLUMN_NAME = 'total'"),
            1);

  Exec("ALTER TABLE order_view DROP PRIMARY KEY");
  st = sink->Open();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("primary key"), std::string::npos) << st.ToString();

  Exec("ALTER TABLE order_view ADD PRIMARY KEY (id)");
  st = sink->Open();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, R"({"name":"ann","total":5})")})), "A");
  EXPECT_EQ(Row("a"), "1 0 ann 5.00");  // the column was added with the declared DECIMAL(10,2)
}

TEST_F(MysqlSinkTest, DroppedTableIsMisconfiguration) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  Exec("DROP TABLE order_view");
  const ApplyResult r = sink->Apply(std::vector{Put("a", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition) << r.status.ToString();
}

TEST_F(MysqlSinkTest, ViewDatabaseCanDifferFromMainStorage) {
  testing::TestDatabase other("mysqlsink_other");
  sink_.MutableOptions<MysqlSinkOptions>().database = other.name();
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, "{}")})), "A");
  EXPECT_EQ(other.Scalar("SELECT COUNT(*) FROM order_view"), 1);
  EXPECT_EQ(db_->Scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '" + db_->name() + "'"),
            0);
}

TEST_F(MysqlSinkTest, UnreachableServerIsUnavailable) {
  global_.mysql.port = testing::FreePort();  // nothing listens there
  auto sink = Make();
  ASSERT_TRUE(sink);
  const auto start = Clock::now();
  const Status st = sink->Open();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  const ApplyResult r = sink->Apply(std::vector{Put("a", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  EXPECT_EQ(sink->Health().code(), StatusCode::kUnavailable);
  std::vector<Difference> differences;
  EXPECT_EQ(sink->Verify({}, differences).code(), StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST_F(MysqlSinkTest, LostConnectionIsUnavailableAndTheNextCallReconnects) {
  const sql::ConnectParams p = testing::MysqlParams();
  testing::TcpProxy proxy(p.host, p.port);
  global_.mysql.port = proxy.port();
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 1, "{}")})), "A");
  proxy.SetEnabled(false);
  const auto start = Clock::now();
  const ApplyResult r = sink->Apply(std::vector{Put("a", 2, "{}"), Put("b", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  EXPECT_EQ(sink->Health().code(), StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  proxy.SetEnabled(true);
  EXPECT_TRUE(sink->Health().ok());
  EXPECT_EQ(Letters(sink->Apply(std::vector{Put("a", 2, "{}"), Put("b", 1, "{}")})), "AA");
}

TEST_F(MysqlSinkTest, VerifyFindsEveryKindOfDifference) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  const std::vector<ChangeEvent> events = {
      Put("a", 1, R"({"name":"ann","total":10})"), Put("b", 2, R"({"name":"bob"})"),
      Put("c", 1, R"({"name":"cat","total":1.5})"), Put("e", 1, R"({"name":"eve"})"),
      Put("f", 1, R"({"name":"fay"})"),            Del("f", 2),
      Put("g", 2, R"({"name":"gus"})"),            Put("h", 1, R"({"name":"hal"})"),
      Del("h", 2)};
  ASSERT_EQ(Letters(sink->Apply(events)), "AAAAAAAAA");

  const auto live = [](std::string id, uint64_t v, std::string state) {
    return EntitySnapshot{std::move(id), v, false, std::move(state)};
  };
  const auto gone = [](std::string id, uint64_t v) { return EntitySnapshot{std::move(id), v, true, ""}; };
  std::vector<Difference> differences;
  std::vector<EntitySnapshot> truth = {live("a", 1, R"({"name":"ann","total":10})"),
                                       live("b", 2, R"({"name":"bob"})"),
                                       live("c", 1, R"({"name":"cat","total":1.5})"),
                                       live("e", 1, R"({"name":"eve"})"),
                                       gone("f", 2),
                                       live("g", 2, R"({"name":"gus"})"),
                                       gone("h", 2)};
  ASSERT_TRUE(sink->Verify(truth, differences).ok());
  EXPECT_TRUE(differences.empty()) << differences.front().entity_id << ": " << differences.front().detail;

  Exec("UPDATE order_view SET name = 'zz' WHERE id = 'c'");
  truth = {live("a", 1, R"({"name":"ann","total":10})"),  // equal
           live("b", 3, R"({"name":"bob"})"),             // version
           live("c", 1, R"({"name":"cat","total":1.5})"),  // content
           live("d", 1, R"({"name":"dan"})"),             // missing: no row
           gone("f", 2),                                  // equal: tombstone
           gone("g", 3),                                  // extra: deleted in storage
           live("h", 3, R"({"name":"hal"})")};            // missing: tombstone in the view
  // e: extra, no such entity in storage
  ASSERT_TRUE(sink->Verify(truth, differences).ok());
  std::sort(differences.begin(), differences.end(),
            [](const Difference& x, const Difference& y) { return x.entity_id < y.entity_id; });
  std::string got;
  for (const auto& d : differences) got += d.entity_id + ":" + std::string(DifferenceKindName(d.kind)) + " ";
  EXPECT_EQ(got, "b:version_mismatch c:content_mismatch d:missing e:extra g:extra h:missing ");
  for (const auto& d : differences) {
    if (d.entity_id == "c") {
      EXPECT_NE(d.detail.find("name"), std::string::npos) << d.detail;
      EXPECT_EQ(d.detail.find("total"), std::string::npos) << d.detail;
    }
  }
}

// verify's second pass lists the view's live rows a page at a time, in
// keyset pages over the primary key: every live id once, no tombstone.
TEST_F(MysqlSinkTest, ScanViewIdsGivesEveryLiveRowOnceInBoundedPages) {
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  std::vector<ChangeEvent> events;
  for (int i = 0; i < 25; ++i) events.push_back(Put("r" + std::to_string(i), 1, R"({"name":"n"})"));
  // In id order r0 r1 r10 r11 | r12 r13 r14 r15 | ...: the second page of
  // 4 rows holds tombstones only, and the scan goes on past it.
  for (const char* id : {"r3", "r10", "r11", "r12", "r13", "r14", "r15"}) events.push_back(Del(id, 2));
  ASSERT_TRUE(sink->Apply(events).status.ok());
  std::vector<std::string> seen;
  size_t largest = 0;
  const Status st = sink->ScanViewIds(4, [&](std::span<const std::string> ids) {
    largest = std::max(largest, ids.size());
    seen.insert(seen.end(), ids.begin(), ids.end());
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(largest, 4u);
  EXPECT_EQ(seen.size(), 18u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(std::find(seen.begin(), seen.end(), "r3"), seen.end());
}

// The version check as a model: the letter each event gets over a view
// holding `view` (id -> "version deleted name"), which it updates.
std::string ModelApply(const std::vector<ChangeEvent>& events, std::map<std::string, std::string>& view,
                       std::map<std::string, uint64_t>& versions) {
  std::string letters;
  for (const ChangeEvent& e : events) {
    const auto it = versions.find(e.entity_id);
    if (it != versions.end() && e.version <= it->second) {
      letters += 'S';
      continue;
    }
    letters += 'A';
    versions[e.entity_id] = e.version;
    std::string name = "NULL";
    if (!e.deleted) {
      const auto json = nlohmann::json::parse(e.state);
      if (json.contains("name")) name = json["name"].get<std::string>();
    }
    view[e.entity_id] = std::to_string(e.version) + (e.deleted ? " 1 " : " 0 ") + name + " NULL";
  }
  return letters;
}

// The sink's connections to the test database (the test's own excluded).
int64_t SinkSessions(testing::TestDatabase& db, const std::string& where = "") {
  return db.Scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '" + db.name() +
                   "' AND ID <> CONNECTION_ID()" + where);
}

TEST_F(MysqlSinkTest, SeveralConnectionsKeepEveryOutcomeExact) {
  sink_.MutableOptions<MysqlSinkOptions>().connections = 4;
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  EXPECT_EQ(SinkSessions(*db_), 4);
  constexpr int kIds = 60;
  std::vector<std::string> ids;
  for (int k = 0; k < kIds; ++k) ids.push_back("id" + std::to_string(k));
  std::vector<size_t> per_lane(4);
  for (const auto& id : ids) ++per_lane[LaneOf(id, 4)];
  for (size_t lane = 0; lane < 4; ++lane) EXPECT_GT(per_lane[lane], 0u) << "lane " << lane;

  // Several events per id in one batch: creations, updates, deletes,
  // re-creations after a delete, repeats and older versions after newer ones.
  std::vector<ChangeEvent> events;
  for (uint64_t round = 1; round <= 5; ++round) {
    for (int k = 0; k < kIds; ++k) {
      const std::string name = "n" + std::to_string(k) + "v" + std::to_string(round);
      if (k % 5 == 0 && round == 3) {
        events.push_back(Del(ids[k], round));
      } else if (k % 3 == 0 && round == 4) {
        events.push_back(Put(ids[k], 2, R"({"name":"old"})"));  // stale: an older version
      } else if (k % 7 == 0 && round == 5) {
        events.push_back(Put(ids[k], 2, R"({"name":"back"})"));  // stale, even after a tombstone
      } else {
        events.push_back(Put(ids[k], round, R"({"name":")" + name + R"("})"));
      }
    }
  }
  std::map<std::string, std::string> view;
  std::map<std::string, uint64_t> versions;
  const std::string first_half(ModelApply({events.begin(), events.begin() + 100}, view, versions));
  EXPECT_EQ(Letters(sink->Apply(std::span<const ChangeEvent>(events).subspan(0, 100))), first_half);
  const std::string rest(ModelApply({events.begin() + 100, events.end()}, view, versions));
  ASSERT_NE(rest.find('S'), std::string::npos);
  EXPECT_EQ(Letters(sink->Apply(std::span<const ChangeEvent>(events).subspan(100))), rest);
  for (const auto& id : ids) EXPECT_EQ(Row(id), view[id]) << id;
  EXPECT_EQ(db_->Scalar("SELECT COUNT(*) FROM order_view"), kIds);
  const auto tombstones = std::count_if(view.begin(), view.end(), [](const auto& kv) {
    return kv.second.find(" 1 ") != std::string::npos;
  });
  EXPECT_GT(tombstones, 0);
  EXPECT_EQ(db_->Scalar("SELECT COUNT(*) FROM order_view WHERE _deleted = 1"), tombstones);

  // Everything again: all stale, no row touched.
  const auto before = Rows();
  EXPECT_EQ(Letters(sink->Apply(events)), std::string(events.size(), 'S'));
  EXPECT_EQ(Rows(), before);
}

TEST_F(MysqlSinkTest, RefusedValueOnOneConnectionRejectsOnlyItsEvent) {
  sink_.MutableOptions<MysqlSinkOptions>().connections = 3;
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  std::vector<ChangeEvent> events;
  std::string want;
  constexpr int kBad = 17;
  for (int k = 0; k < 30; ++k) {
    const std::string id = "id" + std::to_string(k);
    events.push_back(Put(id, 1, R"({"name":"a)" + std::to_string(k) + R"("})"));
    want += 'A';
    if (k == kBad) {
      events.push_back(Put(id, 2, R"({"name":"much too long for eight"})"));
      want += 'R';
    }
  }
  std::vector<size_t> per_lane(3);
  for (const auto& e : events) ++per_lane[LaneOf(e.entity_id, 3)];
  for (size_t lane = 0; lane < 3; ++lane) EXPECT_GT(per_lane[lane], 0u) << "lane " << lane;
  const ApplyResult r = sink->Apply(events);
  ASSERT_EQ(Letters(r), want);
  EXPECT_NE(r.results[kBad + 1].reason.find("name"), std::string::npos) << r.results[kBad + 1].reason;
  EXPECT_EQ(db_->Scalar("SELECT COUNT(*) FROM order_view"), 30);
  EXPECT_EQ(Row("id" + std::to_string(kBad)), "1 0 a" + std::to_string(kBad) + " NULL");
  EXPECT_EQ(Row("id3"), "1 0 a3 NULL");
}

// One connection waits for a row lock while the others commit; then the
// server goes away: the batch is unavailable, and its retry applies exactly
// what the waiting connection had not, the rest being stale.
TEST_F(MysqlSinkTest, CutWhileOneConnectionWaitsIsUnavailableAndTheRetryConverges) {
  const sql::ConnectParams p = testing::MysqlParams();
  testing::TcpProxy proxy(p.host, p.port);
  global_.mysql.port = proxy.port();
  sink_.MutableOptions<MysqlSinkOptions>().connections = 4;
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  ASSERT_EQ(Letters(sink->Apply(std::vector{Put("id0", 1, R"({"name":"first"})")})), "A");

  std::vector<ChangeEvent> events;
  for (int k = 0; k < 40; ++k) {
    events.push_back(Put("id" + std::to_string(k), 2, R"({"name":"v2"})"));
  }
  const size_t blocked_lane = LaneOf("id0", 4);
  std::string retry_letters;
  int64_t others = 0;
  for (const auto& e : events) {
    const bool blocked = LaneOf(e.entity_id, 4) == blocked_lane;
    retry_letters += blocked ? 'A' : 'S';
    others += blocked ? 0 : 1;
  }
  ASSERT_GT(others, 0);

  Exec("BEGIN");
  ASSERT_EQ(db_->Query("SELECT id FROM order_view WHERE id = 'id0' FOR UPDATE").size(), 1u);
  auto applying = std::async(std::launch::async, [&] { return sink->Apply(events); });
  // Until the other connections have committed and the blocked one waits.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline &&
         (db_->Scalar("SELECT COUNT(*) FROM order_view WHERE _version = 2") < others ||
          SinkSessions(*db_, " AND COMMAND = 'Query'") != 1)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(db_->Scalar("SELECT COUNT(*) FROM order_view WHERE _version = 2"), others);
  proxy.SetEnabled(false);
  const ApplyResult cut = applying.get();
  EXPECT_EQ(cut.status.code(), StatusCode::kUnavailable) << cut.status.ToString();
  EXPECT_TRUE(cut.results.empty());
  Exec("ROLLBACK");

  proxy.SetEnabled(true);
  EXPECT_EQ(Letters(sink->Apply(events)), retry_letters);
  for (const auto& e : events) EXPECT_EQ(Row(e.entity_id), "2 0 v2 NULL") << e.entity_id;
}

// Prints the drain rate of batches of 1000 (200,000 events over 100,000
// ids, 2 columns); no threshold, the number is for the record.
TEST_F(MysqlSinkTest, DrainRate) {
  sink_.MutableOptions<MysqlSinkOptions>().columns = {Column("name", "/customer/name", "VARCHAR(64)"),
                                                      Column("total", "/total")};
  auto sink = MakeOpen();
  ASSERT_TRUE(sink);
  constexpr size_t kEvents = 200000;
  constexpr size_t kIds = 100000;
  constexpr size_t kBatch = 1000;
  const auto state = [](size_t k) {
    return R"({"customer":{"name":"customer-)" + std::to_string(k % kIds) + R"("},"total":)" +
           std::to_string(k % 997) + R"(.25,"items":[1,2,3],"status":"open"})";
  };
  std::vector<ChangeEvent> events;
  events.reserve(kEvents);
  for (size_t k = 0; k < kEvents; ++k) {
    events.push_back(Put("order-" + std::to_string(k % kIds), k / kIds + 1, state(k)));
  }
  const auto start = Clock::now();
  for (size_t i = 0; i < kEvents; i += kBatch) {
    const ApplyResult r = sink->Apply(std::span<const ChangeEvent>(events).subspan(i, kBatch));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    ASSERT_EQ(r.results.size(), kBatch);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("mysql sink: %zu events over %zu ids in batches of %zu: %.2f s, %.0f events/s\n", kEvents, kIds, kBatch,
              seconds, static_cast<double>(kEvents) / seconds);

  // Replaying what the view already holds (a restart, or events the push
  // path wrote first) is all stale.
  const auto replay_start = Clock::now();
  for (size_t i = kEvents - kIds; i < kEvents; i += kBatch) {
    const ApplyResult r = sink->Apply(std::span<const ChangeEvent>(events).subspan(i, kBatch));
    ASSERT_EQ(Letters(r), std::string(kBatch, 'S'));
  }
  const double replay_seconds = std::chrono::duration<double>(Clock::now() - replay_start).count();
  std::printf("mysql sink: stale replay of %zu events: %.2f s, %.0f events/s\n", kIds, replay_seconds,
              static_cast<double>(kIds) / replay_seconds);

  std::vector<EntitySnapshot> truth;
  truth.reserve(kIds);
  for (size_t k = kEvents - kIds; k < kEvents; ++k) {
    truth.push_back(EntitySnapshot{"order-" + std::to_string(k % kIds), k / kIds + 1, false, state(k)});
  }
  std::vector<Difference> differences;
  const auto verify_start = Clock::now();
  ASSERT_TRUE(sink->Verify(truth, differences).ok());
  std::printf("mysql sink: verify of %zu rows: %.2f s\n", kIds,
              std::chrono::duration<double>(Clock::now() - verify_start).count());
  EXPECT_TRUE(differences.empty()) << differences.size() << " differences, first " << differences.front().entity_id
                                   << ": " << differences.front().detail;
}

TEST(MysqlSinkConfigTest, ColumnsMayNotClash) {
  config::Config global;
  config::SinkConfig sink;
  sink.name = "v";
  sink.type = "mysql";
  sink.MutableOptions<MysqlSinkOptions>().table = "v";
  sink.MutableOptions<MysqlSinkOptions>().columns = {Column("_VERSION", "/v")};
  EXPECT_EQ(MakeMysqlSink(sink, global).status().code(), StatusCode::kInvalidArgument);
  sink.MutableOptions<MysqlSinkOptions>().columns = {Column("a", "/a"), Column("A", "/b")};
  EXPECT_EQ(MakeMysqlSink(sink, global).status().code(), StatusCode::kInvalidArgument);
  sink.MutableOptions<MysqlSinkOptions>().columns = {};
  EXPECT_EQ(MakeMysqlSink(sink, global).status().code(), StatusCode::kInvalidArgument);
  sink.MutableOptions<MysqlSinkOptions>().columns = {Column("a", "/a"), Column("b", "/b")};
  EXPECT_TRUE(MakeMysqlSink(sink, global).ok());
}

}  // namespace
}  // namespace sluice::connectors::mysql
