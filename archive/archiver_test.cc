// The archiver and the archive's reads on the in-memory access layer and a
// file store: what leaves the hot table, what stays, and that every read of
// history gives the same events before and after.
#include "archive/archiver.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "archive/archive_reader.h"
#include "archive/segment.h"
#include "core/json.h"
#include "core/json_delta.h"
#include "sql/memory_tables.h"

namespace sluice::archive {
namespace {

using sql::EventRow;
constexpr const char* kType = "doc";

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ArchiverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice_archiver_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    objectstore::ObjectStoreOptions o;
    o.url = "file://" + dir_.string();
    auto store = objectstore::OpenObjectStore(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    hot_ = sql::MemoryStorage::Create();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `entities` entities, `versions` versions each, interleaved; a whole
  // state every 4th version, deltas between; entity 0 is deleted at version
  // 6 and made again at 7. Rows older than `old` are committed two days ago.
  void Write(int entities, int versions, uint64_t old = 0) {
    std::vector<Json> state(entities, Json::object());
    uint64_t id = 0;
    for (int v = 1; v <= versions; ++v) {
      for (int e = 0; e < entities; ++e) {
        EventRow r;
        r.event_id = ++id;
        r.entity_id = "e" + std::to_string(e) + (e == 2 ? std::string("\0\xff", 2) : "");
        r.version = v;
        r.command_id = "c" + std::to_string(id);
        r.command_name = "patch";
        r.request = R"({"n":)" + std::to_string(id) + "}";
        r.response = R"({"ok":)" + std::to_string(id) + "}";
        if (v % 3 == 0) r.expected_version = v - 1;
        r.committed_at_us = id <= old ? NowUs() - 2LL * 86400 * 1000000 : NowUs();
        if (e == 0 && v == 6) {
          r.deleted = true;
          state[e] = Json::object();
        } else {
          Json next = state[e];
          next["n"] = id;
          next["text"] = std::string(50 + v, 'x');
          const bool whole = v == 1 || v % 4 == 0 || (e == 0 && v == 7);
          if (whole) {
            r.state = CanonicalJson(next);
          } else {
            r.delta = CanonicalJson(*JsonDelta(state[e], next));
          }
          state[e] = next;
        }
        ASSERT_TRUE(hot_->Insert(kType, 0, r).ok());
      }
    }
    head_ = id;
  }

  std::shared_ptr<ArchivedStorage> Reader() {
    return std::make_shared<ArchivedStorage>(hot_, std::make_shared<SegmentSource>(store_, 64 << 20),
                                             std::set<std::string>{kType});
  }

  // Every event, read in pages of `page` through `storage`.
  std::vector<EventRow> All(sql::Storage& storage, uint32_t page) {
    auto log = storage.OpenEventLog();
    std::vector<EventRow> out;
    uint64_t after = 0;
    while (true) {
      auto got = log->ReadAfter(kType, {{0, after}}, page, sql::EventLog::Columns::kFull);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
      if (!got.ok() || (*got)[0].empty()) break;
      for (auto& r : (*got)[0]) out.push_back(std::move(r));
      after = out.back().event_id;
    }
    return out;
  }

  void SaveOffset(const std::string& sink, uint64_t event_id) {
    sql::OffsetRow row;
    row.event_id = event_id;
    ASSERT_TRUE(hot_->OpenOffsets()->Save(sink, kType, {{0, row}}).ok());
  }

  Result<std::vector<StepReport>> Archive(const ArchivePolicy& policy, std::chrono::seconds window = {},
                                          uint64_t segment_events = 16) {
    ArchiverOptions options;
    options.idempotency_window = window;
    options.segment_events = segment_events;
    Archiver archiver(hot_, store_, options);
    return archiver.Run(kType, 1, policy, {"s"}, 1000, nullptr);
  }

  static void ExpectSame(const std::vector<EventRow>& a, const std::vector<EventRow>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE("event " + std::to_string(a[i].event_id));
      EXPECT_EQ(a[i].event_id, b[i].event_id);
      EXPECT_EQ(a[i].entity_id, b[i].entity_id);
      EXPECT_EQ(a[i].version, b[i].version);
      EXPECT_EQ(a[i].deleted, b[i].deleted);
      EXPECT_EQ(a[i].state, b[i].state);
      EXPECT_EQ(a[i].command_id, b[i].command_id);
      EXPECT_EQ(a[i].command_name, b[i].command_name);
      EXPECT_EQ(a[i].request, b[i].request);
      EXPECT_EQ(a[i].response, b[i].response);
      EXPECT_EQ(a[i].committed_at_us, b[i].committed_at_us);
      EXPECT_FALSE(b[i].archived);
    }
  }

  std::filesystem::path dir_;
  std::shared_ptr<objectstore::ObjectStore> store_;
  std::shared_ptr<sql::MemoryStorage> hot_;
  uint64_t head_ = 0;
};

TEST_F(ArchiverTest, EveryReadOfHistoryIsTheSameAfterArchiving) {
  Write(5, 12);
  const auto before = All(*hot_, 1000);
  ASSERT_EQ(before.size(), head_);
  std::map<std::string, std::vector<EventRow>> histories;
  auto plain = hot_->OpenEventLog();
  for (int e = 0; e < 5; ++e) {
    const std::string id = before[e].entity_id;
    auto h = plain->History(kType, 0, id, 0, 1000);
    ASSERT_TRUE(h.ok());
    histories[id] = *h;
  }
  SaveOffset("s", head_);
  auto reports = Archive(ArchivePolicy{});
  ASSERT_TRUE(reports.ok()) << reports.status().ToString();

  // Segments cover every event; most rows are stubs; each entity's latest
  // state is read from hot rows alone.
  auto table = hot_->OpenArchive();
  auto segments = table->Segments(kType, 0);
  ASSERT_TRUE(segments.ok());
  ASSERT_FALSE(segments->empty());
  EXPECT_EQ(segments->back().last_event_id, head_);
  for (size_t i = 1; i < segments->size(); ++i) {
    EXPECT_EQ((*segments)[i].first_event_id, (*segments)[i - 1].last_event_id + 1);
  }
  auto size = table->Size(kType, 0);
  ASSERT_TRUE(size.ok());
  EXPECT_GT(size->stubs, head_ / 2);
  for (const auto& row : hot_->Events(kType, 0)) {
    if (row.version == 12) {
      EXPECT_FALSE(row.archived) << row.entity_id;
    }
    if (row.archived) {
      EXPECT_TRUE(row.state.empty() && row.request.empty() && row.delta.empty());
    }
  }
  auto latest = plain->LatestAfter(kType, 0, "", 0);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_EQ(latest->size(), 5u);
  for (const auto& l : *latest) EXPECT_EQ(l.state, histories[l.entity_id].back().state);

  // Through the archive, in pages of any size, and as several readers at once.
  auto reader = Reader();
  for (uint32_t page : {1u, 7u, 16u, 1000u}) {
    SCOPED_TRACE("page " + std::to_string(page));
    ExpectSame(before, All(*reader, page));
  }
  auto log = reader->OpenEventLog();
  for (const auto& [id, history] : histories) {
    auto h = log->History(kType, 0, id, 0, 1000);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ExpectSame(history, *h);
    auto tail = log->History(kType, 0, id, 5, 3);
    ASSERT_TRUE(tail.ok());
    ExpectSame({history.begin() + 5, history.begin() + 8}, *tail);
  }
  auto by_ids = log->ByIds(kType, 0, {1, 2, head_ - 1, head_});
  ASSERT_TRUE(by_ids.ok());
  ExpectSame({before[0], before[1], before[head_ - 2], before[head_ - 1]}, *by_ids);
  std::vector<std::pair<std::string, uint64_t>> keys;
  for (const auto& r : before) keys.emplace_back(r.entity_id, r.version);
  auto at = log->AtVersions(kType, 0, keys);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  ASSERT_EQ(at->size(), before.size());
  std::map<std::pair<std::string, uint64_t>, std::string> states;
  for (const auto& r : *at) states[{r.entity_id, r.version}] = r.state;
  for (const auto& r : before) EXPECT_EQ(states[std::make_pair(r.entity_id, r.version)], r.state);
  // A retried command is answered from its archived event.
  auto found = log->FindCommands(kType, 0, {{before[0].entity_id, before[0].command_id}});
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].request, before[0].request);
  EXPECT_EQ((*found)[0].response, before[0].response);
}

TEST_F(ArchiverTest, AStaleWriterCannotReuseWhatWasArchived) {
  Write(3, 8);
  SaveOffset("s", head_);
  ASSERT_TRUE(Archive(ArchivePolicy{}).ok());
  const auto first = hot_->Events(kType, 0).front();
  ASSERT_TRUE(first.archived);
  auto log = hot_->OpenEventLog();
  // Its event_id, its (entity, version) and its command id are all still taken.
  for (int k = 0; k < 3; ++k) {
    auto append = log->NewAppend(kType, 0);
    // k 0: its event_id; 1: its (entity, version); 2: its command id.
    const std::string entity = k == 0 ? std::string("fresh") : first.entity_id;
    const std::string command = k == 2 ? first.command_id : std::string("new");
    sql::NewEvent e;
    e.event_id = k == 0 ? first.event_id : head_ + 1;
    e.entity_id = entity;
    e.version = k == 1 ? first.version : k == 2 ? 100 : 1;
    e.command_id = command;
    e.command_name = "patch";
    e.request = "{}";
    e.response = "{}";
    e.state = "{}";
    ASSERT_TRUE(append->TryAdd(e, 1 << 20));
    const Status st = log->Append(*append);
    EXPECT_EQ(st.code(), StatusCode::kAborted) << k << ": " << st.ToString();
  }
}

TEST_F(ArchiverTest, NothingPastTheSlowestSinkAndNothingYoungerThanThePolicy) {
  Write(4, 10, /*old=*/20);
  SaveOffset("s", head_);
  sql::OffsetRow slow;
  slow.event_id = 12;
  ASSERT_TRUE(hot_->OpenOffsets()->Save("t", kType, {{0, slow}}).ok());
  ArchiverOptions options;
  options.idempotency_window = std::chrono::seconds(0);
  Archiver archiver(hot_, store_, options);
  auto reports = archiver.Run(kType, 1, ArchivePolicy{}, {"s", "t"}, 100, nullptr);
  ASSERT_TRUE(reports.ok());
  auto marks = hot_->OpenArchive()->Watermarks(kType, {0});
  EXPECT_EQ(marks->at(0), 12u);
  EXPECT_NE(reports->back().held_back.find("sink t has applied events up to 12"), std::string::npos)
      << reports->back().held_back;
  // With every sink past, `after: 1d` archives the events committed two days ago only.
  slow.event_id = head_;
  ASSERT_TRUE(hot_->OpenOffsets()->Save("t", kType, {{0, slow}}).ok());
  ArchivePolicy day;
  day.after = std::chrono::hours(24);
  reports = archiver.Run(kType, 1, day, {"s", "t"}, 100, nullptr);
  ASSERT_TRUE(reports.ok());
  marks = hot_->OpenArchive()->Watermarks(kType, {0});
  EXPECT_EQ(marks->at(0), 20u);
}

TEST_F(ArchiverTest, KeepsTheLastVersionsTheWindowAndEveryChainTheyNeed) {
  Write(4, 12);
  SaveOffset("s", head_);
  ArchivePolicy keep3;
  keep3.keep_versions = 3;
  ASSERT_TRUE(Archive(keep3).ok());
  for (const auto& row : hot_->Events(kType, 0)) {
    if (row.version >= 10) {
      EXPECT_FALSE(row.archived) << row.entity_id << " v" << row.version;
    }
  }
  // Every hot row that is not a stub still reads whole from the hot table alone.
  auto plain = hot_->OpenEventLog();
  for (const auto& row : hot_->Events(kType, 0)) {
    if (row.archived) continue;
    auto at = plain->AtVersions(kType, 0, {{row.entity_id, row.version}});
    ASSERT_TRUE(at.ok()) << row.entity_id << " v" << row.version << ": " << at.status().ToString();
  }
  // Events younger than the idempotency window are not archived yet.
  hot_ = sql::MemoryStorage::Create();
  Write(2, 6);
  SaveOffset("s", head_);
  auto young = Archive(ArchivePolicy{}, std::chrono::hours(1));
  ASSERT_TRUE(young.ok());
  for (const auto& row : hot_->Events(kType, 0)) EXPECT_FALSE(row.archived);
  EXPECT_EQ(hot_->OpenArchive()->Watermarks(kType, {0})->at(0), 0u);
  EXPECT_NE(young->back().held_back.find("idempotency window"), std::string::npos) << young->back().held_back;
}

TEST_F(ArchiverTest, AnOrphanOfAKilledStepGoesAndASecondArchiverWaits) {
  Write(2, 4);
  SaveOffset("s", head_);
  // What a step killed after its upload left: an object beyond the watermark.
  ASSERT_TRUE(store_->Put(SegmentKey(kType, 0, 1, 3), "junk").ok());
  auto holder = hot_->OpenArchive();
  ASSERT_TRUE(*holder->Lock(kType, 0));
  Archiver archiver(hot_, store_, ArchiverOptions{std::chrono::seconds(0)});
  auto busy = archiver.Step(kType, 0, ArchivePolicy{}, head_, "s");
  ASSERT_TRUE(busy.ok());
  EXPECT_TRUE(busy->busy);
  EXPECT_EQ(hot_->OpenArchive()->Watermarks(kType, {0})->at(0), 0u);
  holder.reset();  // its session ends
  auto step = archiver.Step(kType, 0, ArchivePolicy{}, head_, "s");
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(step->orphans_deleted, 1u);
  EXPECT_EQ(step->last_event_id, head_);
  auto objects = store_->List("segments/");
  ASSERT_EQ(objects->size(), 1u);
  EXPECT_EQ((*objects)[0].key, SegmentKey(kType, 0, 1, head_));
  EXPECT_TRUE(store_->Get(ManifestKey(kType, 0)).ok());
}

TEST_F(ArchiverTest, ADamagedSegmentIsAnErrorNeverAMadeUpEvent) {
  Write(2, 6);
  SaveOffset("s", head_);
  ASSERT_TRUE(Archive(ArchivePolicy{}).ok());
  const std::string key = SegmentKey(kType, 0, 1, 12);
  auto bytes = store_->Get(key);
  ASSERT_TRUE(bytes.ok());
  std::string damaged = *bytes;
  damaged[damaged.size() / 2] ^= 0x20;
  ASSERT_TRUE(store_->Put(key, damaged).ok());
  auto got = Reader()->OpenEventLog()->ReadAfter(kType, {{0, 0}}, 100, sql::EventLog::Columns::kFull);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInternal);
  EXPECT_NE(got.status().message().find(key), std::string::npos) << got.status().ToString();
  ASSERT_TRUE(store_->Delete(key).ok());
  got = Reader()->OpenEventLog()->ReadAfter(kType, {{0, 0}}, 100, sql::EventLog::Columns::kFull);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("missing"), std::string::npos) << got.status().ToString();
}

// The cache counts what decoded events take in memory (each row and its
// strings' heap blocks, not only the bodies' bytes), and keeps to its size.
TEST_F(ArchiverTest, TheSegmentCacheCountsDecodedEventsAsTheyLieInMemoryAndKeepsToItsSize) {
  Write(8, 40);
  SaveOffset("s", head_);
  ASSERT_TRUE(Archive(ArchivePolicy{}).ok());
  auto segments = hot_->OpenArchive()->Segments(kType, 0);
  ASSERT_TRUE(segments.ok()) << segments.status().ToString();
  ASSERT_GE(segments->size(), 10u);

  SegmentSource one(store_, 64 << 20);
  auto first = one.Get(segments->front());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  uint64_t floor = 0;
  for (const auto& r : (*first)->rows) floor += sizeof(EventRow) + r.state.size() + r.delta.size() + r.request.size();
  EXPECT_GE(one.cached_bytes(), floor);
  const uint64_t cost = one.cached_bytes();

  SegmentSource three(store_, 3 * cost + cost / 2);
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& record : *segments) {
      ASSERT_TRUE(three.Get(record).ok());
      EXPECT_LE(three.cached_bytes(), 3 * cost + cost / 2);
    }
  }
  EXPECT_EQ(three.fetches(), 2 * segments->size());  // LRU over more segments than fit: every read fetches
  ASSERT_TRUE(three.Get(segments->back()).ok());
  EXPECT_EQ(three.fetches(), 2 * segments->size());  // the last one read is kept
}

}  // namespace
}  // namespace sluice::archive
