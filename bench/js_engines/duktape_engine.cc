// Stock Duktape 2.7: Debian's duktape-dev duktape.c, unpatched, built for
// this benchmark alone (bench/CMakeLists.txt; the handlers no longer use
// Duktape). A runtime is one heap with the determinism prelude of js_engine.h
// run before the file, as for V8 and SpiderMonkey. The limits probe runs on
// stock Duktape too: a heap limit through Duktape's public allocator hooks,
// and no CPU-time limit, which stock Duktape does not have.
#include <duktape.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/js_engines/js_engine.h"

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

// A heap limit with stock Duktape's allocator hooks: each block carries its
// size in front, and an allocation past the budget fails (Duktape then runs
// a GC and, failing again, throws a RangeError in the call).
struct Budget {
  size_t used = 0;
  size_t peak = 0;
  size_t limit = 0;
};
constexpr size_t kHeader = 16;  // keeps the block max-aligned

void* BudgetAlloc(void* udata, duk_size_t size) {
  auto* b = static_cast<Budget*>(udata);
  if (b->used + size > b->limit) return nullptr;
  auto* block = static_cast<char*>(std::malloc(size + kHeader));
  if (block == nullptr) return nullptr;
  std::memcpy(block, &size, sizeof size);
  b->used += size;
  b->peak = std::max(b->peak, b->used);
  return block + kHeader;
}

void BudgetFree(void* udata, void* ptr) {
  if (ptr == nullptr) return;
  auto* b = static_cast<Budget*>(udata);
  char* block = static_cast<char*>(ptr) - kHeader;
  size_t size = 0;
  std::memcpy(&size, block, sizeof size);
  b->used -= size;
  std::free(block);
}

void* BudgetRealloc(void* udata, void* ptr, duk_size_t size) {
  if (ptr == nullptr) return BudgetAlloc(udata, size);
  if (size == 0) {
    BudgetFree(udata, ptr);
    return nullptr;
  }
  auto* b = static_cast<Budget*>(udata);
  char* block = static_cast<char*>(ptr) - kHeader;
  size_t old = 0;
  std::memcpy(&old, block, sizeof old);
  if (b->used - old + size > b->limit) return nullptr;
  auto* grown = static_cast<char*>(std::realloc(block, size + kHeader));
  if (grown == nullptr) return nullptr;
  std::memcpy(grown, &size, sizeof size);
  b->used = b->used - old + size;
  b->peak = std::max(b->peak, b->used);
  return grown + kHeader;
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
    if (!Load(ctx, file, source, error)) {
      duk_destroy_heap(ctx);
      return nullptr;
    }
    return std::make_unique<DuktapeRuntime>(file, ctx);
  }

  LimitProbe ProbeLimits() override {
    LimitProbe p;
    p.cpu_limit_works = false;
    p.cpu_limit =
        "none: stock Duktape has no way to stop a running call (DUK_USE_EXEC_TIMEOUT_CHECK is compiled out of "
        "Debian's duktape.c, duk_config.h), so `while(true){}` is not tried";

    Budget budget;
    budget.limit = size_t{16} << 20;
    duk_context* ctx = duk_create_heap(BudgetAlloc, BudgetRealloc, BudgetFree, &budget, nullptr);
    if (ctx == nullptr) {
      p.memory_limit = "duk_create_heap with a 16 MiB budget failed";
      return p;
    }
    std::string error;
    if (!Load(ctx, "probe.js", std::string(kProbeSource), &error)) {
      p.memory_limit = "probe file failed to load: " + error;
      duk_destroy_heap(ctx);
      return p;
    }
    DuktapeRuntime rt("probe.js", ctx);  // owns ctx from here
    const std::string request = R"({"n":41})";
    std::string result;
    const bool grew = rt.Call("grow", std::span(&request, 1), &result, nullptr, &error);
    const std::string grow_error = error;
    const size_t peak = budget.peak;
    const bool after = rt.Call("ok", std::span(&request, 1), &result, nullptr, &error) && result == R"({"ok":42})";
    p.memory_limit_works = !grew && after;
    p.memory_limit = "allocator hooks of duk_create_heap with a byte budget (16 MiB): grow " +
                     std::string(grew ? "NOT stopped" : "stopped (" + grow_error + ")") + " at " +
                     std::to_string(peak >> 10) + " KiB, then the same heap ran ok(): " +
                     (after ? "yes" : "no (" + error + ")");

    const std::string now = "1700000000000";
    std::string clock_result;
    const bool ok = rt.Call("__sluice_set_now", std::span(&now, 1), &result, nullptr, &error) &&
                    rt.Call("clock", std::span(&request, 1), &clock_result, nullptr, &error);
    p.determinism = "prelude (Date replaced, Math.random throws): " + (ok ? clock_result : error);

    rt.Call("fail", std::span(&request, 1), &result, nullptr, &error);
    p.error_location = "lineNumber of the thrown error: " + error;
    return p;
  }

 private:
  // The prelude, then `source` at the top level; the stack left as it was.
  static bool Load(duk_context* ctx, const std::string& file, const std::string& source, std::string* error) {
    duk_push_string(ctx, "prelude.js");
    if (duk_pcompile_lstring_filename(ctx, 0, kDeterminismPrelude.data(), kDeterminismPrelude.size()) != 0 ||
        duk_pcall(ctx, 0) != DUK_EXEC_SUCCESS) {
      *error = ErrorText(ctx, "prelude.js", -1);
      duk_pop(ctx);
      return false;
    }
    duk_pop(ctx);
    duk_push_lstring(ctx, file.data(), file.size());
    if (duk_pcompile_lstring_filename(ctx, 0, source.data(), source.size()) != 0 ||
        duk_pcall(ctx, 0) != DUK_EXEC_SUCCESS) {
      *error = ErrorText(ctx, file, -1);
      duk_pop(ctx);
      return false;
    }
    duk_pop(ctx);
    return true;
  }
};

}  // namespace

std::unique_ptr<JsEngine> MakeDuktapeEngine() { return std::make_unique<DuktapeEngine>(); }

}  // namespace sluice::bench::js
