// ViewSink and ViewCode without a server: what the wrapped sink receives for
// each outcome of the code (a document, not in the view, an error), what the
// code sees of an event, and that a failing event never stops the batch.
#include "connectors/view_sink.h"

#include <gtest/gtest.h>

#include "core/json.h"
#include "tests/support/config_support.h"

namespace sluice::connectors {
namespace {

// Records what it was given; applies everything.
class RecordingSink : public Sink {
 public:
  std::vector<ChangeEvent> applied;
  std::vector<EntitySnapshot> verified;
  Status fail;  // when set, Apply fails the whole batch

  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.entity_checks = true;
    return c;
  }
  Status Open() override { return Status::Ok(); }
  ApplyResult Apply(std::span<const ChangeEvent> events) override {
    ApplyResult r;
    if (!fail.ok()) {
      r.status = fail;
      return r;
    }
    applied.insert(applied.end(), events.begin(), events.end());
    r.results.assign(events.size(), EventResult{});
    return r;
  }
  Status Health() override { return Status::Ok(); }
  void Close() override {}
  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>&) override {
    verified = truth;
    return Status::Ok();
  }

 private:
  std::string name_ = "view";
};

ChangeEvent Event(std::string id, uint64_t version, std::string state, std::string before = "") {
  ChangeEvent e;
  e.entity_type = "account";
  e.partition = 1;
  e.event_id = version * 10;
  e.entity_id = std::move(id);
  e.version = version;
  e.state = std::move(state);
  e.before = std::move(before);
  e.command_name = "deposit";
  e.command_id = "cmd-" + std::to_string(version);
  e.request = R"({"amount":5})";
  e.response = R"({"ok":true})";
  e.committed_at_us = 1764153468123456;  // 2025-11-26T10:37:48.123456Z
  return e;
}

class ViewSinkTest : public ::testing::Test {
 protected:
  // A ViewSink over a RecordingSink with `code` as its file.
  std::unique_ptr<Sink> Make(const std::string& code) {
    config::SinkConfig c;
    c.name = "view";
    c.entity = "account";
    c.code = dir_.Write("view.js", code).string();
    auto inner = std::make_unique<RecordingSink>();
    recorder_ = inner.get();
    auto made = ViewSink::Wrap(c, std::move(inner));
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? std::move(made).value() : nullptr;
  }

  testing::ScratchDir dir_;
  RecordingSink* recorder_ = nullptr;
};

TEST_F(ViewSinkTest, TheCodeSeesTheWholeEvent) {
  auto sink = Make(R"JS(
function transform(e) {
  return {seen: [e.type, e.id, e.version, e.event_id, e.partition, e.command, e.command_id,
                 e.request.amount, e.response.ok, e.state.balance, e.before ? e.before.balance : null,
                 e.deleted, e.committed_at, e.committed_at_ms]};
}
)JS");
  ASSERT_NE(sink, nullptr);
  EXPECT_TRUE(sink->capabilities().full_events);
  EXPECT_FALSE(sink->capabilities().entity_checks);  // the anti-entropy leaves a view with code alone
  const std::vector<ChangeEvent> events = {Event("a", 1, R"({"balance":5})"),
                                           Event("a", 2, R"({"balance":10})", R"({"balance":5})")};
  ApplyResult r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok());
  ASSERT_EQ(recorder_->applied.size(), 2u);
  EXPECT_EQ(ParseJsonOrDiscarded(recorder_->applied[0].state),
            ParseJsonOrDiscarded(R"({"seen":["account","a",1,10,1,"deposit","cmd-1",5,true,5,null,false,
                                     "2025-11-26T10:37:48.123456Z",1764153468123]})"));
  EXPECT_EQ(ParseJsonOrDiscarded(recorder_->applied[1].state)["seen"][10], 5);  // the state before
  EXPECT_EQ(recorder_->applied[1].version, 2u);
}

TEST_F(ViewSinkTest, AnEntityThatStopsMatchingLeavesAsAVersionedDelete) {
  auto sink = Make("function filter(e) { return e.state.balance >= 10; }\n");
  ASSERT_NE(sink, nullptr);
  const std::vector<ChangeEvent> events = {Event("a", 1, R"({"balance":5})"), Event("a", 2, R"({"balance":10})"),
                                           Event("a", 3, R"({"balance":2})")};
  ApplyResult r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok());
  ASSERT_EQ(recorder_->applied.size(), 3u);
  EXPECT_TRUE(recorder_->applied[0].deleted);  // never in the view: a tombstone at version 1
  EXPECT_EQ(recorder_->applied[0].version, 1u);
  EXPECT_FALSE(recorder_->applied[1].deleted);
  EXPECT_EQ(recorder_->applied[1].state, R"({"balance":10})");  // no transform: the state itself
  EXPECT_TRUE(recorder_->applied[2].deleted);                   // stopped matching
  EXPECT_EQ(recorder_->applied[2].version, 3u);
  EXPECT_TRUE(recorder_->applied[2].state.empty());
}

TEST_F(ViewSinkTest, ADeletedEntityLeavesWithoutCallingTheCode) {
  auto sink = Make("function transform(e) { throw new Error('must not be called'); }\n");
  ASSERT_NE(sink, nullptr);
  ChangeEvent gone = Event("a", 4, "");
  gone.deleted = true;
  ApplyResult r = sink->Apply(std::vector<ChangeEvent>{gone});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.results[0].outcome, Outcome::kApplied);
  ASSERT_EQ(recorder_->applied.size(), 1u);
  EXPECT_TRUE(recorder_->applied[0].deleted);
}

TEST_F(ViewSinkTest, BadCodeRejectsOnlyTheEventsItFailsOn) {
  auto sink = Make(R"JS(
function transform(e) {
  if (e.id === 'throws') throw new Error('no owner');
  if (e.id === 'loops') { while (true) {} }
  if (e.id === 'scalar') return 42;
  if (e.id === 'cycle') { var o = {}; o.self = o; return o; }
  if (e.id === 'none') return null;
  return {id: e.id};
}
)JS");
  ASSERT_NE(sink, nullptr);
  std::vector<ChangeEvent> events;
  for (const char* id : {"ok1", "throws", "loops", "scalar", "cycle", "none", "ok2"}) {
    events.push_back(Event(id, 1, "{}"));
  }
  ApplyResult r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok());
  ASSERT_EQ(r.results.size(), events.size());
  EXPECT_EQ(r.results[0].outcome, Outcome::kApplied);
  EXPECT_EQ(r.results[1].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[1].reason.find("view.js:3: Error: no owner"), std::string::npos) << r.results[1].reason;
  EXPECT_EQ(r.results[2].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[2].reason.find("time limit"), std::string::npos) << r.results[2].reason;
  EXPECT_EQ(r.results[3].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[3].reason.find("must return an object"), std::string::npos) << r.results[3].reason;
  EXPECT_EQ(r.results[4].outcome, Outcome::kRejected);
  EXPECT_EQ(r.results[5].outcome, Outcome::kApplied);  // null: not in the view, a delete
  EXPECT_EQ(r.results[6].outcome, Outcome::kApplied);
  ASSERT_EQ(recorder_->applied.size(), 3u);
  EXPECT_EQ(recorder_->applied[0].entity_id, "ok1");
  EXPECT_TRUE(recorder_->applied[1].deleted);
  EXPECT_EQ(recorder_->applied[2].state, R"({"id":"ok2"})");
}

TEST_F(ViewSinkTest, ABatchFailureOfTheSinkIsPassedOn) {
  auto sink = Make("function transform(e) { return {n: 1}; }\n");
  ASSERT_NE(sink, nullptr);
  recorder_->fail = Unavailable("down");
  ApplyResult r = sink->Apply(std::vector<ChangeEvent>{Event("a", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable);
}

TEST_F(ViewSinkTest, VerifyComparesWithTheShapedLatestStates) {
  auto sink = Make(R"JS(
function filter(e) { return e.state.open; }
function transform(e) { return {id: e.id, v: e.version}; }
)JS");
  ASSERT_NE(sink, nullptr);
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->Verify({{"a", 3, false, R"({"open":true})"}, {"b", 2, false, R"({"open":false})"},
                            {"c", 5, true, ""}},
                           diffs)
                  .ok());
  ASSERT_EQ(recorder_->verified.size(), 3u);
  EXPECT_EQ(recorder_->verified[0].state, R"({"id":"a","v":3})");
  EXPECT_TRUE(recorder_->verified[1].deleted);  // filtered out: must be absent
  EXPECT_TRUE(recorder_->verified[2].deleted);
}

TEST_F(ViewSinkTest, CodeThatDoesNotLoadIsAClearError) {
  config::SinkConfig c;
  c.name = "view";
  c.entity = "account";
  c.code_origin = "sluice.yaml:9:11";
  c.code = dir_.Write("broken.js", "function transform(e) {\n  return {;\n}\n").string();
  auto made = ViewSink::Wrap(c, std::make_unique<RecordingSink>());
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("broken.js:"), std::string::npos) << made.status().message();
  EXPECT_NE(made.status().message().find("SyntaxError"), std::string::npos) << made.status().message();
  EXPECT_NE(made.status().message().find("sluice.yaml:9:11"), std::string::npos);
  c.code = dir_.Write("nothing.js", "function helper() {}\n").string();
  made = ViewSink::Wrap(c, std::make_unique<RecordingSink>());
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("neither filter(event) nor transform(event)"), std::string::npos);
}

}  // namespace
}  // namespace sluice::connectors
