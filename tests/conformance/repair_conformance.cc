// The conformance tests of entity checks and repairs (connectors/sink.h:
// VerifyEntities, ScanViewIds, Repair), which the engine's anti-entropy,
// `sluice verify` and `sluice verify --repair` rely on. Every point-view connector runs them;
// one whose capabilities do not claim the feature must refuse it with an
// error instead (the example plugin: no entity checks; elasticsearch: no
// overwrite), and that refusal is what the test checks for it.
#include <gtest/gtest.h>

#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "tests/conformance/conformance.h"

namespace sluice::conformance {
namespace {

using connectors::ChangeEvent;
using connectors::Difference;
using connectors::EntitySnapshot;
using connectors::RepairGuard;

// What storage would say after `e`.
EntitySnapshot Snap(const ChangeEvent& e) { return EntitySnapshot{e.entity_id, e.version, e.deleted, e.state}; }

// A Repair's per-event outcomes as a string, like SinkConformance::Apply.
std::string RepairAs(connectors::Sink& sink, const std::vector<ChangeEvent>& events, RepairGuard guard) {
  const connectors::ApplyResult r = sink.Repair(events, guard);
  if (!r.status.ok()) return r.status.ToString();
  if (r.results.size() != events.size()) return "wrong number of results";
  std::string out;
  for (const auto& e : r.results) {
    out += e.outcome == connectors::Outcome::kApplied ? 'A' : e.outcome == connectors::Outcome::kStale ? 'S' : 'R';
  }
  return out;
}

// An event that removes every trace of an entity storage has no events for.
ChangeEvent Removal(const std::string& id) {
  ChangeEvent e = Del(id, 1);
  e.version = 0;
  return e;
}

TEST_P(PointViewConformance, EntityChecksCompareOnlyTheGivenEntitiesAndSayWhichVersionTheViewHolds) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  if (!sink->capabilities().entity_checks) {
    std::vector<Difference> none;
    EXPECT_FALSE(sink->VerifyEntities(std::vector<EntitySnapshot>{}, none).ok())
        << "a sink without the entity_checks capability must refuse VerifyEntities";
    return;
  }
  ASSERT_EQ(Apply(*sink, {Put("a", 2, 20), Put("b", 1, 10), Put("c", 3, 30), Put("d", 1, 1), Del("d", 2),
                          Put("e", 1, 1), Put("same", 4, 4), Put("other", 1, 1)}),
            "AAAAAAAA");
  const std::vector<EntitySnapshot> truth = {
      Snap(Put("a", 3, 30)),    // the view is older
      Snap(Put("b", 1, 11)),    // same version, other content
      Snap(Put("c", 2, 20)),    // the view is newer than storage
      Snap(Del("d", 2)),        // deleted in both: the tombstone is fine
      Snap(Del("e", 2)),        // deleted in storage, live in the view
      Snap(Put("f", 1, 1)),     // missing from the view
      Snap(Put("same", 4, 4)),  // equal
      EntitySnapshot{"never", 0, true, ""},  // no events, no row: fine
  };  // "other" is not asked about, so it is not reported
  std::vector<Difference> diffs;
  const Status st = sink->VerifyEntities(truth, diffs);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::set<std::tuple<std::string, std::string, std::optional<uint64_t>>> got;
  for (const Difference& d : diffs) {
    got.emplace(std::string(connectors::DifferenceKindName(d.kind)), d.entity_id, d.view_version);
  }
  const std::set<std::tuple<std::string, std::string, std::optional<uint64_t>>> want = {
      {"version_mismatch", "a", 2}, {"content_mismatch", "b", 1}, {"version_mismatch", "c", 3},
      {"extra", "e", 1},            {"missing", "f", std::nullopt}};
  EXPECT_EQ(got, want);
  // A row of an entity storage has no events for is extra.
  diffs.clear();
  ASSERT_TRUE(sink->VerifyEntities(std::vector<EntitySnapshot>{EntitySnapshot{"other", 0, true, ""}}, diffs).ok());
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kExtra);
  EXPECT_EQ(diffs[0].view_version, std::optional<uint64_t>(1));
}

TEST_P(PointViewConformance, ScanViewIdsListsEveryLiveEntityAndNoTombstone) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  const auto collect = [&sink](size_t page, std::set<std::string>& seen) {
    return sink->ScanViewIds(page, [&seen, page](std::span<const std::string> ids) {
      EXPECT_LE(ids.size(), page);
      seen.insert(ids.begin(), ids.end());
      return Status::Ok();
    });
  };
  std::set<std::string> seen;
  if (!sink->capabilities().entity_checks) {
    EXPECT_FALSE(collect(10, seen).ok()) << "a sink without the entity_checks capability must refuse ScanViewIds";
    return;
  }
  ASSERT_EQ(Apply(*sink, {Put("a", 1, 1), Put("b", 2, 2), Put("c", 1, 1), Del("c", 2), Put("d", 1, 1)}), "AAAAA");
  const Status st = collect(2, seen);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(seen, (std::set<std::string>{"a", "b", "d"}));
}

TEST_P(PointViewConformance, RepairNotOlderRewritesTheSameVersionButNeverAnOlderOne) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  if (!sink->capabilities().entity_checks) {
    EXPECT_FALSE(sink->Repair(std::vector<ChangeEvent>{Put("a", 1, 1)}, RepairGuard::kNotOlder).status.ok())
        << "a sink without the entity_checks capability must refuse Repair";
    return;
  }
  EXPECT_EQ(Apply(*sink, {Put("a", 2, 20), Put("b", 1, 1), Put("b", 2, 2), Del("b", 3)}), "AAAA");
  // The same version with other content: Apply keeps it, Repair rewrites it.
  EXPECT_EQ(Apply(*sink, {Put("a", 2, 99)}), "S");
  EXPECT_EQ(RepairAs(*sink, {Put("a", 2, 99)}, RepairGuard::kNotOlder), "A");
  EXPECT_LIVE("a", 2, 99);
  // An older version, and a write under a newer tombstone, are kept out.
  EXPECT_EQ(RepairAs(*sink, {Put("a", 1, 10), Put("b", 2, 2)}, RepairGuard::kNotOlder), "SS");
  EXPECT_LIVE("a", 2, 99);
  EXPECT_NOT_LIVE("b");
  // A missing entity and a delete at the view's own version are written.
  EXPECT_EQ(RepairAs(*sink, {Put("c", 4, 40), Del("a", 2)}, RepairGuard::kNotOlder), "AA");
  EXPECT_LIVE("c", 4, 40);
  EXPECT_NOT_LIVE("a");
  // The versions still guard later writes as before.
  EXPECT_EQ(Apply(*sink, {Put("a", 2, 20), Put("a", 3, 30), Put("c", 4, 1)}), "SAS");
  EXPECT_LIVE("a", 3, 30);
  EXPECT_LIVE("c", 4, 40);
}

TEST_P(PointViewConformance, RepairAnyOverwritesANewerVersionAndRemovesEntitiesWithTheirTombstones) {
  auto sink = OpenSink();
  ASSERT_TRUE(sink);
  if (!sink->capabilities().overwrite) {
    EXPECT_FALSE(sink->Repair(std::vector<ChangeEvent>{Put("a", 1, 1)}, RepairGuard::kAny).status.ok())
        << "a sink without the overwrite capability must refuse kAny";
    return;
  }
  EXPECT_EQ(Apply(*sink, {Put("a", 5, 50), Put("b", 1, 1), Del("b", 2), Put("c", 1, 1)}), "AAAA");
  // A view ahead of storage (storage lost versions 4 and 5) goes back to 3...
  EXPECT_EQ(RepairAs(*sink, {Put("a", 3, 30)}, RepairGuard::kAny), "A");
  EXPECT_LIVE("a", 3, 30);
  // ... and takes the next version storage writes, which it kept out before.
  EXPECT_EQ(Apply(*sink, {Put("a", 4, 40)}), "A");
  EXPECT_LIVE("a", 4, 40);
  // Entities storage has no events for go, tombstones included...
  EXPECT_EQ(RepairAs(*sink, {Removal("b"), Removal("c")}, RepairGuard::kAny), "AA");
  EXPECT_FALSE(Row("b").has_value()) << "b's tombstone is still there";
  EXPECT_FALSE(Row("c").has_value()) << "c is still there";
  // ... so a first version of them applies again.
  EXPECT_EQ(Apply(*sink, {Put("b", 1, 1), Put("c", 1, 1)}), "AA");
  EXPECT_LIVE("b", 1, 1);
}

}  // namespace
}  // namespace sluice::conformance
