// Internal to handlers/: the CPU-time watchdog that stops runaway JavaScript
// (JsLimits::timeout). One thread per process, started at the first use and
// never stopped, polls every thread that runs JavaScript.
//
// A thread that runs JavaScript has one WatchdogSlot (its ThreadEngine's,
// js_thread_engine.h). A call arms it with two atomic stores (budget, then an
// odd epoch), no lock; the watchdog polls every armed slot about once a
// millisecond, reads that thread's CPU clock (a system call, so the calling
// thread never pays for it), counts the budget from the first time it saw
// the epoch, and once the budget is spent marks the epoch expired and asks
// SpiderMonkey to run the interrupt callback, which stops the call. It
// requests nothing before that: in SpiderMonkey 102 an interrupt that lands
// inside a regular expression and lets it go on fails the expression with
// "too much recursion". After 100 ms with nothing armed it sleeps until a
// call is armed.
#pragma once

#include <time.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

struct JSContext;

namespace sluice::handlers {

// One thread's entry in the watchdog. The thread that owns it fills `cx` and
// `cpu_clock` before Add() and arms and disarms it; the watchdog writes
// `expired_epoch` and its own bookkeeping.
struct WatchdogSlot {
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
  // The process's watchdog, its thread started on first use. Leaked on
  // purpose: partition workers may still be running when static destructors
  // run, and a joined watchdog would leave them unguarded.
  static Watchdog& Get();

  // Add() and Remove() are called by the slot's thread when its engine
  // starts and ends. After Remove() returns the watchdog no longer touches
  // the slot or its context.
  void Add(WatchdogSlot* slot);
  void Remove(WatchdogSlot* slot);

  // Called by the slot's thread around each call: Arm() starts a budget of
  // CPU time (an epoch the watchdog has not seen), Disarm() ends it.
  void Arm(WatchdogSlot* slot, int64_t budget_ns) {
    slot->budget_ns.store(budget_ns, std::memory_order_relaxed);
    slot->epoch.store(slot->epoch.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
    if (idle_.load(std::memory_order_seq_cst)) {
      std::lock_guard lock(mu_);
      wake_ = true;
      cv_.notify_one();
    }
  }
  static void Disarm(WatchdogSlot* slot) {
    slot->epoch.store(slot->epoch.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

 private:
  // The watchdog thread's loop; never returns.
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WatchdogSlot*> slots_;  // guarded by mu_
  bool wake_ = false;                 // guarded by mu_
  std::atomic<bool> idle_{false};     // true while the watchdog waits on cv_
};

}  // namespace sluice::handlers
