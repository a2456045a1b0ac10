// "sluice": the project's own handlers::JsRuntime (handlers/js_runtime.h),
// SpiderMonkey 102 with the handlers' sandbox (a realm per runtime, the CPU
// watchdog, the per-realm heap budget, fixed Date), called with JSON in and
// out as the writer and the sinks do: a handler call takes state, request and
// ctx as texts parsed into nlohmann::json (core/json.h) and gives back the new
// state and the response as CanonicalJson text; a one-argument call (view
// code) goes through JsRuntime::CallJson, text in and text out. The ctx text
// is parsed too (the writer builds a JsContext directly), so that every
// engine's handler row parses the same three texts.
//
// Threads: JsRuntime makes one JSContext per thread, on the thread's first
// runtime, and keeps it until the thread exits; js_engines_bench measures each
// engine on a thread of its own, so that this context is gone before the
// "mozjs" engine makes its own.
#include <chrono>
#include <string>

#include "bench/js_engines/js_engine.h"
#include "core/json.h"
#include "handlers/js_runtime.h"

namespace sluice::bench::js {
namespace {

using handlers::JsOutcome;

std::string KindText(JsOutcome::Kind kind) {
  switch (kind) {
    case JsOutcome::Kind::kApplied:
      return "applied";
    case JsOutcome::Kind::kRejected:
      return "rejected";
    case JsOutcome::Kind::kTimeout:
      return "timeout";
    case JsOutcome::Kind::kOutOfMemory:
      return "out of memory";
    case JsOutcome::Kind::kInvalidResult:
      return "invalid result";
  }
  return "?";
}

class SluiceRuntime final : public JsEngineRuntime {
 public:
  explicit SluiceRuntime(std::unique_ptr<handlers::JsRuntime> rt) : rt_(std::move(rt)) {}

  bool Call(std::string_view fn, std::span<const std::string> args, std::string* result, std::string* arg0_after,
            std::string* error) override {
    if (args.size() == 3) {
      // A handler: (state, request, ctx).
      const Json ctx_json = ParseJsonOrDiscarded(args[2]);
      handlers::JsContext ctx;
      if (ctx_json.is_object()) {
        ctx.command_id = ctx_json.value("command_id", std::string());
        ctx.version = ctx_json.value("version", uint64_t{0});
        ctx.exists = ctx_json.value("exists", false);
        ctx.now_ms = ctx_json.value("now", int64_t{0});
      }
      JsOutcome out = rt_->Call(fn, ParseJsonOrDiscarded(args[0]), ParseJsonOrDiscarded(args[1]), ctx);
      if (out.kind != JsOutcome::Kind::kApplied) {
        *error = KindText(out.kind) + ": " + out.message;
        return false;
      }
      *result = CanonicalJson(out.response);
      if (arg0_after != nullptr) *arg0_after = CanonicalJson(out.state);
      return true;
    }
    if (args.size() != 1 || arg0_after != nullptr) {
      *error = "the sluice engine calls handlers (state, request, ctx) or view code (one argument)";
      return false;
    }
    handlers::JsValueOutcome out = rt_->CallJson(fn, args[0], 1'700'000'000'000);
    if (out.kind != JsOutcome::Kind::kApplied) {
      *error = KindText(out.kind) + ": " + out.message;
      return false;
    }
    *result = std::move(out.json);
    return true;
  }

 private:
  std::unique_ptr<handlers::JsRuntime> rt_;
};

class SluiceEngine final : public JsEngine {
 public:
  std::string_view name() const override { return "sluice"; }
  std::string version() const override { return "JsRuntime/mozjs-102"; }

  // View code purpose: any top-level function may be called (the handler
  // file's `record` as well as transform.js's functions).
  std::unique_ptr<JsEngineRuntime> NewRuntime(const std::string& file, const std::string& source,
                                              std::string* error) override {
    auto rt = handlers::JsRuntime::Create(file, source, handlers::JsLimits{}, handlers::JsPurpose::kViewCode);
    if (!rt.ok()) {
      *error = rt.status().message();
      return nullptr;
    }
    return std::make_unique<SluiceRuntime>(std::move(*rt));
  }

  LimitProbe ProbeLimits() override {
    LimitProbe p;
    handlers::JsLimits limits;
    limits.timeout = std::chrono::milliseconds(50);
    limits.memory_bytes = size_t{16} << 20;
    auto rt = handlers::JsRuntime::Create("probe.js", std::string(kProbeSource), limits);
    if (!rt.ok()) {
      p.cpu_limit = "probe file failed to load: " + rt.status().message();
      return p;
    }
    handlers::JsContext jctx{"c1", 1, true, 1'700'000'000'000};
    const Json state = Json::object();
    const Json request = {{"n", 41}};

    const double t0 = ThreadCpuSeconds();
    JsOutcome spin = (*rt)->Call("spin", state, request, jctx);
    const double spent_ms = (ThreadCpuSeconds() - t0) * 1e3;
    JsOutcome after = (*rt)->Call("ok", state, request, jctx);
    p.cpu_limit_works = spin.kind == JsOutcome::Kind::kTimeout && after.kind == JsOutcome::Kind::kApplied &&
                        after.response == Json{{"ok", 42}};
    p.cpu_limit = "watchdog thread on the caller's CPU clock + JS_RequestInterruptCallback, 50 ms limit: spin " +
                  std::string(spin.kind == JsOutcome::Kind::kTimeout ? "stopped" : "NOT stopped (" + KindText(spin.kind) + ")") +
                  " after " + std::to_string(static_cast<int>(spent_ms)) + " ms CPU (incl. realm rebuild), next call " +
                  (after.kind == JsOutcome::Kind::kApplied ? "ok" : "FAILED: " + after.message);

    // 16 MiB takes longer than 50 ms to fill: the memory probe gets 5 s.
    limits.timeout = std::chrono::milliseconds(5000);
    auto big = handlers::JsRuntime::Create("probe.js", std::string(kProbeSource), limits);
    if (!big.ok()) {
      p.memory_limit = "probe file failed to load: " + big.status().message();
      return p;
    }
    JsOutcome grow = (*big)->Call("grow", state, request, jctx);
    after = (*big)->Call("ok", state, request, jctx);
    p.memory_limit_works = grow.kind == JsOutcome::Kind::kOutOfMemory && after.kind == JsOutcome::Kind::kApplied;
    p.memory_limit = "per-realm GC heap budget (16 MiB, 5 s time limit) checked from the GC callbacks: grow " +
                     std::string(grow.kind == JsOutcome::Kind::kOutOfMemory ? "stopped"
                                                                            : "NOT stopped (" + KindText(grow.kind) + ": " + grow.message + ")") +
                     ", realm rebuilt, next call " + (after.kind == JsOutcome::Kind::kApplied ? "ok" : "FAILED");

    JsOutcome clock = (*rt)->Call("clock", state, request, jctx);
    p.determinism = "Date at ctx.now (1700000000000), Math.random replaced: " +
                    (clock.kind == JsOutcome::Kind::kApplied ? clock.response.dump() : clock.message);

    auto bad = handlers::JsRuntime::Create("bad.js", "function ok(s, r, c) {}\nthrow new Error('boom');\n", limits);
    p.error_location = bad.ok() ? "no error" : bad.status().message();
    p.notes = "realms rebuilt after a limit: " + std::to_string((*rt)->rebuilds() + (*big)->rebuilds());
    return p;
  }
};

}  // namespace

std::unique_ptr<JsEngine> MakeSluiceEngine() { return std::make_unique<SluiceEngine>(); }

}  // namespace sluice::bench::js
