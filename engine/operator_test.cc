// `sluice deadletters list|retry|discard` (engine/operator.h) on the
// in-memory tables and a scripted sink: what is resolved, in which order
// events are retried, what a retry or a discard by id refuses. No server.
#include "engine/operator.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "sql/memory_tables.h"

namespace sluice::engine {
namespace {

using connectors::ChangeEvent;
using connectors::Outcome;
using Kind = DeadLetterAction::Kind;

// A sink that answers each event by its event_id, as the test says.
class AnsweringSink : public connectors::Sink {
 public:
  AnsweringSink(std::string name, std::map<uint64_t, connectors::EventResult> answers,
                std::vector<uint64_t>* applied)
      : name_(std::move(name)), answers_(std::move(answers)), applied_(applied) {}
  const std::string& name() const override { return name_; }
  connectors::Capabilities capabilities() const override { return {}; }
  Status Open() override { return Status::Ok(); }
  connectors::ApplyResult Apply(std::span<const ChangeEvent> events) override {
    connectors::ApplyResult r;
    for (const ChangeEvent& e : events) {
      applied_->push_back(e.event_id);
      const auto it = answers_.find(e.event_id);
      r.results.push_back(it == answers_.end() ? connectors::EventResult{} : it->second);
    }
    return r;
  }
  Status Health() override { return Status::Ok(); }
  void Close() override {}
  Status Verify(const std::vector<connectors::EntitySnapshot>&, std::vector<connectors::Difference>&) override {
    return Status::Ok();
  }

 private:
  const std::string name_;
  const std::map<uint64_t, connectors::EventResult> answers_;
  std::vector<uint64_t>* applied_;
};

class DeadLettersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.path = "/etc/sluice.yaml";
    config_.entities["account"].partitions = 2;
    for (const char* name : {"cache", "search"}) {
      config::SinkConfig s;
      s.name = name;
      s.type = "redis";
      s.entity = "account";
      config_.sinks.push_back(s);
    }
    // Partition 0 holds events 1..4 of entity e<id>.
    for (uint64_t id = 1; id <= 4; ++id) {
      sql::EventRow r;
      r.event_id = id;
      r.entity_id = "e" + std::to_string(id);
      r.version = 1;
      r.command_id = "c" + std::to_string(id);
      r.state = "{}";
      ASSERT_TRUE(storage_->Insert("account", 0, r).ok());
    }
  }

  // Files a dead letter of `sink` for event (partition, event_id); returns its id.
  uint64_t File(const std::string& sink, uint32_t partition, uint64_t event_id) {
    auto letters = storage_->OpenDeadLetters();
    EXPECT_TRUE(letters->Add({sink, "account", partition, event_id, "e" + std::to_string(event_id), 1, "refused"}).ok());
    return storage_->FiledDeadLetters().back().id;
  }

  SinkMaker Answering(std::map<uint64_t, connectors::EventResult> answers) {
    return [this, answers](const config::SinkConfig& s) -> Result<std::unique_ptr<connectors::Sink>> {
      return std::unique_ptr<connectors::Sink>(std::make_unique<AnsweringSink>(s.name, answers, &applied_));
    };
  }

  const sql::FiledDeadLetter& Filed(uint64_t id) {
    filed_ = storage_->FiledDeadLetters();
    for (const auto& f : filed_) {
      if (f.id == id) return f;
    }
    ADD_FAILURE() << "no dead letter " << id;
    return filed_.front();
  }

  static connectors::EventResult Answer(Outcome outcome, std::string reason = "") {
    connectors::EventResult r;
    r.outcome = outcome;
    r.reason = std::move(reason);
    return r;
  }

  config::Config config_;
  std::shared_ptr<sql::MemoryStorage> storage_ = sql::MemoryStorage::Create();
  std::vector<uint64_t> applied_;
  std::vector<sql::FiledDeadLetter> filed_;
};

TEST_F(DeadLettersTest, RetryResolvesWhatTheSinkTakesInEventOrderAndKeepsTheRest) {
  const uint64_t gone = File("cache", 1, 9);  // partition 1 has no event 9
  const uint64_t applied = File("cache", 0, 3);
  const uint64_t stale = File("cache", 0, 1);
  const uint64_t rejected = File("cache", 0, 2);
  const uint64_t other = File("search", 0, 4);

  DeadLetterReport report;
  auto unresolved = RetryDeadLetters(*storage_, config_,
                                     Answering({{1, Answer(Outcome::kStale)}, {2, Answer(Outcome::kRejected, "still bad")}}),
                                     {.id = std::nullopt, .sink = "cache"}, report);
  ASSERT_TRUE(unresolved.ok()) << unresolved.status().ToString();
  EXPECT_EQ(*unresolved, 2u);  // rejected again, and the one whose event is gone
  EXPECT_TRUE(report.finished);
  EXPECT_EQ(applied_, (std::vector<uint64_t>{1, 2, 3}));  // by (partition, event_id), not by filing order
  ASSERT_EQ(report.actions.size(), 4u);
  EXPECT_EQ(report.actions[0].kind, Kind::kStale);
  EXPECT_EQ(report.actions[0].id, stale);
  EXPECT_EQ(report.actions[1].kind, Kind::kRejectedAgain);
  EXPECT_EQ(report.actions[1].detail, "still bad");
  EXPECT_EQ(report.actions[1].entity_id, "e2");
  EXPECT_EQ(report.actions[2].kind, Kind::kApplied);
  EXPECT_EQ(report.actions[2].id, applied);
  EXPECT_EQ(report.actions[3].kind, Kind::kEventGone);
  EXPECT_EQ(report.actions[3].id, gone);

  EXPECT_EQ(Filed(stale).resolution, "stale");
  EXPECT_EQ(Filed(applied).resolution, "applied");
  EXPECT_TRUE(Filed(applied).resolved_at);
  EXPECT_FALSE(Filed(rejected).resolved_at);
  EXPECT_EQ(Filed(rejected).letter.error, "still bad");
  EXPECT_FALSE(Filed(gone).resolved_at);
  EXPECT_FALSE(Filed(other).resolved_at);  // another sink's

  auto listed = ListDeadLetters(*storage_, config_, std::nullopt, false);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 3u);  // gone, rejected, other: by id
  EXPECT_EQ(listed->at(0).id, gone);
  EXPECT_EQ(listed->at(1).id, rejected);
  EXPECT_EQ(listed->at(2).id, other);
  auto all = ListDeadLetters(*storage_, config_, "cache", true);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
  EXPECT_EQ(all->at(1).resolution, "applied");
}

TEST_F(DeadLettersTest, RetryByIdChecksTheLetterFirst) {
  const uint64_t cache = File("cache", 0, 1);
  const uint64_t undeclared = File("old-sink", 0, 2);
  DeadLetterReport report;
  const auto retry = [&](std::optional<uint64_t> id, std::optional<std::string> sink) {
    report = DeadLetterReport{};
    return RetryDeadLetters(*storage_, config_, Answering({}), {.id = id, .sink = sink}, report);
  };
  EXPECT_EQ(retry(cache, "search").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(retry(999, std::nullopt).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(retry(undeclared, std::nullopt).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(applied_.empty());

  auto done = retry(cache, std::nullopt);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(*done, 0u);
  EXPECT_EQ(applied_, (std::vector<uint64_t>{1}));
  auto again = retry(cache, std::nullopt);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(report.finished);
  ASSERT_EQ(report.actions.size(), 1u);
  EXPECT_EQ(report.actions[0].kind, Kind::kAlreadyResolved);
  EXPECT_EQ(report.actions[0].detail, "applied");
  EXPECT_EQ(applied_.size(), 1u);  // not applied twice
}

TEST_F(DeadLettersTest, DiscardByIdOrBySinkResolvesWithoutApplying) {
  const uint64_t one = File("cache", 0, 1);
  File("cache", 0, 2);
  File("old-sink", 0, 3);
  DeadLetterReport report;
  EXPECT_EQ(DiscardDeadLetters(*storage_, config_, {.id = std::nullopt, .sink = std::nullopt}, report).status().code(),
            StatusCode::kInvalidArgument);

  auto by_id = DiscardDeadLetters(*storage_, config_, {.id = one, .sink = std::nullopt}, report);
  ASSERT_TRUE(by_id.ok()) << by_id.status().ToString();
  EXPECT_EQ(*by_id, 1u);
  ASSERT_EQ(report.actions.size(), 1u);
  EXPECT_EQ(report.actions[0].kind, Kind::kDiscarded);
  EXPECT_EQ(report.actions[0].entity_id, "e1");
  EXPECT_EQ(report.actions[0].version, "1");
  EXPECT_EQ(Filed(one).resolution, "discarded");

  // A sink the config no longer declares, with dead letters: cleared.
  report = DeadLetterReport{};
  auto old = DiscardDeadLetters(*storage_, config_, {.id = std::nullopt, .sink = "old-sink"}, report);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(*old, 1u);
  EXPECT_EQ(report.discarded_sink, "old-sink");
  // Without any: an unknown sink.
  EXPECT_EQ(DiscardDeadLetters(*storage_, config_, {.id = std::nullopt, .sink = "never"}, report).status().code(),
            StatusCode::kInvalidArgument);

  auto rest = DiscardDeadLetters(*storage_, config_, {.id = std::nullopt, .sink = "cache"}, report);
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(*rest, 1u);  // the one left; the discarded one stays as it was
  EXPECT_TRUE(applied_.empty());
  auto left = ListDeadLetters(*storage_, config_, std::nullopt, false);
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

}  // namespace
}  // namespace sluice::engine
