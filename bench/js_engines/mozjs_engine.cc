// SpiderMonkey 102 (Debian libmozjs-102-dev). A JSContext belongs to the
// thread that made it and a thread has at most one, so the engine holds one
// context and a runtime is a global in its own compartment and zone (a realm);
// the limits probe runs on a thread of its own with a context of its own,
// since JSGC_MAX_BYTES and the interrupt callback are per context.
//
// SpiderMonkey is started once per process, and the handlers' JsRuntime (the
// "sluice" engine, linked in either way) starts it on its first use and shuts
// it down at exit: this engine has the JsRuntime start it (on a passing
// thread, so that no JsRuntime context stays on this engine's thread) and
// neither calls JS_Init nor JS_ShutDown itself. What that start sets for the
// whole process (TZ=UTC, the Date clock hook the handlers use) does not touch
// these runtimes, whose prelude replaces Date.
#include <js/CallAndConstruct.h>
#include <js/CompilationAndEvaluation.h>
#include <js/Context.h>
#include <js/ErrorReport.h>
#include <js/Exception.h>
#include <js/GCAPI.h>
#include <js/GlobalObject.h>
#include <js/Initialization.h>
#include <js/Interrupt.h>
#include <js/JSON.h>
#include <js/Realm.h>
#include <js/SourceText.h>
#include <js/String.h>
#include <js/ValueArray.h>
#include <jsapi.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <unordered_map>

#include "bench/js_engines/js_engine.h"
#include "handlers/js_runtime.h"

namespace sluice::bench::js {
namespace {

const JSClass kGlobalClass = {"global", JSCLASS_GLOBAL_FLAGS, &JS::DefaultGlobalClassOps, nullptr, nullptr, nullptr};

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// JS_Stringify's sink: its output comes in UTF-16 pieces.
bool AppendUtf16(const char16_t* buf, uint32_t len, void* data) {
  auto* out = static_cast<std::string*>(data);
  for (uint32_t i = 0; i < len; ++i) {
    char32_t c = buf[i];
    if (c >= 0xD800 && c < 0xDC00 && i + 1 < len && buf[i + 1] >= 0xDC00 && buf[i + 1] < 0xE000) {
      c = 0x10000 + ((c - 0xD800) << 10) + (buf[++i] - 0xDC00);
    } else if (c >= 0xD800 && c < 0xE000) {
      c = 0xFFFD;  // a lone surrogate (a surrogate pair split across calls is not handled: bench data is ASCII)
    }
    AppendUtf8(c, out);
  }
  return true;
}

// "file:LINE: message" of the pending exception (cleared), or "terminated"
// when the call was stopped without one (an interrupt callback said no).
std::string PendingText(JSContext* cx) {
  if (!JS_IsExceptionPending(cx)) return "terminated";
  JS::ExceptionStack stack(cx);
  if (!JS::StealPendingExceptionStack(cx, &stack)) return "exception could not be read";
  JS::ErrorReportBuilder report(cx);
  if (!report.init(cx, stack, JS::ErrorReportBuilder::NoSideEffects)) return "exception could not be reported";
  std::string out;
  if (const JSErrorReport* r = report.report(); r != nullptr && r->filename != nullptr) {
    out = std::string(r->filename) + ":" + std::to_string(r->lineno) + ": ";
  }
  const char* what = report.toStringResult().c_str();
  return out + (what != nullptr ? what : "(no message)");
}

bool Evaluate(JSContext* cx, const std::string& file, std::string_view source, JS::MutableHandleValue rval) {
  JS::CompileOptions options(cx);
  options.setFileAndLine(file.c_str(), 1);
  JS::SourceText<mozilla::Utf8Unit> text;
  return text.init(cx, source.data(), source.size(), JS::SourceOwnership::Borrowed) &&
         JS::Evaluate(cx, options, text, rval);
}

class MozjsRuntime final : public JsEngineRuntime {
 public:
  MozjsRuntime(JSContext* cx, std::string file) : cx_(cx), file_(std::move(file)), global_(cx) {}
  ~MozjsRuntime() override {
    functions_.clear();
    global_.reset();
  }

  bool Load(const std::string& source, std::string* error) {
    JS::RealmOptions options;
    options.creationOptions().setNewCompartmentAndZone();
    global_ = JS_NewGlobalObject(cx_, &kGlobalClass, nullptr, JS::FireOnNewGlobalHook, options);
    if (global_ == nullptr) {
      *error = PendingText(cx_);
      return false;
    }
    JSAutoRealm realm(cx_, global_);
    JS::RootedValue ignored(cx_);
    if (!JS::InitRealmStandardClasses(cx_) || !Evaluate(cx_, "prelude.js", kDeterminismPrelude, &ignored) ||
        !Evaluate(cx_, file_, source, &ignored)) {
      *error = PendingText(cx_);
      return false;
    }
    return true;
  }

  bool Call(std::string_view fn, std::span<const std::string> args, std::string* result, std::string* arg0_after,
            std::string* error) override {
    JSAutoRealm realm(cx_, global_);
    JS::RootedValue f(cx_);
    if (!Function(fn, &f)) {
      *error = PendingText(cx_);
      return false;
    }
    JS::RootedValueArray<4> argv(cx_);
    if (args.size() > 4) {
      *error = "too many arguments";
      return false;
    }
    for (size_t i = 0; i < args.size(); ++i) {
      JS::RootedString s(cx_, JS_NewStringCopyUTF8N(cx_, JS::UTF8Chars(args[i].data(), args[i].size())));
      if (s == nullptr || !JS_ParseJSON(cx_, s, argv[i])) {
        *error = PendingText(cx_);
        return false;
      }
    }
    JS::RootedValue ret(cx_);
    const JS::HandleValueArray call_args = JS::HandleValueArray::subarray(argv, 0, args.size());
    if (!JS_CallFunctionValue(cx_, nullptr, f, call_args, &ret)) {
      *error = PendingText(cx_);
      return false;
    }
    if (ret.isUndefined()) ret.setNull();
    result->clear();
    if (!JS_Stringify(cx_, &ret, nullptr, JS::NullHandleValue, AppendUtf16, result)) {
      *error = PendingText(cx_);
      return false;
    }
    if (arg0_after != nullptr) {
      arg0_after->clear();
      if (args.empty() || !JS_Stringify(cx_, argv[0], nullptr, JS::NullHandleValue, AppendUtf16, arg0_after)) {
        *error = args.empty() ? "no first argument to return" : PendingText(cx_);
        return false;
      }
    }
    return true;
  }

 private:
  // The function a top-level name refers to; evaluating the name finds
  // `const f = ...` too, which is not a property of the global object.
  bool Function(std::string_view name, JS::MutableHandleValue f) {
    auto it = functions_.find(std::string(name));
    if (it != functions_.end()) {
      f.set(it->second);
      return true;
    }
    if (!Evaluate(cx_, "lookup", name, f)) return false;
    functions_.try_emplace(std::string(name), cx_, f.get());
    return true;
  }

  JSContext* const cx_;
  const std::string file_;
  JS::PersistentRootedObject global_;
  std::unordered_map<std::string, JS::PersistentRootedValue> functions_;
};

JSContext* NewContext(uint32_t max_bytes) {
  JSContext* cx = JS_NewContext(max_bytes);
  if (cx != nullptr && !JS::InitSelfHostedCode(cx)) {
    JS_DestroyContext(cx);
    return nullptr;
  }
  return cx;
}

// The probe's state, read by the interrupt callback on the JS thread.
std::atomic<bool> g_stop_requested{false};
bool StopIfRequested(JSContext*) { return !g_stop_requested.load(); }

class MozjsEngine final : public JsEngine {
 public:
  MozjsEngine() {
    if (!JS_IsInitialized()) {
      std::thread([] {
        (void)handlers::JsRuntime::Create("start.js", "function f() {}\n", handlers::JsLimits{},
                                          handlers::JsPurpose::kViewCode);
      }).join();
    }
    if (JS_IsInitialized()) cx_ = NewContext(JS::DefaultHeapMaxBytes);
  }
  ~MozjsEngine() override {
    if (cx_ != nullptr) JS_DestroyContext(cx_);
  }

  std::string_view name() const override { return "mozjs"; }
  std::string version() const override { return JS_GetImplementationVersion(); }

  std::unique_ptr<JsEngineRuntime> NewRuntime(const std::string& file, const std::string& source,
                                              std::string* error) override {
    if (cx_ == nullptr) {
      *error = "JS_NewContext failed";
      return nullptr;
    }
    auto rt = std::make_unique<MozjsRuntime>(cx_, file);
    if (!rt->Load(source, error)) return nullptr;
    return rt;
  }

  LimitProbe ProbeLimits() override {
    LimitProbe p;
    std::thread([&p] { Probe(&p); }).join();
    return p;
  }

 private:
  // On a thread of its own: the context's heap limit and interrupt callback
  // would otherwise apply to every runtime of the benchmark's thread.
  static void Probe(LimitProbe* p) {
    const double t0 = ThreadCpuSeconds();
    JSContext* cx = NewContext(uint32_t{16} << 20);
    p->notes = "JS_NewContext + InitSelfHostedCode on a new thread (once per worker thread): " +
               std::to_string((ThreadCpuSeconds() - t0) * 1e3) + " ms CPU";
    if (cx == nullptr) {
      p->cpu_limit = "JS_NewContext failed on a second thread";
      return;
    }
    JS_SetGCParameter(cx, JSGC_MAX_BYTES, uint32_t{16} << 20);
    JS_AddInterruptCallback(cx, StopIfRequested);
    {
      std::string error;
      std::string result;
      const std::string request = R"({"n":41})";
      MozjsRuntime rt(cx, "probe.js");
      if (!rt.Load(std::string(kProbeSource), &error)) {
        p->cpu_limit = "probe file failed to load: " + error;
      } else {
        // The watchdog: after 50 ms of the JS thread's CPU time, ask it to stop.
        clockid_t clock{};
        pthread_getcpuclockid(pthread_self(), &clock);
        std::atomic<bool> done{false};
        g_stop_requested = false;
        const double spin_t0 = ThreadCpuSeconds();
        std::thread watchdog([&] {
          timespec start{};
          ::clock_gettime(clock, &start);
          while (!done) {
            timespec now{};
            ::clock_gettime(clock, &now);
            if ((now.tv_sec - start.tv_sec) * 1'000'000'000L + (now.tv_nsec - start.tv_nsec) >= 50'000'000L) {
              g_stop_requested = true;
              JS_RequestInterruptCallback(cx);  // thread-safe
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        });
        const bool returned = rt.Call("spin", std::span(&request, 1), &result, nullptr, &error);
        done = true;
        watchdog.join();
        const double spent_ms = (ThreadCpuSeconds() - spin_t0) * 1e3;
        g_stop_requested = false;
        const bool after = rt.Call("ok", std::span(&request, 1), &result, nullptr, &error) && result == R"({"ok":42})";
        p->cpu_limit_works = !returned && after;
        p->cpu_limit = "JS_AddInterruptCallback + JS_RequestInterruptCallback from a watchdog thread at 50 ms CPU: spin " +
                       std::string(returned ? "NOT stopped" : "stopped (" + error + ")") + " after " +
                       std::to_string(static_cast<int>(spent_ms)) + " ms CPU; then the same context ran ok(): " +
                       (after ? "yes" : "no (" + error + ")");

        const bool grew = rt.Call("grow", std::span(&request, 1), &result, nullptr, &error);
        const std::string grow_error = error;
        const bool after_grow = rt.Call("ok", std::span(&request, 1), &result, nullptr, &error);
        const std::string after_error = error;
        // What the garbage of the stopped call still holds is freed by a full GC.
        JS_GC(cx);
        const bool after_gc = rt.Call("ok", std::span(&request, 1), &result, nullptr, &error);
        p->memory_limit_works = !grew && after_gc;
        p->memory_limit = "JSGC_MAX_BYTES 16 MiB (per JSContext, i.e. shared by every realm of the thread): grow " +
                          std::string(grew ? "NOT stopped" : "stopped: " + grow_error) + ", then ok(): " +
                          (after_grow ? "yes" : "no (" + after_error + ")") + "; after JS_GC(cx), ok(): " +
                          (after_gc ? "yes" : "no (" + error + ")");

        const std::string now = "1700000000000";
        std::string clock_result;
        const bool ok = rt.Call("__sluice_set_now", std::span(&now, 1), &result, nullptr, &error) &&
                        rt.Call("clock", std::span(&request, 1), &clock_result, nullptr, &error);
        p->determinism = "prelude (Date replaced, Math.random throws): " + (ok ? clock_result : error);

        rt.Call("fail", std::span(&request, 1), &result, nullptr, &error);
        p->error_location = "JS::ErrorReportBuilder filename/lineno: " + error;
      }
    }
    JS_DestroyContext(cx);
  }

  JSContext* cx_ = nullptr;
};

}  // namespace

std::unique_ptr<JsEngine> MakeMozjsEngine() { return std::make_unique<MozjsEngine>(); }

}  // namespace sluice::bench::js
