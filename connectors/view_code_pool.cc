#include "connectors/view_code_pool.h"

#include <algorithm>
#include <utility>

#include "core/cpus.h"
#include "core/log.h"
#include "core/thread_name.h"

namespace sluice::connectors {
namespace {

// Below this many events per runtime, handing slices to workers costs more
// than it saves.
constexpr size_t kMinSlice = 32;

// Slice k of [0, n) cut in `parts`.
std::pair<size_t, size_t> SliceOf(size_t n, size_t parts, size_t k) {
  return {n * k / parts, n * (k + 1) / parts};
}

std::string Describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception";
  }
}

}  // namespace

size_t ViewCodePool::DefaultSize() {
  return std::clamp<size_t>(UsableCpus(), 1, 4);
}

Result<std::unique_ptr<ViewCodePool>> ViewCodePool::Make(const ViewCode& like, size_t size) {
  std::unique_ptr<ViewCodePool> pool(new ViewCodePool());
  size = std::max<size_t>(1, size);
  ASSIGN_OR_RETURN(auto own, like.Again());
  pool->codes_.push_back(std::move(own));
  pool->codes_.resize(size);
  try {
    for (size_t k = 1; k < size; ++k) {
      {
        std::lock_guard lock(pool->mu_);
        ++pool->loading_;
      }
      ViewCodePool* p = pool.get();
      pool->workers_.push_back(StartNamedThread("sluice-code", [p, k, &like] { p->Work(k, &like); }));
    }
  } catch (const std::exception& e) {
    std::lock_guard lock(pool->mu_);
    --pool->loading_;  // the thread that did not start
    if (pool->load_error_.ok()) pool->load_error_ = Unavailable(std::string("starting a view code thread: ") + e.what());
  }
  // `like` is read by the workers until each has made its runtime.
  std::unique_lock lock(pool->mu_);
  pool->done_cv_.wait(lock, [&] { return pool->loading_ == 0; });
  if (!pool->load_error_.ok()) {
    Status error = pool->load_error_;
    lock.unlock();
    pool->StopWorkers();
    return error;
  }
  return pool;
}

ViewCodePool::~ViewCodePool() { StopWorkers(); }

void ViewCodePool::StopWorkers() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

void ViewCodePool::Work(size_t worker, const ViewCode* like) {
  {
    auto made = like->Again();  // on this thread, which alone calls it
    std::lock_guard lock(mu_);
    if (made.ok()) {
      codes_[worker] = std::move(made).value();
    } else if (load_error_.ok()) {
      load_error_ = made.status();
    }
    if (--loading_ == 0) done_cv_.notify_all();
  }
  uint64_t seen = 0;
  for (;;) {
    size_t n = 0;
    const Slice* each = nullptr;
    {
      std::unique_lock lock(mu_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) break;
      seen = generation_;
      n = n_;
      each = each_;
    }
    std::exception_ptr failed;
    try {
      const auto [begin, end] = SliceOf(n, codes_.size(), worker);
      if (begin < end) (*each)(*codes_[worker], begin, end);
    } catch (...) {
      failed = std::current_exception();
    }
    std::lock_guard lock(mu_);
    if (failed && !failure_) failure_ = failed;
    if (--pending_ == 0) done_cv_.notify_all();
  }
  // A runtime is released on the thread that ran it.
  codes_[worker].reset();
}

Status ViewCodePool::ForEach(size_t n, const std::function<void(ViewCode& code, size_t i)>& each) {
  return ForEachSlice(n, [&each](ViewCode& code, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) each(code, i);
  });
}

Status ViewCodePool::ForEachSlice(size_t n, const Slice& each) {
  const bool alone = workers_.empty() || n < kMinSlice * 2;
  if (!alone) {
    std::lock_guard lock(mu_);
    n_ = n;
    each_ = &each;
    failure_ = nullptr;
    pending_ = workers_.size();
    ++generation_;
  }
  if (!alone) start_cv_.notify_all();
  std::exception_ptr failed;
  try {
    const auto [begin, end] = alone ? std::pair<size_t, size_t>{0, n} : SliceOf(n, codes_.size(), 0);
    if (begin < end) each(*codes_[0], begin, end);
  } catch (...) {
    failed = std::current_exception();
  }
  if (!alone) {
    // Every worker is done with `each` before it goes out of scope.
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    each_ = nullptr;
    if (!failed) failed = failure_;
  }
  if (failed) return Internal("view code: " + Describe(failed));
  return Status::Ok();
}

void CodeAhead::Prepare(std::span<ChangeEvent> events, const Make& make) {
  if (!pool_ && !failed_) {
    auto pool = ViewCodePool::Make(code_);
    if (!pool.ok()) {
      LogRateLimited(LogLevel::kWarn, "view.prepare." + who_,
                     who_ + ": view code runs on the applier alone: " + pool.status().message());
      failed_ = true;
      return;
    }
    pool_ = std::move(pool).value();
  }
  if (!pool_) return;
  Status st = pool_->ForEachSlice(events.size(), [&](ViewCode& code, size_t begin, size_t end) {
    std::vector<const ChangeEvent*> slice;
    slice.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) slice.push_back(&events[i]);
    std::vector<std::shared_ptr<const PreparedEvent>> made = make(code, slice);
    for (size_t i = begin; i < end; ++i) events[i].prepared = std::move(made[i - begin]);
  });
  if (!st.ok()) {
    for (ChangeEvent& e : events) e.prepared.reset();  // Apply runs the code of what is unprepared
    LogRateLimited(LogLevel::kWarn, "view.prepare." + who_, who_ + ": " + st.message());
  }
}

}  // namespace sluice::connectors
