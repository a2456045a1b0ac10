#include "connectors/view_code_pool.h"

#include <algorithm>
#include <utility>

#include "core/thread_name.h"

namespace sluice::connectors {
namespace {

// Below this many events per runtime, handing slices to workers costs more
// than it saves.
constexpr size_t kMinSlice = 32;

// Slice k of [0, n) cut in `parts`.
std::pair<size_t, size_t> Slice(size_t n, size_t parts, size_t k) {
  return {n * k / parts, n * (k + 1) / parts};
}

}  // namespace

size_t ViewCodePool::DefaultSize() {
  const unsigned cores = std::thread::hardware_concurrency();
  return std::clamp<size_t>(cores == 0 ? 1 : cores, 1, 4);
}

Result<std::unique_ptr<ViewCodePool>> ViewCodePool::Load(const config::SinkConfig& sink, ViewCode::Purpose purpose,
                                                         size_t size) {
  std::vector<std::unique_ptr<ViewCode>> codes;
  for (size_t k = 0; k < std::max<size_t>(1, size); ++k) {
    ASSIGN_OR_RETURN(auto code, ViewCode::LoadFor(sink, purpose));
    codes.push_back(std::move(code));
  }
  return std::unique_ptr<ViewCodePool>(new ViewCodePool(std::move(codes)));
}

ViewCodePool::ViewCodePool(std::vector<std::unique_ptr<ViewCode>> codes) : codes_(std::move(codes)) {
  for (size_t k = 1; k < codes_.size(); ++k) {
    workers_.push_back(StartNamedThread("sluice-code", [this, k] { Work(k); }));
  }
}

ViewCodePool::~ViewCodePool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ViewCodePool::Work(size_t worker) {
  uint64_t seen = 0;
  for (;;) {
    size_t n = 0;
    const std::function<void(ViewCode&, size_t)>* each = nullptr;
    {
      std::unique_lock lock(mu_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) break;
      seen = generation_;
      n = n_;
      each = each_;
    }
    const auto [begin, end] = Slice(n, codes_.size(), worker);
    for (size_t i = begin; i < end; ++i) (*each)(*codes_[worker], i);
    std::lock_guard lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
  // A runtime is released on the thread that ran it.
  codes_[worker].reset();
}

void ViewCodePool::ForEach(size_t n, const std::function<void(ViewCode& code, size_t i)>& each) {
  if (workers_.empty() || n < kMinSlice * 2) {
    for (size_t i = 0; i < n; ++i) each(*codes_[0], i);
    return;
  }
  {
    std::lock_guard lock(mu_);
    n_ = n;
    each_ = &each;
    pending_ = workers_.size();
    ++generation_;
  }
  start_cv_.notify_all();
  const auto [begin, end] = Slice(n, codes_.size(), 0);
  for (size_t i = begin; i < end; ++i) each(*codes_[0], i);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  each_ = nullptr;
}

}  // namespace sluice::connectors
