// Duktape 2.7 as the handlers build it (handlers/CMakeLists.txt: the
// project's patched duktape.c, linked through sluice_handlers). A runtime is
// one heap; the limits probe goes through handlers::JsRuntime, which is what
// production runs.
#include <duktape.h>

#include <cstring>
#include <string>
#include <vector>

#include "bench/js_engines/js_engine.h"
#include "handlers/js_runtime.h"

namespace sluice::bench::js {
namespace {

// Plain data only: Duktape unwinds errors with longjmp.
struct DukCallArgs {
  const char* fn;
  size_t fn_len;
  const std::string* args;
  size_t argc;
  bool want_arg0;
};

// [] -> [result_json, arg0_json]
duk_ret_t CallUnsafe(duk_context* ctx, void* udata) {
  auto* a = static_cast<DukCallArgs*>(udata);
  duk_get_global_lstring(ctx, a->fn, a->fn_len);  // [fn]
  for (size_t i = 0; i < a->argc; ++i) {
    duk_push_lstring(ctx, a->args[i].data(), a->args[i].size());
    duk_json_decode(ctx, -1);
  }
  // Keep args[0] past the call, which consumes the arguments.
  if (a->argc > 0) {
    duk_dup(ctx, 1);  // [fn arg0 .. argN-1 arg0]
    duk_insert(ctx, 0);  // [arg0 fn arg0 .. argN-1]
  } else {
    duk_push_null(ctx);
    duk_insert(ctx, 0);
  }
  duk_call(ctx, static_cast<duk_idx_t>(a->argc));  // [arg0 ret]
  if (duk_is_undefined(ctx, -1)) {
    duk_pop(ctx);
    duk_push_null(ctx);
  }
  duk_json_encode(ctx, -1);
  duk_swap(ctx, 0, 1);  // [ret_json arg0]
  if (a->want_arg0) {
    duk_json_encode(ctx, 1);
  }
  return 2;
}

std::string ErrorText(duk_context* ctx, const std::string& file, duk_idx_t idx) {
  std::string line;
  if (duk_is_error(ctx, idx)) {
    duk_get_prop_string(ctx, idx, "lineNumber");
    if (duk_is_number(ctx, -1)) line = ":" + std::to_string(static_cast<long long>(duk_get_number(ctx, -1)));
    duk_pop(ctx);
  }
  return file + line + ": " + duk_safe_to_string(ctx, idx);
}

class DuktapeRuntime final : public JsEngineRuntime {
 public:
  DuktapeRuntime(std::string file, duk_context* ctx) : file_(std::move(file)), ctx_(ctx) {}
  ~DuktapeRuntime() override { duk_destroy_heap(ctx_); }

  bool Call(std::string_view fn, std::span<const std::string> args, std::string* result, std::string* arg0_after,
            std::string* error) override {
    DukCallArgs a{fn.data(), fn.size(), args.data(), args.size(), arg0_after != nullptr};
    if (duk_safe_call(ctx_, CallUnsafe, &a, 0, 2) != DUK_EXEC_SUCCESS) {
      *error = ErrorText(ctx_, file_, -2);
      duk_pop_2(ctx_);
      return false;
    }
    duk_size_t len = 0;
    const char* out = duk_get_lstring(ctx_, -2, &len);
    result->assign(out, len);
    if (arg0_after != nullptr) {
      out = duk_get_lstring(ctx_, -1, &len);
      arg0_after->assign(out, len);
    }
    duk_pop_2(ctx_);
    return true;
  }

 private:
  const std::string file_;
  duk_context* const ctx_;
};

class DuktapeEngine final : public JsEngine {
 public:
  std::string_view name() const override { return "duktape"; }
  std::string version() const override {
    return std::to_string(DUK_VERSION / 10000) + "." + std::to_string(DUK_VERSION / 100 % 100) + "." +
           std::to_string(DUK_VERSION % 100);
  }

  std::unique_ptr<JsEngineRuntime> NewRuntime(const std::string& file, const std::string& source,
                                              std::string* error) override {
    duk_context* ctx = duk_create_heap_default();
    if (ctx == nullptr) {
      *error = "duk_create_heap failed";
      return nullptr;
    }
    duk_push_lstring(ctx, file.data(), file.size());
    if (duk_pcompile_lstring_filename(ctx, 0, source.data(), source.size()) != 0 ||
        duk_pcall(ctx, 0) != DUK_EXEC_SUCCESS) {
      *error = ErrorText(ctx, file, -1);
      duk_destroy_heap(ctx);
      return nullptr;
    }
    duk_pop(ctx);
    return std::make_unique<DuktapeRuntime>(file, ctx);
  }

  LimitProbe ProbeLimits() override {
    using handlers::JsOutcome;
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
    p.cpu_limit = "exec-timeout hook (patched duktape.c), 50 ms limit: spin stopped after " +
                  std::to_string(static_cast<int>(spent_ms)) + " ms CPU (incl. heap rebuild), next call " +
                  (after.kind == JsOutcome::Kind::kApplied ? "ok" : "FAILED: " + after.message);

    // Duktape fills 16 MiB slower than 50 ms: the memory probe gets 5 s.
    limits.timeout = std::chrono::milliseconds(5000);
    auto big = handlers::JsRuntime::Create("probe.js", std::string(kProbeSource), limits);
    if (!big.ok()) {
      p.memory_limit = "probe file failed to load: " + big.status().message();
      return p;
    }
    JsOutcome grow = (*big)->Call("grow", state, request, jctx);
    after = (*big)->Call("ok", state, request, jctx);
    p.memory_limit_works = grow.kind == JsOutcome::Kind::kOutOfMemory && after.kind == JsOutcome::Kind::kApplied;
    p.memory_limit = std::string("custom allocator with a byte budget (16 MiB): grow ") +
                     (grow.kind == JsOutcome::Kind::kOutOfMemory ? "stopped" : "NOT stopped: " + grow.message) +
                     ", heap rebuilt, next call " + (after.kind == JsOutcome::Kind::kApplied ? "ok" : "FAILED");

    JsOutcome clock = (*rt)->Call("clock", state, request, jctx);
    p.determinism = "DUK_USE_DATE_GET_NOW hook + prelude: " + clock.response.dump();

    auto bad = handlers::JsRuntime::Create("bad.js", "function ok(s, r, c) {}\nthrow new Error('boom');\n", limits);
    p.error_location = bad.ok() ? "no error" : bad.status().message();
    return p;
  }
};

}  // namespace

std::unique_ptr<JsEngine> MakeDuktapeEngine() { return std::make_unique<DuktapeEngine>(); }

}  // namespace sluice::bench::js
