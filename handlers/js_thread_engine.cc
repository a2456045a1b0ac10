#include "handlers/js_thread_engine.h"

#include <js/Context.h>
#include <js/Date.h>
#include <js/GCAPI.h>
#include <js/Initialization.h>
#include <js/Interrupt.h>
#include <js/LocaleSensitive.h>
#include <js/MemoryCallbacks.h>
#include <js/Promise.h>
#include <js/Realm.h>
#include <js/Stack.h>
#include <jsapi.h>
#include <jsfriendapi.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace sluice::handlers {
namespace {

// The fixed timestamp Date sees on this thread, in microseconds.
thread_local double t_now_us = 0;

double FixedNow(double, JSContext*) { return t_now_us; }

}  // namespace

void SetFixedNow(double now_ms) { t_now_us = now_ms * 1000.0; }

namespace {

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

}  // namespace

thread_local ThreadEngine* ThreadEngine::current_ = nullptr;
thread_local bool ThreadEngine::exiting_ = false;

ThreadEngine* ThreadEngine::Current() {
  if (current_ != nullptr) return current_;
  if (exiting_) return nullptr;
  static thread_local std::unique_ptr<ThreadEngine> owned;
  auto engine = std::make_unique<ThreadEngine>();
  if (!engine->Start()) return nullptr;
  owned = std::move(engine);
  current_ = owned.get();
  return current_;
}

ThreadEngine* ThreadEngine::IfStarted() { return current_; }

ThreadEngine::ThreadEngine() : token_(std::make_shared<ThreadToken>()) {}

ThreadEngine::~ThreadEngine() {
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

void ThreadEngine::SweepAbandoned() {
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

std::shared_ptr<Realm> ThreadEngine::NewRealm(size_t limit) {
  auto realm = std::make_shared<Realm>();
  realm->owner = token_;
  realm->limit = limit;
  realms_.push_back(realm);
  UpdateHeapLimit();
  return realm;
}

void ThreadEngine::Release(const std::shared_ptr<Realm>& realm) {
  realm->ReleaseRoots();
  realms_.erase(std::remove(realms_.begin(), realms_.end(), realm), realms_.end());
  UpdateHeapLimit();
}

bool ThreadEngine::Start() {
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
void ThreadEngine::UpdateHeapLimit() {
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

bool CheckRealmMemory(JSContext* cx, Realm& realm) {
  JSObject* global = *realm.global;
  if (js::GetGCHeapUsageForObjectZone(global) <= realm.limit) return true;
  JS::PrepareZoneForGC(cx, JS::GetObjectZone(global));
  JS::NonIncrementalGC(cx, JS::GCOptions::Normal, JS::GCReason::API);
  return js::GetGCHeapUsageForObjectZone(global) <= realm.limit;
}

void DropQueuedJobs(ThreadEngine& engine) {
  ActiveCall dropping;
  dropping.dropping_jobs = true;
  engine.set_active(&dropping);
  JS_RequestInterruptCallback(engine.cx());
  js::RunJobs(engine.cx());
  JS_ClearPendingException(engine.cx());
  engine.set_active(nullptr);
}

CallGuard::CallGuard(ThreadEngine& engine, Realm& realm, std::chrono::milliseconds timeout, int64_t now_ms)
    : engine_(engine) {
  call_.realm = &realm;
  t_now_us = static_cast<double>(now_ms) * 1000.0;
  Watchdog::Get().Arm(&engine.slot(), std::chrono::nanoseconds(timeout).count());
  call_.epoch = engine.slot().epoch.load(std::memory_order_relaxed);
  engine.set_active(&call_);
}

void CallGuard::Stop() {
  if (stopped_) return;
  stopped_ = true;
  engine_.set_active(nullptr);
  Watchdog::Disarm(&engine_.slot());
}

}  // namespace sluice::handlers
