// V8 from node 18's libnode (Debian libnode-dev: V8 10.2, its headers in
// /usr/include/node; libnode.so exports V8 and libplatform). A runtime is an
// isolate with one context, entered for each call (Isolate::Scope), as a
// worker owning many partitions would do; or, for the engine "v8ctx", a
// context of one isolate that all runtimes share (cheaper, but then the heap
// limit and a TerminateExecution are the isolate's, shared by them all).
#include <libplatform/libplatform.h>
#include <pthread.h>
#include <v8.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "bench/js_engines/js_engine.h"

namespace sluice::bench::js {
namespace {

std::string ToUtf8(v8::Isolate* isolate, v8::Local<v8::Value> v) {
  v8::String::Utf8Value u(isolate, v);
  return *u != nullptr ? std::string(*u, u.length()) : std::string();
}

v8::Local<v8::String> ToV8(v8::Isolate* isolate, std::string_view s) {
  return v8::String::NewFromUtf8(isolate, s.data(), v8::NewStringType::kNormal, static_cast<int>(s.size()))
      .ToLocalChecked();
}

// "file:LINE: message" of what `tc` caught.
std::string CaughtText(v8::Isolate* isolate, v8::Local<v8::Context> ctx, const v8::TryCatch& tc) {
  if (tc.HasTerminated()) return "terminated";
  std::string where;
  v8::Local<v8::Message> m = tc.Message();
  if (!m.IsEmpty()) {
    where = ToUtf8(isolate, m->GetScriptResourceName()) + ":" + std::to_string(m->GetLineNumber(ctx).FromMaybe(0)) +
            ": ";
  }
  return where + ToUtf8(isolate, tc.Exception());
}

class V8Runtime final : public JsEngineRuntime {
 public:
  V8Runtime(v8::Isolate* isolate, bool owns_isolate, std::string file)
      : isolate_(isolate), owns_isolate_(owns_isolate), file_(std::move(file)) {}
  ~V8Runtime() override {
    functions_.clear();
    context_.Reset();
    if (owns_isolate_) isolate_->Dispose();
  }

  // Compiles and runs the prelude and `source`; false with `error`.
  bool Load(const std::string& source, std::string* error) {
    v8::Isolate::Scope is(isolate_);
    v8::HandleScope hs(isolate_);
    v8::Local<v8::Context> ctx = v8::Context::New(isolate_);
    context_.Reset(isolate_, ctx);
    v8::Context::Scope cs(ctx);
    return Run("prelude.js", kDeterminismPrelude, error) && Run(file_, source, error);
  }

  bool Call(std::string_view fn, std::span<const std::string> args, std::string* result, std::string* arg0_after,
            std::string* error) override {
    v8::Isolate::Scope is(isolate_);
    v8::HandleScope hs(isolate_);
    v8::Local<v8::Context> ctx = context_.Get(isolate_);
    v8::Context::Scope cs(ctx);
    v8::TryCatch tc(isolate_);
    v8::Local<v8::Function> f;
    if (!Function(ctx, fn).ToLocal(&f)) {
      *error = CaughtText(isolate_, ctx, tc);
      return false;
    }
    v8::Local<v8::Value> argv[4];
    if (args.size() > std::size(argv)) {
      *error = "too many arguments";
      return false;
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (!v8::JSON::Parse(ctx, ToV8(isolate_, args[i])).ToLocal(&argv[i])) {
        *error = CaughtText(isolate_, ctx, tc);
        return false;
      }
    }
    v8::Local<v8::Value> ret;
    if (!f->Call(ctx, v8::Undefined(isolate_), static_cast<int>(args.size()), argv).ToLocal(&ret)) {
      *error = CaughtText(isolate_, ctx, tc);
      return false;
    }
    if (ret->IsUndefined()) ret = v8::Null(isolate_);
    v8::Local<v8::String> text;
    if (!v8::JSON::Stringify(ctx, ret).ToLocal(&text)) {
      *error = CaughtText(isolate_, ctx, tc);
      return false;
    }
    *result = ToUtf8(isolate_, text);
    if (arg0_after != nullptr) {
      if (args.empty() || !v8::JSON::Stringify(ctx, argv[0]).ToLocal(&text)) {
        *error = "no first argument to return";
        return false;
      }
      *arg0_after = ToUtf8(isolate_, text);
    }
    return true;
  }

  v8::Isolate* isolate() const { return isolate_; }

 private:
  bool Run(const std::string& file, std::string_view source, std::string* error) {
    v8::Local<v8::Context> ctx = isolate_->GetCurrentContext();
    v8::TryCatch tc(isolate_);
    v8::ScriptOrigin origin(isolate_, ToV8(isolate_, file));
    v8::Local<v8::Script> script;
    if (!v8::Script::Compile(ctx, ToV8(isolate_, source), &origin).ToLocal(&script) || script->Run(ctx).IsEmpty()) {
      *error = CaughtText(isolate_, ctx, tc);
      return false;
    }
    return true;
  }

  // The function a top-level name refers to. Evaluating the name finds
  // `const f = ...` too, which is not a property of the global object.
  v8::MaybeLocal<v8::Function> Function(v8::Local<v8::Context> ctx, std::string_view name) {
    auto it = functions_.find(std::string(name));
    if (it != functions_.end()) return it->second.Get(isolate_);
    v8::Local<v8::Script> script;
    v8::Local<v8::Value> v;
    if (!v8::Script::Compile(ctx, ToV8(isolate_, name)).ToLocal(&script) || !script->Run(ctx).ToLocal(&v)) return {};
    if (!v->IsFunction()) {
      isolate_->ThrowError(ToV8(isolate_, std::string(name) + " is not a function"));
      return {};
    }
    v8::Local<v8::Function> f = v.As<v8::Function>();
    functions_.emplace(std::string(name), v8::Global<v8::Function>(isolate_, f));
    return f;
  }

  v8::Isolate* const isolate_;
  const bool owns_isolate_;
  const std::string file_;
  v8::Global<v8::Context> context_;
  std::unordered_map<std::string, v8::Global<v8::Function>> functions_;
};

// Stops the isolate's running script once the thread `target` has used
// `limit` of CPU time since Arm(): the CPU-time limit a partition worker would
// keep, one watchdog thread per worker.
class CpuWatchdog {
 public:
  CpuWatchdog() : thread_([this] { Loop(); }) {}
  ~CpuWatchdog() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  void Arm(v8::Isolate* isolate, std::chrono::milliseconds limit) {
    clockid_t clock{};
    pthread_getcpuclockid(pthread_self(), &clock);
    timespec ts{};
    ::clock_gettime(clock, &ts);
    std::lock_guard lock(mu_);
    isolate_ = isolate;
    clock_ = clock;
    deadline_ns_ = int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec + std::chrono::nanoseconds(limit).count();
    fired_ = false;
    cv_.notify_one();
  }
  // True when it terminated the script.
  bool Disarm() {
    std::lock_guard lock(mu_);
    isolate_ = nullptr;
    return fired_;
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!quit_) {
      if (isolate_ == nullptr) {
        cv_.wait(lock);
        continue;
      }
      timespec ts{};
      ::clock_gettime(clock_, &ts);
      if (int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec >= deadline_ns_) {
        isolate_->TerminateExecution();  // thread-safe, the one V8 call allowed from another thread
        fired_ = true;
        isolate_ = nullptr;
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  v8::Isolate* isolate_ = nullptr;
  clockid_t clock_{};
  int64_t deadline_ns_ = 0;
  bool fired_ = false;
  bool quit_ = false;
  std::thread thread_;
};

size_t NearHeapLimit(void* data, size_t current_heap_limit, size_t) {
  auto* isolate = static_cast<v8::Isolate*>(data);
  isolate->TerminateExecution();
  // Room for the termination to unwind; the runtime is to be thrown away.
  return current_heap_limit + (size_t{16} << 20);
}

// V8 is initialised once per process and cannot be after V8::Dispose(), so
// the platform lives until exit (both engines below use it).
v8::ArrayBuffer::Allocator* InitializeV8() {
  static v8::ArrayBuffer::Allocator* const allocator = [] {
    static std::unique_ptr<v8::Platform> platform = v8::platform::NewDefaultPlatform();
    v8::V8::InitializePlatform(platform.get());
    v8::V8::Initialize();
    return v8::ArrayBuffer::Allocator::NewDefaultAllocator();
  }();
  return allocator;
}

class V8Engine final : public JsEngine {
 public:
  explicit V8Engine(bool shared_isolate) : allocator_(InitializeV8()) {
    if (shared_isolate) shared_isolate_ = NewIsolate(0);
  }
  ~V8Engine() override {
    if (shared_isolate_ != nullptr) shared_isolate_->Dispose();
  }

  std::string_view name() const override { return shared_isolate_ != nullptr ? "v8ctx" : "v8"; }
  std::string version() const override { return v8::V8::GetVersion(); }

  std::unique_ptr<JsEngineRuntime> NewRuntime(const std::string& file, const std::string& source,
                                              std::string* error) override {
    if (shared_isolate_ != nullptr) {
      auto rt = std::make_unique<V8Runtime>(shared_isolate_, false, file);
      if (!rt->Load(source, error)) return nullptr;
      return rt;
    }
    return NewRuntime(file, source, 0, error);
  }

  LimitProbe ProbeLimits() override {
    LimitProbe p;
    std::string error;
    std::string result;
    auto rt = NewRuntime("probe.js", std::string(kProbeSource), size_t{16} << 20, &error);
    if (rt == nullptr) {
      p.cpu_limit = "probe file failed to load: " + error;
      return p;
    }
    v8::Isolate* isolate = rt->isolate();
    const std::string request = R"({"n":41})";
    {
      CpuWatchdog watchdog;
      const double t0 = ThreadCpuSeconds();
      watchdog.Arm(isolate, std::chrono::milliseconds(50));
      const bool returned = rt->Call("spin", std::span(&request, 1), &result, nullptr, &error);
      const bool fired = watchdog.Disarm();
      const double spent_ms = (ThreadCpuSeconds() - t0) * 1e3;
      isolate->CancelTerminateExecution();
      const bool after = rt->Call("ok", std::span(&request, 1), &result, nullptr, &error) && result == R"({"ok":42})";
      p.cpu_limit_works = !returned && fired && after;
      // What arming the watchdog adds to a call (a CPU clock read, a lock, a wake-up).
      constexpr int kCalls = 20000;
      double t1 = ThreadCpuSeconds();
      for (int i = 0; i < kCalls; ++i) rt->Call("ok", std::span(&request, 1), &result, nullptr, &error);
      const double plain_us = (ThreadCpuSeconds() - t1) * 1e6 / kCalls;
      t1 = ThreadCpuSeconds();
      for (int i = 0; i < kCalls; ++i) {
        watchdog.Arm(isolate, std::chrono::milliseconds(50));
        rt->Call("ok", std::span(&request, 1), &result, nullptr, &error);
        watchdog.Disarm();
      }
      const double armed_us = (ThreadCpuSeconds() - t1) * 1e6 / kCalls;
      p.notes = "a small call costs " + std::to_string(plain_us) + " us CPU, " + std::to_string(armed_us) +
                " us with the watchdog armed and disarmed around it";
      p.cpu_limit = "watchdog thread reading the JS thread's CPU clock, Isolate::TerminateExecution at 50 ms: spin " +
                    std::string(fired ? "terminated" : "NOT terminated") + " after " +
                    std::to_string(static_cast<int>(spent_ms)) +
                    " ms CPU; CancelTerminateExecution, then the same isolate ran ok(): " +
                    (after ? "yes" : "no (" + error + ")");
    }
    {
      const bool returned = rt->Call("grow", std::span(&request, 1), &result, nullptr, &error);
      isolate->CancelTerminateExecution();
      v8::HeapStatistics hs;
      isolate->GetHeapStatistics(&hs);
      const bool after = rt->Call("ok", std::span(&request, 1), &result, nullptr, &error);
      p.memory_limit_works = !returned && error == "terminated" && after;
      p.memory_limit = "ResourceConstraints max_old_generation 16 MiB + NearHeapLimitCallback -> TerminateExecution: grow " +
                       std::string(!returned && error == "terminated" ? "terminated" : "NOT terminated (" + error + ")") +
                       " (heap used " + std::to_string(hs.used_heap_size() >> 20) + " MiB), then ok(): " +
                       (after ? "yes" : "no") + " (limit raised by the callback: throw the isolate away)";
    }
    {
      const std::string now = "1700000000000";
      std::string clock;
      const bool ok = CallSetNow(rt.get(), now) && rt->Call("clock", std::span(&request, 1), &clock, nullptr, &error);
      p.determinism = "prelude (Date replaced, Math.random throws): " + (ok ? clock : error);
    }
    rt->Call("fail", std::span(&request, 1), &result, nullptr, &error);
    p.error_location = "TryCatch::Message() GetScriptResourceName/GetLineNumber: " + error;
    return p;
  }

 private:
  v8::Isolate* NewIsolate(size_t heap_limit) {
    v8::Isolate::CreateParams params;
    params.array_buffer_allocator = allocator_;
    if (heap_limit > 0) params.constraints.set_max_old_generation_size_in_bytes(heap_limit);
    v8::Isolate* isolate = v8::Isolate::New(params);
    if (heap_limit > 0) isolate->AddNearHeapLimitCallback(NearHeapLimit, isolate);
    return isolate;
  }

  std::unique_ptr<V8Runtime> NewRuntime(const std::string& file, const std::string& source, size_t heap_limit,
                                        std::string* error) {
    auto rt = std::make_unique<V8Runtime>(NewIsolate(heap_limit), true, file);
    if (!rt->Load(source, error)) return nullptr;
    return rt;
  }

  static bool CallSetNow(V8Runtime* rt, const std::string& now) {
    std::string result;
    std::string error;
    return rt->Call("__sluice_set_now", std::span(&now, 1), &result, nullptr, &error);
  }

  v8::ArrayBuffer::Allocator* const allocator_;
  v8::Isolate* shared_isolate_ = nullptr;
};

}  // namespace

std::unique_ptr<JsEngine> MakeV8Engine(bool shared_isolate) { return std::make_unique<V8Engine>(shared_isolate); }

}  // namespace sluice::bench::js
