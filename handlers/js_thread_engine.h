// Internal to handlers/: the SpiderMonkey engine of one thread, and the
// per-call limits it enforces for JsRuntime (js_runtime.cc).
//
// SpiderMonkey allows one JSContext per thread. A thread gets its
// ThreadEngine (its context, its WatchdogSlot, the realms it made) at its
// first JsRuntime; JS_Init runs once per process before the first context,
// and JS_ShutDown at exit once no other thread still has a context. The
// engine is destroyed when its thread exits (a thread_local), releasing
// every realm the thread still holds first.
//
// Threads: a ThreadEngine, its realms' roots and a CallGuard are touched only
// by their own thread. Another thread may only read a Realm's `owner` and
// mark the realm abandoned (ThreadToken); the owning thread releases it at
// its next call (SweepAbandoned) or when it exits.
#pragma once

#include <js/RootingAPI.h>
#include <js/TypeDecls.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "handlers/js_watchdog.h"

namespace sluice::handlers {

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
  size_t limit = 0;  // bytes of GC heap its zone may hold (JsLimits::memory_bytes)
  std::optional<JS::PersistentRootedObject> global;
  std::optional<JS::PersistentRootedObject> functions;  // an array, in `names` order
  std::vector<std::string> names;                        // sorted
  // kLazyMember, made before the file ran (so the file cannot change what it uses).
  std::optional<JS::PersistentRootedObject> lazy_member;
  // kMany and the native it moves Date with, made before the file ran too.
  std::optional<JS::PersistentRootedObject> many;
  std::optional<JS::PersistentRootedObject> set_now;
  std::optional<JS::PersistentRootedObject> settle;

  void ReleaseRoots() {
    settle.reset();
    set_now.reset();
    many.reset();
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

// The JavaScript engine of one thread, made at its first JsRuntime and
// destroyed when the thread exits (thread_local). Its context has the
// interrupt, out-of-memory and GC callbacks that stop the active call at a
// limit, and a GC heap limit that is the sum of its live realms' limits.
class ThreadEngine {
 public:
  // The calling thread's engine, made on first use; null when SpiderMonkey
  // could not start (or the thread is exiting).
  static ThreadEngine* Current();
  // The calling thread's engine if it has one (never makes one).
  static ThreadEngine* IfStarted();

  ThreadEngine();
  ~ThreadEngine();
  ThreadEngine(const ThreadEngine&) = delete;
  ThreadEngine& operator=(const ThreadEngine&) = delete;

  JSContext* cx() const { return cx_; }
  const std::shared_ptr<ThreadToken>& token() const { return token_; }
  WatchdogSlot& slot() { return slot_; }
  ActiveCall* active() const { return active_; }
  void set_active(ActiveCall* call) { active_ = call; }

  // Releases the realms other threads gave up (their runtimes moved or were
  // destroyed elsewhere); cheap when there are none.
  void SweepAbandoned();
  // A realm of this thread, held to `limit` bytes of GC heap; the caller
  // makes its global. Release() drops its roots and its share of the heap.
  std::shared_ptr<Realm> NewRealm(size_t limit);
  void Release(const std::shared_ptr<Realm>& realm);

 private:
  bool Start();
  // The context's heap limit and collection thresholds, from the live realms.
  void UpdateHeapLimit();

  static thread_local ThreadEngine* current_;
  static thread_local bool exiting_;

  JSContext* cx_ = nullptr;
  std::shared_ptr<ThreadToken> token_;
  WatchdogSlot slot_;
  std::vector<std::shared_ptr<Realm>> realms_;
  ActiveCall* active_ = nullptr;
  uint32_t base_heap_bytes_ = 0;
  uint32_t threshold_mb_ = 0;
};

// Moves the fixed timestamp Date sees on this thread (a call of a run of
// JsRuntime::CallJsonMany, each at its own time).
void SetFixedNow(double now_ms);

// True while the realm's zone (its part of the GC heap) stays within its
// limit, after collecting the zone if it had grown past it.
bool CheckRealmMemory(JSContext* cx, Realm& realm);

// After a call stopped at a limit: the promise jobs it queued would otherwise
// run in the thread's next call, whichever runtime it is for; each is stopped
// at its first interrupt check (the start of its function) instead.
void DropQueuedJobs(ThreadEngine& engine);

// One call (or a file's top level) on this thread, inside `realm`: from
// construction to Stop() the watchdog holds it to `timeout` of CPU time, the
// callbacks hold it to the realm's heap limit, and Date reads `now_ms`.
class CallGuard {
 public:
  CallGuard(ThreadEngine& engine, Realm& realm, std::chrono::milliseconds timeout, int64_t now_ms);
  ~CallGuard() { Stop(); }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;

  void Stop();
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

}  // namespace sluice::handlers
