// `sluice verify --repair` (RepairView) over the in-memory tables and a
// point view: what it rewrites, in bounded reads, and what it leaves with
// advice. No server; tests/anti_entropy_test.cc repairs real views.
#include "engine/view_repair.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/memory_view_test.h"
#include "sql/memory_tables.h"

namespace sluice::engine {
namespace {

using sql::MemoryStorage;

class ViewRepairTest : public MemoryStorageViewTest {
 protected:
  Status Repair(RepairReport& report, const CompareOptions& options = {}) {
    return RepairView(*log_, view_, sink_, partitions_, [this] { ++barriers_; return Status::Ok(); }, report, options);
  }

  int barriers_ = 0;
};

TEST_F(ViewRepairTest, AnEmptiedViewIsRewrittenWithBoundedReadsOfTheLatestEvents) {
  partitions_ = 1;
  std::vector<std::string> ids;
  for (int i = 0; i < 2500; ++i) ids.push_back("e" + std::to_string(i));
  Store(ids);
  Store({"e7"});  // a second version
  view_.rows["e1"] = {1, false, R"({"v":1})"};  // the one row that survived
  RepairReport report;
  ASSERT_TRUE(Repair(report).ok());
  EXPECT_EQ(report.checked, 2500u);
  EXPECT_EQ(report.found, 2499u);
  EXPECT_EQ(report.rewritten, 2499u);
  EXPECT_EQ(report.remaining, 0u);
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(view_.rows.size(), 2500u);
  EXPECT_EQ(view_.rows["e7"].version, 2u);
  // The differing ids are read again in IN lists of at most 1000, twice
  // (before the repair and to check it): 3 + 3 reads; the truth is one
  // LatestAfter per partition.
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kLatestOf), 6u);
  EXPECT_EQ(storage_->calls(MemoryStorage::Op::kLatestAfter), 1u);
  EXPECT_EQ(barriers_, 1);
  for (const auto guard : view_.repair_guards) EXPECT_EQ(guard, connectors::RepairGuard::kNotOlder);
}

// The same with a second session reading ahead (as `sluice verify
// --repair` runs): the repairs, on the first session, meet the reads ahead.
TEST_F(ViewRepairTest, AnEmptiedViewIsRewrittenWhileStorageIsReadAhead) {
  std::vector<std::string> ids;
  for (int i = 0; i < 300; ++i) ids.push_back("e" + std::to_string(i));
  Store(ids);
  Store({"e7"});
  for (int i = 0; i < 5; ++i) view_.rows["ghost" + std::to_string(i)] = {1, false, "{}"};
  view_.overwrite = true;  // the extras are deleted
  view_.apply_allowed = true;
  const auto ahead = storage_->OpenEventLog();
  RepairReport report;
  ASSERT_TRUE(Repair(report, CompareOptions{.page = 7, .progress = {}, .read_ahead = ahead.get()}).ok());
  EXPECT_EQ(report.checked, 300u);
  EXPECT_EQ(report.found, 305u);
  EXPECT_EQ(report.remaining, 0u);
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(view_.rows.size(), 300u);
  EXPECT_EQ(view_.rows["e7"].version, 2u);
}

TEST_F(ViewRepairTest, AViewAheadOfStorageIsOverwrittenOnlyWhenTheSinkCan) {
  Store({"a", "b"});
  Store({"a"});
  const auto damage = [this] {
    view_.rows["a"] = {5, false, R"({"v":5})"};     // newer than storage's 2
    view_.rows["b"] = {1, false, R"({"v":1})"};     // equal
    view_.rows["x"] = {3, false, R"({"v":3})"};     // storage has no events for x
  };
  damage();
  RepairReport refused;
  ASSERT_TRUE(Repair(refused).ok());
  EXPECT_EQ(refused.found, 2u);
  EXPECT_EQ(refused.rewritten, 0u);
  ASSERT_EQ(refused.remaining, 2u);
  for (const auto& left : refused.left) EXPECT_NE(left.why.find("sluice rebuild --sink cache"), std::string::npos);

  view_.overwrite = true;
  view_.apply_allowed = true;
  RepairReport report;
  ASSERT_TRUE(Repair(report).ok());
  EXPECT_EQ(report.rewritten, 2u);
  EXPECT_EQ(report.remaining, 0u) << (report.left.empty() ? "" : report.left[0].why);
  EXPECT_EQ(view_.rows.count("x"), 0u);
  EXPECT_EQ(view_.rows["a"].version, 2u);
  EXPECT_EQ(view_.rows["b"].version, 1u);
}

TEST_F(ViewRepairTest, ARepairRewritesEachPageBeforeReadingTheNext) {
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) ids.push_back("e" + std::to_string(i));
  Store(ids);
  view_.rows["ghost"] = {2, false, "{}"};  // storage has no events for it
  view_.overwrite = true;
  view_.apply_allowed = true;
  RepairReport report;
  CompareOptions options;
  options.page = 4;
  ASSERT_TRUE(Repair(report, options).ok());
  EXPECT_EQ(report.checked, 30u);
  EXPECT_EQ(report.found, 31u);
  EXPECT_EQ(report.differing, 31u);
  EXPECT_EQ(report.rewritten, 31u);
  EXPECT_EQ(report.remaining, 0u);
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(view_.rows.size(), 30u);
  EXPECT_EQ(view_.rows.count("ghost"), 0u);
  // Repaired a page at a time: never more than a page in one write, and a
  // barrier per page that differed.
  for (const auto& call : view_.repair_calls) EXPECT_LE(call.size(), 4u);
  EXPECT_GE(barriers_, 30 / 4);
  EXPECT_LE(view_.largest_check, 4u);
  // Interleaved: the first page's differences are repaired right after its
  // comparison and their second look, before the next page is read.
  const std::string order(view_.calls.begin(), view_.calls.end());
  EXPECT_EQ(order.substr(0, 5), "vvrvv") << order;
}

}  // namespace
}  // namespace sluice::engine
