#include "sql/tables_test.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "sql/connection.h"

namespace sluice::sql {

void TablesContractTest::SetUp() {
  made_ = GetParam().make();
  if (made_.storage == nullptr) GTEST_SKIP() << GetParam().name << " is not available";
  storage_ = made_.storage.get();
}

namespace {

struct Stored {
  uint64_t event_id;
  std::string entity_id;
  uint64_t version;
  bool deleted;
};

// An append of the events to a partition of "account" (0 unless given).
std::unique_ptr<EventAppend> AppendOf(EventLog& log, const std::vector<Stored>& events, uint32_t partition = 0) {
  auto append = log.NewAppend("account", partition);
  std::vector<std::string> texts;
  texts.reserve(events.size() * 3);
  for (const Stored& s : events) {
    const std::string n = std::to_string(s.event_id);
    texts.push_back("cmd-" + (partition == 0 ? "" : "p" + std::to_string(partition) + "-") + n);
    texts.push_back(R"({"n":)" + n + "}");
    texts.push_back(R"({"ok":)" + n + "}");
    NewEvent e;
    e.event_id = s.event_id;
    e.entity_id = s.entity_id;
    e.version = s.version;
    e.command_id = texts[texts.size() - 3];
    e.command_name = s.deleted ? "delete" : "put";
    e.request = texts[texts.size() - 2];
    e.response = texts.back();
    e.state = texts[texts.size() - 2];
    e.deleted = s.deleted;
    EXPECT_TRUE(append->TryAdd(e, 1 << 20));
  }
  return append;
}

// Appends the events to a partition of "account" (0 unless given), in one transaction.
void Append(EventLog& log, const std::vector<Stored>& events, uint32_t partition = 0) {
  auto append = AppendOf(log, events, partition);
  ASSERT_TRUE(log.Append(*append).ok());
}

// a: versions 1, 2; b: 1; c: 1, then deleted at 2. Event 5 is missing (a gap).
void Fill(EventLog& log) {
  Append(log, {{1, "a", 1, false}, {2, "b", 1, false}, {3, "a", 2, false}, {4, "c", 1, false}, {6, "c", 2, true}});
}

std::vector<std::string> Ids(const std::vector<EventRow>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.entity_id + "@" + std::to_string(r.version));
  return out;
}

std::vector<uint64_t> EventIds(const std::vector<EventRow>& rows) {
  std::vector<uint64_t> out;
  for (const auto& r : rows) out.push_back(r.event_id);
  return out;
}

TEST_P(TablesContractTest, LatestOfGivesTheNewestEventOfEachIdThatHasOneInIdOrder) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  auto rows = log->LatestOf("account", 0, {"c", "zz", "a"});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(Ids(*rows), (std::vector<std::string>{"a@2", "c@2"}));
  const EventRow& a = rows->at(0);
  EXPECT_EQ(a.event_id, 3u);
  EXPECT_EQ(a.state, R"({"n":3})");
  EXPECT_EQ(a.command_name, "put");
  EXPECT_EQ(a.command_id, "cmd-3");
  EXPECT_GT(a.committed_at_us, 0);
  EXPECT_TRUE(a.request.empty());  // not among ReadAfter's columns
  const EventRow& c = rows->at(1);
  EXPECT_TRUE(c.deleted);
  EXPECT_EQ(c.state, "");
  auto none = log->LatestOf("account", 0, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto versions = log->LatestVersions("account", 0, {"a", "c", "zz"});
  ASSERT_TRUE(versions.ok());
  EXPECT_EQ(*versions, (std::map<std::string, uint64_t>{{"a", 2}, {"c", 2}}));
}

TEST_P(TablesContractTest, LatestAfterWalksTheEntitiesWithAKeysetCursor) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  auto first = log->LatestAfter("account", 0, "", 2);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(Ids(*first), (std::vector<std::string>{"a@2", "b@1"}));
  auto next = log->LatestAfter("account", 0, "b", 2);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(Ids(*next), (std::vector<std::string>{"c@2"}));
  auto past = log->LatestAfter("account", 0, "c", 2);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->empty());
  auto all = log->LatestAfter("account", 0, "", 0);  // no limit: the whole partition
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Ids(*all), (std::vector<std::string>{"a@2", "b@1", "c@2"}));
  EXPECT_EQ(EventIds(*all), (std::vector<uint64_t>{3, 2, 6}));
  auto empty = log->LatestAfter("account", 1, "", 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_P(TablesContractTest, ReadAfterWithFullColumnsAddsRequestAndResponse) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  auto view = log->ReadAfter("account", {{0, 2}}, 10, EventLog::Columns::kView);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_EQ(EventIds(view->at(0)), (std::vector<uint64_t>{3, 4, 6}));
  EXPECT_TRUE(view->at(0)[0].request.empty());
  // Two partitions (one statement for both) and one: the same columns.
  for (const auto& from : {std::vector<std::pair<uint32_t, uint64_t>>{{0, 2}, {1, 0}},
                           std::vector<std::pair<uint32_t, uint64_t>>{{0, 2}}}) {
    auto full = log->ReadAfter("account", from, 10, EventLog::Columns::kFull);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    const auto& rows = full->at(0);
    ASSERT_EQ(EventIds(rows), (std::vector<uint64_t>{3, 4, 6}));
    EXPECT_EQ(rows[0].request, R"({"n":3})");
    EXPECT_EQ(rows[0].response, R"({"ok":3})");
    EXPECT_EQ(rows[0].state, R"({"n":3})");
    EXPECT_EQ(rows[0].command_id, "cmd-3");
    EXPECT_EQ(rows[2].request, R"({"n":6})");
    EXPECT_TRUE(rows[2].deleted);
  }
}

TEST_P(TablesContractTest, StagedAppendsAreOneTransactionThatOnlyCommitShows) {
  auto writer = storage_->OpenEventLog();
  auto reader = storage_->OpenEventLog();
  auto first = AppendOf(*writer, {{1, "a", 1, false}, {2, "b", 1, false}});
  auto second = AppendOf(*writer, {{3, "a", 2, false}});
  ASSERT_TRUE(writer->Stage(*first).ok());
  ASSERT_TRUE(writer->Stage(*second).ok());  // joins the open transaction
  EXPECT_EQ(*reader->Head("account", 0), 0u);
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(*reader->Head("account", 0), 3u);
  EXPECT_EQ(Ids(*reader->LatestOf("account", 0, {"a", "b"})), (std::vector<std::string>{"a@2", "b@1"}));

  // Rolled back: nothing of it is stored, and the session appends again.
  auto dropped = AppendOf(*writer, {{4, "c", 1, false}});
  ASSERT_TRUE(writer->Stage(*dropped).ok());
  writer->Rollback();
  EXPECT_EQ(*reader->Head("account", 0), 3u);

  // A duplicate key in a later append drops the earlier ones of the transaction too.
  auto fine = AppendOf(*writer, {{4, "c", 1, false}});
  auto taken = AppendOf(*writer, {{3, "d", 1, false}});
  ASSERT_TRUE(writer->Stage(*fine).ok());
  const Status dup = writer->Stage(*taken);
  EXPECT_EQ(dup.code(), StatusCode::kAborted) << dup.ToString();
  EXPECT_EQ(DuplicateKeyName(dup), "PRIMARY") << dup.ToString();
  EXPECT_TRUE(writer->Commit().ok());  // nothing staged
  EXPECT_EQ(*reader->Head("account", 0), 3u);

  // Commit and Rollback with nothing staged do nothing; Append works as before.
  writer->Rollback();
  EXPECT_TRUE(writer->Commit().ok());
  Append(*writer, {{4, "c", 1, false}});
  EXPECT_EQ(*reader->Head("account", 0), 4u);
}

// Group commit: appends of several partitions' tables of one server staged
// on one session are one transaction, stored all or nothing. Appends of two
// servers are refused.
TEST_P(TablesContractTest, StagedAppendsOfSeveralTablesAreOneTransaction) {
  auto writer = storage_->OpenEventLog();
  auto reader = storage_->OpenEventLog();
  Append(*writer, {{1, "x", 1, false}}, 1);
  auto p0 = AppendOf(*writer, {{1, "a", 1, false}}, 0);
  auto p1 = AppendOf(*writer, {{2, "b", 1, false}, {3, "c", 1, false}}, 1);
  ASSERT_TRUE(writer->Stage(*p0).ok());
  if (p0->server() != p1->server()) {
    const Status refused = writer->Stage(*p1);
    EXPECT_EQ(refused.code(), StatusCode::kInternal) << refused.ToString();
    EXPECT_TRUE(writer->Commit().ok());  // nothing staged
    EXPECT_EQ(*reader->Head("account", 0), 0u);
    EXPECT_EQ(*reader->Head("account", 1), 1u);
    return;
  }
  ASSERT_TRUE(writer->Stage(*p1).ok());
  EXPECT_EQ(*reader->Head("account", 0), 0u);
  EXPECT_EQ(*reader->Head("account", 1), 1u);
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(*reader->Head("account", 0), 1u);
  EXPECT_EQ(*reader->Head("account", 1), 3u);
  EXPECT_EQ(Ids(*reader->LatestOf("account", 1, {"b", "c"})), (std::vector<std::string>{"b@1", "c@1"}));

  // A duplicate key in one table's append drops the other table's too.
  auto fine = AppendOf(*writer, {{2, "a", 2, false}}, 0);
  auto taken = AppendOf(*writer, {{1, "y", 1, false}}, 1);
  ASSERT_TRUE(writer->Stage(*fine).ok());
  const Status dup = writer->Stage(*taken);
  EXPECT_EQ(dup.code(), StatusCode::kAborted) << dup.ToString();
  EXPECT_EQ(DuplicateKeyName(dup), "PRIMARY") << dup.ToString();
  EXPECT_TRUE(writer->Commit().ok());  // nothing staged
  EXPECT_EQ(*reader->Head("account", 0), 1u);
  EXPECT_EQ(*reader->Head("account", 1), 3u);
  // Rolled back on the writer's session too: the row of `fine` can be appended.
  Append(*writer, {{2, "a", 2, false}}, 0);
  EXPECT_EQ(*reader->Head("account", 0), 2u);
}

TEST_P(TablesContractTest, HeadsGivesEachPartitionsHighestEventIdInOneCall) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  auto heads = log->Heads("account", {0, 1});
  ASSERT_TRUE(heads.ok()) << heads.status().ToString();
  EXPECT_EQ(*heads, (std::map<uint32_t, uint64_t>{{0, 6}, {1, 0}}));  // 1 is empty
  auto one = log->Head("account", 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, 6u);
  auto none = log->Heads("account", {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(TablesContractTest, SecondsSinceCommitGivesTheAgeOfEachEventThatExistsInOneCall) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  Append(*log, {{1, "p1", 1, false}, {2, "p1", 2, false}}, 1);  // on the second server where there are two
  auto since = log->SecondsSinceCommit("account", {{0, 1}, {0, 99}, {1, 2}});  // 0/99 does not exist
  ASSERT_TRUE(since.ok()) << since.status().ToString();
  ASSERT_EQ(since->size(), 2u);
  for (const uint32_t p : {0u, 1u}) {
    ASSERT_TRUE(since->count(p)) << p;
    EXPECT_GE(since->at(p), 0.0);
    EXPECT_LT(since->at(p), 3600.0);  // committed moments ago
  }
  auto none = log->SecondsSinceCommit("account", {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(TablesContractTest, AtVersionsReadsTheStatesAtTheGivenKeysThatExist) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  auto rows = log->AtVersions("account", 0, {{"a", 1}, {"c", 2}, {"b", 7}, {"zz", 1}, {"it's", 1}});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::map<std::string, EventRow> by_key;
  for (auto& r : *rows) by_key[r.entity_id + "@" + std::to_string(r.version)] = r;
  ASSERT_EQ(by_key.size(), 2u);
  EXPECT_EQ(by_key["a@1"].state, R"({"n":1})");
  EXPECT_FALSE(by_key["a@1"].deleted);
  EXPECT_TRUE(by_key["c@2"].deleted);
  EXPECT_EQ(by_key["c@2"].state, "");
  auto none = log->AtVersions("account", 0, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(TablesContractTest, ByIdsReadsTheEventsThatExistInEventIdOrder) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  auto rows = log->ByIds("account", 0, {6, 5, 1});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(EventIds(*rows), (std::vector<uint64_t>{1, 6}));
  EXPECT_EQ(rows->at(0).state, R"({"n":1})");
  EXPECT_EQ(rows->at(0).request, R"({"n":1})");  // a retry of view code sees the whole event
  EXPECT_EQ(rows->at(0).response, R"({"ok":1})");
  EXPECT_TRUE(rows->at(1).deleted);
  auto none = log->ByIds("account", 0, {});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_P(TablesContractTest, HistoryPagesOneEntitysEventsByVersion) {
  auto log = storage_->OpenEventLog();
  Fill(*log);
  auto all = log->History("account", 0, "c", 0, 10);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(EventIds(*all), (std::vector<uint64_t>{4, 6}));
  EXPECT_EQ(all->at(0).version, 1u);
  EXPECT_EQ(all->at(0).request, R"({"n":4})");
  EXPECT_EQ(all->at(0).response, R"({"ok":4})");
  EXPECT_EQ(all->at(0).state, R"({"n":4})");
  EXPECT_EQ(all->at(0).command_id, "cmd-4");
  EXPECT_GT(all->at(0).committed_at_us, 0);
  EXPECT_TRUE(all->at(1).deleted);
  EXPECT_EQ(all->at(1).command_name, "delete");
  auto page = log->History("account", 0, "a", 0, 1);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(EventIds(*page), (std::vector<uint64_t>{1}));
  auto rest = log->History("account", 0, "a", 1, 1);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(EventIds(*rest), (std::vector<uint64_t>{3}));
  auto none = log->History("account", 0, "nobody", 0, 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// Events that stored deltas (docs/delta.md) among full states, in one
// table, as a writer with deltas on leaves it (and a table from before
// deltas, upgraded, holds the full states): every read gives full states.
// x: full 1, delta 2, delta 3, deleted 4, full 5 (re-created), delta 6.
// y: full 1, delta 2.
struct DeltaEvent {
  uint64_t event_id;
  std::string entity_id;
  uint64_t version;
  std::string state;  // for a full state
  std::string delta;  // for a delta
  bool deleted = false;
};
const std::vector<DeltaEvent>& MixedEvents() {
  static const std::vector<DeltaEvent> events = {
      {1, "x", 1, R"({"a":1,"keep":null})", ""},
      {2, "y", 1, R"({"list":[1]})", ""},
      {3, "x", 2, "", R"([["s",["a"],2],["s",["b"],{"c":true}]])"},
      {4, "y", 2, "", R"([["a",["list"],[2,3]]])"},
      {5, "x", 3, "", R"([["r",["a"]],["s",["b","c"],1.0]])"},
      {6, "x", 4, "", "", true},
      {7, "x", 5, R"({"again":1})", ""},
      {8, "x", 6, "", R"([["s",["again"],-0.0]])"},
  };
  return events;
}
// The full state after each (entity, version) of MixedEvents.
const std::map<std::string, std::string>& MixedStates() {
  static const std::map<std::string, std::string> states = {
      {"x@1", R"({"a":1,"keep":null})"},          {"x@2", R"({"a":2,"b":{"c":true},"keep":null})"},
      {"x@3", R"({"b":{"c":1.0},"keep":null})"}, {"x@4", ""},
      {"x@5", R"({"again":1})"},                  {"x@6", R"({"again":-0.0})"},
      {"y@1", R"({"list":[1]})"},                 {"y@2", R"({"list":[1,2,3]})"},
  };
  return states;
}
void AppendMixed(EventLog& log, size_t first, size_t end) {
  auto append = log.NewAppend("account", 1);
  for (size_t i = first; i < end; ++i) {
    const DeltaEvent& d = MixedEvents()[i];
    NewEvent e;
    e.event_id = d.event_id;
    e.entity_id = d.entity_id;
    e.version = d.version;
    static const std::vector<std::string> ids = {"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"};
    e.command_id = ids[i];
    e.command_name = d.deleted ? "delete" : "patch";
    e.request = "{}";
    e.response = "{}";
    e.state = d.state;
    e.delta = d.delta;
    e.deleted = d.deleted;
    ASSERT_TRUE(append->TryAdd(e, 1 << 20));
  }
  ASSERT_TRUE(log.Append(*append).ok());
}
void ExpectMixedStates(const std::vector<EventRow>& rows) {
  for (const EventRow& r : rows) {
    const std::string key = r.entity_id + "@" + std::to_string(r.version);
    EXPECT_EQ(r.state, MixedStates().at(key)) << key;
  }
}

TEST_P(TablesContractTest, EventsThatStoredDeltasAreReadAsFullStates) {
  auto writer = storage_->OpenEventLog();
  AppendMixed(*writer, 0, MixedEvents().size());
  // Each read from a fresh log (nothing remembered), and again from the same one.
  for (int fresh = 1; fresh >= 0; --fresh) {
    std::unique_ptr<EventLog> made = storage_->OpenEventLog();
    EventLog& log = fresh ? *made : *writer;
    auto all = log.ReadAfter("account", {{1, 0}}, 100, EventLog::Columns::kView);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    ASSERT_EQ(all->at(1).size(), 8u);
    ExpectMixedStates(all->at(1));
    EXPECT_EQ(all->at(1)[2].delta, MixedEvents()[2].delta);  // the delta itself comes along
    // Reads that start after the snapshots: the chains come from storage.
    for (uint64_t after = 0; after < 8; ++after) {
      auto part = storage_->OpenEventLog()->ReadAfter("account", {{1, after}}, 2, EventLog::Columns::kFull);
      ASSERT_TRUE(part.ok()) << after << ": " << part.status().ToString();
      ExpectMixedStates(part->at(1));
    }
    auto latest = log.LatestOf("account", 1, {"x", "y"});
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    EXPECT_EQ(Ids(*latest), (std::vector<std::string>{"x@6", "y@2"}));
    ExpectMixedStates(*latest);
    // How far each is from its snapshot (the writer's rule for the next one).
    EXPECT_EQ(latest->at(0).deltas_since_snapshot, 1u);
    EXPECT_EQ(latest->at(0).delta_bytes_since_snapshot, MixedEvents()[7].delta.size());
    EXPECT_EQ(all->at(1)[4].deltas_since_snapshot, 2u);  // x@3
    EXPECT_EQ(all->at(1)[4].delta_bytes_since_snapshot, MixedEvents()[2].delta.size() + MixedEvents()[4].delta.size());
    EXPECT_EQ(all->at(1)[6].deltas_since_snapshot, 0u);  // x@5, a snapshot
    auto walk = storage_->OpenEventLog()->LatestAfter("account", 1, "", 0);
    ASSERT_TRUE(walk.ok()) << walk.status().ToString();
    ExpectMixedStates(*walk);
    auto at = storage_->OpenEventLog()->AtVersions("account", 1, {{"x", 3}, {"x", 2}, {"y", 2}, {"x", 6}});
    ASSERT_TRUE(at.ok()) << at.status().ToString();
    EXPECT_EQ(at->size(), 4u);
    ExpectMixedStates(*at);
    auto by_ids = storage_->OpenEventLog()->ByIds("account", 1, {5, 8});
    ASSERT_TRUE(by_ids.ok()) << by_ids.status().ToString();
    ExpectMixedStates(*by_ids);
    auto history = storage_->OpenEventLog()->History("account", 1, "x", 2, 10);
    ASSERT_TRUE(history.ok()) << history.status().ToString();
    EXPECT_EQ(history->size(), 4u);
    ExpectMixedStates(*history);
  }
}

// A delta whose chain has no snapshot (storage lost rows) is an error that
// names the entity and version, never a made-up state.
TEST_P(TablesContractTest, ADeltaWithoutItsSnapshotIsAnErrorNotAState) {
  auto log = storage_->OpenEventLog();
  AppendMixed(*log, 3, 4);  // y@2 alone: a delta with no y@1 before it
  auto rows = storage_->OpenEventLog()->ReadAfter("account", {{1, 0}}, 10, EventLog::Columns::kView);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("entity 'y'"), std::string::npos) << rows.status().message();
  EXPECT_NE(rows.status().message().find("version 2"), std::string::npos) << rows.status().message();
}

DeadLetter Letter(const std::string& sink, uint32_t partition, uint64_t event_id, std::string error = "refused") {
  return DeadLetter{sink, "account", partition, event_id, "e" + std::to_string(event_id), 7, std::move(error)};
}

TEST_P(TablesContractTest, DeadLettersAreListedCountedAndResolvedBySelection) {
  auto letters = storage_->OpenDeadLetters();
  ASSERT_TRUE(letters->Add(Letter("cache", 1, 9)).ok());
  ASSERT_TRUE(letters->Add(Letter("cache", 0, 4)).ok());
  ASSERT_TRUE(letters->Add(Letter("search", 0, 4)).ok());
  ASSERT_TRUE(letters->Add(Letter("cache", 1, 9, "filed twice")).ok());  // ignored

  auto cache = letters->List({.sink = "cache", .id = std::nullopt, .unresolved_only = true});
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  ASSERT_EQ(cache->size(), 2u);
  const FiledDeadLetter& first = cache->at(0);
  EXPECT_LT(first.id, cache->at(1).id);  // by id, in filing order
  EXPECT_EQ(first.letter.event_id, 9u);
  EXPECT_EQ(first.letter.partition, 1u);
  EXPECT_EQ(first.letter.entity_id, "e9");
  EXPECT_EQ(first.letter.entity_type, "account");
  EXPECT_EQ(first.letter.version, 7u);
  EXPECT_EQ(first.letter.error, "refused");
  EXPECT_TRUE(std::regex_match(first.created_at, std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6})")))
      << first.created_at;
  EXPECT_FALSE(first.resolved_at);
  EXPECT_EQ(first.resolution, "");

  const uint64_t id = first.id;
  auto resolved = letters->Resolve({.sink = std::nullopt, .id = id, .unresolved_only = true}, "stale");
  ASSERT_TRUE(resolved.ok()) << resolved.status().ToString();
  EXPECT_EQ(*resolved, 1u);
  auto again = letters->Resolve({.sink = std::nullopt, .id = id, .unresolved_only = false}, "discarded");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);  // resolved already: kept as it was

  auto unresolved = letters->Count({.sink = "cache", .id = std::nullopt, .unresolved_only = true});
  auto filed = letters->Count({.sink = "cache", .id = std::nullopt, .unresolved_only = false});
  auto unknown = letters->Count({.sink = "gone", .id = std::nullopt, .unresolved_only = false});
  ASSERT_TRUE(unresolved.ok() && filed.ok() && unknown.ok());
  EXPECT_EQ(*unresolved, 1u);
  EXPECT_EQ(*filed, 2u);
  EXPECT_EQ(*unknown, 0u);

  auto one = letters->List({.sink = std::nullopt, .id = id, .unresolved_only = false});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  ASSERT_TRUE(one->at(0).resolved_at);
  EXPECT_TRUE(std::regex_match(*one->at(0).resolved_at, std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6})")));
  EXPECT_EQ(one->at(0).resolution, "stale");

  ASSERT_TRUE(letters->SetError(cache->at(1).id, std::string(5000, 'x')).ok());
  auto everything = letters->List({.sink = std::nullopt, .id = std::nullopt, .unresolved_only = false});
  ASSERT_TRUE(everything.ok());
  ASSERT_EQ(everything->size(), 3u);
  EXPECT_EQ(everything->at(1).letter.error, std::string(4000, 'x'));

  auto by_sink = letters->Resolve({.sink = "cache", .id = std::nullopt, .unresolved_only = true}, "discarded");
  ASSERT_TRUE(by_sink.ok());
  EXPECT_EQ(*by_sink, 1u);
  auto left = letters->List({.sink = std::nullopt, .id = std::nullopt, .unresolved_only = true});
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ(left->at(0).letter.sink, "search");
  auto among = letters->Among("cache", "account", {{1, 9}, {0, 4}, {0, 5}});
  ASSERT_TRUE(among.ok());
  EXPECT_EQ(among->size(), 2u);  // resolved or not
}

// Leases (DESIGN 10): taken when free, renewed with the same token by their
// owner, refused to others while they run, released; offsets saved through
// a fence only for the partitions whose lease the saver still holds.
TEST_P(TablesContractTest, LeasesAreTakenRenewedReleasedAndFenceOffsetWrites) {
  using namespace std::chrono_literals;
  auto leases = storage_->OpenLeases();
  const std::string scope = "sink/cache";
  auto a = leases->Acquire(scope, "account", {0, 1}, "engine-a", 60s, {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(*a, (std::map<uint32_t, uint64_t>{{0, 1}, {1, 1}}));
  auto b = leases->Acquire(scope, "account", {0, 1}, "engine-b", 60s, {});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->empty());  // both run, and are engine-a's
  auto renewed = leases->Acquire(scope, "account", {0}, "engine-a", 60s, *a);
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(*renewed, (std::map<uint32_t, uint64_t>{{0, 1}}));  // a renewal keeps the token
  ASSERT_TRUE(leases->Release(scope, "account", {{1, 1}}, "engine-a").ok());
  b = leases->Acquire(scope, "account", {0, 1}, "engine-b", 60s, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::map<uint32_t, uint64_t>{{1, 2}}));  // taken again: a higher token
  // The same lease of another scope is another lease.
  auto other = leases->Acquire("writer", "account", {1}, "writer-1", 60s, {});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, (std::map<uint32_t, uint64_t>{{1, 1}}));

  auto offsets = storage_->OpenOffsets();
  OffsetRow row;
  row.event_id = 7;
  auto refused = offsets->SaveFenced("cache", "account", {{0, row}, {1, row}},
                                     Fence{scope, "engine-a", {{0, 1}, {1, 1}}});
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(*refused, std::set<uint32_t>{1});  // lost to engine-b
  row.event_id = 9;
  refused = offsets->SaveFenced("cache", "account", {{1, row}}, Fence{scope, "engine-b", {{1, 2}}});
  ASSERT_TRUE(refused.ok());
  EXPECT_TRUE(refused->empty());
  auto saved = offsets->Load("cache", "account");
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->at(0).event_id, 7u);
  EXPECT_EQ(saved->at(1).event_id, 9u);  // never 7: engine-a's write for it was refused
  // A fence without a token for a partition, or with an old one, writes nothing.
  refused = offsets->SaveFenced("cache", "account", {{0, row}}, Fence{scope, "engine-a", {}});
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(*refused, std::set<uint32_t>{0});

  auto listed = leases->List(scope);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ(listed->at(0).owner, "engine-a");
  EXPECT_EQ(listed->at(1).owner, "engine-b");
  EXPECT_EQ(listed->at(1).token, 2u);
  EXPECT_GT(listed->at(0).expires_in_ms, 50'000);
  auto all = leases->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 3u);
}

// A lease its owner stopped renewing is taken by another with a higher
// token once it expired, and the former owner's fenced writes change nothing.
TEST_P(TablesContractTest, AnExpiredLeaseIsTakenOverAndItsFormerOwnerIsFenced) {
  using namespace std::chrono_literals;
  auto leases = storage_->OpenLeases();
  auto a = leases->Acquire("sink/s", "account", {0}, "engine-a", 100ms, {});
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->at(0), 1u);
  std::this_thread::sleep_for(300ms);
  auto b = leases->Acquire("sink/s", "account", {0}, "engine-b", 60s, {});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::map<uint32_t, uint64_t>{{0, 2}}));
  auto again = leases->Acquire("sink/s", "account", {0}, "engine-a", 60s, *a);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty());
  OffsetRow row;
  row.event_id = 5;
  auto refused = storage_->OpenOffsets()->SaveFenced("s", "account", {{0, row}}, Fence{"sink/s", "engine-a", {{0, 1}}});
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(*refused, std::set<uint32_t>{0});
  auto saved = storage_->OpenOffsets()->Load("s", "account");
  ASSERT_TRUE(saved.ok());
  EXPECT_TRUE(saved->empty());
}

// An owner's round keeps every lease it holds of (scope, type) valid at
// once (however many), so others take none of them while it renews, even
// across several TTLs; once it stops, another takes one, and the owner's
// next round with the tokens it knew finds that one gone and keeps the rest
// under the same tokens. The log shows each hold from its start to its end.
TEST_P(TablesContractTest, ARenewalKeepsEveryLeaseOfItsOwnerAndTheNextSeesATakeover) {
  using namespace std::chrono_literals;
  auto a = storage_->OpenLeases();
  auto b = storage_->OpenLeases();
  const std::vector<uint32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  auto held = a->Acquire("sink/r", "account", all, "engine-a", 300ms, {});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 8u);
  const std::map<uint32_t, uint64_t> first = *held;
  for (int round = 0; round < 8; ++round) {  // 8 x 100 ms: past the TTL more than twice
    std::this_thread::sleep_for(100ms);
    held = a->Acquire("sink/r", "account", all, "engine-a", 300ms, *held);
    ASSERT_TRUE(held.ok()) << held.status().ToString();
    EXPECT_EQ(*held, first) << "round " << round;
    auto taken = b->Acquire("sink/r", "account", all, "engine-b", 300ms, {});
    ASSERT_TRUE(taken.ok()) << taken.status().ToString();
    EXPECT_TRUE(taken->empty()) << "round " << round << ": engine-b took " << taken->size();
  }
  auto listed = b->List("sink/r");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 8u);
  for (const LeaseRow& l : *listed) {
    EXPECT_EQ(l.owner, "engine-a");
    EXPECT_GT(l.expires_in_ms, 0) << "partition " << l.partition;
  }
  std::this_thread::sleep_for(400ms);  // engine-a stops renewing: all expire
  auto taken = b->Acquire("sink/r", "account", {3}, "engine-b", 60s, {});
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(*taken, (std::map<uint32_t, uint64_t>{{3, first.at(3) + 1}}));
  held = a->Acquire("sink/r", "account", all, "engine-a", 60s, first);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::map<uint32_t, uint64_t> expected = first;
  expected.erase(3);
  EXPECT_EQ(*held, expected);  // the rest stay its own, under the same tokens
  auto history = b->History("sink/r");
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 9u);
  for (size_t i = 0; i < history->size(); ++i) {
    const LeaseSpan& h = history->at(i);
    EXPECT_LT(h.taken_at_ms, h.ended_at_ms) << "partition " << h.partition << " token " << h.token;
    if (i > 0 && history->at(i - 1).partition == h.partition) {
      EXPECT_LE(history->at(i - 1).ended_at_ms, h.taken_at_ms) << "partition " << h.partition;
    }
  }
}

// A round renews every lease naming its owner, so the leases an owner no
// longer asks for (it forgot them: a restart under its name, a round past
// its validity) must not be kept alive by its rounds: they are let go at
// its next round on a server where it asks for others (at once with one
// server), and expire within a TTL on one where it asks for none. Another
// owner takes them then, while the owner keeps renewing what it asks for.
TEST_P(TablesContractTest, LeasesItsOwnerNoLongerAsksForAreNotKeptAlive) {
  using namespace std::chrono_literals;
  auto a = storage_->OpenLeases();
  auto b = storage_->OpenLeases();
  auto held = a->Acquire("sink/f", "account", {0, 1}, "engine-a", 300ms, {});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ(held->size(), 2u);
  const std::map<uint32_t, uint64_t> known = {{0, held->at(0)}};  // the round that knew 1 was lost
  std::map<uint32_t, uint64_t> taken;
  for (int round = 0; round < 8 && taken.empty(); ++round) {  // 8 x 100 ms: more than two TTLs
    auto again = a->Acquire("sink/f", "account", {0}, "engine-a", 300ms, known);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, known);
    auto got = b->Acquire("sink/f", "account", {1}, "engine-b", 60s, {});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    taken = *got;
    if (taken.empty()) std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(taken, (std::map<uint32_t, uint64_t>{{1, held->at(1) + 1}}));
  auto history = b->History("sink/f");
  ASSERT_TRUE(history.ok());
  for (size_t i = 1; i < history->size(); ++i) {
    if (history->at(i - 1).partition != history->at(i).partition) continue;
    EXPECT_LE(history->at(i - 1).ended_at_ms, history->at(i).taken_at_ms) << "partition " << history->at(i).partition;
  }
}

TEST_P(TablesContractTest, MembersAreTheOnesWithARecentHeartbeat) {
  using namespace std::chrono_literals;
  auto leases = storage_->OpenLeases();
  ASSERT_TRUE(leases->Heartbeat("engine", "b", "").ok());
  ASSERT_TRUE(leases->Heartbeat("engine", "a", "").ok());
  ASSERT_TRUE(leases->Heartbeat("writer", "w", "http://127.0.0.1:1").ok());
  auto engines = leases->Members("engine", 60s);
  ASSERT_TRUE(engines.ok()) << engines.status().ToString();
  ASSERT_EQ(engines->size(), 2u);
  EXPECT_EQ(engines->at(0).member, "a");
  EXPECT_EQ(engines->at(1).member, "b");
  auto writers = leases->Members("writer", 60s);
  ASSERT_TRUE(writers.ok());
  ASSERT_EQ(writers->size(), 1u);
  EXPECT_EQ(writers->at(0).address, "http://127.0.0.1:1");
  ASSERT_TRUE(leases->Leave("engine", "a").ok());
  engines = leases->Members("engine", 60s);
  ASSERT_TRUE(engines.ok());
  ASSERT_EQ(engines->size(), 1u);
  std::this_thread::sleep_for(50ms);
  engines = leases->Members("engine", 20ms);  // b's heartbeat is older than that now
  ASSERT_TRUE(engines.ok());
  EXPECT_TRUE(engines->empty());
}

// A member's name is claimed by one session at a time: a second process
// under the same name is refused while the first lives, and gets it once
// the first's session is gone (a process that died).
TEST_P(TablesContractTest, AMembersNameIsClaimedByOneSessionAtATime) {
  auto first = storage_->OpenLeases();
  auto claimed = first->Claim("engine", "e1");
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  EXPECT_TRUE(*claimed);
  auto again = first->Claim("engine", "e1");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again);  // its own claim
  auto second = storage_->OpenLeases();
  auto twin = second->Claim("engine", "e1");
  ASSERT_TRUE(twin.ok());
  EXPECT_FALSE(*twin);
  auto other = second->Claim("engine", "e2");  // another name, another group
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(*other);
  auto writer = second->Claim("writer", "e1");
  ASSERT_TRUE(writer.ok());
  EXPECT_TRUE(*writer);
  first.reset();  // its session ends
  bool taken = false;
  for (int i = 0; i < 100 && !taken; ++i) {  // the server notices the closed session at once, or nearly
    auto after = second->Claim("engine", "e1");
    ASSERT_TRUE(after.ok());
    taken = *after;
    if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(taken);
}

// Owners racing for the same leases (each on its own session), with leases
// short enough to expire between rounds: a (partition, token) is only ever
// held by one owner, so at no time do two owners hold one partition.
TEST_P(TablesContractTest, OwnersRacingForLeasesNeverShareATokenOfAPartition) {
  using namespace std::chrono_literals;
  constexpr int kOwners = 4;
  constexpr int kRounds = 60;
  std::mutex mu;
  std::map<std::pair<uint32_t, uint64_t>, std::set<std::string>> holders;
  std::atomic<int> failures{0}, aborted{0};
  std::vector<std::thread> threads;
  for (int o = 0; o < kOwners; ++o) {
    threads.emplace_back([&, o] {
      auto leases = storage_->OpenLeases();
      const std::string me = "owner-" + std::to_string(o);
      std::map<uint32_t, uint64_t> mine;
      for (int round = 0; round < kRounds; ++round) {
        auto got = leases->Acquire("sink/race", "account", {0, 1, 2, 3}, me, 5ms, mine);
        if (!got.ok()) {
          // A deadlock between two acquisitions is reported, never half-applied.
          (got.status().code() == StatusCode::kAborted ? aborted : failures)++;
          continue;
        }
        mine = *got;
        {
          std::lock_guard lock(mu);
          for (const auto& [p, token] : *got) holders[{p, token}].insert(me);
        }
        if (round % 3 == 0) {
          (void)leases->Release("sink/race", "account", *got, me);
          mine.clear();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(round % 4 * 3));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  size_t tokens = 0;
  for (const auto& [key, owners] : holders) {
    EXPECT_EQ(owners.size(), 1u) << "partition " << key.first << " token " << key.second;
    ++tokens;
  }
  EXPECT_GT(tokens, 8u);  // the leases did change hands
  // The log agrees: each partition's holds follow one another in time.
  auto history = storage_->OpenLeases()->History("sink/race");
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  EXPECT_EQ(history->size(), tokens);
  for (size_t i = 1; i < history->size(); ++i) {
    const LeaseSpan& before = history->at(i - 1);
    const LeaseSpan& after = history->at(i);
    if (before.partition != after.partition) continue;
    EXPECT_EQ(after.token, before.token + 1);
    EXPECT_LE(before.ended_at_ms, after.taken_at_ms) << "partition " << after.partition << " token " << after.token;
  }
}

// A restarted process of a member (same name, no tokens known) takes its
// live leases over with a higher token: its former self is fenced, and the
// log shows the former hold cut where the new one starts.
TEST_P(TablesContractTest, ARestartedMemberTakesItsLeasesOverFromItsFormerSelf) {
  using namespace std::chrono_literals;
  auto leases = storage_->OpenLeases();
  auto before = leases->Acquire("sink/s", "account", {0, 1}, "engine-a", 60s, {});
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(*before, (std::map<uint32_t, uint64_t>{{0, 1}, {1, 1}}));
  // One lease it knows (renewed), one it does not (taken over).
  auto after = leases->Acquire("sink/s", "account", {0, 1}, "engine-a", 60s, {{0, 1}});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, (std::map<uint32_t, uint64_t>{{0, 1}, {1, 2}}));
  OffsetRow row;
  row.event_id = 3;
  auto refused = storage_->OpenOffsets()->SaveFenced("s", "account", {{0, row}, {1, row}},
                                                     Fence{"sink/s", "engine-a", *before});
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(*refused, std::set<uint32_t>{1});
  ASSERT_TRUE(leases->Release("sink/s", "account", *after, "engine-a").ok());
  auto history = leases->History("sink/s");
  ASSERT_TRUE(history.ok()) << history.status().ToString();
  ASSERT_EQ(history->size(), 3u);
  EXPECT_EQ(history->at(0).partition, 0u);
  EXPECT_EQ(history->at(1).partition, 1u);
  EXPECT_EQ(history->at(1).token, 1u);
  EXPECT_EQ(history->at(2).token, 2u);
  EXPECT_LE(history->at(1).ended_at_ms, history->at(2).taken_at_ms);
  for (const LeaseSpan& s : *history) {
    EXPECT_EQ(s.owner, "engine-a");
    EXPECT_LT(s.ended_at_ms - s.taken_at_ms, 50'000);  // released, not left to run for 60 s
  }
}

}  // namespace
}  // namespace sluice::sql
