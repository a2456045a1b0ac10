// Capped exponential backoff with "equal jitter" (each delay uniform in the
// upper half of its ceiling, never below half of it), for retries of
// unavailable servers. Not thread-safe: one instance per retry loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace sluice {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
      : initial_(initial), max_(max), rng_(std::random_device{}()) {}

  // The next delay: uniform in [ceiling/2, ceiling], ceiling doubling up to max.
  std::chrono::milliseconds Next() {
    auto ceiling = initial_ * (int64_t{1} << (attempt_ < 20 ? attempt_ : 20));
    if (ceiling > max_) ceiling = max_;
    ++attempt_;
    std::uniform_int_distribution<int64_t> d(ceiling.count() / 2, ceiling.count());
    return std::chrono::milliseconds(d(rng_));
  }
  void Reset() { attempt_ = 0; }
  uint32_t attempts() const { return attempt_; }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  uint32_t attempt_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace sluice
