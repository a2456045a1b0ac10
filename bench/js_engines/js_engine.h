// The engines js_engines_bench compares, behind one small interface: the
// project's own handlers::JsRuntime ("sluice", SpiderMonkey 102 with the
// handlers' sandbox, always built), SpiderMonkey 102 used directly
// (libmozjs-102), stock Duktape 2.7 (Debian duktape-dev) and V8 (node 18's
// libnode). Each of the last three is compiled only when its library or
// source was found (bench/CMakeLists.txt sets SLUICE_BENCH_HAVE_MOZJS /
// _DUKTAPE / _V8).
//
// Threads: an engine and every runtime it made are used by the thread that
// made the engine (js_engines_bench makes a thread per engine). SpiderMonkey
// allows one JSContext per thread, so its runtimes are realms (globals in
// their own compartment and zone) of that thread's context, for "mozjs" as
// for "sluice"; a V8 runtime is an isolate with one context (or a context of
// a shared isolate); a Duktape runtime is a heap.
#pragma once

#include <time.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sluice::bench::js {

// One loaded source file, as a partition worker would keep it.
class JsEngineRuntime {
 public:
  virtual ~JsEngineRuntime() = default;

  // Calls the top-level function `fn` (a function declaration or a top-level
  // `const`) with each of `args` parsed by the engine's own JSON parser.
  // `result` gets JSON.stringify of the return value ("null" for undefined)
  // and, when `arg0_after` is not null, of args[0] after the call (a handler's
  // new state). False with `error` ("file:LINE: message") when it threw.
  virtual bool Call(std::string_view fn, std::span<const std::string> args, std::string* result,
                    std::string* arg0_after, std::string* error) = 0;
};

// What ProbeLimits() found, in words for the report.
struct LimitProbe {
  bool cpu_limit_works = false;  // `while(true){}` was stopped, and the runtime ran a call afterwards
  std::string cpu_limit;         // how, how late, and what happened after
  bool memory_limit_works = false;
  std::string memory_limit;
  std::string determinism;       // Date.now(), new Date(), Math.random() after the prelude
  std::string error_location;    // the message of a throw at a known line
  std::string notes;             // anything else the probe found
};

class JsEngine {
 public:
  virtual ~JsEngine() = default;

  virtual std::string_view name() const = 0;
  virtual std::string version() const = 0;

  // A runtime with `source` run at its top level as `file`; null and `error`
  // set when it does not compile or throws (how ES2020 support is tested).
  virtual std::unique_ptr<JsEngineRuntime> NewRuntime(const std::string& file, const std::string& source,
                                                      std::string* error) = 0;

  // Tries the sandbox the handlers need: a CPU-time limit on `while(true){}`
  // (and a call on the same runtime afterwards), a heap limit, a fixed Date
  // and no Math.random, and file:line of a thrown error.
  virtual LimitProbe ProbeLimits() = 0;
};

std::unique_ptr<JsEngine> MakeSluiceEngine();
#ifdef SLUICE_BENCH_HAVE_DUKTAPE
std::unique_ptr<JsEngine> MakeDuktapeEngine();
#endif
#ifdef SLUICE_BENCH_HAVE_V8
// shared_isolate: every runtime a context of one isolate ("v8ctx"), not an
// isolate of its own ("v8").
std::unique_ptr<JsEngine> MakeV8Engine(bool shared_isolate);
#endif
#ifdef SLUICE_BENCH_HAVE_MOZJS
std::unique_ptr<JsEngine> MakeMozjsEngine();
#endif

inline double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

inline double ProcessCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The prelude V8, SpiderMonkey ("mozjs") and Duktape run before a file
// ("sluice" has the handlers' own, in C++): Date sees a fixed time set by
// __sluice_set_now, Math.random throws. Written in ES5 so that it also runs
// on Duktape.
inline constexpr std::string_view kDeterminismPrelude = R"JS(
(function (g) {
  'use strict';
  var RealDate = g.Date, now = 0;
  function FixedDate(a, b, c, d, e, f, ms) {
    if (!(this instanceof FixedDate)) return new RealDate(now).toString();
    switch (arguments.length) {
      case 0: return new RealDate(now);
      case 1: return new RealDate(a);
      default: return new RealDate(RealDate.UTC(a, b, c === undefined ? 1 : c, d || 0, e || 0, f || 0, ms || 0));
    }
  }
  FixedDate.prototype = RealDate.prototype;
  FixedDate.now = function now_() { return now; };
  FixedDate.UTC = RealDate.UTC;
  FixedDate.parse = RealDate.parse;
  Object.defineProperty(g, 'Date', {value: FixedDate, writable: false, enumerable: false, configurable: false});
  Object.defineProperty(g, '__sluice_set_now', {value: function (t) { now = t; }, enumerable: false});
  Object.defineProperty(Math, 'random', {
    value: function random() { throw new Error('Math.random() is not allowed in handlers'); },
    writable: false, enumerable: false, configurable: false
  });
})(this);
)JS";

// The source ProbeLimits() loads: `spin` never returns, `grow` allocates
// without end, `clock` reports what Date and Math.random give, `fail` throws
// on line 8, `ok` answers {ok: n + 1} to a request {n} (its first argument,
// or its second as a handler).
inline constexpr std::string_view kProbeSource =
    "function spin() { while (true) {} }\n"
    "function grow() { var a = []; while (true) { a.push({n: a.length, s: 'x' + a.length}); } }\n"
    "function clock() {\n"
    "  var r = 'none';\n"
    "  try { r = String(Math.random()); } catch (e) { r = 'throws'; }\n"
    "  return {now: Date.now(), date: new Date().getTime(), random: r};\n"
    "}\n"
    "function fail() { throw new Error('boom'); }\n"
    "function ok(a, b) { return {ok: (b || a).n + 1}; }\n";

}  // namespace sluice::bench::js
