// Comparing a view with main storage page by page (CompareByPages) over the
// in-memory tables and a point view: every kind of difference is found, no
// read holds more than a page, extras are reported once, and lag between
// the passes is not a difference. No server; tests/views_test.cc and
// tests/anti_entropy_test.cc compare real views.
#include "engine/view_compare.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/event_reader.h"
#include "engine/memory_view_test.h"
#include "sql/memory_tables.h"

namespace sluice::engine {
namespace {

using connectors::Difference;
using sql::MemoryStorage;

// Each test twice: one page at a time, and with a second session that
// reads storage ahead (CompareOptions::read_ahead).
class ViewCompareTest : public MemoryStorageViewTest, public ::testing::WithParamInterface<bool> {
 protected:
  sql::EventLog* Ahead() { return GetParam() ? ahead_.get() : nullptr; }

  // Compares with `page` entities a page; each page's differences are kept
  // in `found_` by id, and the largest page handed over in `largest_page_`.
  Result<uint64_t> Compare(uint32_t page, const std::function<void(const CompareProgress&)>& progress = {}) {
    CompareOptions options;
    options.page = page;
    options.progress = progress;
    options.read_ahead = Ahead();
    return CompareByPages(*log_, view_, "account", partitions_, options, [this](std::vector<Difference>& diffs) {
      largest_page_ = std::max(largest_page_, diffs.size());
      for (Difference& d : diffs) found_[d.entity_id].push_back(d.kind);
      tally_.Add(diffs);
      return Status::Ok();
    });
  }

  std::unique_ptr<sql::EventLog> ahead_ = storage_->OpenEventLog();
  std::map<std::string, std::vector<Difference::Kind>> found_;
  size_t largest_page_ = 0;
  DifferenceTally tally_;
};

TEST_P(ViewCompareTest, EveryKindOfDifferenceIsFoundAPageAtATime) {
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) ids.push_back("e" + std::to_string(i));
  Store(ids);
  Store({"e1"});                 // e1 at version 2
  Store({"e2", "e3"}, true);     // deleted at version 2
  for (const std::string& id : ids) view_.rows[id] = {versions_[id], false, R"({"v":)" + std::to_string(versions_[id]) + "}"};
  view_.rows.erase("e0");                               // missing
  view_.rows["e1"] = {1, false, R"({"v":1})"};          // an older version
  view_.rows["e3"] = {2, true, ""};                     // a tombstone of a deleted entity: fine
  view_.rows["e4"].state = R"({"v":"other"})";          // other content
  view_.rows["x1"] = {7, false, "{}"};                  // no events in storage
  view_.rows["x2"] = {1, true, ""};                     // a tombstone of no entity: fine

  const auto checked = Compare(7);
  ASSERT_TRUE(checked.ok()) << checked.status().message();
  EXPECT_EQ(*checked, 40u);
  const std::map<std::string, std::vector<Difference::Kind>> want = {
      {"e0", {Difference::Kind::kMissing}},
      {"e1", {Difference::Kind::kVersionMismatch}},
      {"e2", {Difference::Kind::kExtra}},  // live in the view, deleted in storage
      {"e4", {Difference::Kind::kContentMismatch}},
      {"x1", {Difference::Kind::kExtra}},
  };
  EXPECT_EQ(found_, want);
  // No read of the view was given more than a page of entities.
  EXPECT_LE(view_.largest_check, 7u);
  EXPECT_GT(view_.verify_calls, 40 / 7);
  // 40 entities over 2 partitions, 7 a statement: each partition ends with a
  // short (or empty) read.
  EXPECT_GE(storage_->calls(MemoryStorage::Op::kLatestAfter), 40u / 7);
  EXPECT_LE(storage_->calls(MemoryStorage::Op::kLatestAfter), 40u / 7 + 4);
  // 39 live view rows, 7 a page.
  EXPECT_EQ(view_.scan_pages, 6);
  EXPECT_EQ(tally_.total, 5u);
  EXPECT_EQ(tally_.by_kind.at("extra"), 2u);
}

TEST_P(ViewCompareTest, AMatchingViewHasNoDifferences) {
  Store({"a", "b", "c"});
  Store({"b"});
  for (const char* id : {"a", "b", "c"}) view_.rows[id] = {versions_[id], false, R"({"v":)" + std::to_string(versions_[id]) + "}"};
  const auto checked = Compare(2);
  ASSERT_TRUE(checked.ok());
  EXPECT_EQ(*checked, 3u);
  EXPECT_TRUE(found_.empty());
}

// A view whose scan repeats ids (as Redis SCAN may).
class RepeatingView : public MemoryView {
 public:
  connectors::Capabilities capabilities() const override {
    connectors::Capabilities c = MemoryView::capabilities();
    c.scan_repeats = true;
    return c;
  }
  // Each page twice in a row, then the whole scan again.
  Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string>)>& each) override {
    const auto twice = [&each](std::span<const std::string> ids) -> Status {
      RETURN_IF_ERROR(each(ids));
      return each(ids);
    };
    RETURN_IF_ERROR(MemoryView::ScanViewIds(page, twice));
    return MemoryView::ScanViewIds(page, each);
  }
};

TEST_P(ViewCompareTest, AnExtraRowIsReportedOnceThoughTheScanGivesItTwice) {
  Store({"a"});
  RepeatingView view;
  view.rows["a"] = {1, false, R"({"v":1})"};
  view.rows["ghost"] = {3, false, "{}"};
  std::vector<Difference> all;
  const auto checked = CompareByPages(*log_, view, "account", partitions_, CompareOptions{.page = 1, .progress = {}, .read_ahead = Ahead()},
                                      [&all](std::vector<Difference>& diffs) {
                                        all.insert(all.end(), diffs.begin(), diffs.end());
                                        return Status::Ok();
                                      });
  ASSERT_TRUE(checked.ok());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].entity_id, "ghost");
  EXPECT_EQ(all[0].kind, Difference::Kind::kExtra);
  EXPECT_EQ(all[0].view_version, 3u);
}

TEST_P(ViewCompareTest, AnEntityStoredBetweenThePassesIsNotExtra) {
  Store({"a"});
  view_.rows["a"] = {1, false, R"({"v":1})"};
  bool stored = false;
  const auto checked = Compare(100, [&](const CompareProgress& p) {
    if (!p.scanning_view || stored) return;
    // Committed and applied after pass 1 read its partition.
    stored = true;
    Store({"late"});
    view_.rows["late"] = {1, false, R"({"v":1})"};
  });
  ASSERT_TRUE(checked.ok());
  EXPECT_TRUE(stored);
  EXPECT_TRUE(found_.empty());
}

TEST_P(ViewCompareTest, ProgressCountsEntitiesThenViewIds) {
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) ids.push_back("e" + std::to_string(i));
  Store(ids);
  for (const std::string& id : ids) view_.rows[id] = {1, false, R"({"v":1})"};
  std::vector<CompareProgress> heard;
  ASSERT_TRUE(Compare(4, [&heard](const CompareProgress& p) { heard.push_back(p); }).ok());
  ASSERT_FALSE(heard.empty());
  uint64_t last = 0;
  bool scanning = false;
  for (const CompareProgress& p : heard) {
    EXPECT_GE(p.entities, last);
    last = p.entities;
    EXPECT_EQ(p.partitions, 2u);
    if (scanning) {
      EXPECT_TRUE(p.scanning_view) << "pass 2 comes after pass 1";
    }
    scanning = p.scanning_view;
  }
  EXPECT_EQ(heard.back().entities, 10u);
  EXPECT_EQ(heard.back().partitions_done, 2u);
  EXPECT_TRUE(heard.back().scanning_view);
  EXPECT_EQ(heard.back().view_ids, 10u);
}

TEST_P(ViewCompareTest, AFailingPageStopsTheComparisonWithItsError) {
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) ids.push_back("e" + std::to_string(i));
  Store(ids);
  int pages = 0;
  const auto checked = CompareByPages(*log_, view_, "account", partitions_, CompareOptions{.page = 2, .progress = {}, .read_ahead = Ahead()},
                                      [&pages](std::vector<Difference>&) {
                                        return ++pages == 2 ? Unavailable("the view went away") : Status::Ok();
                                      });
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().message(), "the view went away");
  EXPECT_EQ(pages, 2);
}

// In pass 2 too, with a lookup in flight: a failing page, or a failing
// scan, is the comparison's error.
TEST_P(ViewCompareTest, AFailureInTheViewsScanStopsTheComparisonWithItsError) {
  Store({"a"});
  view_.rows["a"] = {1, false, R"({"v":1})"};
  for (int i = 0; i < 6; ++i) view_.rows["ghost" + std::to_string(i)] = {1, false, "{}"};
  int extras = 0;
  auto checked = CompareByPages(*log_, view_, "account", partitions_,
                                CompareOptions{.page = 1, .progress = {}, .read_ahead = Ahead()},
                                [&extras](std::vector<Difference>& diffs) {
                                  extras += static_cast<int>(diffs.size());
                                  return extras >= 2 ? Unavailable("the view went away") : Status::Ok();
                                });
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().message(), "the view went away");
  EXPECT_EQ(extras, 2);

  class FailingScan : public MemoryView {
   public:
    Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string>)>& each) override {
      int pages = 0;
      return MemoryView::ScanViewIds(page, [&](std::span<const std::string> ids) -> Status {
        if (++pages == 3) return Unavailable("the scan broke");
        return each(ids);
      });
    }
  } failing;
  failing.rows = view_.rows;
  checked = CompareByPages(*log_, failing, "account", partitions_,
                           CompareOptions{.page = 1, .progress = {}, .read_ahead = Ahead()},
                           [](std::vector<Difference>&) { return Status::Ok(); });
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().message(), "the scan broke");
}

TEST_P(ViewCompareTest, ASinkWithoutEntityChecksIsRefused) {
  class Plain : public MemoryView {
   public:
    connectors::Capabilities capabilities() const override { return {}; }
  } plain;
  const auto checked = CompareByPages(*log_, plain, "account", partitions_, {}, [](std::vector<Difference>&) {
    return Status::Ok();
  });
  ASSERT_FALSE(checked.ok());
  EXPECT_EQ(checked.status().code(), StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(PagesAndReadAhead, ViewCompareTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ReadAhead" : "OnePageAtATime";
                         });

// A view that calls after_page once each page of its scan was handed over.
class PagingView : public MemoryView {
 public:
  std::function<void()> after_page;
  Status ScanViewIds(size_t page, const std::function<Status(std::span<const std::string>)>& each) override {
    return MemoryView::ScanViewIds(page, [&](std::span<const std::string> ids) -> Status {
      RETURN_IF_ERROR(each(ids));
      if (after_page) after_page();
      return Status::Ok();
    });
  }
};

// With a session to read ahead on, storage is asked about a page of the
// view's ids while the view goes on to its next page: the view's scan is
// not held by the lookup (held here until the view's page was handed over).
TEST_F(MemoryStorageViewTest, ViewIdsAreLookedUpInStorageWhileTheViewReadsOn) {
  Store({"a", "b"});
  PagingView view;
  view.rows["a"] = {1, false, R"({"v":1})"};
  view.rows["b"] = {1, false, R"({"v":1})"};
  view.rows["ghost"] = {2, false, "{}"};
  const auto ahead = storage_->OpenEventLog();
  storage_->Hold(MemoryStorage::Op::kLatestVersions);
  std::atomic<bool> released{false};
  bool handed_over_while_held = false;
  view.after_page = [&] {
    if (!released.exchange(true)) {
      handed_over_while_held = true;
      storage_->Release(MemoryStorage::Op::kLatestVersions);
    }
  };
  // Without a read ahead the lookup would hold the scan: released anyway
  // after 10 s, so that the test fails instead of hanging.
  std::thread watchdog([&] {
    for (int i = 0; i < 1000 && !released; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!released.exchange(true)) storage_->Release(MemoryStorage::Op::kLatestVersions);
  });
  std::vector<Difference> all;
  const auto checked = CompareByPages(*log_, view, "account", partitions_,
                                      CompareOptions{.page = 1, .progress = {}, .read_ahead = ahead.get()},
                                      [&all](std::vector<Difference>& diffs) {
                                        all.insert(all.end(), diffs.begin(), diffs.end());
                                        return Status::Ok();
                                      });
  watchdog.join();
  ASSERT_TRUE(checked.ok()) << checked.status().message();
  EXPECT_TRUE(handed_over_while_held);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].entity_id, "ghost");
  EXPECT_EQ(all[0].kind, Difference::Kind::kExtra);
}

TEST(DifferenceTallyTest, CountsEveryDifferenceAndListsTheFirstOnes) {
  DifferenceTally tally;
  for (int round = 0; round < 3; ++round) {
    std::vector<Difference> page;
    for (int i = 0; i < 30; ++i) page.emplace_back(Difference::Kind::kMissing, "m" + std::to_string(round * 30 + i), "");
    page.emplace_back(Difference::Kind::kExtra, "x" + std::to_string(round), "");
    tally.Add(page);
  }
  EXPECT_EQ(tally.total, 93u);
  EXPECT_EQ(tally.by_kind.at("missing"), 90u);
  EXPECT_EQ(tally.by_kind.at("extra"), 3u);
  ASSERT_EQ(tally.listed.size(), DifferenceTally::kListed);
  EXPECT_EQ(tally.listed.front().entity_id, "m0");
}

TEST_P(ViewCompareTest, ReadTruthReadsInBoundedStatements) {
  std::vector<std::string> ids;
  for (int i = 0; i < 25; ++i) ids.push_back("e" + std::to_string(i));
  Store(ids);
  Store({"e5"});
  const auto truth = ReadTruth(*log_, "account", partitions_, 4);
  ASSERT_TRUE(truth.ok());
  ASSERT_EQ(truth->size(), 25u);
  std::set<std::string> seen;
  for (const auto& s : *truth) {
    seen.insert(s.entity_id);
    EXPECT_EQ(s.version, s.entity_id == "e5" ? 2u : 1u) << s.entity_id;
  }
  EXPECT_EQ(seen.size(), 25u);
  EXPECT_GE(storage_->calls(MemoryStorage::Op::kLatestAfter), 25u / 4);
}

}  // namespace
}  // namespace sluice::engine
