#include "handlers/js_runtime.h"

#include <array>
#include <time.h>

#include <cstdio>
#include <thread>

#include <gtest/gtest.h>

namespace sluice::handlers {
namespace {

constexpr char kAccount[] = R"JS(
function _amount(request) {
  if (typeof request.amount !== 'number' || request.amount <= 0) throw new Error('amount must be a positive number');
  return request.amount;
}
function deposit(state, request, ctx) {
  state.balance = (state.balance || 0) + _amount(request);
  return {balance: state.balance, version: ctx.version, id: ctx.command_id};
}
function withdraw(state, request) {
  var a = _amount(request);
  if ((state.balance || 0) < a) throw new Error('insufficient funds');
  state.balance -= a;
  return {balance: state.balance};
}
)JS";

JsLimits SmallLimits() {
  JsLimits l;
  l.timeout = std::chrono::milliseconds(50);
  l.memory_bytes = size_t{4} << 20;
  return l;
}

std::unique_ptr<JsRuntime> MustCreate(const std::string& source, JsLimits limits = SmallLimits()) {
  auto rt = JsRuntime::Create("test.js", source, limits);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return rt.ok() ? std::move(rt).value() : nullptr;
}

JsContext Ctx(uint64_t version = 0, int64_t now_ms = 1'700'000'000'000) {
  JsContext c;
  c.command_id = "cmd-1";
  c.version = version;
  c.exists = version > 0;
  c.now_ms = now_ms;
  return c;
}

TEST(JsRuntime, ListsTopLevelFunctionsAsCommandsButNotHelpers) {
  auto rt = MustCreate(kAccount);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->commands(), (std::vector<std::string>{"deposit", "withdraw"}));
  EXPECT_TRUE(rt->HasCommand("deposit"));
  EXPECT_FALSE(rt->HasCommand("_amount"));
}

TEST(JsRuntime, MutatesStateInPlaceAndReturnsTheResponse) {
  auto rt = MustCreate(kAccount);
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("deposit", Json{{"balance", 5}, {"owner", "ann"}}, Json{{"amount", 7}}, Ctx(3));
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.state, (Json{{"balance", 12}, {"owner", "ann"}}));
  EXPECT_EQ(out.response, (Json{{"balance", 12}, {"version", 3}, {"id", "cmd-1"}}));
}

TEST(JsRuntime, ThrowRejectsWithTheMessage) {
  auto rt = MustCreate(kAccount);
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("withdraw", Json{{"balance", 5}}, Json{{"amount", 7}}, Ctx(1));
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected);
  EXPECT_EQ(out.message, "insufficient funds");
  // A TypeError from a handler bug names its type; a thrown string is kept as it is.
  auto rt2 = MustCreate("function a(s) { return s.x.y; }\nfunction b() { throw 'plain text'; }");
  ASSERT_NE(rt2, nullptr);
  out = rt2->Call("a", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected);
  EXPECT_EQ(out.message.rfind("TypeError: ", 0), 0u) << out.message;
  out = rt2->Call("b", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.message, "plain text");
}

TEST(JsRuntime, StateAndRequestArriveAsJsonParseWouldMakeThem) {
  auto rt = MustCreate("function echo(s, r) { s.copy = r; return [typeof r.i, typeof r.f, r.u.length, Object.keys(r)]; }");
  ASSERT_NE(rt, nullptr);
  const Json state = Json::parse(R"({"a":[1,-2,3.5,null,true,"x",{"b":[]}],"big":9007199254740993,"e":"\u00e9\ud83d\ude00","z":{}})");
  const Json request = Json::parse(R"({"u":"h\u00e9","i":-7,"f":0.1,"n":null,"o":{"k":[{"d":1e300}]}})");
  JsOutcome out = rt->Call("echo", state, request, Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  Json expected = state;
  expected["big"] = 9007199254740992.0;  // a double, as JSON.parse makes it
  expected["copy"] = request;
  EXPECT_EQ(out.state, expected);
  EXPECT_EQ(out.response, Json::parse(R"(["number","number",2,["f","i","n","o","u"]])"));
  // Deeper than JSON.parse would accept: rejected, not a crash.
  Json deep = Json::array();
  for (int i = 0; i < 1200; ++i) deep = Json::array({deep});
  out = rt->Call("echo", Json::object(), Json{{"d", deep}}, Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected);
  EXPECT_NE(out.message.find("nested too deeply"), std::string::npos) << out.message;
}

TEST(JsRuntime, UndefinedReturnIsNullResponse) {
  auto rt = MustCreate("function touch(s) { s.touched = true; }");
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("touch", Json::object(), Json::object(), Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_TRUE(out.response.is_null());
  EXPECT_EQ(out.state, (Json{{"touched", true}}));
}

TEST(JsRuntime, ClockIsTheContextTimestampAndRandomIsRefused) {
  auto rt = MustCreate(R"JS(
function stamp(s, r, ctx) { return {now: Date.now(), date: new Date().toISOString(), ctx: ctx.now, hour: new Date().getHours()}; }
function roll() { return Math.random(); }
)JS");
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("stamp", Json::object(), Json::object(), Ctx(0, 86'400'000 + 3'600'000));
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.response["now"], 90'000'000);
  EXPECT_EQ(out.response["ctx"], 90'000'000);
  EXPECT_EQ(out.response["date"], "1970-01-02T01:00:00.000Z");
  EXPECT_EQ(out.response["hour"], 1);  // local time is UTC
  out = rt->Call("roll", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected);
  EXPECT_NE(out.message.find("Math.random() is not allowed"), std::string::npos) << out.message;
}

TEST(JsRuntime, GlobalsCannotCarryStateBetweenCalls) {
  auto rt = MustCreate(R"JS(
var count = 0;
function bump() { 'use strict'; count += 1; return count; }
function leak() { 'use strict'; globalThis.kept = 1; }
)JS");
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("bump", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected);  // the frozen global's var is read-only
  EXPECT_NE(out.message.find("TypeError"), std::string::npos) << out.message;
  out = rt->Call("leak", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected);
}

TEST(JsRuntime, InfiniteLoopIsStoppedAndTheRuntimeCarriesOn) {
  auto rt = MustCreate(std::string(kAccount) +
                       "function spin() { for (;;) {} }\n"
                       "function stubborn() { for (;;) { try { for (;;) {} } catch (e) {} } }\n"
                       "function last_word() { try { for (;;) {} } finally { throw new Error('not this'); } }\n"
                       "function later() { Promise.resolve().then(() => { for (;;) {} }); for (;;) {} }\n");
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("spin", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kTimeout);
  EXPECT_NE(out.message.find("handler_timeout"), std::string::npos) << out.message;
  out = rt->Call("stubborn", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kTimeout) << out.message;
  out = rt->Call("last_word", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kTimeout) << out.message;
  // A promise job the stopped call queued does not run in the next call.
  out = rt->Call("later", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kTimeout) << out.message;
  EXPECT_EQ(rt->rebuilds(), 4u);
  out = rt->Call("deposit", Json::object(), Json{{"amount", 1}}, Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.state["balance"], 1);
}

TEST(JsRuntime, MemoryHogIsStoppedAndTheRuntimeCarriesOn) {
  auto rt = MustCreate(std::string(kAccount) +
                       "function hog() { var a = []; for (;;) a.push('x'.repeat(1000) + a.length); }\n"
                       // Few, large strings (flat: SpiderMonkey's repeat() alone builds a rope).
                       "function big() { var a = []; for (;;) a.push('y'.repeat(1 << 20).toUpperCase()); }\n");
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("hog", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kOutOfMemory) << out.message;
  // SpiderMonkey counts a string's characters against the realm only once the
  // string leaves the nursery, so a few large strings can outgrow the limit
  // until the time limit stops them (docs/handlers.md); either way the call
  // is stopped and the realm rebuilt.
  out = rt->Call("big", Json::object(), Json::object(), Ctx());
  EXPECT_TRUE(out.kind == JsOutcome::Kind::kOutOfMemory || out.kind == JsOutcome::Kind::kTimeout) << out.message;
  out = rt->Call("deposit", Json{{"balance", 2}}, Json{{"amount", 1}}, Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.state["balance"], 3);
}

int64_t ThreadCpuNanosForTest() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// handler_timeout holds whatever a runaway handler calls: loops over native
// functions (which run no bytecode, so the executor's own check came too
// late: 3.45 s of CPU against 50 ms), allocation-heavy loops (456 s), and
// a regular expression that backtracks for ever (no bytecode at all). The
// CPU the call takes, rebuilding the heap included, is what the other
// entities of the partition wait for: at most about twice the limit.
TEST(JsRuntime, RunawayHandlersStopWithinTwiceTheirCpuLimit) {
  JsLimits limits;
  limits.timeout = std::chrono::milliseconds(50);
  limits.memory_bytes = size_t{512} << 20;  // the timeout, not the heap, must stop them
  auto rt = MustCreate(std::string(kAccount) +
                           "function joins() { for (;;) new Array(1000).join('x'); }\n"
                           "function pushes() { var a = []; for (;;) a.push(new Array(100000).join('x')); }\n"
                           "function caught() { for (;;) { try { new Array(100000).join('x'); } catch (e) {} } }\n"
                           "function regex() { return /^(a+)+$/.test('a'.repeat(40) + '!'); }\n"
                           "function sorts() { var a = []; for (var i = 0; i < 300000; i++) a.push(i * 7919 % 300007);"
                           " for (;;) { a.sort(); a.reverse(); } }\n"
                           "function grows() { var s = 'x'; for (;;) { s = s + s; if (s.length > (1 << 26)) s = 'x'; } }\n",
                       limits);
  ASSERT_NE(rt, nullptr);
  for (const char* name : {"joins", "pushes", "caught", "regex", "sorts", "grows"}) {
    const int64_t before = ThreadCpuNanosForTest();
    JsOutcome out = rt->Call(name, Json::object(), Json::object(), Ctx());
    const double used_ms = static_cast<double>(ThreadCpuNanosForTest() - before) / 1e6;
    EXPECT_EQ(out.kind, JsOutcome::Kind::kTimeout) << name << ": " << out.message;
    EXPECT_LE(used_ms, 2 * 50.0) << name << " used " << used_ms << " ms of CPU against a 50 ms limit";
    std::printf("%s: %.1f ms of CPU\n", name, used_ms);
    // And the runtime carries on.
    out = rt->Call("deposit", Json::object(), Json{{"amount", 1}}, Ctx());
    ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << name << ": " << out.message;
  }
}

TEST(JsRuntime, UnserialisableResultIsReported) {
  auto rt = MustCreate("function cyc(s) { s.self = s; }\nfunction wipe(s) { s.a = 1; return {r: function () {}}; }");
  ASSERT_NE(rt, nullptr);
  JsOutcome out = rt->Call("cyc", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kInvalidResult) << out.message;
  // Functions are dropped as JSON.stringify drops them.
  out = rt->Call("wipe", Json::object(), Json::object(), Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.response, Json::object());
}

// A handler can nest the state one level deeper per command; what it leaves
// is held to max_json_depth like a request body, so stored states stay
// within what every later parse accepts.
TEST(JsRuntime, ResultDeeperThanMaxJsonDepthIsInvalid) {
  JsLimits limits = SmallLimits();
  limits.max_json_depth = 10;
  auto rt = MustCreate("function wrap(s) { s.inner = {x: s.inner || null}; }\n"
                       "function deep() { var r = 1; for (var i = 0; i < 10; i++) r = [r]; return r; }\n",
                       limits);
  ASSERT_NE(rt, nullptr);
  Json state = Json::object();
  for (int depth = 2; depth <= 10; ++depth) {
    JsOutcome out = rt->Call("wrap", state, Json::object(), Ctx());
    ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << "depth " << depth << ": " << out.message;
    state = out.state;
    EXPECT_EQ(JsonDepth(state), static_cast<uint32_t>(depth));
  }
  JsOutcome out = rt->Call("wrap", state, Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kInvalidResult) << out.message;
  EXPECT_NE(out.message.find("deeper than 10"), std::string::npos) << out.message;
  out = rt->Call("deep", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;  // exactly 10 levels
}

TEST(JsRuntime, SyntaxErrorNamesFileAndLine) {
  auto rt = JsRuntime::Create("handlers/bad.js", "function ok() {}\n\nfunction broken() { return 1 +; }\n", SmallLimits());
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().message().rfind("handlers/bad.js:3: SyntaxError", 0), 0u) << rt.status().message();
}

TEST(JsRuntime, TopLevelThrowAndLoopAndBadNamesFailTheLoad) {
  auto thrown = JsRuntime::Create("t.js", "function a() {}\nthrow new Error('boom');", SmallLimits());
  ASSERT_FALSE(thrown.ok());
  EXPECT_EQ(thrown.status().message(), "t.js:2: Error: boom");
  auto loop = JsRuntime::Create("t.js", "function a() {}\nwhile (true) {}", SmallLimits());
  ASSERT_FALSE(loop.ok());
  EXPECT_NE(loop.status().message().find("handler_timeout"), std::string::npos) << loop.status().message();
  // The top level's promise jobs run within its limits, not in a later call.
  auto job = JsRuntime::Create("t.js", "function a() {}\nPromise.resolve().then(() => { for (;;) {} });", SmallLimits());
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("handler_timeout"), std::string::npos) << job.status().message();
  auto after = MustCreate(kAccount);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->Call("deposit", Json::object(), Json{{"amount", 1}}, Ctx()).kind, JsOutcome::Kind::kApplied);
  auto none = JsRuntime::Create("t.js", "var x = 1;", SmallLimits());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("defines no command"), std::string::npos);
  auto builtin = JsRuntime::Create("t.js", "function patch() {}", SmallLimits());
  ASSERT_FALSE(builtin.ok());
  EXPECT_NE(builtin.status().message().find("built-in"), std::string::npos);
  auto upper = JsRuntime::Create("t.js", "function Deposit() {}", SmallLimits());
  ASSERT_FALSE(upper.ok());
  EXPECT_NE(upper.status().message().find("not a valid command name"), std::string::npos);
}

TEST(JsRuntime, RuntimesShareNothing) {
  auto a = MustCreate("function set(s, r) { s.v = r.v; return Object.keys(this).length; }");
  auto b = MustCreate("function set(s, r) { s.w = r.v; }");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->Call("set", Json::object(), Json{{"v", 1}}, Ctx()).state, (Json{{"v", 1}}));
  EXPECT_EQ(b->Call("set", Json::object(), Json{{"v", 2}}, Ctx()).state, (Json{{"w", 2}}));
}

// SpiderMonkey has one context per thread and a realm belongs to the context
// that made it; a runtime made on one thread, called on another and
// destroyed on a third rebuilds its realm where it is called and never
// touches a realm from the wrong thread.
TEST(JsRuntime, MadeCalledAndDestroyedOnDifferentThreads) {
  std::unique_ptr<JsRuntime> rt;
  std::thread([&] { rt = MustCreate(kAccount); }).join();
  ASSERT_NE(rt, nullptr);
  for (int round = 0; round < 3; ++round) {
    std::thread([&] {
      for (int i = 0; i < 3; ++i) {
        JsOutcome out = rt->Call("deposit", Json{{"balance", i}}, Json{{"amount", 1}}, Ctx());
        ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
        EXPECT_EQ(out.state["balance"], i + 1);
      }
      JsOutcome out = rt->Call("withdraw", Json{{"balance", 0}}, Json{{"amount", 1}}, Ctx());
      EXPECT_EQ(out.message, "insufficient funds");
    }).join();  // the thread exits: its context goes, and the realm with it
  }
  // Called here too, while the realm of a live thread was abandoned.
  JsOutcome out = rt->Call("deposit", Json::object(), Json{{"amount", 2}}, Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  std::thread([&] { rt.reset(); }).join();
  // This thread's engine releases what other threads gave up at its next use.
  auto again = MustCreate(kAccount);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->Call("deposit", Json::object(), Json{{"amount", 3}}, Ctx()).state["balance"], 3);
}

TEST(JsRuntime, ManyRuntimesOnOneThreadAndLimitsPerRuntime) {
  // The memory limit is what stops the hog: its time limit is far off, so
  // that a machine short of CPU cannot stop it by time first.
  JsLimits limits = SmallLimits();
  limits.timeout = std::chrono::seconds(10);
  std::vector<std::unique_ptr<JsRuntime>> runtimes;
  for (int i = 0; i < 40; ++i) {
    runtimes.push_back(
        MustCreate(std::string(kAccount) + "function hog() { var a = []; for (;;) a.push({i: a.length}); }\n", limits));
    ASSERT_NE(runtimes.back(), nullptr) << i;
  }
  for (size_t i = 0; i < runtimes.size(); ++i) {
    JsOutcome out = runtimes[i]->Call("deposit", Json{{"balance", 1}}, Json{{"amount", 1}}, Ctx());
    ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << i << ": " << out.message;
  }
  // One runtime's runaway call leaves the others alone.
  EXPECT_EQ(runtimes[7]->Call("hog", Json::object(), Json::object(), Ctx()).kind, JsOutcome::Kind::kOutOfMemory);
  for (auto& rt : runtimes) {
    ASSERT_EQ(rt->Call("deposit", Json::object(), Json{{"amount", 1}}, Ctx()).kind, JsOutcome::Kind::kApplied);
  }
  // Threads that each make and call runtimes at the same time.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 5; ++i) {
        auto rt = MustCreate(kAccount);
        ASSERT_NE(rt, nullptr);
        JsOutcome out = rt->Call("deposit", Json::object(), Json{{"amount", t + i + 1}}, Ctx());
        ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
        EXPECT_EQ(out.state["balance"], t + i + 1);
      }
    });
  }
  for (auto& th : threads) th.join();
}

constexpr char kModern[] = R"JS(
const _fee = 2;
class _Ledger {
  #total = 0;
  constructor(entries = []) { this.entries = [...entries]; }
  add({amount, note = 'none'}) { this.entries.push({amount, note}); this.#total += amount; return this; }
  get total() { return this.#total; }
}
const deposit = (state, request, {now}) => {
  const ledger = new _Ledger(state.entries ?? []).add(request);
  const {total} = ledger;
  state.entries = ledger.entries;
  state.last = request.meta?.source ?? `at ${new Date(now).toISOString()}`;
  return {total, count: state.entries.length, fee: _fee, big: 2n ** 64n === 18446744073709551616n};
};
async function later(state) { state.done = await Promise.resolve(true); return 'ok'; }
function transform(event) { const {id, ...rest} = event; return {key: `k-${id}`, ...rest, n: rest.n ?? 0}; }
)JS";

TEST(JsRuntime, HandlersAndViewCodeAcceptEs2020) {
  auto rt = MustCreate(kModern);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->commands(), (std::vector<std::string>{"deposit", "later", "transform"}));
  JsOutcome out = rt->Call("deposit", Json::object(), Json{{"amount", 5}}, Ctx(0, 0));
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.response, (Json{{"total", 5}, {"count", 1}, {"fee", 2}, {"big", true}}));
  EXPECT_EQ(out.state["last"], "at 1970-01-01T00:00:00.000Z");
  out = rt->Call("later", Json::object(), Json::object(), Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.state, (Json{{"done", true}}));
  EXPECT_EQ(out.response, "ok");

  auto view = JsRuntime::Create("view.js", kModern, SmallLimits(), JsPurpose::kViewCode);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  JsValueOutcome v = (*view)->CallJson("transform", R"({"id":7,"a":[1,2]})", 0);
  ASSERT_EQ(v.kind, JsOutcome::Kind::kApplied) << v.message;
  EXPECT_EQ(Json::parse(v.json), Json::parse(R"({"key":"k-7","a":[1,2],"n":0})"));
  // Top-level `let` and class bindings are frozen with the global object, as
  // a top-level `var` is: they cannot carry state from call to call.
  auto let = MustCreate("let count = 0;\nclass _K {}\nfunction bump() { return ++count; }\nfunction swap() { 'use strict'; _K = 1; }\nfunction get() { return count; }");
  ASSERT_NE(let, nullptr);
  out = let->Call("bump", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected);
  EXPECT_EQ(out.message.rfind("TypeError: ", 0), 0u) << out.message;
  out = let->Call("swap", Json::object(), Json::object(), Ctx());
  EXPECT_EQ(out.kind, JsOutcome::Kind::kRejected) << out.message;
  out = let->Call("get", Json::object(), Json::object(), Ctx());
  ASSERT_EQ(out.kind, JsOutcome::Kind::kApplied) << out.message;
  EXPECT_EQ(out.response, 0);
}

TEST(JsRuntime, CallJsonErrorsNameFileAndLine) {
  auto rt = JsRuntime::Create("view.js", "function f(e) {\n  if (e.bad) throw new Error('bad event');\n  return e.n > 1 ? undefined : e; }\nfunction g(e) { e.self = e; return e; }\n", SmallLimits(), JsPurpose::kViewCode);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  JsValueOutcome v = (*rt)->CallJson("f", R"({"bad":true})", 0);
  EXPECT_EQ(v.kind, JsOutcome::Kind::kRejected);
  EXPECT_EQ(v.message, "view.js:2: Error: bad event");
  v = (*rt)->CallJson("f", R"({"n":2})", 0);
  EXPECT_EQ(v.json, "null");
  v = (*rt)->CallJson("g", R"({})", 0);
  EXPECT_EQ(v.kind, JsOutcome::Kind::kInvalidResult) << v.message;
}


TEST(JsRuntime, LazyMembersAreParsedOnlyWhenRead) {
  auto rt = JsRuntime::Create("view.js", R"JS(
JSON.parse = function () { throw new Error('replaced'); };  // changes nothing for lazy members
function shallow(e) { return {id: e.id}; }
function deep(e) { return {was: e.before.n, req: e.request, none: e.response, keys: Object.keys(e)}; }
function writes(e) { e.before = 7; return {before: e.before}; }
)JS", SmallLimits(), JsPurpose::kViewCode);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  const std::pair<std::string_view, std::string_view> broken[] = {{"before", "{not json"}, {"request", "{}"}};
  // Never read: a text that does not parse costs nothing and breaks nothing.
  JsValueOutcome v = (*rt)->CallJsonLazy("shallow", R"({"id":"a"})", broken, 0);
  ASSERT_EQ(v.kind, JsOutcome::Kind::kApplied) << v.message;
  EXPECT_EQ(v.json, R"({"id":"a"})");
  v = (*rt)->CallJsonLazy("deep", R"({"id":"a"})", broken, 0);
  EXPECT_EQ(v.kind, JsOutcome::Kind::kRejected);
  EXPECT_NE(v.message.find("SyntaxError"), std::string::npos) << v.message;
  const std::pair<std::string_view, std::string_view> good[] = {
      {"before", R"({"n":4})"}, {"request", R"({"amount":5})"}, {"response", ""}};
  v = (*rt)->CallJsonLazy("deep", R"({"id":"a"})", good, 0);
  ASSERT_EQ(v.kind, JsOutcome::Kind::kApplied) << v.message;
  EXPECT_EQ(ParseJsonOrDiscarded(v.json),
            ParseJsonOrDiscarded(R"({"was":4,"req":{"amount":5},"none":null,"keys":["id","before","request","response"]})"));
  v = (*rt)->CallJsonLazy("writes", R"({"id":"a"})", good, 0);
  ASSERT_EQ(v.kind, JsOutcome::Kind::kApplied) << v.message;
  EXPECT_EQ(v.json, R"({"before":7})");
}

// CallJsonMany answers each call as CallJsonLazy would (kind, JSON text,
// message), whatever the call does: returns, throws, returns undefined, a
// function, a promise, a cycle or a BigInt, reads its lazy members or Date.
TEST(JsRuntime, CallJsonManyAnswersEachCallAsCallJsonLazy) {
  const std::string code = R"JS(
function f(e) {
  if (e.n % 7 === 3) throw new Error('bad ' + e.n);
  if (e.n % 11 === 5) return undefined;
  if (e.n % 13 === 6) return function () {};
  if (e.n % 17 === 8) return (async () => ({late: e.n, now: Date.now()}))();
  if (e.n % 19 === 9) { const o = {}; o.o = o; return o; }
  if (e.n % 23 === 10) return 10n;
  return {n: e.n, now: Date.now(), was: e.before && e.before.v, s: e.before && e.before.s, req: e.request,
          keys: Object.keys(e).join(',')};
}
)JS";
  auto many = JsRuntime::Create("view.js", code, SmallLimits(), JsPurpose::kViewCode);
  auto alone = JsRuntime::Create("view.js", code, SmallLimits(), JsPurpose::kViewCode);
  ASSERT_TRUE(many.ok() && alone.ok());
  std::vector<std::string> args, befores;
  for (int n = 0; n < 300; ++n) {
    args.push_back(R"({"n":)" + std::to_string(n) + "}");
    // Texts of ASCII (the escaped \u00e9) go to the code one way, the others
    // (raw UTF-8, calls 200..219) another.
    const std::string s = n >= 200 && n < 220 ? "caf\xc3\xa9" : "caf\\u00e9";
    befores.push_back(n % 3 == 0 ? "" : R"({"v":)" + std::to_string(n * 2) + R"(,"s":")" + s + R"( \"q\""})");
  }
  std::vector<std::array<std::pair<std::string_view, std::string_view>, 3>> lazy(args.size());
  std::vector<JsRuntime::LazyArg> calls;
  for (size_t n = 0; n < args.size(); ++n) {
    lazy[n] = {{{"request", n % 2 ? R"({"a":1})" : ""}, {"response", ""}, {"before", befores[n]}}};
    calls.push_back({args[n], lazy[n], static_cast<int64_t>(1'700'000'000'000 + n)});
  }
  const std::vector<JsValueOutcome> got = (*many)->CallJsonMany("f", calls);
  ASSERT_EQ(got.size(), calls.size());
  int applied = 0;
  for (size_t n = 0; n < calls.size(); ++n) {
    const JsValueOutcome want = (*alone)->CallJsonLazy("f", calls[n].arg, calls[n].lazy, calls[n].now_ms);
    EXPECT_EQ(static_cast<int>(got[n].kind), static_cast<int>(want.kind)) << n << ": " << got[n].message;
    EXPECT_EQ(got[n].json, want.json) << n;
    EXPECT_EQ(got[n].message, want.message) << n;
    applied += got[n].kind == JsOutcome::Kind::kApplied;
  }
  EXPECT_GT(applied, 200);
  EXPECT_GE((*many)->runs(), 2u);
  EXPECT_LT((*many)->calls_again(), calls.size() / 3);
  EXPECT_EQ(got[3].message, "view.js:3: Error: bad 3");
  EXPECT_EQ(ParseJsonOrDiscarded(got[1].json),
            ParseJsonOrDiscarded(R"({"n":1,"now":1700000000001,"was":2,"s":"caf\u00e9 \"q\"","req":{"a":1},)"
                                 R"("keys":"n,request,response,before"})"));
  EXPECT_EQ(ParseJsonOrDiscarded(got[202].json)["s"], "caf\u00e9 \"q\"");
}

// A call that runs away inside a run stops the run; it alone times out, and
// every other call of the run is answered.
TEST(JsRuntime, CallJsonManyStopsARunawayCallAlone) {
  auto rt = JsRuntime::Create("view.js", "function f(e) { if (e.n === 40) { for (;;) {} } return e.n; }\n", SmallLimits(),
                              JsPurpose::kViewCode);
  ASSERT_TRUE(rt.ok());
  std::vector<std::string> args;
  for (int n = 0; n < 100; ++n) args.push_back(R"({"n":)" + std::to_string(n) + "}");
  std::vector<JsRuntime::LazyArg> calls;
  for (const std::string& a : args) calls.push_back({a, {}, 0});
  const std::vector<JsValueOutcome> got = (*rt)->CallJsonMany("f", calls);
  for (size_t n = 0; n < got.size(); ++n) {
    if (n == 40) {
      EXPECT_EQ(got[n].kind, JsOutcome::Kind::kTimeout) << got[n].message;
    } else {
      ASSERT_EQ(got[n].kind, JsOutcome::Kind::kApplied) << n << ": " << got[n].message;
      EXPECT_EQ(got[n].json, std::to_string(n));
    }
  }
}

// Answers of CallJsonMany and CallJsonLazy on two runtimes of `code`, call by call.
void ExpectManyAsAlone(const std::string& code, const std::vector<std::string>& args,
                       const std::vector<std::string>& befores, JsLimits limits = SmallLimits()) {
  auto many = JsRuntime::Create("view.js", code, limits, JsPurpose::kViewCode);
  auto alone = JsRuntime::Create("view.js", code, limits, JsPurpose::kViewCode);
  ASSERT_TRUE(many.ok() && alone.ok()) << (many.ok() ? alone.status() : many.status()).ToString();
  std::vector<std::array<std::pair<std::string_view, std::string_view>, 1>> lazy(args.size());
  std::vector<JsRuntime::LazyArg> calls;
  for (size_t n = 0; n < args.size(); ++n) {
    lazy[n] = {{{"before", befores[n]}}};
    calls.push_back({args[n], lazy[n], static_cast<int64_t>(1'000 * (n + 1))});
  }
  // Twice: the second time the runs are long.
  for (int pass = 0; pass < 2; ++pass) {
    const std::vector<JsValueOutcome> got = (*many)->CallJsonMany("f", calls);
    for (size_t n = 0; n < calls.size(); ++n) {
      const JsValueOutcome want = (*alone)->CallJsonLazy("f", calls[n].arg, calls[n].lazy, calls[n].now_ms);
      EXPECT_EQ(static_cast<int>(got[n].kind), static_cast<int>(want.kind)) << n << ": " << got[n].message;
      EXPECT_EQ(got[n].json, want.json) << n;
      EXPECT_EQ(got[n].message, want.message) << n;
    }
  }
  EXPECT_GE((*many)->runs(), 1u);
}

std::vector<std::string> NumberedArgs(int count) {
  std::vector<std::string> args;
  for (int n = 0; n < count; ++n) args.push_back(R"({"n":)" + std::to_string(n) + "}");
  return args;
}

// Promise jobs a call queues run before its result is encoded and before the
// next call; an async function's result is its settled value, with the
// Date of its own call after an await; no call is made twice for it.
TEST(JsRuntime, CallJsonManyRunsEachCallsPromiseJobsBeforeTheNext) {
  const std::string code = R"JS(
async function later(e) { await null; return {n: e.n, now: Date.now()}; }
function f(e) {
  if (e.n % 2) return later(e);
  const o = {a: e.n};
  Promise.resolve().then(() => { o.b = Date.now(); });
  return o;
}
)JS";
  ExpectManyAsAlone(code, NumberedArgs(40), std::vector<std::string>(40, ""));
  auto rt = JsRuntime::Create("view.js", code, SmallLimits(), JsPurpose::kViewCode);
  ASSERT_TRUE(rt.ok());
  std::vector<std::string> args = NumberedArgs(64);
  std::vector<JsRuntime::LazyArg> calls;
  for (const std::string& a : args) calls.push_back({a, {}, 5});
  (void)(*rt)->CallJsonMany("f", calls);
  EXPECT_EQ((*rt)->calls_again(), 0u);  // settled in their runs, never made again
}

// A file that changes the built-ins the helper uses changes nothing of what
// the code sees; `this` is undefined in strict code, as alone.
TEST(JsRuntime, CallJsonManyIsProofAgainstChangedBuiltinsAndKeepsThis) {
  const std::string code = R"JS(
'use strict';
String.prototype.substring = function () { return '{"a":"hacked"}'; };
Object.defineProperty(Promise, Symbol.hasInstance, {value: () => false});
Object.defineProperty(Array.prototype, '3', {set(v) { throw new Error('setter'); }, configurable: true});
Function.prototype.call = function () { return 'called'; };
async function f(e) { return {n: e.n, was: e.before, self: typeof this, global: this === globalThis}; }
)JS";
  std::vector<std::string> befores;
  for (int n = 0; n < 20; ++n) befores.push_back(R"({"a":"xyz)" + std::to_string(n) + R"("})");
  ExpectManyAsAlone(code, NumberedArgs(20), befores);
}

// A lazy text that is not UTF-8 fails a call alone even when the code never
// reads it: it fails the same in a run.
TEST(JsRuntime, CallJsonManyRejectsWhatALoneCallRejects) {
  std::vector<std::string> befores(12, "");
  befores[5] = "{\"s\":\"caf\xc3\xa9\"}";
  befores[7] = "{\"s\":\"bad \xff\"}";
  ExpectManyAsAlone("function f(e) { return {n: e.n}; }\n", NumberedArgs(12), befores);
}

// Calls that each take a good share of the time limit are never put in a
// run that would cross it: no realm is rebuilt for a limit a call alone
// would not reach.
TEST(JsRuntime, CallJsonManyKeepsSlowCallsOutOfRunsThatWouldHitTheLimit) {
  JsLimits limits = SmallLimits();
  limits.timeout = std::chrono::milliseconds(1000);
  auto rt = JsRuntime::Create("view.js", R"JS(
function f(e) {
  let x = 0;
  for (let i = 0; i < 60000000; i++) x = (x + i) % 1000003;
  return {n: e.n, x};
}
)JS", limits, JsPurpose::kViewCode);
  ASSERT_TRUE(rt.ok());
  std::vector<std::string> args = NumberedArgs(8);
  std::vector<JsRuntime::LazyArg> calls;
  for (const std::string& a : args) calls.push_back({a, {}, 0});
  const std::vector<JsValueOutcome> got = (*rt)->CallJsonMany("f", calls);
  for (const JsValueOutcome& o : got) EXPECT_EQ(o.kind, JsOutcome::Kind::kApplied) << o.message;
  EXPECT_EQ((*rt)->rebuilds(), 0u);
}

}  // namespace
}  // namespace sluice::handlers
