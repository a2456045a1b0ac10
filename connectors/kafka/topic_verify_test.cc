// The comparison of a topic with storage, on records made by hand (the
// read from a real topic: kafka_sink_test's Verify tests).
#include "connectors/kafka/topic_verify.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace sluice::connectors::kafka {
namespace {

ChangeEvent Event(std::string id, uint64_t version, std::string state, uint64_t event_id = 0) {
  ChangeEvent e;
  e.entity_type = "account";
  e.partition = 0;
  e.event_id = event_id != 0 ? event_id : version;
  e.entity_id = std::move(id);
  e.version = version;
  e.state = std::move(state);
  e.deleted = e.state.empty();
  e.command_name = "put";
  e.command_id = "c-" + e.entity_id + "-" + std::to_string(version);
  return e;
}

// Gives `records` as the topic, at offsets 0, 1, ... of topic partition 0.
ReadRecords Topic(std::vector<ChangeEvent> records) {
  return [records = std::move(records)](const EachRecord& each) {
    int64_t offset = 0;
    for (ChangeEvent e : records) each(std::move(e), 0, offset++);
    return Status::Ok();
  };
}

// kind -> entity ids, in the order found.
std::map<Difference::Kind, std::vector<std::string>> ByKind(const std::vector<Difference>& diffs) {
  std::map<Difference::Kind, std::vector<std::string>> out;
  for (const Difference& d : diffs) out[d.kind].push_back(d.entity_id);
  return out;
}

TEST(CompareLatest, FindsEachKindOfDifference) {
  const ReadRecords topic = Topic({
      Event("same", 1, R"({"a":1})"), Event("same", 2, R"({"a": 2})"),  // the same JSON, spaced otherwise
      Event("behind", 1, R"({})"),
      Event("altered", 1, R"({"a":1})"),
      Event("repeated", 1, R"({})"), Event("repeated", 1, R"({})"),
      Event("unknown", 1, R"({})"),
      Event("gone", 1, R"({})"), Event("gone", 2, ""),
  });
  const std::vector<EntitySnapshot> truth = {
      {"same", 2, false, R"({"a":2})"},     {"behind", 2, false, R"({})"}, {"altered", 1, false, R"({"a":9})"},
      {"repeated", 1, false, R"({})"},      {"gone", 2, true, ""},         {"absent", 3, false, R"({})"},
      {"deleted_absent", 4, true, ""},
  };
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareLatest("t", topic, truth, diffs).ok());
  auto kinds = ByKind(diffs);
  EXPECT_EQ(kinds[Difference::Kind::kVersionMismatch], std::vector<std::string>{"behind"});
  EXPECT_EQ(kinds[Difference::Kind::kContentMismatch], std::vector<std::string>{"altered"});
  EXPECT_EQ(kinds[Difference::Kind::kMissing], std::vector<std::string>{"absent"});
  EXPECT_EQ(kinds[Difference::Kind::kExtra], (std::vector<std::string>{"repeated", "unknown"}));
  EXPECT_EQ(diffs.size(), 5u);
}

TEST(CompareHistory, FindsMissingAlteredDuplicateAndPhantomRecords) {
  const std::vector<ChangeEvent> history = {
      Event("a", 1, R"({"n":1})"), Event("a", 2, R"({"n":2})"), Event("b", 1, R"({})"), Event("c", 1, R"({})"),
      Event("d", 1, R"({})"), Event("d", 2, ""),  // deleted
  };
  ChangeEvent altered = Event("b", 1, R"({"x":1})");
  ChangeEvent phantom = Event("a", 3, R"({})");
  // Version 1 of "a" again, of another event id, ahead of the record of the
  // event itself: the one with the event's id is its record.
  ChangeEvent other_event = Event("a", 1, R"({"n":1})", 99);
  ChangeEvent spaced = history[1];
  spaced.state = R"({"n": 2})";  // the same JSON as storage's
  const ReadRecords topic =
      Topic({other_event, history[0], spaced, history[1], altered, phantom, history[4], history[5]});
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareHistory("t", topic, history, diffs).ok());
  auto kinds = ByKind(diffs);
  EXPECT_EQ(kinds[Difference::Kind::kMissing], std::vector<std::string>{"c"});
  EXPECT_EQ(kinds[Difference::Kind::kContentMismatch], std::vector<std::string>{"b"});
  EXPECT_EQ(kinds[Difference::Kind::kDuplicate], std::vector<std::string>{"a"});
  EXPECT_EQ(kinds[Difference::Kind::kPhantom], (std::vector<std::string>{"a", "a"}));
  EXPECT_EQ(diffs.size(), 5u);
  // Where each record is, for the operator.
  for (const Difference& d : diffs) {
    if (d.kind == Difference::Kind::kDuplicate) {
      EXPECT_NE(d.detail.find("t[0]@3"), std::string::npos) << d.detail;
    }
  }
}

TEST(CompareHistory, AFailedReadIsTheResult) {
  const ReadRecords broken = [](const EachRecord&) { return Unavailable("broker down"); };
  std::vector<Difference> diffs;
  EXPECT_EQ(CompareHistory("t", broken, {}, diffs).code(), StatusCode::kUnavailable);
  EXPECT_EQ(CompareLatest("t", broken, {}, diffs).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice::connectors::kafka
