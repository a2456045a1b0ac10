// The kafka sink against the real broker (SLUICE_TEST_KAFKA_BROKERS, started
// by scripts/services up kafka). Every test uses its own topic. What the sink
// wrote is read back with an independent consumer (tests/support/kafka_support).
#include "connectors/kafka/kafka_sink.h"
#include "connectors/events_history.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"
#include "core/change_event.pb.h"
#include "core/json.h"
#include "core/thread_name.h"
#include "tests/support/kafka_support.h"

namespace sluice::connectors::kafka {
namespace {

using testing::KafkaBrokers;
using testing::KafkaRecord;
using testing::ReadTopic;

#define ASSERT_OK(expr)                     \
  do {                                      \
    const Status st_ = (expr);              \
    ASSERT_TRUE(st_.ok()) << st_.message(); \
  } while (0)

std::string UniqueTopic(const std::string& what) {
  return "t" + std::to_string(::getpid()) + "_" + what + "_" + std::to_string(std::random_device{}() % 1000000);
}

config::Config LoadWith(const std::string& sink_yaml, uint32_t partitions = 8) {
  const std::string text = "storage:\n  mysql: {host: 127.0.0.1}\n"
                           "entities:\n  account: {partitions: " + std::to_string(partitions) + "}\n"
                           "sinks:\n  - name: feed\n    type: kafka\n    entity: account\n"
                           "    brokers: \"" + KafkaBrokers() + "\"\n" + sink_yaml;
  auto c = config::LoadConfigFromString(text, "test.yaml", connectors::BuiltinSinkTypes());
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(c).value() : config::Config{};
}

// Sink::VerifyHistory against `history` held in memory (EventsHistory), as
// sluice verify reads storage's a page at a time.
Status VerifyHistory(Sink& sink, std::vector<ChangeEvent> history, std::vector<Difference>& diffs,
                     uint32_t partitions = 8) {
  connectors::EventsHistory pages(std::move(history), partitions);
  return sink.VerifyHistory(pages, diffs);
}

// A sink of its own topic (created by the sink), transactional or idempotent.
config::Config LoadTopic(const std::string& topic, bool transactional) {
  return LoadWith("    topic: " + topic + "\n    create_topic: true\n    transactional: " +
                  (transactional ? "true" : "false") + "\n");
}

std::unique_ptr<Sink> Make(const config::Config& c) {
  auto s = MakeKafkaSink(c.sinks.at(0), c);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Events of entity "p<partition>" in source partition p with versions equal
// to their event ids from..to, so a topic holding them in order has
// versions 1, 2, 3, ... per key.
std::vector<ChangeEvent> Events(uint32_t partition, uint64_t from, uint64_t to) {
  std::vector<ChangeEvent> out;
  for (uint64_t id = from; id <= to; ++id) {
    ChangeEvent e;
    e.entity_type = "account";
    e.partition = partition;
    e.event_id = id;
    e.entity_id = "p" + std::to_string(partition);
    e.version = id;
    e.state = R"({"n":)" + std::to_string(id) + "}";
    e.command_name = "patch";
    e.command_id = "c" + std::to_string(partition) + "-" + std::to_string(id);
    e.committed_at_us = 1700000000000000 + static_cast<int64_t>(id);
    out.push_back(e);
  }
  return out;
}

std::map<Outcome, int> Count(const ApplyResult& r) {
  std::map<Outcome, int> n;
  for (const auto& x : r.results) ++n[x.outcome];
  return n;
}

TEST(KafkaSink, DeliversOneRecordPerEventWithKeyHeadersAndJsonValue) {
  SLUICE_REQUIRE_KAFKA();
  for (const bool transactional : {true, false}) {
  SCOPED_TRACE(transactional ? "transactional" : "idempotent");
  const std::string topic = UniqueTopic("json");
  auto c = LoadTopic(topic, transactional);
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  ASSERT_OK(sink->Open());
  auto events = Events(3, 1, 2);
  ChangeEvent del = Events(3, 3, 3)[0];
  del.deleted = true;
  del.state.clear();
  events.push_back(del);
  auto r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kApplied], 3);

  std::string error;
  const auto records = ReadTopic(topic, &error);
  ASSERT_EQ(records.size(), 3u) << error;
  // The sink created the topic with the entity's 8 partitions; source
  // partition 3 went to topic partition 3, as Kafka's key partitioner would.
  for (const KafkaRecord& rec : records) {
    EXPECT_EQ(rec.partition, 3);
    EXPECT_EQ(rec.key, "p3");
    EXPECT_EQ(rec.headers.at("sluice-entity-type"), "account");
    EXPECT_EQ(rec.headers.at("sluice-partition"), "3");
  }
  EXPECT_EQ(records[1].headers.at("sluice-version"), "2");
  EXPECT_EQ(records[1].headers.at("sluice-event-id"), "2");
  // Idempotent: only the batch's last record of a topic partition carries
  // the positions. Transactional: none does (each record's own headers say
  // where its partition is).
  EXPECT_EQ(records[0].headers.count("sluice-positions"), 0u);
  if (transactional) {
    EXPECT_EQ(records[2].headers.count("sluice-positions"), 0u);
  } else {
    EXPECT_EQ(records[2].headers.at("sluice-positions"), "3:3");
  }
  auto v = ParseJson(records[1].value);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)["state"]["n"], 2);
  EXPECT_EQ((*v)["version"], 2);
  EXPECT_EQ((*v)["command_id"], "c3-2");
  auto d = ParseJson(records[2].value);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)["deleted"], true);
  EXPECT_TRUE((*d)["state"].is_null());
  EXPECT_TRUE(testing::CheckVersionsPerKey(records).empty());
  }
}

TEST(KafkaSink, ProtobufValuesDecodeWithTheShippedProto) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("proto");
  auto c = LoadWith("    topic: " + topic + "\n    format: protobuf\n    create_topic: true\n    partitions: 1\n");
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  ASSERT_OK(sink->Open());
  auto r = sink->Apply(Events(5, 1, 4));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  const auto records = ReadTopic(topic);
  ASSERT_EQ(records.size(), 4u);
  sluice::v1::ChangeEvent m;
  ASSERT_TRUE(m.ParseFromString(records[3].value));
  EXPECT_EQ(m.entity_id(), "p5");
  EXPECT_EQ(m.version(), 4u);
  EXPECT_EQ(m.partition(), 5u);
  EXPECT_EQ(m.event_id(), 4u);
  EXPECT_EQ(m.state_json(), R"({"n":4})");
  EXPECT_EQ(records[3].partition, 0);  // 5 % 1
}

// A restarted sink must not produce again what is already in the topic:
// neither what a finished batch delivered (found through sluice-positions)
// nor what a batch cut short by a crash delivered (the records after it).
// Eight source partitions share two topic partitions.
TEST(KafkaSink, ReopenedSinkSkipsEverythingTheTopicAlreadyHas) {
  SLUICE_REQUIRE_KAFKA();
  for (const bool transactional : {true, false}) {
  SCOPED_TRACE(transactional ? "transactional" : "idempotent");
  const std::string topic = UniqueTopic("reopen");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 2\n    transactional: " +
                    (transactional ? "true" : "false") + "\n");
  {
    auto first = Make(c);
    ASSERT_TRUE(first);
    ASSERT_OK(first->Open());
    for (uint32_t p = 0; p < 8; ++p) {
      auto r = first->Apply(Events(p, 1, 50));
      ASSERT_TRUE(r.status.ok()) << r.status.message();
      EXPECT_EQ(Count(r)[Outcome::kApplied], 50);
    }
    // Within one process, a retried batch is not produced twice either.
    auto again = first->Apply(Events(2, 41, 55));
    ASSERT_TRUE(again.status.ok());
    EXPECT_EQ(Count(again)[Outcome::kStale], 10);
    EXPECT_EQ(Count(again)[Outcome::kApplied], 5);
  }  // gone without a word, as after SIGKILL: the topic is all that remains
  // What a crash in the middle of a batch leaves: records of source partition
  // 3 (topic partition 1) after the last positions header.
  std::vector<KafkaRecord> leftover;
  for (const ChangeEvent& e : Events(3, 51, 60)) {
    KafkaRecord r;
    r.key = e.entity_id;
    r.value = "{}";
    r.headers = {{"sluice-entity-type", "account"}, {"sluice-version", std::to_string(e.version)},
                 {"sluice-event-id", std::to_string(e.event_id)}, {"sluice-partition", "3"}};
    leftover.push_back(r);
  }
  std::string error;
  ASSERT_TRUE(testing::ProduceRaw(topic, 1, leftover, &error)) << error;

  auto second = Make(c);
  ASSERT_TRUE(second);
  ASSERT_OK(second->Open());
  // The engine resumes from older offsets than what was delivered.
  auto r3 = second->Apply(Events(3, 40, 70));
  ASSERT_TRUE(r3.status.ok()) << r3.status.message();
  EXPECT_EQ(Count(r3)[Outcome::kStale], 21);    // 40..60
  EXPECT_EQ(Count(r3)[Outcome::kApplied], 10);  // 61..70
  auto r2 = second->Apply(Events(2, 30, 60));
  ASSERT_TRUE(r2.status.ok());
  EXPECT_EQ(Count(r2)[Outcome::kStale], 26);  // 30..55
  EXPECT_EQ(Count(r2)[Outcome::kApplied], 5);
  auto r7 = second->Apply(Events(7, 1, 51));
  ASSERT_TRUE(r7.status.ok());
  EXPECT_EQ(Count(r7)[Outcome::kStale], 50);
  EXPECT_EQ(Count(r7)[Outcome::kApplied], 1);

  std::map<std::string, uint64_t> last;
  const auto records = ReadTopic(topic, &error);
  ASSERT_FALSE(records.empty()) << error;
  const auto problems = testing::CheckVersionsPerKey(records, &last);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(last["p3"], 70u);
  EXPECT_EQ(last["p2"], 60u);
  EXPECT_EQ(last["p7"], 51u);
  EXPECT_EQ(last["p0"], 50u);
  EXPECT_EQ(records.size(), 8u * 50 + 5 + 10 + 10 + 5 + 1);
  }
}

// The records of source partition p as the sink writes them (headers only;
// the value is not what these tests look at).
std::vector<KafkaRecord> RawRecords(uint32_t p, uint64_t from, uint64_t to) {
  std::vector<KafkaRecord> out;
  for (const ChangeEvent& e : Events(p, from, to)) {
    KafkaRecord r;
    r.key = e.entity_id;
    r.value = "{}";
    r.headers = {{"sluice-entity-type", "account"}, {"sluice-version", std::to_string(e.version)},
                 {"sluice-event-id", std::to_string(e.event_id)}, {"sluice-partition", std::to_string(p)}};
    out.push_back(r);
  }
  return out;
}

// Issue 21, item 1: two sinks on one partition, as two engines are when one
// took the partition over from the other. The one that produced last fences
// the other: a zombie's batch fails and adds nothing to the topic; handing
// the partition back fences the first one in turn. Eight source partitions
// share two topic partitions, so reading back the partition's last record
// passes other partitions' records.
TEST(KafkaSink, TransactionalProducerOfAFormerOwnerIsFencedAndPublishesNothing) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("fenced");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 2\n    delivery_timeout: 5s\n");
  auto a = Make(c);
  auto b = Make(c);
  ASSERT_TRUE(a && b);
  ASSERT_OK(a->Open());
  ASSERT_OK(b->Open());
  auto r = a->Apply(Events(3, 1, 10));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kApplied], 10);
  ASSERT_TRUE(a->Apply(Events(5, 1, 4)).status.ok());  // partition 5 shares topic partition 1
  // b takes partition 3 over from a's saved offset 4: what a committed after
  // it is read back, not produced again.
  r = b->Apply(Events(3, 5, 20));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kStale], 6);
  EXPECT_EQ(Count(r)[Outcome::kApplied], 10);
  // a, still running, is a zombie for partition 3: refused, nothing published.
  r = a->Apply(Events(3, 11, 30));
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.message();
  EXPECT_NE(r.status.message().find("partition 3"), std::string::npos) << r.status.message();
  // Its other partition is its own still.
  a->Close();
  ASSERT_OK(a->Open());
  r = a->Apply(Events(5, 5, 8));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kApplied], 4);

  std::string error;
  std::map<std::string, uint64_t> last;
  auto records = ReadTopic(topic, &error);
  ASSERT_FALSE(records.empty()) << error;
  auto problems = testing::CheckVersionsPerKey(records, &last);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(last["p3"], 20u);
  EXPECT_EQ(records.size(), 20u + 8);

  // Handed back to a (re-opened after its failure): it fences b in turn.
  r = a->Apply(Events(3, 11, 30));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kStale], 10);
  EXPECT_EQ(Count(r)[Outcome::kApplied], 10);
  r = b->Apply(Events(3, 21, 40));
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.message();
  records = ReadTopic(topic, &error);
  problems = testing::CheckVersionsPerKey(records, &last);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(last["p3"], 30u);
  EXPECT_EQ(records.size(), 30u + 8);
}

// A topic of one partition where the first owner of source partition 1
// committed its events 1..5, then froze with events 6..9 in a transaction it
// left open (a producer of the test's own, under the partition's
// transactional id). `open` is null when that could not be set up.
struct FrozenOwner {
  std::string topic;
  config::Config config;
  std::unique_ptr<testing::OpenTransaction> open;
};

FrozenOwner LeaveAFrozenOwner(const std::string& what) {
  FrozenOwner f;
  f.topic = UniqueTopic(what);
  f.config = LoadWith("    topic: " + f.topic + "\n    create_topic: true\n    partitions: 1\n");
  auto first = Make(f.config);
  if (!first || !first->Open().ok() || !first->Apply(Events(1, 1, 5)).status.ok()) {
    ADD_FAILURE() << "the first owner could not write";
    return f;
  }
  std::string error;
  f.open = testing::OpenTransaction::Start(f.topic, 0, "sluice-feed-" + f.topic + "-1", RawRecords(1, 6, 9), &error);
  EXPECT_TRUE(f.open) << error;
  return f;
}

// An engine frozen in the middle of a batch leaves a transaction open with
// records on the broker. The next owner's producer aborts it before reading
// the partition back: those records are never seen by a read_committed
// consumer, are produced again exactly once, and the frozen producer's
// commit, once it resumes, fails.
TEST(KafkaSink, AnOpenTransactionOfAFrozenOwnerIsAbortedByTheNextOne) {
  SLUICE_REQUIRE_KAFKA();
  FrozenOwner f = LeaveAFrozenOwner("frozen");
  ASSERT_TRUE(f.open);
  const std::string& topic = f.topic;
  const config::Config& c = f.config;
  auto& frozen = f.open;
  std::string error;
  // The frozen batch is on the broker, uncommitted.
  EXPECT_EQ(ReadTopic(topic, &error, /*uncommitted=*/true).size(), 9u) << error;
  EXPECT_EQ(ReadTopic(topic, &error).size(), 5u) << error;

  auto next = Make(c);
  ASSERT_TRUE(next);
  ASSERT_OK(next->Open());
  auto r = next->Apply(Events(1, 3, 12));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kStale], 3);     // 3..5, committed by the first
  EXPECT_EQ(Count(r)[Outcome::kApplied], 7);   // 6..12: the frozen 6..9 did not count
  EXPECT_FALSE(frozen->Commit().empty());      // fenced

  std::map<std::string, uint64_t> last;
  const auto records = ReadTopic(topic, &error);
  const auto problems = testing::CheckVersionsPerKey(records, &last);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(last["p1"], 12u);
  EXPECT_EQ(records.size(), 12u);
  EXPECT_EQ(ReadTopic(topic, &error, true).size(), 16u);  // the aborted 4 are still on the broker
}

TEST(KafkaSink, RecordTooLargeIsRejectedAndTheRestDelivered) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("large");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 1\n"
                    "    properties: {message.max.bytes: 2000}\n");
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  ASSERT_OK(sink->Open());
  auto events = Events(0, 1, 3);
  events[1].state = R"({"blob":")" + std::string(5000, 'x') + "\"}";
  auto r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.results.size(), 3u);
  EXPECT_EQ(r.results[0].outcome, Outcome::kApplied);
  EXPECT_EQ(r.results[1].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[1].reason.find("too large"), std::string::npos) << r.results[1].reason;
  EXPECT_EQ(r.results[2].outcome, Outcome::kApplied);
  EXPECT_EQ(ReadTopic(topic).size(), 2u);
}

// A sink on a topic the test created, open once every partition of the
// topic has its leader; null (the test fails) when it cannot open.
std::unique_ptr<Sink> OpenOn(const std::string& topic, bool transactional, const std::string& more_yaml = "") {
  std::string error;
  for (int i = 0; i < 100; ++i) {
    error.clear();
    ReadTopic(topic, &error);
    if (error.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(error, "");
  auto sink = Make(LoadWith("    topic: " + topic + "\n    delivery_timeout: 5s\n    transactional: " +
                            (transactional ? "true" : "false") + "\n" + more_yaml));
  if (!sink) return nullptr;
  const Status st = sink->Open();
  EXPECT_TRUE(st.ok()) << st.message();
  return st.ok() ? std::move(sink) : nullptr;
}

std::string Padded(size_t bytes) { return R"({"pad":")" + std::string(bytes, 'x') + R"("})"; }

// Records that each fit the topic's max.message.bytes are all delivered,
// however many of them a batch holds, and a record over it is refused alone:
// the producers are held to the topic's limit (read at Open), so librdkafka
// never builds a batch the broker refuses whole. Before, 30 records of 300
// bytes went in requests the broker refused, and every one was dead-lettered.
TEST(KafkaSink, ATopicsSmallerMessageLimitRefusesOnlyTheRecordOverIt) {
  SLUICE_REQUIRE_KAFKA();
  for (const bool transactional : {true, false}) {
    SCOPED_TRACE(transactional ? "transactional" : "idempotent");
    const std::string topic = UniqueTopic("limit");
    std::string error;
    ASSERT_TRUE(testing::CreateTopic(topic, 1, &error, {{"max.message.bytes", "2000"}})) << error;
    auto sink = OpenOn(topic, transactional);
    ASSERT_TRUE(sink);
    auto batch = Events(0, 1, 30);
    for (ChangeEvent& e : batch) e.state = Padded(300);
    batch[9].state = Padded(5000);
    auto r = sink->Apply(batch);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(Count(r)[Outcome::kApplied], 29);
    ASSERT_EQ(r.results.size(), 30u);
    EXPECT_EQ(r.results[9].outcome, Outcome::kRejected);
    EXPECT_NE(r.results[9].reason.find("max.message.bytes 2000"), std::string::npos) << r.results[9].reason;
    const auto records = ReadTopic(topic, &error);
    EXPECT_EQ(records.size(), 29u) << error;
    std::set<std::string> versions;
    for (const auto& rec : records) versions.insert(rec.headers.at("sluice-version"));
    EXPECT_EQ(versions.size(), 29u);
    EXPECT_EQ(versions.count("10"), 0u);
  }
}

// A topic limit lowered after Open: the broker refuses the requests the
// producers built to the old one. That refusal is not taken as final (it may
// be the batch's, not the record's): the batch fails, the re-opened sink
// reads the new limit and refuses only the record over it. Transactional: the
// refusal spoils only its own partition's transaction, which is aborted,
// while the batch's other partition commits (the partitions end their
// transactions each on its own). Nothing is lost or published twice.
TEST(KafkaSink, ALimitLoweredAfterOpenCostsOneRetryAndRefusesOnlyTheRecordOverIt) {
  SLUICE_REQUIRE_KAFKA();
  for (const bool transactional : {true, false}) {
    SCOPED_TRACE(transactional ? "transactional" : "idempotent");
    const std::string topic = UniqueTopic("lowered");
    std::string error;
    ASSERT_TRUE(testing::CreateTopic(topic, 2, &error)) << error;
    // A linger long enough that partition 0's three records go in one request.
    auto sink = OpenOn(topic, transactional, "    properties: {linger.ms: 50}\n");
    ASSERT_TRUE(sink);
    ASSERT_TRUE(testing::SetTopicConfigs(topic, {{"max.message.bytes", "2000"}}, &error)) << error;
    // Partition 0 (topic partition 0) first: the refused one is looked at first.
    std::vector<ChangeEvent> batch = Events(0, 1, 3);
    batch[0].state = Padded(5000);
    for (const ChangeEvent& e : Events(1, 1, 4)) batch.push_back(e);  // topic partition 1
    auto r = sink->Apply(batch);
    EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.message();
    EXPECT_NE(r.status.message().find("Message size too large"), std::string::npos) << r.status.message();
    if (transactional) {
      EXPECT_NE(r.status.message().find("partition 0: delivery failed"), std::string::npos) << r.status.message();
      const auto records = ReadTopic(topic, &error);
      EXPECT_EQ(records.size(), 4u) << error;  // partition 1's transaction committed
      for (const auto& rec : records) EXPECT_EQ(rec.key, "p1");
    }

    sink->Close();  // as the engine does after a failed batch
    ASSERT_OK(sink->Open());
    r = sink->Apply(batch);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    ASSERT_EQ(r.results.size(), 7u);
    EXPECT_EQ(r.results[0].outcome, Outcome::kRejected);  // dead-lettered
    EXPECT_NE(r.results[0].reason.find("max.message.bytes 2000"), std::string::npos) << r.results[0].reason;
    for (size_t i = 1; i < 7; ++i) EXPECT_NE(r.results[i].outcome, Outcome::kRejected) << i;
    if (transactional) {
      EXPECT_EQ(Count(r)[Outcome::kStale], 4);  // partition 1, read back
    }
    r = sink->Apply(Events(0, 4, 5));  // partition 0 carries on
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(Count(r)[Outcome::kApplied], 2);
    const auto records = ReadTopic(topic, &error);
    EXPECT_EQ(records.size(), 8u) << error;
    std::map<std::string, int> seen;
    for (const auto& rec : records) ++seen[rec.key + "/" + rec.headers.at("sluice-version")];
    EXPECT_EQ(seen.size(), 8u);  // each once
    EXPECT_EQ(seen.count("p0/1"), 0u);
  }
}

// A topic limit raised after Open: a record over the old limit and under
// the new one is not dead-lettered. The batch fails once, and the re-opened
// sink, held to the new limit, delivers it.
TEST(KafkaSink, ALimitRaisedAfterOpenDeliversTheRecordsItNowTakes) {
  SLUICE_REQUIRE_KAFKA();
  for (const bool transactional : {true, false}) {
    SCOPED_TRACE(transactional ? "transactional" : "idempotent");
    const std::string topic = UniqueTopic("raised");
    std::string error;
    ASSERT_TRUE(testing::CreateTopic(topic, 1, &error, {{"max.message.bytes", "2000"}})) << error;
    auto sink = OpenOn(topic, transactional);
    ASSERT_TRUE(sink);
    ASSERT_TRUE(testing::SetTopicConfigs(topic, {{"max.message.bytes", "1048588"}}, &error)) << error;
    std::vector<ChangeEvent> batch = Events(0, 1, 3);
    batch[1].state = Padded(5000);
    auto r = sink->Apply(batch);
    EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.message();
    EXPECT_NE(r.status.message().find("was raised to 1048588"), std::string::npos) << r.status.message();
    sink->Close();
    ASSERT_OK(sink->Open());
    r = sink->Apply(batch);
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    ASSERT_EQ(r.results.size(), 3u);
    EXPECT_EQ(r.results[1].outcome, Outcome::kApplied) << r.results[1].reason;
    const auto records = ReadTopic(topic, &error);
    EXPECT_EQ(records.size(), 3u) << error;
    const auto problems = testing::CheckVersionsPerKey(records);
    EXPECT_TRUE(problems.empty()) << problems.front();
  }
}

TEST(KafkaSink, MissingTopicWithoutCreateTopicIsAConfigurationError) {
  SLUICE_REQUIRE_KAFKA();
  auto c = LoadWith("    topic: " + UniqueTopic("missing") + "\n");
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  const Status st = sink->Open();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.message();
  EXPECT_NE(st.message().find("create_topic"), std::string::npos) << st.message();
  EXPECT_EQ(sink->Health().code(), StatusCode::kFailedPrecondition);
}

TEST(KafkaSink, UnreachableBrokerIsUnavailable) {
  // No server needed: nothing listens on the port (bound and released).
  const std::string text = "storage:\n  mysql: {host: 127.0.0.1}\nentities:\n  account: {partitions: 1}\n"
                           "sinks:\n  - {name: feed, type: kafka, entity: account, brokers: \"127.0.0.1:1\", "
                           "topic: nowhere, delivery_timeout: 1s}\n";
  auto c = config::LoadConfigFromString(text, "test.yaml", connectors::BuiltinSinkTypes());
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto sink = Make(*c);
  ASSERT_TRUE(sink);
  EXPECT_EQ(sink->Health().code(), StatusCode::kUnavailable);
  EXPECT_EQ(sink->Open().code(), StatusCode::kUnavailable);
}

TEST(KafkaSink, VerifyComparesTheLatestRecordPerEntity) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("verify");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 2\n");
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  ASSERT_OK(sink->Open());
  ASSERT_TRUE(sink->Apply(Events(0, 1, 3)).status.ok());
  ASSERT_TRUE(sink->Apply(Events(1, 1, 2)).status.ok());
  std::vector<Difference> diffs;
  std::vector<EntitySnapshot> truth = {{"p0", 3, false, R"({"n":3})"}, {"p1", 2, false, R"({"n":2})"}};
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  EXPECT_TRUE(diffs.empty());
  truth = {{"p0", 4, false, R"({"n":4})"}, {"p1", 2, false, R"({"n":9})"}, {"p9", 1, false, "{}"}};
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  ASSERT_EQ(diffs.size(), 3u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kVersionMismatch);
  EXPECT_EQ(diffs[1].kind, Difference::Kind::kContentMismatch);
  EXPECT_EQ(diffs[2].kind, Difference::Kind::kMissing);
}

// A topic is checked record by record against the history (DESIGN I5): a
// record of an event storage does not have (one a crash of the MySQL server
// rolled back, its event_id then reused by another command) is a phantom, a
// record with other fields is altered, an event recorded twice a duplicate.
TEST(KafkaSink, VerifyHistoryFindsPhantomAlteredDuplicateAndMissingRecords) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("history");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 1\n", 1);
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  EXPECT_TRUE(sink->capabilities().verifies_history);
  ASSERT_OK(sink->Open());
  std::vector<ChangeEvent> history = Events(0, 1, 4);
  ASSERT_TRUE(sink->Apply(history).status.ok());
  std::vector<Difference> diffs;
  ASSERT_OK(VerifyHistory(*sink, history, diffs, 1));
  EXPECT_TRUE(diffs.empty()) << diffs.front().detail;

  const auto kinds = [](const std::vector<Difference>& d) {
    std::map<std::string, int> n;
    for (const auto& x : d) ++n[std::string(DifferenceKindName(x.kind))];
    return n;
  };
  // The record of event 4 holds another command than storage: altered.
  std::vector<ChangeEvent> altered = history;
  altered[3].command_id = "other-command";
  altered[3].state = R"({"n":40})";
  diffs.clear();
  ASSERT_OK(VerifyHistory(*sink, altered, diffs, 1));
  EXPECT_EQ(kinds(diffs), (std::map<std::string, int>{{"content_mismatch", 1}})) << diffs.front().detail;
  // Storage lost event 4 in a crash and gave its event_id to a command on
  // another entity: the record of p0 version 4 is a phantom, q's is missing.
  std::vector<ChangeEvent> after_crash = history;
  after_crash[3].entity_id = "q";
  after_crash[3].version = 1;
  after_crash[3].command_id = "q-create";
  diffs.clear();
  ASSERT_OK(VerifyHistory(*sink, after_crash, diffs, 1));
  EXPECT_EQ(kinds(diffs), (std::map<std::string, int>{{"missing", 1}, {"phantom", 1}}));
  // Storage has fewer events than the topic: the extra records are phantoms.
  diffs.clear();
  ASSERT_OK(VerifyHistory(*sink, std::vector<ChangeEvent>(history.begin(), history.begin() + 2), diffs, 1));
  EXPECT_EQ(kinds(diffs), (std::map<std::string, int>{{"phantom", 2}}));
  // More events than records: missing.
  std::vector<ChangeEvent> longer = history;
  longer.push_back(Events(0, 5, 5)[0]);
  diffs.clear();
  ASSERT_OK(VerifyHistory(*sink, longer, diffs, 1));
  EXPECT_EQ(kinds(diffs), (std::map<std::string, int>{{"missing", 1}}));
  // A record produced twice (past the sink) is a duplicate.
  const auto records = ReadTopic(topic);
  ASSERT_EQ(records.size(), 4u);
  std::string error;
  ASSERT_TRUE(testing::ProduceRaw(topic, 0, {records[1]}, &error)) << error;
  diffs.clear();
  ASSERT_OK(VerifyHistory(*sink, history, diffs, 1));
  EXPECT_EQ(kinds(diffs), (std::map<std::string, int>{{"duplicate", 1}}));
  sink->Close();
}

// A record that reaches the topic after verify began (its event committed
// after the history's heads were read) is not compared: the sink asks where
// every topic partition ends before it reads the history. Two source
// partitions on two topic partitions; the record of partition 1's event 4
// goes in again as the history gives its first page (while topic partition
// 0 is read): seen, it would be a duplicate.
TEST(KafkaSink, VerifyHistoryComparesTheTopicAsItEndedBeforeTheHistoryWasRead) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("history-ends");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 2\n", 2);
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  ASSERT_OK(sink->Open());
  std::vector<ChangeEvent> history = Events(0, 1, 4);
  for (ChangeEvent& e : Events(1, 1, 4)) history.push_back(std::move(e));
  ASSERT_TRUE(sink->Apply(history).status.ok());
  std::string error;
  const auto records = ReadTopic(topic, &error);
  ASSERT_EQ(records.size(), 8u) << error;
  ASSERT_EQ(records.back().partition, 1);

  class AppendsOnFirstRead final : public HistoryPages {
   public:
    AppendsOnFirstRead(std::vector<ChangeEvent> events, std::function<void()> append)
        : events_(std::move(events), 2), append_(std::move(append)) {}
    uint32_t partitions() const override { return 2; }
    Result<std::vector<ChangeEvent>> Next(uint32_t p, uint32_t limit) override {
      if (append_) std::exchange(append_, nullptr)();
      return events_.Next(p, limit);
    }
    Result<std::vector<ChangeEvent>> Of(uint32_t p, const std::vector<uint64_t>& ids) override {
      return events_.Of(p, ids);
    }
    void Rewind() override { events_.Rewind(); }

   private:
    connectors::EventsHistory events_;
    std::function<void()> append_;
  };
  bool appended = false;
  AppendsOnFirstRead pages(history, [&] { appended = testing::ProduceRaw(topic, 1, {records.back()}, &error); });
  std::vector<Difference> diffs;
  ASSERT_OK(sink->VerifyHistory(pages, diffs));
  ASSERT_TRUE(appended) << error;
  EXPECT_TRUE(diffs.empty()) << diffs.size() << ": " << diffs.front().detail;
  // Asked again, the topic holds the repeat.
  diffs.clear();
  ASSERT_OK(VerifyHistory(*sink, history, diffs, 2));
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kDuplicate);
  sink->Close();
}

// The engine that takes a partition over fences it at once (Sink::TakeOver),
// without waiting for the partition's next event: a crashed owner's open
// transaction stops holding back read_committed consumers right away.
TEST(KafkaSink, TakingAPartitionOverAbortsItsFormerOwnersOpenTransactionAtOnce) {
  SLUICE_REQUIRE_KAFKA();
  FrozenOwner f = LeaveAFrozenOwner("takeover");
  ASSERT_TRUE(f.open);
  const std::string& topic = f.topic;
  const config::Config& c = f.config;
  auto& frozen = f.open;
  std::string error;
  auto next = Make(c);
  ASSERT_TRUE(next);
  ASSERT_OK(next->Open());
  ASSERT_OK(next->TakeOver(TakenOver{"sink/feed", "e2", {{1, 2}}}));
  EXPECT_FALSE(frozen->Commit().empty());  // fenced before any event of partition 1
  // Nothing is open any more: verify reads the whole topic at once.
  std::vector<ChangeEvent> history = Events(1, 1, 5);
  std::vector<Difference> diffs;
  ASSERT_OK(VerifyHistory(*next, history, diffs));
  EXPECT_TRUE(diffs.empty()) << diffs.front().detail;
  EXPECT_EQ(ReadTopic(topic, &error).size(), 5u) << error;
}

// Another engine's sink over `c` takes source partition p over (token 2)
// and applies its events from..to; `applied` of them are new to the topic.
void AnotherEngineApplies(const config::Config& c, uint32_t p, uint64_t from, uint64_t to, int applied) {
  auto other = Make(c);
  ASSERT_TRUE(other);
  ASSERT_OK(other->Open());
  ASSERT_OK(other->TakeOver(TakenOver{"sink/feed", "e2", {{p, 2}}}));
  auto r = other->Apply(Events(p, from, to));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kApplied], applied);
}

// Closes the sink and reads its topic back: per key the versions in order,
// none repeated (else a failure); the last version of each key in *last.
std::vector<testing::KafkaRecord> CloseAndReadBack(Sink& sink, const std::string& topic,
                                                   std::map<std::string, uint64_t>* last) {
  sink.Close();
  std::string error;
  auto records = ReadTopic(topic, &error);
  EXPECT_EQ(error, "");
  const auto problems = testing::CheckVersionsPerKey(records, last);
  EXPECT_TRUE(problems.empty()) << problems.front();
  return records;
}

// librdkafka threads of this process.
int KafkaThreads() {
  int n = 0;
  for (const auto& [name, count] : ThreadNamesOf()) {
    if (name.rfind("rdk:", 0) == 0) n += count;
  }
  return n;
}

// The engine keeps the sink open when it takes a partition over
// (Capabilities::stays_open_at_takeover); TakeOver() learns what another
// engine wrote of the partition meanwhile. Transactional: the partition's
// producer, fenced by the other engine's, is made again; idempotent: its
// topic partition is read back. Nothing is produced twice, and the
// partition this sink held throughout goes on.
TEST(KafkaSink, APartitionTakenBackLearnsWhatAnotherEngineWroteWithoutClosingTheSink) {
  SLUICE_REQUIRE_KAFKA();
  for (const bool transactional : {true, false}) {
    SCOPED_TRACE(transactional ? "transactional" : "idempotent");
    const std::string topic = UniqueTopic("back");
    auto c = LoadTopic(topic, transactional);
    auto sink = Make(c);
    ASSERT_TRUE(sink);
    EXPECT_TRUE(sink->capabilities().stays_open_at_takeover);
    ASSERT_OK(sink->Open());
    ASSERT_OK(sink->TakeOver(TakenOver{"sink/feed", "e1", {{0, 1}, {1, 1}}}));
    ASSERT_TRUE(sink->Apply(Events(0, 1, 3)).status.ok());
    ASSERT_TRUE(sink->Apply(Events(1, 1, 3)).status.ok());
    // Partition 1 went to another engine, which published 4..9 (and, when
    // transactional, fenced this sink's producer of it).
    ASSERT_NO_FATAL_FAILURE(AnotherEngineApplies(c, 1, 4, 9, 6));
    // Taken back under a new token, from this sink's offset 3: 4..9 are in
    // the topic, 10..12 are new. Partition 0's producer stays (a
    // transactional producer of partition 1 is made again in its place).
    const int threads_before = KafkaThreads();
    ASSERT_OK(sink->TakeOver(TakenOver{"sink/feed", "e1", {{1, 3}}}));
    if (transactional) {
      EXPECT_GE(KafkaThreads(), threads_before);
    }
    auto r = sink->Apply(Events(1, 4, 12));
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(Count(r)[Outcome::kStale], 6);
    EXPECT_EQ(Count(r)[Outcome::kApplied], 3);
    r = sink->Apply(Events(0, 4, 5));
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(Count(r)[Outcome::kApplied], 2);
    std::map<std::string, uint64_t> last;
    EXPECT_EQ(CloseAndReadBack(*sink, topic, &last).size(), 5u + 12);
    EXPECT_EQ(last["p0"], 5u);
    EXPECT_EQ(last["p1"], 12u);
  }
}

// An engine that lost partitions tells its sink (Sink::Released): their
// transactional producers go at once instead of after producer_idle, and the
// partition it kept goes on. Taken back later, a released partition learns
// what its other owner wrote meanwhile: nothing is produced twice.
TEST(KafkaSink, ProducersOfReleasedPartitionsGoAtOnce) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("released");
  auto c = LoadTopic(topic, /*transactional=*/true);
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  ASSERT_OK(sink->Open());
  ASSERT_OK(sink->TakeOver(TakenOver{"sink/feed", "e1", {{0, 1}, {1, 1}, {2, 1}, {3, 1}}}));
  for (uint32_t p = 0; p < 4; ++p) ASSERT_TRUE(sink->Apply(Events(p, 1, 3)).status.ok());
  const int busy = KafkaThreads();
  const std::vector<uint32_t> lost = {1, 2, 3};
  sink->Released(lost);
  const int released = KafkaThreads();
  // Three producers gone, each with at least three threads (main, internal,
  // one per broker).
  EXPECT_GE(busy - released, 3 * 3) << busy << " librdkafka threads before, " << released << " after";
  auto r = sink->Apply(Events(0, 4, 5));  // the partition kept, with its producer
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kApplied], 2);
  EXPECT_EQ(KafkaThreads(), released);
  // Meanwhile another engine holds partition 1 and publishes 4..9.
  ASSERT_NO_FATAL_FAILURE(AnotherEngineApplies(c, 1, 4, 9, 6));
  // Taken back from this sink's offset 3: 4..9 are in the topic, 10..12 new.
  ASSERT_OK(sink->TakeOver(TakenOver{"sink/feed", "e1", {{1, 3}}}));
  r = sink->Apply(Events(1, 4, 12));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kStale], 6);
  EXPECT_EQ(Count(r)[Outcome::kApplied], 3);
  std::map<std::string, uint64_t> last;
  EXPECT_EQ(CloseAndReadBack(*sink, topic, &last).size(), 5u + 12 + 3 + 3);
  EXPECT_EQ(last["p0"], 5u);
  EXPECT_EQ(last["p1"], 12u);
}

// A takeover of many partitions makes their producers several at a time
// (read_back_concurrency), each thread with a reader of its own: every former
// owner's open transaction is aborted, and what each committed is read
// back, whichever thread made the partition's producer.
void TakeOverManyPartitions(const std::string& name) {
  constexpr uint32_t kPartitions = 6;
  const std::string topic = UniqueTopic(name);
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    read_back_concurrency: 3\n", kPartitions);
  // The former owner committed 1..3 of every partition, then froze with
  // 4..5 of each in an open transaction.
  std::vector<std::unique_ptr<testing::OpenTransaction>> frozen;
  {
    auto former = Make(c);
    ASSERT_TRUE(former);
    ASSERT_OK(former->Open());
    for (uint32_t p = 0; p < kPartitions; ++p) ASSERT_TRUE(former->Apply(Events(p, 1, 3)).status.ok());
    for (uint32_t p = 0; p < kPartitions; ++p) {
      std::string error;
      frozen.push_back(testing::OpenTransaction::Start(topic, static_cast<int32_t>(p),
                                                       "sluice-feed-" + topic + "-" + std::to_string(p),
                                                       RawRecords(p, 4, 5), &error));
      ASSERT_TRUE(frozen.back()) << error;
    }
  }
  auto next = Make(c);
  ASSERT_TRUE(next);
  ASSERT_OK(next->Open());
  TakenOver all{"sink/feed", "e2", {}};
  for (uint32_t p = 0; p < kPartitions; ++p) all.tokens[p] = 2;
  ASSERT_OK(next->TakeOver(all));
  for (auto& f : frozen) EXPECT_FALSE(f->Commit().empty());  // each fenced at the takeover
  // From the former owner's saved offset 1: 2..3 are in the topic.
  std::vector<ChangeEvent> events;
  for (uint32_t p = 0; p < kPartitions; ++p) {
    const auto e = Events(p, 2, 6);
    events.insert(events.end(), e.begin(), e.end());
  }
  auto r = next->Apply(events);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kStale], 2 * static_cast<int>(kPartitions));
  EXPECT_EQ(Count(r)[Outcome::kApplied], 3 * static_cast<int>(kPartitions));
  std::map<std::string, uint64_t> last;
  EXPECT_EQ(CloseAndReadBack(*next, topic, &last).size(), 6u * kPartitions);
  for (uint32_t p = 0; p < kPartitions; ++p) EXPECT_EQ(last["p" + std::to_string(p)], 6u) << p;
}

TEST(KafkaSink, ATakeoverOfManyPartitionsFencesAndReadsBackEachOfThem) {
  SLUICE_REQUIRE_KAFKA();
  TakeOverManyPartitions("fenceall");
}

#ifdef SLUICE_FAILPOINTS
// The same when no thread can be started (a failpoint stands in for the
// process's thread limit): the calling thread's reader makes every
// producer. In a process of its own, where the failpoint is read.
TEST(KafkaSink, ATakeoverWithoutThreadsFencesAndReadsBackEachPartitionOnTheCaller) {
  SLUICE_REQUIRE_KAFKA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SLUICE_FAILPOINTS", "on_threads.start=error", 1);
        TakeOverManyPartitions("fencenothreads");
        std::exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}
#endif

// Two source partitions share one topic partition. A former owner of
// partition 2 left a transaction open (frozen); partition 1's records
// committed after it are past the last stable offset. The next owner of
// partition 1 must find them (reading to the log's end, waiting for the
// open transaction to end), not stop at the open transaction and produce
// them again.
TEST(KafkaSink, RecoveryReadsPastAnotherPartitionsOpenTransaction) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("lso");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 1\n");
  auto first = Make(c);
  ASSERT_TRUE(first);
  ASSERT_OK(first->Open());
  ASSERT_TRUE(first->Apply(Events(1, 1, 5)).status.ok());
  std::string error;
  auto frozen = testing::OpenTransaction::Start(topic, 0, "sluice-feed-" + topic + "-2", RawRecords(2, 1, 3), &error);
  ASSERT_TRUE(frozen) << error;
  auto r = first->Apply(Events(1, 6, 8));  // committed after the open transaction
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  // The open transaction ends a moment later (its owner resumes and commits).
  std::thread resume([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    EXPECT_EQ(frozen->Commit(), "");
  });
  auto next = Make(c);
  ASSERT_TRUE(next);
  ASSERT_OK(next->Open());
  r = next->Apply(Events(1, 4, 10));
  resume.join();
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kStale], 5);    // 4..8
  EXPECT_EQ(Count(r)[Outcome::kApplied], 2);  // 9, 10
  std::map<std::string, uint64_t> last;
  const auto records = ReadTopic(topic, &error);
  const auto problems = testing::CheckVersionsPerKey(records, &last);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(last["p1"], 10u);
  EXPECT_EQ(last["p2"], 3u);
  EXPECT_EQ(records.size(), 13u);
}

// Issue 24, item 4a: a transactional producer holds librdkafka threads and
// broker connections per source partition. Those of partitions without a
// batch for producer_idle go at Idle(); a partition's next batch makes its
// producer again and reads the topic back first: what another engine wrote
// of the partition meanwhile is skipped, nothing is produced twice.
TEST(KafkaSink, ProducersOfIdlePartitionsCloseAndComeBackWithoutDuplicates) {
  SLUICE_REQUIRE_KAFKA();
  const std::string topic = UniqueTopic("idle");
  auto c = LoadWith("    topic: " + topic + "\n    create_topic: true\n    partitions: 2\n    producer_idle: 3s\n");
  auto sink = Make(c);
  ASSERT_TRUE(sink);
  ASSERT_OK(sink->Open());
  for (uint32_t p = 0; p < 4; ++p) ASSERT_TRUE(sink->Apply(Events(p, 1, 5)).status.ok());
  const int busy = KafkaThreads();
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  ASSERT_TRUE(sink->Apply(Events(0, 6, 8)).status.ok());  // partition 0 stays in use
  sink->Idle();
  const int idle = KafkaThreads();
  // Three producers gone, each with at least three threads (main, internal,
  // one per broker).
  EXPECT_GE(busy - idle, 3 * 3) << busy << " librdkafka threads before, " << idle << " after";
  sink->Idle();  // partition 0's was used just now: it stays
  EXPECT_EQ(KafkaThreads(), idle);
  // Meanwhile another engine held partition 1 and published 6..9.
  ASSERT_NO_FATAL_FAILURE(AnotherEngineApplies(c, 1, 4, 9, 4));
  // Partition 1 again, from this sink's saved offset 3: 4..9 are in the
  // topic (read back), 10..12 are new.
  auto r = sink->Apply(Events(1, 4, 12));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Count(r)[Outcome::kStale], 6);
  EXPECT_EQ(Count(r)[Outcome::kApplied], 3);
  std::map<std::string, uint64_t> last;
  EXPECT_EQ(CloseAndReadBack(*sink, topic, &last).size(), 8u + 12 + 5 + 5);
  EXPECT_EQ(last["p0"], 8u);
  EXPECT_EQ(last["p1"], 12u);
}

}  // namespace
}  // namespace sluice::connectors::kafka
