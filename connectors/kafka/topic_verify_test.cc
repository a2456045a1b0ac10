// The comparison of a topic with storage, on records made by hand (the
// read from a real topic: kafka_sink_test's Verify tests).
#include "connectors/kafka/topic_verify.h"

#include "connectors/events_history.h"

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

// `records` per topic partition, at offsets 0, 1, ... of each.
ReadTopicPartition Partitions(std::map<int32_t, std::vector<ChangeEvent>> records) {
  return [records = std::move(records)](int32_t t, const EachRecord& each) {
    const auto it = records.find(t);
    if (it == records.end()) return Status::Ok();
    int64_t offset = 0;
    for (ChangeEvent e : it->second) each(std::move(e), t, offset++);
    return Status::Ok();
  };
}

// Source partition p's records are in topic partition p % n.
std::function<int32_t(uint32_t)> Modulo(int32_t n) {
  return [n](uint32_t p) { return static_cast<int32_t>(p % static_cast<uint32_t>(n)); };
}

ChangeEvent In(uint32_t partition, ChangeEvent e) {
  e.partition = partition;
  return e;
}

TEST(CompareHistory, FindsMissingAlteredDuplicateAndPhantomRecords) {
  const std::vector<ChangeEvent> history = {
      Event("a", 1, R"({"n":1})", 1), Event("a", 2, R"({"n":2})", 2), Event("b", 1, R"({})", 3),
      Event("c", 1, R"({})", 4),      Event("d", 1, R"({})", 5),      Event("d", 2, "", 6),  // deleted
  };
  ChangeEvent altered = history[2];
  altered.state = R"({"x":1})";
  // Version 1 of "a" again under an event id storage does not have, ahead of
  // the record of the event itself: the one with the event's id is its record.
  ChangeEvent other_event = Event("a", 1, R"({"n":1})", 99);
  ChangeEvent spaced = history[1];
  spaced.state = R"({"n": 2})";  // the same JSON as storage's
  ChangeEvent past_the_end = Event("a", 3, R"({})", 7);
  EventsHistory pages(history, 1);
  std::vector<Difference> diffs;
  // c's record is not there; a's second comes twice.
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1),
                             Partitions({{0, {other_event, history[0], spaced, history[1], altered, history[4],
                                              history[5], past_the_end}}}),
                             pages, diffs)
                  .ok());
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
  // Looked up: event 99 (the first record, ahead), event 5 (ahead of c, which
  // has none), and at the end the repeat of event 2.
  EXPECT_EQ(pages.lookups(), 3);
}

// A record's state is its text as read (not checked to be JSON when
// decoded): text that is not JSON differs from storage's state, as does
// other JSON; the same bytes, or the same JSON spaced otherwise, do not.
TEST(CompareHistory, AStateThatIsNotJsonDiffers) {
  const std::vector<ChangeEvent> history = {Event("a", 1, R"({"n":1})", 1), Event("b", 1, R"({"n":1})", 2),
                                            Event("c", 1, R"({"n":1})", 3)};
  ChangeEvent broken = history[0];
  broken.state = R"({"n":1,,})";
  ChangeEvent cut = history[1];
  cut.state = R"({"n":1)";
  ChangeEvent spaced = history[2];
  spaced.state = R"( { "n" : 1 } )";
  EventsHistory pages(history, 1);
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1), Partitions({{0, {broken, cut, spaced}}}), pages, diffs).ok());
  auto kinds = ByKind(diffs);
  EXPECT_EQ(kinds[Difference::Kind::kContentMismatch], (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(diffs.size(), 2u);
  diffs.clear();
  ASSERT_TRUE(CompareLatest("t", Topic({broken, cut, spaced}),
                            {{"a", 1, false, R"({"n":1})"}, {"b", 1, false, R"({"n":1})"},
                             {"c", 1, false, R"({"n":1})"}},
                            diffs)
                  .ok());
  kinds = ByKind(diffs);
  EXPECT_EQ(kinds[Difference::Kind::kContentMismatch], (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(diffs.size(), 2u);
}

// Two records of a partition in the wrong order: consumers of the topic see
// the later version first. The record that comes late is out of order, and
// its event is not missing.
TEST(CompareHistory, ARecordAfterALaterEventsIsOutOfOrder) {
  const std::vector<ChangeEvent> history = {Event("a", 1, "{}", 1), Event("a", 2, "{}", 2), Event("a", 3, "{}", 3),
                                            Event("a", 4, "{}", 4)};
  EventsHistory pages(history, 1);
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1), Partitions({{0, {history[0], history[2], history[1], history[3]}}}),
                             pages, diffs)
                  .ok());
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kOutOfOrder);
  EXPECT_NE(diffs[0].detail.find("t[0]@2"), std::string::npos) << diffs[0].detail;
  // The same record once more is a duplicate; its first coming stays out of order.
  diffs.clear();
  pages.Rewind();
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1),
                             Partitions({{0, {history[0], history[2], history[1], history[1], history[3]}}}), pages,
                             diffs)
                  .ok());
  auto kinds = ByKind(diffs);
  EXPECT_EQ(kinds[Difference::Kind::kOutOfOrder], std::vector<std::string>{"a"});
  EXPECT_EQ(kinds[Difference::Kind::kDuplicate], std::vector<std::string>{"a"});
  EXPECT_EQ(diffs.size(), 2u);
  // A late record whose state also differs is one difference, which says both.
  ChangeEvent altered = history[1];
  altered.state = R"({"x":1})";
  diffs.clear();
  pages.Rewind();
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1), Partitions({{0, {history[0], history[2], altered, history[3]}}}),
                             pages, diffs)
                  .ok());
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kOutOfOrder);
  EXPECT_NE(diffs[0].detail.find("with another state"), std::string::npos) << diffs[0].detail;
}

// A record ahead that holds another entity at an event id storage has is a
// phantom, and the events before that id keep their chance: their records
// after it are in place, not out of order.
TEST(CompareHistory, APhantomAheadAtAnEventIdPassesNoEvent) {
  const std::vector<ChangeEvent> history = {Event("a", 1, "{}", 1), Event("a", 2, "{}", 2), Event("a", 3, "{}", 3)};
  EventsHistory pages(history, 1);
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1),
                             Partitions({{0, {history[0], Event("z", 1, "{}", 3), history[1], history[2]}}}), pages,
                             diffs)
                  .ok());
  ASSERT_EQ(diffs.size(), 1u) << diffs.back().detail;
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kPhantom);
  EXPECT_EQ(diffs[0].entity_id, "z");
}

// A record that holds another event at the next event's id is a phantom;
// the event's own record right after it is its record.
TEST(CompareHistory, AWrongRecordAtAnEventIdLeavesTheEventToItsOwnRecord) {
  const std::vector<ChangeEvent> history = {Event("a", 1, "{}", 1), Event("b", 1, "{}", 2)};
  EventsHistory pages(history, 1);
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1),
                             Partitions({{0, {history[0], Event("z", 9, "{}", 2), history[1]}}}), pages, diffs)
                  .ok());
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kPhantom);
  EXPECT_EQ(diffs[0].entity_id, "z");
}

// Records behind their place are looked up 1,000 at a time, as they come
// (a duplicated topic partition is not held): 2,500 repeats take three
// lookups, and each is a duplicate.
TEST(CompareHistory, RecordsBehindTheirPlaceAreLookedUpInBatches) {
  std::vector<ChangeEvent> history;
  for (uint64_t id = 1; id <= 2500; ++id) history.push_back(Event("e" + std::to_string(id), 1, "{}", id));
  std::vector<ChangeEvent> records = history;
  records.insert(records.end(), history.begin(), history.end());
  EventsHistory pages(history, 1);
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1), Partitions({{0, records}}), pages, diffs).ok());
  EXPECT_EQ(ByKind(diffs)[Difference::Kind::kDuplicate].size(), 2500u);
  EXPECT_EQ(diffs.size(), 2500u);
  EXPECT_EQ(pages.lookups(), 3);
}

// Storage lost an event in a crash and gave its event_id to another
// command: the record of the lost one is a phantom, the new event missing.
TEST(CompareHistory, ARecordOfAnotherEntityAtAnEventIdIsAPhantom) {
  const std::vector<ChangeEvent> history = {Event("p", 1, "{}", 1), Event("q", 1, "{}", 2)};
  EventsHistory pages(history, 1);
  std::vector<Difference> diffs;
  ASSERT_TRUE(
      CompareHistory("t", 1, Modulo(1), Partitions({{0, {history[0], Event("p", 2, "{}", 2)}}}), pages, diffs).ok());
  auto kinds = ByKind(diffs);
  EXPECT_EQ(kinds[Difference::Kind::kPhantom], std::vector<std::string>{"p"});
  EXPECT_EQ(kinds[Difference::Kind::kMissing], std::vector<std::string>{"q"});
  EXPECT_EQ(diffs.size(), 2u);
}

// A source partition's records belong in the topic partition it maps to: a
// record elsewhere is a phantom (consumers of a key would see it out of
// order), and its event is missing from where it belongs.
TEST(CompareHistory, ARecordInAnotherTopicPartitionIsAPhantom) {
  const std::vector<ChangeEvent> history = {In(0, Event("a", 1, "{}", 1)), In(1, Event("b", 1, "{}", 1)),
                                            In(2, Event("c", 1, "{}", 1)), In(3, Event("d", 1, "{}", 1))};
  EventsHistory pages(history, 4);
  std::vector<Difference> diffs;
  // 4 source partitions over 2 topic partitions: 0 and 2 in 0, 1 and 3 in 1.
  ASSERT_TRUE(CompareHistory("t", 2, Modulo(2),
                             Partitions({{0, {history[0], history[2], history[3]}}, {1, {history[1]}}}), pages,
                             diffs)
                  .ok());
  auto kinds = ByKind(diffs);
  EXPECT_EQ(kinds[Difference::Kind::kPhantom], std::vector<std::string>{"d"});
  EXPECT_EQ(kinds[Difference::Kind::kMissing], std::vector<std::string>{"d"});
  ASSERT_EQ(diffs.size(), 2u);
  EXPECT_NE(diffs[0].detail.find("in topic partition 1"), std::string::npos) << diffs[0].detail;
}

// The comparison holds a page of each source partition of the topic
// partition it reads, not the history: 3 source partitions in one topic
// partition share the 10,000 events of a page.
TEST(CompareHistory, HoldsAPageNotTheHistory) {
  std::vector<ChangeEvent> history;
  std::vector<ChangeEvent> records;
  for (uint64_t id = 1; id <= 12000; ++id) {
    for (uint32_t p = 0; p < 3; ++p) {
      history.push_back(In(p, Event("e" + std::to_string(id % 500), id, "{}", id)));
      records.push_back(history.back());
    }
  }
  EventsHistory pages(history, 3);
  std::vector<Difference> diffs;
  ASSERT_TRUE(CompareHistory("t", 1, Modulo(1), Partitions({{0, records}}), pages, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs.size() << ": " << diffs.front().detail;
  EXPECT_LE(pages.largest_page(), 10000u / 3);
  EXPECT_EQ(pages.lookups(), 0) << "every record was in its place";
}

// A history that cannot be read, or a topic: the comparison's result.
TEST(CompareHistory, AFailedReadIsTheResult) {
  class Broken final : public HistoryPages {
   public:
    uint32_t partitions() const override { return 1; }
    Result<std::vector<ChangeEvent>> Next(uint32_t, uint32_t) override { return Unavailable("storage down"); }
    Result<std::vector<ChangeEvent>> Of(uint32_t, const std::vector<uint64_t>&) override {
      return Unavailable("storage down");
    }
    void Rewind() override {}
  };
  Broken storage_down;
  std::vector<Difference> diffs;
  EXPECT_EQ(CompareHistory("t", 1, Modulo(1), Partitions({{0, {Event("a", 1, "{}", 1)}}}), storage_down, diffs).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(CompareHistory("t", 1, Modulo(1), Partitions({}), storage_down, diffs).code(), StatusCode::kUnavailable);
  EventsHistory pages({Event("a", 1, "{}", 1)}, 1);
  const ReadTopicPartition broker_down = [](int32_t, const EachRecord&) { return Unavailable("broker down"); };
  EXPECT_EQ(CompareHistory("t", 1, Modulo(1), broker_down, pages, diffs).code(), StatusCode::kUnavailable);
  const ReadRecords broken = [](const EachRecord&) { return Unavailable("broker down"); };
  EXPECT_EQ(CompareLatest("t", broken, {}, diffs).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice::connectors::kafka
