#include "handlers/js_runtime.h"

#include <js/Array.h>
#include <js/CallAndConstruct.h>
#include <js/CompilationAndEvaluation.h>
#include <js/Context.h>
#include <js/Date.h>
#include <js/ErrorReport.h>
#include <js/Exception.h>
#include <js/GCAPI.h>
#include <js/GlobalObject.h>
#include <js/Initialization.h>
#include <js/Interrupt.h>
#include <js/JSON.h>
#include <js/LocaleSensitive.h>
#include <js/MemoryCallbacks.h>
#include <js/Promise.h>
#include <js/PropertyAndElement.h>
#include <js/Realm.h>
#include <js/SourceText.h>
#include <js/Stack.h>
#include <js/String.h>
#include <jsapi.h>
#include <jsfriendapi.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/names.h"

namespace sluice::handlers {
namespace {

int64_t ClockNanos(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// --- The watchdog: one thread per process --------------------------------
//
// A thread that runs JavaScript has one Slot. A call arms it with two atomic
// stores (budget, then an odd epoch); the watchdog polls every armed slot
// about once a millisecond, reads that thread's CPU clock (a system call, so
// the calling thread never pays for it), counts the budget from the first
// time it saw the epoch, and once the budget is spent marks the epoch expired
// and asks SpiderMonkey to run the interrupt callback, which stops the call.
// It requests nothing before that: in SpiderMonkey 102 an interrupt that
// lands inside a regular expression and lets it go on fails the expression
// with "too much recursion".
struct Slot {
  JSContext* cx = nullptr;
  clockid_t cpu_clock{};
  std::atomic<uint64_t> epoch{0};  // odd while a call is armed; written by the slot's thread
  std::atomic<int64_t> budget_ns{0};
  std::atomic<uint64_t> expired_epoch{0};  // written by the watchdog
  // The watchdog's own bookkeeping.
  uint64_t seen_epoch = 0;
  int64_t start_cpu_ns = 0;
};

class Watchdog {
 public:
  // Leaked on purpose: partition workers may still be running when static
  // destructors run, and a joined watchdog would leave them unguarded.
  static Watchdog& Get() {
    static Watchdog* const w = [] {
      auto owned = std::make_unique<Watchdog>();
      std::thread([w = owned.get()] { w->Run(); }).detach();
      return owned.release();
    }();
    return *w;
  }

  void Add(Slot* slot) {
    std::lock_guard lock(mu_);
    slots_.push_back(slot);
  }
  // After Remove() returns the watchdog no longer touches the slot or its context.
  void Remove(Slot* slot) {
    std::lock_guard lock(mu_);
    slots_.erase(std::remove(slots_.begin(), slots_.end(), slot), slots_.end());
  }

  void Arm(Slot* slot, int64_t budget_ns) {
    slot->budget_ns.store(budget_ns, std::memory_order_relaxed);
    slot->epoch.store(slot->epoch.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    if (idle_.load(std::memory_order_seq_cst)) {
      std::lock_guard lock(mu_);
      wake_ = true;
      cv_.notify_one();
    }
  }
  static void Disarm(Slot* slot) {
    slot->epoch.store(slot->epoch.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

 private:
  void Run() {
    int idle_polls = 0;
    for (;;) {
      bool any_armed = false;
      {
        std::lock_guard lock(mu_);
        for (Slot* s : slots_) {
          const uint64_t e = s->epoch.load(std::memory_order_acquire);
          if ((e & 1) == 0) continue;
          any_armed = true;
          const int64_t now = ClockNanos(s->cpu_clock);
          if (e != s->seen_epoch) {
            s->seen_epoch = e;
            s->start_cpu_ns = now;
            continue;
          }
          if (now - s->start_cpu_ns >= s->budget_ns.load(std::memory_order_relaxed)) {
            s->expired_epoch.store(e, std::memory_order_release);
            JS_RequestInterruptCallback(s->cx);
          }
        }
      }
      idle_polls = any_armed ? 0 : idle_polls + 1;
      if (idle_polls < 100) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      // Nothing ran for 100 ms: sleep until a call is armed.
      std::unique_lock lock(mu_);
      idle_.store(true, std::memory_order_seq_cst);
      const bool armed_now = std::any_of(slots_.begin(), slots_.end(), [](Slot* s) {
        return (s->epoch.load(std::memory_order_seq_cst) & 1) != 0;
      });
      if (!armed_now) cv_.wait(lock, [&] { return wake_; });
      wake_ = false;
      idle_.store(false, std::memory_order_relaxed);
      idle_polls = 0;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot*> slots_;
  bool wake_ = false;
  std::atomic<bool> idle_{false};
};

// --- One JSContext per thread --------------------------------------------

// Identifies a thread that runs JavaScript, and outlives it: realms made on a
// thread carry its token, so another thread can tell whose a realm is and
// ask for it to be released.
struct ThreadToken {
  std::atomic<bool> abandoned_realms{false};
};

// One JsRuntime's global in its own compartment and zone, owned by the
// context of the thread that made it. Its roots are set and reset only on
// that thread; another thread may only read `owner` and set `abandoned`.
struct Realm {
  std::shared_ptr<ThreadToken> owner;
  std::atomic<bool> abandoned{false};
  size_t limit = 0;
  std::optional<JS::PersistentRootedObject> global;
  std::optional<JS::PersistentRootedObject> functions;  // an array, in `names` order
  std::vector<std::string> names;                        // sorted
  // kLazyMember, made before the file ran (so the file cannot change what it uses).
  std::optional<JS::PersistentRootedObject> lazy_member;

  void ReleaseRoots() {
    lazy_member.reset();
    functions.reset();
    global.reset();
  }
};

// What the interrupt and out-of-memory callbacks need to know about the call
// running on this thread.
struct ActiveCall {
  Realm* realm = nullptr;
  uint64_t epoch = 0;
  bool timed_out = false;
  bool out_of_memory = false;
  bool dropping_jobs = false;  // stop every job at its first interrupt check
};

// The fixed timestamp Date sees on this thread, in microseconds.
thread_local double t_now_us = 0;

double FixedNow(double, JSContext*) { return t_now_us; }

const JSClass kGlobalClass = {"global", JSCLASS_GLOBAL_FLAGS, &JS::DefaultGlobalClassOps, nullptr, nullptr, nullptr};

// JS_Init, and every JS_NewContext, must not run concurrently.
std::mutex& ContextCreationMutex() {
  static std::mutex mu;
  return mu;
}
int g_live_contexts = 0;   // guarded by ContextCreationMutex()
bool g_shut_down = false;  // guarded by ContextCreationMutex()

// SpiderMonkey's helper threads must be stopped (JS_ShutDown) before the
// library's own static destructors run, or they abort the process at exit.
// JS_ShutDown needs every context gone: the exiting thread's went with its
// thread_local engine; other threads' are there only if they still run.
void ShutDownAtExit() {
  std::lock_guard lock(ContextCreationMutex());
  g_shut_down = true;
  if (g_live_contexts == 0) JS_ShutDown();
}

bool InitProcess() {
  static const bool ok = [] {
    // SpiderMonkey takes local time from TZ; handlers see UTC. sluice itself
    // formats every time in UTC (gmtime_r), so nothing else depends on it.
    ::setenv("TZ", "UTC", 1);
    ::tzset();
    if (!JS_Init()) return false;
    std::atexit(ShutDownAtExit);
    JS::SetReduceMicrosecondTimePrecisionCallback(FixedNow);
    JS::ResetTimeZone();
    return true;
  }();
  return ok;
}

// The stack a thread may give SpiderMonkey: what is left of the thread's
// stack below the current frame, less a margin (half of it on a small
// stack), at most 1 MiB.
size_t NativeStackQuota() {
  size_t quota = size_t{1} << 20;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* base = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &base, &size) == 0 && base != nullptr) {
      const char here = 0;
      const auto left = static_cast<size_t>(&here - static_cast<const char*>(base));
      quota = std::min(quota, left > (size_t{128} << 10) ? left - (size_t{64} << 10) : left / 2);
    }
    pthread_attr_destroy(&attr);
  }
  return quota;
}

bool OnInterrupt(JSContext* cx);
void OnOutOfMemory(JSContext* cx, void* data);
void OnGc(JSContext* cx, JSGCStatus status, JS::GCReason reason, void* data);
void OnNurseryGc(JSContext* cx, JS::GCNurseryProgress progress, JS::GCReason reason);

// The JavaScript engine of one thread, made at its first JsRuntime and
// destroyed when the thread exits (thread_local).
class ThreadEngine {
 public:
  // The calling thread's engine, made on first use; null when SpiderMonkey
  // could not start.
  static ThreadEngine* Current() {
    if (current_ != nullptr) return current_;
    if (exiting_) return nullptr;
    static thread_local std::unique_ptr<ThreadEngine> owned;
    auto engine = std::make_unique<ThreadEngine>();
    if (!engine->Start()) return nullptr;
    owned = std::move(engine);
    current_ = owned.get();
    return current_;
  }
  // The calling thread's engine if it has one (never makes one).
  static ThreadEngine* IfStarted() { return current_; }

  ThreadEngine() : token_(std::make_shared<ThreadToken>()) {}
  ~ThreadEngine() {
    exiting_ = true;
    current_ = nullptr;
    if (cx_ == nullptr) return;
    Watchdog::Get().Remove(&slot_);
    for (auto& realm : realms_) realm->ReleaseRoots();
    realms_.clear();
    std::lock_guard lock(ContextCreationMutex());
    JS_DestroyContext(cx_);
    --g_live_contexts;
  }
  ThreadEngine(const ThreadEngine&) = delete;
  ThreadEngine& operator=(const ThreadEngine&) = delete;

  JSContext* cx() const { return cx_; }
  const std::shared_ptr<ThreadToken>& token() const { return token_; }
  Slot& slot() { return slot_; }
  ActiveCall* active() const { return active_; }
  void set_active(ActiveCall* call) { active_ = call; }

  // Releases the realms other threads gave up (their runtimes moved or were
  // destroyed elsewhere); cheap when there are none.
  void SweepAbandoned() {
    if (!token_->abandoned_realms.load(std::memory_order_relaxed) ||
        !token_->abandoned_realms.exchange(false, std::memory_order_acquire)) {
      return;
    }
    for (auto it = realms_.begin(); it != realms_.end();) {
      if ((*it)->abandoned.load(std::memory_order_acquire)) {
        (*it)->ReleaseRoots();
        it = realms_.erase(it);
      } else {
        ++it;
      }
    }
    UpdateHeapLimit();
  }

  std::shared_ptr<Realm> NewRealm(size_t limit) {
    auto realm = std::make_shared<Realm>();
    realm->owner = token_;
    realm->limit = limit;
    realms_.push_back(realm);
    UpdateHeapLimit();
    return realm;
  }

  void Release(const std::shared_ptr<Realm>& realm) {
    realm->ReleaseRoots();
    realms_.erase(std::remove(realms_.begin(), realms_.end(), realm), realms_.end());
    UpdateHeapLimit();
  }

 private:
  bool Start() {
    std::lock_guard lock(ContextCreationMutex());
    if (g_shut_down || !InitProcess()) return false;
    cx_ = JS_NewContext(JS::DefaultHeapMaxBytes);
    if (cx_ == nullptr) return false;
    ++g_live_contexts;
    JS_SetNativeStackQuota(cx_, NativeStackQuota());
    if (!js::UseInternalJobQueues(cx_) || !JS::InitSelfHostedCode(cx_)) {
      JS_DestroyContext(cx_);
      --g_live_contexts;
      cx_ = nullptr;
      return false;
    }
    JS_SetDefaultLocale(JS_GetRuntime(cx_), "en-US");
    JS_AddInterruptCallback(cx_, OnInterrupt);
    JS::SetOutOfMemoryCallback(cx_, OnOutOfMemory, nullptr);
    JS_SetGCCallback(cx_, OnGc, nullptr);
    JS::SetGCNurseryCollectionCallback(cx_, OnNurseryGc);
    base_heap_bytes_ = JS_GetGCParameter(cx_, JSGC_BYTES);
    UpdateHeapLimit();
    slot_.cx = cx_;
    if (pthread_getcpuclockid(pthread_self(), &slot_.cpu_clock) != 0) slot_.cpu_clock = CLOCK_THREAD_CPUTIME_ID;
    Watchdog::Get().Add(&slot_);
    return true;
  }

  // The thread's GC heap may hold the engine's own data and, for each live
  // realm, its memory limit; each realm is also held to its own limit by
  // CheckRealmMemory(). This is the backstop between two checks.
  // A zone is collected once it grows by half the smallest limit, so that
  // the GC callbacks check a growing realm well before it doubles its limit.
  void UpdateHeapLimit() {
    if (cx_ == nullptr) return;
    uint64_t total = uint64_t{base_heap_bytes_} + (uint64_t{8} << 20);
    size_t smallest = size_t{64} << 20;
    for (const auto& realm : realms_) {
      total += realm->limit;
      smallest = std::min(smallest, realm->limit);
    }
    JS_SetGCParameter(cx_, JSGC_MAX_BYTES, static_cast<uint32_t>(std::min<uint64_t>(total, 0xffffffffu)));
    const auto threshold_mb = static_cast<uint32_t>(std::clamp<size_t>(smallest / 2 >> 20, 1, 27));
    if (threshold_mb != threshold_mb_) {
      threshold_mb_ = threshold_mb;
      JS_SetGCParameter(cx_, JSGC_ALLOCATION_THRESHOLD, threshold_mb);
      JS_SetGCParameter(cx_, JSGC_MALLOC_THRESHOLD_BASE, threshold_mb);
    }
  }

  static thread_local ThreadEngine* current_;
  static thread_local bool exiting_;

  JSContext* cx_ = nullptr;
  std::shared_ptr<ThreadToken> token_;
  Slot slot_;
  std::vector<std::shared_ptr<Realm>> realms_;
  ActiveCall* active_ = nullptr;
  uint32_t base_heap_bytes_ = 0;
  uint32_t threshold_mb_ = 0;
};

thread_local ThreadEngine* ThreadEngine::current_ = nullptr;
thread_local bool ThreadEngine::exiting_ = false;

// True while the realm's zone (its part of the GC heap) stays within its
// limit, after collecting the zone if it had grown past it.
bool CheckRealmMemory(JSContext* cx, Realm& realm) {
  JSObject* global = *realm.global;
  if (js::GetGCHeapUsageForObjectZone(global) <= realm.limit) return true;
  JS::PrepareZoneForGC(cx, JS::GetObjectZone(global));
  JS::NonIncrementalGC(cx, JS::GCOptions::Normal, JS::GCReason::API);
  return js::GetGCHeapUsageForObjectZone(global) <= realm.limit;
}

bool OnInterrupt(JSContext* cx) {
  ThreadEngine* engine = ThreadEngine::IfStarted();
  ActiveCall* call = engine != nullptr ? engine->active() : nullptr;
  if (call == nullptr) return true;
  if (call->dropping_jobs) {
    JS_RequestInterruptCallback(cx);  // for the next job
    return false;
  }
  if (call->timed_out || call->out_of_memory) return false;
  if (engine->slot().expired_epoch.load(std::memory_order_acquire) == call->epoch) {
    call->timed_out = true;
    return false;
  }
  if (!CheckRealmMemory(cx, *call->realm)) {
    call->out_of_memory = true;
    return false;
  }
  return true;
}

bool RealmOverLimit(const Realm& realm) {
  return realm.global.has_value() && js::GetGCHeapUsageForObjectZone(*realm.global) > realm.limit;
}

// After a collection (of any zone, or of the nursery) the realm of the
// running call may be past its limit, garbage included: the interrupt
// callback collects the realm's zone and looks again. Nothing is collected
// here (a callback of the collector must not start one).
void OnGc(JSContext* cx, JSGCStatus status, JS::GCReason, void*) {
  ThreadEngine* engine = ThreadEngine::IfStarted();
  ActiveCall* call = engine != nullptr ? engine->active() : nullptr;
  if (status == JSGC_END && call != nullptr && call->realm != nullptr && RealmOverLimit(*call->realm)) {
    JS_RequestInterruptCallback(cx);
  }
}

void OnNurseryGc(JSContext* cx, JS::GCNurseryProgress progress, JS::GCReason) {
  ThreadEngine* engine = ThreadEngine::IfStarted();
  ActiveCall* call = engine != nullptr ? engine->active() : nullptr;
  if (progress != JS::GCNurseryProgress::GC_NURSERY_COLLECTION_END || call == nullptr || call->realm == nullptr) return;
  if (RealmOverLimit(*call->realm)) JS_RequestInterruptCallback(cx);
}

void OnOutOfMemory(JSContext* cx, void*) {
  ThreadEngine* engine = ThreadEngine::IfStarted();
  ActiveCall* call = engine != nullptr ? engine->active() : nullptr;
  if (call == nullptr) return;
  // Caught or not, the call is over: the next interrupt check stops it.
  call->out_of_memory = true;
  JS_RequestInterruptCallback(cx);
}

// The promise jobs a stopped call queued would otherwise run in the thread's
// next call, whichever runtime it is for: each is stopped at its first
// interrupt check (the start of its function) instead.
void DropQueuedJobs(ThreadEngine& engine) {
  ActiveCall dropping;
  dropping.dropping_jobs = true;
  engine.set_active(&dropping);
  JS_RequestInterruptCallback(engine.cx());
  js::RunJobs(engine.cx());
  JS_ClearPendingException(engine.cx());
  engine.set_active(nullptr);
}

// Arms the watchdog for one call (or a file's top level) on this thread.
class CallGuard {
 public:
  CallGuard(ThreadEngine& engine, Realm& realm, std::chrono::milliseconds timeout, int64_t now_ms)
      : engine_(engine) {
    call_.realm = &realm;
    t_now_us = static_cast<double>(now_ms) * 1000.0;
    Watchdog::Get().Arm(&engine.slot(), std::chrono::nanoseconds(timeout).count());
    call_.epoch = engine.slot().epoch.load(std::memory_order_relaxed);
    engine.set_active(&call_);
  }
  ~CallGuard() { Stop(); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    engine_.set_active(nullptr);
    Watchdog::Disarm(&engine_.slot());
  }
  // The call kept more than its realm may hold once it returned.
  void MarkOutOfMemory() { call_.out_of_memory = true; }
  bool timed_out() const { return call_.timed_out; }
  bool out_of_memory() const { return call_.out_of_memory; }
  bool stopped_by_limit() const { return call_.timed_out || call_.out_of_memory; }

 private:
  ThreadEngine& engine_;
  ActiveCall call_;
  bool stopped_ = false;
};

// --- Values --------------------------------------------------------------

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

// JS_Stringify's output, UTF-16 in pieces, as UTF-8. JSON.stringify escapes
// lone surrogates, so a high surrogate is only ever followed by a low one,
// possibly in the next piece.
struct Utf8Sink {
  std::string text;
  char16_t high = 0;

  static bool Append(const char16_t* buf, uint32_t len, void* data) {
    auto* sink = static_cast<Utf8Sink*>(data);
    for (uint32_t i = 0; i < len; ++i) {
      const char16_t c = buf[i];
      if (sink->high != 0) {
        const char16_t h = sink->high;
        sink->high = 0;
        if (c >= 0xDC00 && c < 0xE000) {
          AppendUtf8(0x10000 + ((char32_t{h} - 0xD800) << 10) + (c - 0xDC00), &sink->text);
          continue;
        }
        AppendUtf8(0xFFFD, &sink->text);
      }
      if (c >= 0xD800 && c < 0xDC00) {
        sink->high = c;
      } else if (c >= 0xDC00 && c < 0xE000) {
        AppendUtf8(0xFFFD, &sink->text);
      } else if (c < 0x80) {
        sink->text.push_back(static_cast<char>(c));
      } else {
        AppendUtf8(c, &sink->text);
      }
    }
    return true;
  }
};

// JSON.stringify(v) as UTF-8; "" when JSON.stringify gives undefined.
bool Stringify(JSContext* cx, JS::MutableHandleValue v, std::string* out) {
  Utf8Sink sink;
  if (!JS_Stringify(cx, v, nullptr, JS::NullHandleValue, &Utf8Sink::Append, &sink)) return false;
  if (sink.high != 0) AppendUtf8(0xFFFD, &sink.text);
  *out = std::move(sink.text);
  return true;
}

// JSON.parse(text).
bool ParseText(JSContext* cx, std::string_view text, JS::MutableHandleValue v) {
  JS::RootedString s(cx, JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(text.data(), text.size())));
  return s != nullptr && JS_ParseJSON(cx, s, v);
}

std::string ToUtf8(JSContext* cx, JS::HandleString s) {
  JS::UniqueChars chars = JS_EncodeStringToUTF8(cx, s);
  return chars ? std::string(chars.get()) : std::string();
}

bool IsErrorObject(JSContext* cx, JS::HandleValue v) {
  if (!v.isObject()) return false;
  JS::RootedObject obj(cx, &v.toObject());
  return JS_ErrorFromException(cx, obj) != nullptr;
}

std::string StringProperty(JSContext* cx, JS::HandleObject obj, const char* name, const char* fallback) {
  JS::RootedValue v(cx);
  if (!JS_GetProperty(cx, obj, name, &v) || !v.isString()) {
    JS_ClearPendingException(cx);
    return fallback;
  }
  JS::RootedString s(cx, v.toString());
  return ToUtf8(cx, s);
}

// The message of a thrown value: an Error as "message" (plain Error) or
// "Name: message"; anything else as String(value).
std::string ThrownMessage(JSContext* cx, JS::HandleValue v, bool name_plain_error = false) {
  if (IsErrorObject(cx, v)) {
    JS::RootedObject obj(cx, &v.toObject());
    const std::string name = StringProperty(cx, obj, "name", "Error");
    const std::string message = StringProperty(cx, obj, "message", "");
    if (name == "Error" && !name_plain_error) return message;
    return name + ": " + message;
  }
  JS::RootedString s(cx, JS::ToString(cx, v));
  if (s == nullptr) {
    JS_ClearPendingException(cx);
    return "(a thrown value that cannot be turned into a string)";
  }
  return ToUtf8(cx, s);
}

// The line an Error object was made at, or 0.
unsigned ErrorLine(JSContext* cx, JS::HandleValue v) {
  if (!v.isObject()) return 0;
  JS::RootedObject obj(cx, &v.toObject());
  const JSErrorReport* report = JS_ErrorFromException(cx, obj);
  return report != nullptr ? report->lineno : 0;
}

// Takes the pending exception (none: the call was terminated).
bool TakeException(JSContext* cx, JS::MutableHandleValue v) {
  if (!JS_IsExceptionPending(cx)) return false;
  if (!JS_GetPendingException(cx, v)) v.setUndefined();
  JS_ClearPendingException(cx);
  return true;
}

// "file:LINE: Name: message" (LINE when the error knows it).
std::string LocatedMessage(JSContext* cx, JS::HandleValue v, const std::string& file) {
  const unsigned line = ErrorLine(cx, v);
  std::string where = line > 0 ? file + ":" + std::to_string(line) + ": " : std::string();
  return where + ThrownMessage(cx, v, /*name_plain_error=*/true);
}

bool Evaluate(JSContext* cx, const char* file, std::string_view source) {
  JS::CompileOptions options(cx);
  options.setFileAndLine(file, 1);
  JS::SourceText<mozilla::Utf8Unit> text;
  JS::RootedValue ignored(cx);
  return text.init(cx, source.data(), source.size(), JS::SourceOwnership::Borrowed) &&
         JS::Evaluate(cx, options, text, &ignored);
}

// Runs the jobs promises queued, so that an async function finishes within
// its call; then a returned promise stands for its result.
bool SettleValue(JSContext* cx, JS::MutableHandleValue v) {
  js::RunJobs(cx);
  if (JS_IsExceptionPending(cx)) return false;
  if (!v.isObject()) return true;
  JS::RootedObject obj(cx, &v.toObject());
  if (!JS::IsPromiseObject(obj)) return true;
  switch (JS::GetPromiseState(obj)) {
    case JS::PromiseState::Fulfilled: v.set(JS::GetPromiseResult(obj)); return true;
    case JS::PromiseState::Rejected: {
      JS::RootedValue reason(cx, JS::GetPromiseResult(obj));
      JS::SetSettledPromiseIsHandled(cx, obj);
      JS_SetPendingException(cx, reason);
      return false;
    }
    case JS::PromiseState::Pending: break;
  }
  JS_ReportErrorASCII(cx, "the returned promise is still pending (nothing outside the call can settle it)");
  return false;
}

// Runs before each file: what would make handlers non-deterministic.
constexpr std::string_view kPrelude = R"JS(
(function (global) {
  'use strict';
  Object.defineProperty(Math, 'random', {
    value: function random() {
      throw new Error('Math.random() is not allowed: handlers and view code must be deterministic ' +
                      '(derive values from the request or ctx)');
    },
    writable: false, enumerable: false, configurable: false
  });
  // What the garbage collector's timing could make observable.
  delete global.WeakRef;
  delete global.FinalizationRegistry;
})(globalThis);
)JS";

// lazy(object, name, text): makes object[name] the value of the JSON text,
// parsed when first read (CallJson's lazy members: what view code seldom
// reads costs no parse). It keeps its own JSON.parse and defineProperty, so
// that a file that replaces them changes nothing here.
constexpr std::string_view kLazyMember = R"JS(
(function () {
  'use strict';
  const parse = JSON.parse;
  const define = Object.defineProperty;
  return function lazy(object, name, text) {
    define(object, name, {
      configurable: true, enumerable: true,
      get() {
        const value = parse(text);
        define(object, name, {value: value, writable: true, enumerable: true, configurable: true});
        return value;
      },
      set(value) {
        define(object, name, {value: value, writable: true, enumerable: true, configurable: true});
      }
    });
  };
})()
)JS";

// The deepest state or request a handler is given: what ParseJson ever
// builds (SpiderMonkey's JSON.parse has no limit of its own).
constexpr uint32_t kMaxJsonDepth = kMaxJsonDepthCap;

}  // namespace

struct JsRuntime::Heap {
  std::shared_ptr<Realm> realm;

  ~Heap() { Drop(); }

  // Gives the realm up: released now on its own thread, else left for that
  // thread to release (or already released, if the thread has exited).
  void Drop() {
    if (realm == nullptr) return;
    ThreadEngine* engine = ThreadEngine::IfStarted();
    if (engine != nullptr && realm->owner == engine->token()) {
      engine->Release(realm);
    } else {
      realm->abandoned.store(true, std::memory_order_release);
      realm->owner->abandoned_realms.store(true, std::memory_order_release);
    }
    realm.reset();
  }

  bool OnThisThread() const {
    ThreadEngine* engine = ThreadEngine::IfStarted();
    return realm != nullptr && engine != nullptr && realm->owner == engine->token();
  }
};

JsRuntime::JsRuntime(std::string file, std::string source, JsLimits limits, JsPurpose purpose)
    : file_(std::move(file)), source_(std::move(source)), limits_(limits), purpose_(purpose) {}

JsRuntime::~JsRuntime() = default;

Result<std::unique_ptr<JsRuntime>> JsRuntime::Create(std::string file, std::string source, JsLimits limits,
                                                     JsPurpose purpose) {
  std::unique_ptr<JsRuntime> rt(new JsRuntime(std::move(file), std::move(source), limits, purpose));
  RETURN_IF_ERROR(rt->Load());
  return rt;
}

Status JsRuntime::Load() {
  heap_.reset();
  ThreadEngine* engine = ThreadEngine::Current();
  if (engine == nullptr) return InvalidArgument(file_ + ": the JavaScript engine (SpiderMonkey) could not be started");
  engine->SweepAbandoned();
  JSContext* cx = engine->cx();
  auto heap = std::make_unique<Heap>();
  heap->realm = engine->NewRealm(limits_.memory_bytes);
  Realm& realm = *heap->realm;

  JS::RealmOptions options;
  options.creationOptions().setNewCompartmentAndZone();
  JS::RootedObject global(cx, JS_NewGlobalObject(cx, &kGlobalClass, nullptr, JS::FireOnNewGlobalHook, options));
  if (global == nullptr) {
    JS_ClearPendingException(cx);
    return InvalidArgument(file_ + ": the JavaScript realm could not be created");
  }
  realm.global.emplace(cx, global);
  JSAutoRealm in_realm(cx, global);
  CallGuard guard(*engine, realm, limits_.timeout, 0);
  auto fail = [&](std::string what) {
    guard.Stop();
    JS_ClearPendingException(cx);
    if (guard.stopped_by_limit()) DropQueuedJobs(*engine);
    if (guard.timed_out()) what += " (stopped at the handler_timeout of " + std::to_string(limits_.timeout.count()) + "ms)";
    if (guard.out_of_memory()) what += " (the heap reached handler_memory, " + std::to_string(limits_.memory_bytes) + " bytes)";
    return InvalidArgument(std::move(what));
  };
  JS::RootedValue thrown(cx);
  if (!JS::InitRealmStandardClasses(cx) || !Evaluate(cx, "prelude.js", kPrelude)) {
    return fail(file_ + ": the handler prelude failed to run");
  }
  {
    JS::CompileOptions lazy_options(cx);
    lazy_options.setFileAndLine("lazy.js", 1);
    JS::SourceText<mozilla::Utf8Unit> lazy_text;
    JS::RootedValue lazy(cx);
    if (!lazy_text.init(cx, kLazyMember.data(), kLazyMember.size(), JS::SourceOwnership::Borrowed) ||
        !JS::Evaluate(cx, lazy_options, lazy_text, &lazy) || !lazy.isObject()) {
      return fail(file_ + ": the handler prelude failed to run");
    }
    realm.lazy_member.emplace(cx, &lazy.toObject());
  }
  // The top level's promise jobs run now, within its limits.
  if (!Evaluate(cx, file_.c_str(), source_) || (js::RunJobs(cx), JS_IsExceptionPending(cx))) {
    if (!TakeException(cx, &thrown)) return fail(file_ + ": the file's top level was stopped");
    return fail(file_ + ":" + [&] {
      const unsigned line = ErrorLine(cx, thrown);
      return line > 0 ? std::to_string(line) + ": " : std::string(" ");
    }() + ThrownMessage(cx, thrown, /*name_plain_error=*/true));
  }

  // The commands: the global object's own enumerable functions, and the
  // functions top-level `const` (or `let`) declarations hold, not starting
  // with '_'.
  JS::RootedValueVector found(cx);
  std::vector<std::string> found_names;
  std::string problems;
  auto consider = [&](JS::HandleObject holder) -> bool {
    JS::Rooted<JS::IdVector> ids(cx, JS::IdVector(cx));
    if (!JS_Enumerate(cx, holder, &ids)) return false;
    for (size_t i = 0; i < ids.length(); ++i) {
      if (!ids[i].isString()) continue;
      JS::RootedString key(cx, ids[i].toString());
      const std::string name = ToUtf8(cx, key);
      JS::RootedValue v(cx);
      if (!JS_GetPropertyById(cx, holder, ids[i], &v)) return false;
      const bool is_function = v.isObject() && JS_ObjectIsFunction(&v.toObject());
      if (!is_function || name.empty() || name[0] == '_') continue;
      if (purpose_ == JsPurpose::kHandlers && !IsValidCommandName(name)) {
        problems += "\n" + file_ + ": function '" + name +
                    "' is not a valid command name ([a-z][a-z0-9_]*, at most 64 bytes); "
                    "start helper functions with '_'";
        continue;
      }
      if (purpose_ == JsPurpose::kHandlers &&
          (name == "create" || name == "put" || name == "patch" || name == "delete")) {
        problems += "\n" + file_ + ": function '" + name + "' would hide the built-in command of that name";
        continue;
      }
      if (!found.append(v)) return false;
      found_names.push_back(name);
    }
    return true;
  };
  // Top-level `let` and class bindings live in the global lexical
  // environment, not on the global object: frozen too, so that they cannot
  // carry state between calls either.
  JS::RootedObject lexical(cx, JS_GlobalLexicalEnvironment(global));
  if (!consider(global) || (lexical != nullptr && !consider(lexical))) {
    return fail(file_ + ": could not list the file's functions");
  }
  if (lexical != nullptr && !JS_FreezeObject(cx, lexical)) return fail(file_ + ": could not freeze the top-level bindings");
  if (!problems.empty()) return fail(problems.substr(1));
  if (found_names.empty()) {
    if (purpose_ == JsPurpose::kViewCode) {
      return fail(file_ + ": defines no function (view code defines top-level functions such as "
                          "`function transform(event) {...}`)");
    }
    return fail(file_ + ": defines no command (a command is a top-level function such as "
                        "`function deposit(state, request, ctx) {...}`)");
  }
  std::vector<size_t> order(found_names.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return found_names[a] < found_names[b]; });
  std::vector<std::string> names;
  JS::RootedObject table(cx, JS::NewArrayObject(cx, order.size()));
  if (table == nullptr) return fail(file_ + ": could not list the file's functions");
  for (size_t i = 0; i < order.size(); ++i) {
    names.push_back(found_names[order[i]]);
    if (!JS_SetElement(cx, table, static_cast<uint32_t>(i), found[order[i]])) {
      return fail(file_ + ": could not list the file's functions");
    }
  }
  if (!Evaluate(cx, "freeze.js", "Object.freeze(globalThis);")) {
    JS::RootedValue why(cx);
    TakeException(cx, &why);
    return fail(file_ + ": could not freeze the global object: " + ThrownMessage(cx, why));
  }
  guard.Stop();
  if (guard.stopped_by_limit()) return fail(file_ + ": the file's top level was stopped");
  realm.functions.emplace(cx, table);
  realm.names = names;
  if (commands_.empty()) commands_ = std::move(names);
  heap_ = std::move(heap);
  return Status::Ok();
}

bool JsRuntime::HasCommand(std::string_view name) const {
  return std::binary_search(commands_.begin(), commands_.end(), name);
}

namespace {

// The function `name` of a loaded realm.
bool FunctionOf(JSContext* cx, const Realm& realm, std::string_view name, JS::MutableHandleValue fn) {
  auto it = std::lower_bound(realm.names.begin(), realm.names.end(), name);
  if (it == realm.names.end() || *it != name) return false;
  JS::RootedObject table(cx, *realm.functions);
  return JS_GetElement(cx, table, static_cast<uint32_t>(it - realm.names.begin()), fn);
}

}  // namespace

JsOutcome JsRuntime::Call(std::string_view name, const Json& state, const Json& request, const JsContext& jctx) {
  JsOutcome out;
  if (!HasCommand(name)) {
    out.kind = JsOutcome::Kind::kRejected;
    out.message = "no handler for command '" + std::string(name) + "'";
    return out;
  }
  if (JsonDepth(state) > kMaxJsonDepth || JsonDepth(request) > kMaxJsonDepth) {
    out.kind = JsOutcome::Kind::kRejected;
    out.message = "the state or request is nested too deeply";
    return out;
  }
  if (heap_ == nullptr || !heap_->OnThisThread()) {
    // First call on this thread, or a rebuild that failed earlier (it can
    // only fail on limits the file met before).
    if (Status st = Load(); !st.ok()) {
      out.kind = JsOutcome::Kind::kOutOfMemory;
      out.message = "the handler could not be reloaded: " + st.message();
      return out;
    }
  }
  ThreadEngine& engine = *ThreadEngine::IfStarted();
  engine.SweepAbandoned();
  JSContext* cx = engine.cx();
  Realm& realm = *heap_->realm;
  const std::string state_text = state.dump(-1, ' ', false, Json::error_handler_t::replace);
  const std::string request_text = request.dump(-1, ' ', false, Json::error_handler_t::replace);
  bool returned = false;
  bool threw = false;
  bool timed_out = false;
  bool out_of_memory = false;
  std::string new_state;
  std::string response;
  // Everything that roots a JavaScript value of the call ends with this
  // block, so that a rebuild after a limit can collect the old realm.
  {
    JS::RootedObject global(cx, *realm.global);
    JSAutoRealm in_realm(cx, global);
    CallGuard guard(engine, realm, limits_.timeout, jctx.now_ms);
    JS::RootedValue thrown(cx);
    JS::RootedValueArray<3> args(cx);
    JS::RootedValue fn(cx);
    JS::RootedObject c(cx);
    JS::RootedValue ret(cx);
    bool ok = FunctionOf(cx, realm, name, &fn) && ParseText(cx, state_text, args[0]) &&
              ParseText(cx, request_text, args[1]);
    if (ok) {
      c = JS_NewPlainObject(cx);
      JS::RootedString id(cx, JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(jctx.command_id.data(), jctx.command_id.size())));
      ok = c != nullptr && id != nullptr && JS_DefineProperty(cx, c, "command_id", id, JSPROP_ENUMERATE) &&
           JS_DefineProperty(cx, c, "version", static_cast<double>(jctx.version), JSPROP_ENUMERATE) &&
           JS_DefineProperty(cx, c, "exists", jctx.exists, JSPROP_ENUMERATE) &&
           JS_DefineProperty(cx, c, "now", static_cast<double>(jctx.now_ms), JSPROP_ENUMERATE);
      if (ok) args[2].setObject(*c);
    }
    ok = ok && JS_CallFunctionValue(cx, nullptr, fn, args, &ret) && SettleValue(cx, &ret);
    if (ok) {
      returned = true;
      if (ret.isUndefined()) ret.setNull();
      ok = Stringify(cx, args[0], &new_state) && Stringify(cx, &ret, &response);
    }
    if (!ok) threw = TakeException(cx, &thrown);
    if (ok && !CheckRealmMemory(cx, realm)) guard.MarkOutOfMemory();
    if (threw) out.message = ThrownMessage(cx, thrown);
    guard.Stop();
    timed_out = guard.timed_out();
    out_of_memory = guard.out_of_memory();
  }
  if (timed_out || out_of_memory) {
    // Whatever the call caught or kept, the realm is rebuilt from the file.
    out.kind = timed_out ? JsOutcome::Kind::kTimeout : JsOutcome::Kind::kOutOfMemory;
    out.message = timed_out ? "the handler of '" + std::string(name) + "' ran longer than handler_timeout (" +
                                  std::to_string(limits_.timeout.count()) + "ms) and was stopped"
                            : "the handler of '" + std::string(name) + "' needed more than handler_memory (" +
                                  std::to_string(limits_.memory_bytes) + " bytes) and was stopped";
    out.state = Json();
    ++rebuilds_;
    DropQueuedJobs(engine);
    heap_.reset();
    // What the runaway call left is collected now, not during the next call.
    JS_GC(cx);
    if (Status st = Load(); !st.ok()) heap_.reset();
    return out;
  }
  if (!returned || threw) {
    out.kind = returned ? JsOutcome::Kind::kInvalidResult : JsOutcome::Kind::kRejected;
    if (!threw) out.message = "the call was stopped";
    if (returned) out.message = "the state or response is not JSON-serialisable: " + out.message;
    return out;
  }
  auto parsed_state = ParseJson(new_state.empty() ? std::string_view("null") : std::string_view(new_state),
                                limits_.max_json_depth);
  auto parsed_response = ParseJson(response.empty() ? std::string_view("null") : std::string_view(response),
                                   limits_.max_json_depth);
  if (!parsed_state.ok() || !parsed_response.ok() || !parsed_state->is_object()) {
    out.kind = JsOutcome::Kind::kInvalidResult;
    out.message = "the handler of '" + std::string(name) + "' left a state that is not a JSON object";
    if (!parsed_state.ok()) {
      out.message = "the handler of '" + std::string(name) + "' left a state that is not valid: " +
                    parsed_state.status().message();
    } else if (!parsed_response.ok()) {
      out.message = "the handler of '" + std::string(name) + "' returned a value that is not valid: " +
                    parsed_response.status().message();
    }
    return out;
  }
  out.kind = JsOutcome::Kind::kApplied;
  out.message.clear();
  out.state = std::move(parsed_state).value();
  out.response = std::move(parsed_response).value();
  return out;
}

JsValueOutcome JsRuntime::CallJson(std::string_view name, std::string_view arg, int64_t now_ms) {
  return CallJsonLazy(name, arg, {}, now_ms);
}

JsValueOutcome JsRuntime::CallJsonLazy(std::string_view name, std::string_view arg,
                                       std::span<const std::pair<std::string_view, std::string_view>> lazy,
                                       int64_t now_ms) {
  JsValueOutcome out;
  if (!HasCommand(name)) {
    out.message = file_ + ": defines no function '" + std::string(name) + "'";
    return out;
  }
  if (heap_ == nullptr || !heap_->OnThisThread()) {
    if (Status st = Load(); !st.ok()) {
      out.kind = JsOutcome::Kind::kOutOfMemory;
      out.message = file_ + " could not be reloaded: " + st.message();
      return out;
    }
  }
  ThreadEngine& engine = *ThreadEngine::IfStarted();
  engine.SweepAbandoned();
  JSContext* cx = engine.cx();
  Realm& realm = *heap_->realm;
  bool returned = false;
  bool threw = false;
  bool timed_out = false;
  bool out_of_memory = false;
  std::string json;
  {
    JS::RootedObject global(cx, *realm.global);
    JSAutoRealm in_realm(cx, global);
    CallGuard guard(engine, realm, limits_.timeout, now_ms);
    JS::RootedValueArray<1> args(cx);
    JS::RootedValue fn(cx);
    JS::RootedValue ret(cx);
    bool ok = FunctionOf(cx, realm, name, &fn) && ParseText(cx, arg, args[0]);
    if (ok && !lazy.empty()) {
      // Each lazy member: null when its text is empty, else parsed on first read.
      ok = args[0].isObject();
      JS::RootedObject object(cx, ok ? &args[0].toObject() : nullptr);
      JS::RootedValue helper(cx, JS::ObjectValue(**realm.lazy_member));
      for (const auto& [member, text] : lazy) {
        if (!ok) break;
        const std::string key(member);
        if (text.empty()) {
          ok = JS_SetProperty(cx, object, key.c_str(), JS::NullHandleValue);
          continue;
        }
        JS::RootedValueArray<3> lazy_args(cx);
        lazy_args[0].setObject(*object);
        JS::RootedString key_string(cx, JS_NewStringCopyN(cx, key.data(), key.size()));
        JS::RootedString text_string(cx, JS_NewStringCopyUTF8N(cx, JS::UTF8Chars(text.data(), text.size())));
        ok = key_string != nullptr && text_string != nullptr;
        if (!ok) break;
        lazy_args[1].setString(key_string);
        lazy_args[2].setString(text_string);
        JS::RootedValue ignored(cx);
        ok = JS_CallFunctionValue(cx, nullptr, helper, lazy_args, &ignored);
      }
    }
    ok = ok && JS_CallFunctionValue(cx, nullptr, fn, args, &ret) && SettleValue(cx, &ret);
    if (ok) {
      returned = true;
      if (ret.isUndefined() || ret.isSymbol() || (ret.isObject() && JS_ObjectIsFunction(&ret.toObject()))) {
        ret.setNull();
      }
      ok = Stringify(cx, &ret, &json);
    }
    JS::RootedValue thrown(cx);
    if (!ok) threw = TakeException(cx, &thrown);
    if (ok && !CheckRealmMemory(cx, realm)) guard.MarkOutOfMemory();
    if (threw) out.message = LocatedMessage(cx, thrown, file_);
    guard.Stop();
    timed_out = guard.timed_out();
    out_of_memory = guard.out_of_memory();
  }
  if (timed_out || out_of_memory) {
    out.kind = timed_out ? JsOutcome::Kind::kTimeout : JsOutcome::Kind::kOutOfMemory;
    out.message = file_ + ": " + std::string(name) +
                  (timed_out ? "() ran longer than its time limit (" + std::to_string(limits_.timeout.count()) +
                                   "ms of CPU) and was stopped"
                             : "() needed more than its memory limit (" + std::to_string(limits_.memory_bytes) +
                                   " bytes) and was stopped");
    ++rebuilds_;
    DropQueuedJobs(engine);
    heap_.reset();
    // What the runaway call left is collected now, not during the next call.
    JS_GC(cx);
    if (Status st = Load(); !st.ok()) heap_.reset();
    return out;
  }
  if (!returned || threw) {
    out.kind = returned ? JsOutcome::Kind::kInvalidResult : JsOutcome::Kind::kRejected;
    if (!threw) out.message = file_ + ": " + std::string(name) + "() was stopped";
    if (returned) out.message = file_ + ": " + std::string(name) + "() returned a value JSON cannot encode: " + out.message;
    return out;
  }
  out.kind = JsOutcome::Kind::kApplied;
  out.json = json.empty() ? "null" : std::move(json);
  return out;
}

}  // namespace sluice::handlers
