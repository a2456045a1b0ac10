// The conformance tests every connector runs (see conformance.h for the
// list and how a connector registers).
#include <gtest/gtest.h>

#include "tests/conformance/conformance.h"

namespace sluice::conformance {
namespace {

using connectors::ChangeEvent;

TEST_P(SinkConformance, IdempotentReapply) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  const std::vector<ChangeEvent> batch = {Put("a", 1, 10), Put("a", 2, 20), Put("b", 1, 30)};
  EXPECT_EQ(Apply(*sink, batch), "AAA");
  EXPECT_EQ(Apply(*sink, batch), "SSS");
  EXPECT_LIVE("a", 2, 20);
  EXPECT_LIVE("b", 1, 30);
}

TEST_P(PointViewConformance, StaleVersionsAreSkipped) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Apply(*sink, {Put("a", 3, 30)}), "A");
  EXPECT_EQ(Apply(*sink, {Put("a", 2, 20), Put("a", 1, 10)}), "SS");
  EXPECT_LIVE("a", 3, 30);
  // Within one batch too: the older event after the newer one is stale.
  EXPECT_EQ(Apply(*sink, {Put("b", 2, 2), Put("b", 1, 1)}), "AS");
  EXPECT_LIVE("b", 2, 2);
}

TEST_P(PointViewConformance, VersionedDeletesNeverResurrect) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Apply(*sink, {Put("a", 1, 1), Put("a", 2, 2)}), "AA");
  EXPECT_EQ(Apply(*sink, {Del("a", 3)}), "A");
  EXPECT_NOT_LIVE("a");
  // Late copies of older versions stay out, and the delete itself is idempotent.
  EXPECT_EQ(Apply(*sink, {Put("a", 2, 2)}), "S");
  EXPECT_EQ(Apply(*sink, {Put("a", 1, 1), Del("a", 3)}), "SS");
  EXPECT_NOT_LIVE("a");
  // A newer version (the entity created again) comes back.
  EXPECT_EQ(Apply(*sink, {Put("a", 4, 4)}), "A");
  EXPECT_LIVE("a", 4, 4);
  // All in one batch.
  EXPECT_EQ(Apply(*sink, {Put("c", 1, 1), Del("c", 2), Put("c", 1, 1)}), "AAS");
  EXPECT_NOT_LIVE("c");
}

TEST_P(SinkConformance, OneRejectedEventDoesNotFailTheBatch) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  const ChangeEvent poison = connector_->PoisonEvent(Put("p", 1, 5));
  const connectors::ApplyResult r = sink->Apply(std::vector<ChangeEvent>{Put("a", 1, 1), poison, Put("b", 1, 2),
                                                                         Put("a", 2, 3)});
  ASSERT_TRUE(r.status.ok()) << "one bad event failed the whole batch: " << r.status.ToString();
  ASSERT_EQ(r.results.size(), 4u);
  EXPECT_EQ(r.results[0].outcome, connectors::Outcome::kApplied);
  EXPECT_EQ(r.results[1].outcome, connectors::Outcome::kRejected);
  EXPECT_FALSE(r.results[1].reason.empty()) << "a rejection needs a reason for the dead-letter table";
  EXPECT_EQ(r.results[2].outcome, connectors::Outcome::kApplied);
  EXPECT_EQ(r.results[3].outcome, connectors::Outcome::kApplied);
  ASSERT_TRUE(sink->Flush().ok());
  EXPECT_LIVE("a", 2, 3);
  EXPECT_LIVE("b", 1, 2);
  EXPECT_NOT_LIVE("p");
}

TEST_P(SinkConformance, RestartFromAnOldOffset) {
  std::vector<ChangeEvent> history;  // x, y, z at versions 1..4, interleaved
  for (uint64_t v = 1; v <= 4; ++v) {
    for (const char* id : {"x", "y", "z"}) history.push_back(Put(id, v, static_cast<int64_t>(v * 100)));
  }
  const auto range = [&](size_t begin, size_t end) {
    return std::vector<ChangeEvent>(history.begin() + static_cast<std::ptrdiff_t>(begin),
                                    history.begin() + static_cast<std::ptrdiff_t>(end));
  };
  {
    auto sink = OpenSink();
    ASSERT_TRUE(sink);
    EXPECT_EQ(Apply(*sink, range(0, 8)), "AAAAAAAA");
    EXPECT_EQ(Apply(*sink, range(8, 12)), "AAAA");
    sink->Close();
  }
  // A new process whose saved offset is older than what the view holds.
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Apply(*sink, range(3, 12)), "SSSSSSSSS");
  EXPECT_EQ(Apply(*sink, {Put("x", 5, 500), Del("y", 5)}), "AA");
  EXPECT_EQ(Apply(*sink, range(0, 12)), "SSSSSSSSSSSS");
  EXPECT_LIVE("x", 5, 500);
  EXPECT_NOT_LIVE("y");
  EXPECT_LIVE("z", 4, 400);
}

TEST_P(SinkConformance, FlushedEventsOutliveTheInstance) {
  auto first = OpenSink();
  ASSERT_TRUE(first);
  const std::vector<ChangeEvent> batch = {Put("f", 1, 1), Put("g", 1, 2), Put("f", 2, 3)};
  const connectors::ApplyResult r = first->Apply(batch);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  ASSERT_TRUE(first->Flush().ok());
  // The engine saves offsets now; a crash follows (the first is never closed)
  // and a new process applies from an older offset.
  auto second = OpenSink();
  ASSERT_TRUE(second);
  EXPECT_EQ(Apply(*second, batch), "SSS");
  EXPECT_LIVE("f", 2, 3);
  EXPECT_LIVE("g", 1, 2);
}

TEST_P(SinkConformance, AReopenedSinkAppliesWhatItsCloseDropped) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Apply(*sink, {Put("h", 1, 1)}), "A");
  // Acknowledged but not flushed: close() may drop it, and the engine then
  // applies it again after open(). A sink must not call it stale unless the
  // view really holds it.
  const std::vector<ChangeEvent> batch = {Put("h", 2, 2), Put("i", 1, 5)};
  const connectors::ApplyResult r = sink->Apply(batch);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  sink->Close();
  ASSERT_TRUE(sink->Open().ok());
  const std::string again = Apply(*sink, batch);
  ASSERT_EQ(again.size(), 2u) << again;
  for (char c : again) EXPECT_TRUE(c == 'A' || c == 'S') << again;
  EXPECT_LIVE("h", 2, 2);
  EXPECT_LIVE("i", 1, 5);
}

TEST_P(OutageConformance, ServerDownIsBatchLevelUnavailable) {
  if (!connector_->CanGoDown()) GTEST_SKIP() << GetParam().name << " cannot simulate its server going down";
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  EXPECT_EQ(Apply(*sink, {Put("a", 1, 1)}), "A");

  connector_->SetServerDown(true);
  const std::vector<ChangeEvent> batch = {Put("a", 2, 2), Put("b", 1, 1)};
  for (int attempt = 0; attempt < 2; ++attempt) {  // stays unavailable, never hangs or half-answers
    const connectors::ApplyResult r = sink->Apply(batch);
    EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  }
  EXPECT_EQ(sink->Health().code(), StatusCode::kUnavailable);

  // Back up: the engine closes, re-opens and retries the same batch; whatever
  // got through before the cut is harmless because of the version check.
  connector_->SetServerDown(false);
  sink->Close();
  ASSERT_TRUE(sink->Open().ok());
  const std::string again = Apply(*sink, batch);
  ASSERT_EQ(again.size(), 2u) << again;
  for (char c : again) EXPECT_TRUE(c == 'A' || c == 'S') << again;
  EXPECT_TRUE(sink->Health().ok());
  EXPECT_LIVE("a", 2, 2);
  EXPECT_LIVE("b", 1, 1);
}

}  // namespace
}  // namespace sluice::conformance
