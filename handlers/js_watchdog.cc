#include "handlers/js_watchdog.h"

#include <js/Interrupt.h>
#include <jsapi.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

namespace sluice::handlers {
namespace {

int64_t ClockNanos(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

Watchdog& Watchdog::Get() {
  static Watchdog* const w = [] {
    auto owned = std::make_unique<Watchdog>();
    std::thread([w = owned.get()] { w->Run(); }).detach();
    return owned.release();
  }();
  return *w;
}

void Watchdog::Add(WatchdogSlot* slot) {
  std::lock_guard lock(mu_);
  slots_.push_back(slot);
}

void Watchdog::Remove(WatchdogSlot* slot) {
  std::lock_guard lock(mu_);
  slots_.erase(std::remove(slots_.begin(), slots_.end(), slot), slots_.end());
}

void Watchdog::Run() {
  int idle_polls = 0;
  for (;;) {
    bool any_armed = false;
    {
      std::lock_guard lock(mu_);
      for (WatchdogSlot* s : slots_) {
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
    const bool armed_now = std::any_of(slots_.begin(), slots_.end(), [](WatchdogSlot* s) {
      return (s->epoch.load(std::memory_order_seq_cst) & 1) != 0;
    });
    if (!armed_now) cv_.wait(lock, [&] { return wake_; });
    wake_ = false;
    idle_.store(false, std::memory_order_relaxed);
    idle_polls = 0;
  }
}

}  // namespace sluice::handlers
