// ViewSink and ViewCode without a server: what the wrapped sink receives for
// each outcome of the code (a document, not in the view, an error), what the
// code sees of an event, and that a failing event never stops the batch.
#include "connectors/view_sink.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "connectors/events_history.h"
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

  bool log = false;  // says it is a log (verifies_history, record_keys), like kafka
  std::vector<ChangeEvent> history;  // what VerifyHistory was given
  int idle_calls = 0;
  std::vector<uint32_t> released;  // what Released was given

  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.entity_checks = !log;
    c.verifies_history = log;
    c.record_keys = log;
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
  void Idle() override { ++idle_calls; }
  void Released(std::span<const uint32_t> partitions) override {
    released.insert(released.end(), partitions.begin(), partitions.end());
  }
  void Close() override {}
  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>&) override {
    verified = truth;
    return Status::Ok();
  }
  Status VerifyHistory(HistoryPages& pages, std::vector<Difference>&) override {
    history.clear();
    for (uint32_t p = 0; p < pages.partitions(); ++p) {
      for (;;) {
        ASSIGN_OR_RETURN(std::vector<ChangeEvent> page, pages.Next(p, 2));
        if (page.empty()) break;
        history.insert(history.end(), page.begin(), page.end());
      }
    }
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

  // A ViewSink routing between destinations "orders" (its own), "orders.eu"
  // and "orders.us", each a RecordingSink (logs when `log`).
  std::unique_ptr<Sink> MakeRouted(const std::string& code, bool log) {
    config::SinkConfig c;
    c.name = "view";
    c.type = log ? "kafka" : "elasticsearch";
    c.entity = "order";
    c.routes = {"orders.eu", "orders.us"};
    c.code = dir_.Write("route.js", code).string();
    std::vector<ViewSink::Destination> destinations;
    routed_.clear();
    for (const char* name : {"orders", "orders.eu", "orders.us"}) {
      auto inner = std::make_unique<RecordingSink>();
      inner->log = log;
      routed_[name] = inner.get();
      destinations.push_back({name, std::move(inner)});
    }
    auto made = ViewSink::Wrap(c, log ? "topic" : "index", std::move(destinations));
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? std::move(made).value() : nullptr;
  }

  testing::ScratchDir dir_;
  RecordingSink* recorder_ = nullptr;
  std::map<std::string, RecordingSink*> routed_;
};

ChangeEvent Order(std::string id, uint64_t version, std::string region, std::string before_region = "") {
  ChangeEvent e = Event(std::move(id), version, region.empty() ? "" : R"({"region":")" + region + R"("})",
                        before_region.empty() ? "" : R"({"region":")" + before_region + R"("})");
  e.entity_type = "order";
  e.deleted = region.empty();
  return e;
}

constexpr char kRouteByRegion[] = R"JS(
function route(e) {
  const s = e.state ?? e.before;
  if (s.region === 'nowhere') return 'orders.nowhere';
  if (s.region === 'bad-header') return {to: null, headers: {'sluice-version': '1'}};
  if (s.region === 'other') return null;
  return {to: `orders.${s.region}`, key: `${s.region}/${e.id}`, headers: {region: s.region}};
}
)JS";

TEST_F(ViewSinkTest, ALogWritesEachEventWhereItsRouteSays) {
  auto sink = MakeRouted(kRouteByRegion, /*log=*/true);
  ASSERT_NE(sink, nullptr);
  const std::vector<ChangeEvent> events = {Order("a", 1, "eu"),           Order("b", 1, "us"),
                                           Order("a", 2, "us", "eu"),     Order("c", 1, "other"),
                                           Order("a", 3, "", "us"),       Order("d", 1, "nowhere"),
                                           Order("e", 1, "bad-header")};
  ApplyResult r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok());
  ASSERT_EQ(r.results.size(), events.size());
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(r.results[i].outcome, Outcome::kApplied) << i;
  EXPECT_EQ(r.results[5].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[5].reason.find("'orders.nowhere'"), std::string::npos) << r.results[5].reason;
  EXPECT_NE(r.results[5].reason.find("orders, orders.eu, orders.us"), std::string::npos) << r.results[5].reason;
  EXPECT_EQ(r.results[6].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[6].reason.find("sluice-* are sluice's own"), std::string::npos) << r.results[6].reason;

  ASSERT_EQ(routed_["orders.eu"]->applied.size(), 1u);
  const ChangeEvent& eu = routed_["orders.eu"]->applied[0];
  EXPECT_EQ(eu.entity_id, "a");
  EXPECT_EQ(eu.record_key, "eu/a");
  ASSERT_EQ(eu.record_headers.size(), 1u);
  EXPECT_EQ(eu.record_headers[0], std::make_pair(std::string("region"), std::string("eu")));
  // A log keeps every event where it went: no delete follows a move, and
  // the delete goes where route() sends it (here by the state before).
  ASSERT_EQ(routed_["orders.us"]->applied.size(), 3u);
  EXPECT_EQ(routed_["orders.us"]->applied[0].entity_id, "b");
  EXPECT_EQ(routed_["orders.us"]->applied[1].version, 2u);
  EXPECT_TRUE(routed_["orders.us"]->applied[2].deleted);
  ASSERT_EQ(routed_["orders"]->applied.size(), 1u);  // null: the sink's own
  EXPECT_EQ(routed_["orders"]->applied[0].entity_id, "c");
  EXPECT_TRUE(routed_["orders"]->applied[0].record_key.empty());

  // verify compares each destination with the events routed to it.
  std::vector<Difference> diffs;
  EventsHistory history(events, 2);
  ASSERT_TRUE(sink->VerifyHistory(history, diffs).ok());
  EXPECT_EQ(routed_["orders.eu"]->history.size(), 1u);
  EXPECT_EQ(routed_["orders.us"]->history.size(), 3u);
  EXPECT_EQ(routed_["orders"]->history.size(), 1u);
  EXPECT_EQ(history.rewinds(), 2) << "each destination after the first reads the history again";
  // Pages of 2: the first page of the partition holds none of orders'
  // events, which is not the end of them.
  EXPECT_EQ(routed_["orders"]->history.at(0).entity_id, "c");
}

// What lets a destination free what it holds reaches every destination: a
// kafka view by code closes its idle producers and those of partitions the
// engine lost, like a kafka sink without code.
TEST_F(ViewSinkTest, IdleAndReleasedReachEveryDestination) {
  auto sink = MakeRouted(kRouteByRegion, /*log=*/true);
  ASSERT_TRUE(sink);
  sink->Idle();
  const std::vector<uint32_t> lost = {2, 5};
  sink->Released(lost);
  for (const auto& [name, d] : routed_) {
    EXPECT_EQ(d->idle_calls, 1) << name;
    EXPECT_EQ(d->released, lost) << name;
  }
}

TEST_F(ViewSinkTest, APointViewMovesAnEntityWithAVersionedDelete) {
  auto sink = MakeRouted(R"JS(
function route(e) { return e.state.region === 'other' ? null : 'orders.' + e.state.region; }
function transform(e) { return {region: e.state.region, v: e.version}; }
)JS",
                         /*log=*/false);
  ASSERT_NE(sink, nullptr);
  const std::vector<ChangeEvent> events = {Order("a", 1, "eu"), Order("a", 2, "us", "eu"), Order("a", 3, "us", "us"),
                                           Order("a", 4, "", "us"), Order("b", 7, "other", "mars")};
  ApplyResult r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(r.results[i].outcome, Outcome::kApplied) << i;
  const auto& eu = routed_["orders.eu"]->applied;
  const auto& us = routed_["orders.us"]->applied;
  const auto& own = routed_["orders"]->applied;
  // eu: the document at 1, out at 2 (moved to us), out at 4 (deleted), out at 7 ('mars' fails route()).
  ASSERT_EQ(eu.size(), 4u);
  EXPECT_FALSE(eu[0].deleted);
  EXPECT_EQ(eu[0].state, R"({"region":"eu","v":1})");
  EXPECT_TRUE(eu[1].deleted);
  EXPECT_EQ(eu[1].version, 2u);
  EXPECT_TRUE(eu[2].deleted);
  EXPECT_EQ(eu[2].version, 4u);
  EXPECT_EQ(eu[3].entity_id, "b");
  EXPECT_TRUE(eu[3].deleted);
  // us: in at 2 and 3 (no move: nothing deleted elsewhere), out at 4 and 7.
  ASSERT_EQ(us.size(), 4u);
  EXPECT_EQ(us[0].version, 2u);
  EXPECT_EQ(us[1].version, 3u);
  EXPECT_TRUE(us[2].deleted);
  EXPECT_TRUE(us[3].deleted);
  ASSERT_EQ(own.size(), 2u);
  EXPECT_TRUE(own[0].deleted);  // the delete at 4 reaches every destination
  EXPECT_EQ(own[1].entity_id, "b");
  EXPECT_FALSE(own[1].deleted);

  // A key is a kafka record's: a point view refuses the event.
  auto keyed = MakeRouted("function route(e) { return {to: 'orders.eu', key: 'k'}; }\n", /*log=*/false);
  ASSERT_NE(keyed, nullptr);
  r = keyed->Apply(std::vector<ChangeEvent>{Order("a", 1, "eu")});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.results[0].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[0].reason.find("key or headers"), std::string::npos) << r.results[0].reason;
}

TEST_F(ViewSinkTest, VerifyOfARoutedPointViewGivesEachDestinationItsEntities) {
  auto sink = MakeRouted("function route(e) { return 'orders.' + e.state.region; }\n", /*log=*/false);
  ASSERT_NE(sink, nullptr);
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->Verify({{"a", 3, false, R"({"region":"eu"})"}, {"b", 2, false, R"({"region":"us"})"},
                            {"c", 5, true, ""}},
                           diffs)
                  .ok());
  ASSERT_EQ(routed_["orders.eu"]->verified.size(), 2u);  // a, and c (deleted: absent everywhere)
  EXPECT_EQ(routed_["orders.eu"]->verified[0].entity_id, "a");
  EXPECT_TRUE(routed_["orders.eu"]->verified[1].deleted);
  ASSERT_EQ(routed_["orders.us"]->verified.size(), 2u);
  EXPECT_EQ(routed_["orders.us"]->verified[0].entity_id, "b");
  ASSERT_EQ(routed_["orders"]->verified.size(), 1u);
}

TEST_F(ViewSinkTest, RoutesAndRouteMustComeTogether) {
  config::SinkConfig c;
  c.name = "view";
  c.type = "kafka";
  c.entity = "order";
  c.routes = {"orders.eu"};
  c.code = dir_.Write("noroute.js", "function transform(e) { return e.state; }\n").string();
  std::vector<ViewSink::Destination> destinations;
  destinations.push_back({"orders", std::make_unique<RecordingSink>()});
  destinations.push_back({"orders.eu", std::make_unique<RecordingSink>()});
  auto made = ViewSink::Wrap(c, "topic", std::move(destinations));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("defines no route(event)"), std::string::npos) << made.status().message();
  // route() on a type without destinations (redis, mysql, plugins).
  c.type = "redis";
  c.routes.clear();
  c.code = dir_.Write("route.js", "function route(e) { return null; }\n").string();
  made = ViewSink::Wrap(c, std::make_unique<RecordingSink>());
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("a redis sink has no destinations"), std::string::npos)
      << made.status().message();
}

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

TEST_F(ViewSinkTest, AFilterResultCountsAsJavaScriptCountsIt) {
  auto sink = Make(R"JS(
function filter(e) {
  switch (e.id) {
    case 'fn': return function () {};   // truthy, though its JSON is nothing
    case 'obj': return {};
    case 'str': return 'yes';
    case 'nan': return NaN;
    case 'undef': return undefined;
    case 'later-yes': return Promise.resolve({});
    case 'later-no': return Promise.resolve(0);
    default: return '';
  }
}
)JS");
  ASSERT_NE(sink, nullptr);
  std::vector<ChangeEvent> events;
  for (const char* id : {"fn", "obj", "str", "nan", "undef", "empty", "later-yes", "later-no"}) {
    events.push_back(Event(id, 1, "{}"));
  }
  ApplyResult r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok());
  ASSERT_EQ(recorder_->applied.size(), events.size());
  std::map<std::string, bool> in_view;
  for (const ChangeEvent& e : recorder_->applied) in_view[e.entity_id] = !e.deleted;
  EXPECT_EQ(in_view, (std::map<std::string, bool>{{"fn", true}, {"obj", true}, {"str", true}, {"nan", false},
                                                   {"undef", false}, {"empty", false}, {"later-yes", true},
                                                   {"later-no", false}}));
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

TEST_F(ViewSinkTest, CodeRunAheadOnAnotherThreadGivesWhatApplyAloneGives) {
  const std::string code = R"JS(
function filter(e) { if (e.id === 'bad') throw new Error('bad one'); return e.state.balance % 2 === 0; }
function transform(e) { return {b: e.state.balance, was: e.before ? e.before.balance : null}; }
)JS";
  std::vector<ChangeEvent> events;
  for (uint64_t v = 1; v <= 500; ++v) {  // enough for the pool's workers to take slices
    events.push_back(Event(v == 7 ? "bad" : "a", v, R"({"balance":)" + std::to_string(v) + "}",
                           v > 1 ? R"({"balance":)" + std::to_string(v - 1) + "}" : ""));
  }
  auto alone = Make(code);
  ASSERT_NE(alone, nullptr);
  EXPECT_TRUE(alone->capabilities().prepares);
  const ApplyResult want = alone->Apply(events);
  const std::vector<ChangeEvent> want_applied = recorder_->applied;

  auto ahead = Make(code);
  ASSERT_NE(ahead, nullptr);
  std::vector<ChangeEvent> prepared = events;
  std::thread reader([&] { ahead->Prepare(prepared); });  // the engine's reader thread
  reader.join();
  for (const ChangeEvent& e : prepared) ASSERT_NE(e.prepared, nullptr);
  const ApplyResult got = ahead->Apply(prepared);
  ASSERT_TRUE(got.status.ok());
  ASSERT_EQ(got.results.size(), want.results.size());
  for (size_t i = 0; i < got.results.size(); ++i) {
    EXPECT_EQ(got.results[i].outcome, want.results[i].outcome) << i;
    EXPECT_EQ(got.results[i].reason, want.results[i].reason) << i;
  }
  EXPECT_NE(got.results[6].reason.find("bad one"), std::string::npos) << got.results[6].reason;
  ASSERT_EQ(recorder_->applied.size(), want_applied.size());
  for (size_t i = 0; i < want_applied.size(); ++i) {
    EXPECT_EQ(recorder_->applied[i].state, want_applied[i].state) << i;
    EXPECT_EQ(recorder_->applied[i].deleted, want_applied[i].deleted) << i;
    EXPECT_EQ(recorder_->applied[i].version, want_applied[i].version) << i;
    EXPECT_EQ(recorder_->applied[i].prepared, nullptr);  // the inner sink never sees the wrapper's plan
  }
}

TEST_F(ViewSinkTest, APoolRunsEveryEventOnceEachRuntimeOnItsOwnThread) {
  config::SinkConfig c;
  c.name = "view";
  c.code = dir_.Write("pool.js", "function transform(e) { return {v: e.version * 2}; }\n").string();
  auto code = ViewCode::LoadFor(c, ViewCode::Purpose::kShape);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  // The pool runs the text the sink loaded, not what the file says now.
  dir_.Write("pool.js", "function transform(e) { return {changed: true}; }\n");
  auto pool = ViewCodePool::Make(**code, 3);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  for (size_t n : {0, 1, 10, 1000, 4097}) {
    std::vector<std::string> docs(n);
    std::vector<std::thread::id> ran_on(n);
    std::map<const ViewCode*, std::set<std::thread::id>> threads_of;
    std::mutex mu;
    ASSERT_TRUE((*pool)
                    ->ForEach(n,
                              [&](ViewCode& runtime, size_t i) {
                                ChangeEvent e = Event("a", i + 1, "{}");
                                docs[i] = runtime.Shape(e).document;
                                ran_on[i] = std::this_thread::get_id();
                                std::lock_guard lock(mu);
                                threads_of[&runtime].insert(std::this_thread::get_id());
                              })
                    .ok());
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(docs[i], "{\"v\":" + std::to_string((i + 1) * 2) + "}") << n << " " << i;
    for (const auto& [code, threads] : threads_of) EXPECT_EQ(threads.size(), 1u) << "a runtime ran on two threads";
    if (n >= 1000) {
      EXPECT_EQ(threads_of.size(), 3u) << n;  // every runtime took a slice
    }
    if (n > 0 && n <= 10) {
      EXPECT_EQ(std::set<std::thread::id>(ran_on.begin(), ran_on.end()).size(), 1u);  // small: the caller alone
    }
  }
  // A slice that throws: every slice stops, the pool says so and still works.
  for (size_t throw_at : {size_t{5}, size_t{999}}) {
    Status st = (*pool)->ForEach(1000, [&](ViewCode&, size_t i) {
      if (i == throw_at) throw std::runtime_error("boom");
    });
    EXPECT_EQ(st.code(), StatusCode::kInternal);
    EXPECT_NE(st.message().find("boom"), std::string::npos) << st.message();
  }
  EXPECT_TRUE((*pool)->ForEach(1000, [](ViewCode&, size_t) {}).ok());
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
  EXPECT_NE(made.status().message().find("none of filter(event), transform(event) and route(event)"), std::string::npos);
}

}  // namespace
}  // namespace sluice::connectors
