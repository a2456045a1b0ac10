// engine/event_reader over the in-memory tables: the paging of StoredHistory,
// the gap cut of the pull loop's reads, the truth per entity. No server;
// tests/event_reader_test.cc runs the statements themselves on MariaDB.
#include "engine/event_reader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "sql/memory_tables.h"

namespace sluice::engine {
namespace {

class EventReaderFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // p0: 1..5 then 8, 9 (6 and 7 missing); entity a (odd ids) and b (even).
    for (uint64_t id : {1, 2, 3, 4, 5, 8, 9}) Insert(0, id, id % 2 ? "a" : "b", (id + 1) / 2);
    // p1: one entity, deleted at its second version.
    Insert(1, 1, "c", 1);
    Insert(1, 2, "c", 2, true);
  }

  void Insert(uint32_t partition, uint64_t id, const std::string& entity, uint64_t version, bool deleted = false) {
    sql::EventRow r;
    r.event_id = id;
    r.entity_id = entity;
    r.version = version;
    r.command_id = "c" + std::to_string(id);
    r.deleted = deleted;
    if (!deleted) r.state = R"({"n":)" + std::to_string(id) + "}";
    ASSERT_TRUE(storage_->Insert("account", partition, r).ok());
  }

  static std::vector<uint64_t> Ids(const std::vector<connectors::ChangeEvent>& events) {
    std::vector<uint64_t> out;
    for (const auto& e : events) out.push_back(e.event_id);
    return out;
  }

  std::shared_ptr<sql::MemoryStorage> storage_ = sql::MemoryStorage::Create();
  std::unique_ptr<sql::EventLog> log_ = storage_->OpenEventLog();
};

// Every page of a partition until an empty one.
std::vector<connectors::ChangeEvent> Drain(connectors::HistoryPages& history, uint32_t partition, uint32_t page) {
  std::vector<connectors::ChangeEvent> all;
  for (;;) {
    auto next = history.Next(partition, page);
    EXPECT_TRUE(next.ok()) << next.status().ToString();
    if (!next.ok() || next->empty()) return all;
    EXPECT_LE(next->size(), page);
    std::move(next->begin(), next->end(), std::back_inserter(all));
  }
}

TEST_F(EventReaderFakeTest, HistoryPagesOverEveryEventGapsIncluded) {
  for (uint32_t page : {1u, 2u, 3u, 7u, 10000u}) {
    const uint64_t reads_before = storage_->calls(sql::MemoryStorage::Op::kReadAfter);
    StoredHistory history(*log_, "account", 2, /*full_events=*/false);
    EXPECT_EQ(Ids(Drain(history, 0, page)), (std::vector<uint64_t>{1, 2, 3, 4, 5, 8, 9})) << "page " << page;
    const auto p1 = Drain(history, 1, page);
    EXPECT_EQ(Ids(p1), (std::vector<uint64_t>{1, 2})) << "page " << page;
    EXPECT_EQ(p1.at(0).partition, 1u);
    EXPECT_EQ(p1.at(0).entity_type, "account");
    EXPECT_EQ(history.given(), 9u);
    // Per partition: the pages up to the head, no read past it.
    const uint64_t reads = storage_->calls(sql::MemoryStorage::Op::kReadAfter) - reads_before;
    EXPECT_EQ(reads, (7 + page - 1) / page + (2 + page - 1) / page) << "page " << page;
    EXPECT_TRUE(history.Next(0, page)->empty()) << "the end stays the end";
  }
}

// The history ends at the heads of its first read: an event committed
// since is not in it (a log sink learned where it ends before asking), until
// a rewind, which asks again.
TEST_F(EventReaderFakeTest, HistoryEndsAtTheHeadsOfItsFirstReadUntilARewind) {
  StoredHistory history(*log_, "account", 2, /*full_events=*/false);
  EXPECT_EQ(Ids(*history.Next(1, 1)), (std::vector<uint64_t>{1}));
  Insert(1, 3, "c", 3);
  EXPECT_EQ(Ids(Drain(history, 1, 10)), (std::vector<uint64_t>{2}));
  EXPECT_TRUE(history.Of(1, {3})->empty()) << "past the head";
  EXPECT_EQ(Ids(*history.Of(1, {2, 3, 7})), (std::vector<uint64_t>{2}));
  history.Rewind();
  EXPECT_EQ(Ids(Drain(history, 1, 10)), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(history.most_given(), 3u);
  EXPECT_EQ(history.read(), 5u);
}

// With full events each carries its state before, in pages and looked up
// out of order alike.
TEST_F(EventReaderFakeTest, FullHistoryCarriesTheStateBefore) {
  for (uint64_t id : {3, 4, 5}) Insert(1, id, "e", id - 2);  // e: versions 1..3
  StoredHistory history(*log_, "account", 2, /*full_events=*/true);
  const auto p1 = Drain(history, 1, 2);  // pages [1, 2], [3, 4], [5]
  ASSERT_EQ(Ids(p1), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(p1[0].before, "");  // c's creation
  EXPECT_EQ(p1[1].before, R"({"n":1})");
  EXPECT_EQ(p1[3].before, R"({"n":3})");
  EXPECT_EQ(p1[4].before, R"({"n":4})");  // the page before's
  const auto looked_up = history.Of(1, {4, 5});
  ASSERT_TRUE(looked_up.ok()) << looked_up.status().ToString();
  ASSERT_EQ(looked_up->size(), 2u);
  EXPECT_EQ(looked_up->at(0).before, R"({"n":3})");
  EXPECT_EQ(looked_up->at(1).before, R"({"n":4})");
}

TEST_F(EventReaderFakeTest, ThePullLoopsReadsStopBeforeAGap) {
  auto r = ReadEventsOfPartitions(*log_, "account", {{0, 2}, {1, 0}}, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Ids(r->at(0).events), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_TRUE(r->at(0).gap);
  EXPECT_EQ(Ids(r->at(1).events), (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(r->at(1).gap);
  auto past = ReadEvents(*log_, "account", 0, 7, 10);  // waiting at 7: 8 follows without a gap
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(Ids(past->events), (std::vector<uint64_t>{8, 9}));
}

// With a session to read ahead on, the next page's read has started when
// `each` gets a page (verify: storage is read while the view compares the
// page before); without one, each read comes after the page before. The
// same pages either way, and `each` may use the log meanwhile.
TEST_F(EventReaderFakeTest, LatestPagesAreReadAheadOnTheSessionGiven) {
  for (const bool read_ahead : {false, true}) {
    SCOPED_TRACE(read_ahead ? "read ahead" : "one page at a time");
    auto ahead = storage_->OpenEventLog();
    const uint64_t before = storage_->calls(sql::MemoryStorage::Op::kLatestAfter);
    std::vector<std::string> pages;
    std::vector<uint64_t> reads_started;  // when each page was given
    const Status st = ForEachLatestPage(
        *log_, "account", 2, 1,
        [&](uint32_t p, std::vector<connectors::EntitySnapshot>& page) {
          pages.push_back(std::to_string(p) + page.at(0).entity_id);
          // Reads started when the page is given: the walk's (p0 "", p0 a,
          // p0 b: empty, p1 "", p1 c: empty) and the caller's own below, one
          // per page before. The read ahead runs on a thread: wait for it.
          const std::vector<uint64_t> want = read_ahead ? std::vector<uint64_t>{2, 4, 7} : std::vector<uint64_t>{1, 3, 6};
          const uint64_t target = want.at(std::min(pages.size(), want.size()) - 1);
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          uint64_t started = 0;
          do {
            started = storage_->calls(sql::MemoryStorage::Op::kLatestAfter) - before;
            if (started >= target) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          } while (std::chrono::steady_clock::now() < deadline);
          reads_started.push_back(started);
          EXPECT_TRUE(log_->LatestAfter("account", 0, "", 1).ok());  // the caller's session, meanwhile
          return Status::Ok();
        },
        read_ahead ? ahead.get() : nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(pages, (std::vector<std::string>{"0a", "0b", "1c"}));
    if (read_ahead) {
      EXPECT_EQ(reads_started, (std::vector<uint64_t>{2, 4, 7}));
    } else {
      EXPECT_EQ(reads_started, (std::vector<uint64_t>{1, 3, 6}));
    }
  }
}

// A failed read ahead is the walk's failure; a failing `each` ends the walk
// once the read in flight is done.
TEST_F(EventReaderFakeTest, LatestPagesReadAheadFailuresEndTheWalk) {
  auto ahead = storage_->OpenEventLog();
  int given = 0;
  storage_->FailNext(sql::MemoryStorage::Op::kLatestAfter, Status(StatusCode::kUnavailable, "gone"));
  Status st = ForEachLatestPage(*log_, "account", 2, 1, [&](uint32_t, auto&) { ++given; return Status::Ok(); },
                                ahead.get());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(given, 0);
  auto again = storage_->OpenEventLog();
  st = ForEachLatestPage(
      *log_, "account", 2, 1, [&](uint32_t, auto&) { ++given; return Status(StatusCode::kInternal, "view"); },
      again.get());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(given, 1);
}

TEST_F(EventReaderFakeTest, TruthIsTheLatestEventOfEachEntityOfEveryPartition) {
  auto truth = ReadTruth(*log_, "account", 2);
  ASSERT_TRUE(truth.ok());
  ASSERT_EQ(truth->size(), 3u);
  EXPECT_EQ(truth->at(0).entity_id, "a");
  EXPECT_EQ(truth->at(0).version, 5u);
  EXPECT_EQ(truth->at(0).state, R"({"n":9})");
  EXPECT_EQ(truth->at(1).entity_id, "b");
  EXPECT_EQ(truth->at(1).version, 4u);
  EXPECT_EQ(truth->at(2).entity_id, "c");
  EXPECT_TRUE(truth->at(2).deleted);
  EXPECT_EQ(truth->at(2).state, "");

  auto walk = ReadLatestEventsAfter(*log_, "account", 0, "a", 10);
  ASSERT_TRUE(walk.ok());
  EXPECT_EQ(Ids(*walk), (std::vector<uint64_t>{8}));
  EXPECT_EQ(walk->at(0).partition, 0u);
  auto by_id = ReadEventsById(*log_, "account", 0, {9, 6, 2});
  ASSERT_TRUE(by_id.ok());
  EXPECT_EQ(Ids(*by_id), (std::vector<uint64_t>{2, 9}));
}

}  // namespace
}  // namespace sluice::engine
