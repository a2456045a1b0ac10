// ViewCodePool: a sink's view code on several threads, so that the code of
// one batch runs on more than one core (Sink::Prepare of ViewSink and the
// aggregate sink). It holds one runtime of the code per thread, all made from
// the text of one ViewCode (never the file read again): the calling thread's
// and one per worker thread, each made and called only on its own thread (a
// JavaScript runtime is kept on one thread, handlers/js_runtime.h).
//
// ForEachSlice(n, each) splits [0, n) into one slice per runtime, runs the
// caller's slice on the calling thread and the others on the workers, and
// returns when every slice is done. `each` must only touch what belongs to
// its slice. ForEach(n, each) is the same one index at a time.
//
// Threads: Make and ForEach are called by one thread (the engine's preparer);
// the workers live as long as the pool.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "connectors/view_code.h"

namespace sluice::connectors {

class ViewCodePool {
 public:
  // How many runtimes a pool gets by default: the CPUs the process can use
  // (core/cpus.h), at most 4.
  static size_t DefaultSize();

  // `size` runtimes of `like`'s text (the caller's made here, each worker's
  // on its thread); the error of the first that fails.
  static Result<std::unique_ptr<ViewCodePool>> Make(const ViewCode& like, size_t size = DefaultSize());
  ~ViewCodePool();

  // Calls each(code, begin, end) on slices that cover [0, n), one slice per
  // runtime. Batches smaller than a few dozen are one slice, on the calling
  // thread. Internal (after every slice has stopped) when `each` threw.
  using Slice = std::function<void(ViewCode& code, size_t begin, size_t end)>;
  Status ForEachSlice(size_t n, const Slice& each);
  // Calls each(code, i) for every i in [0, n), in such slices.
  Status ForEach(size_t n, const std::function<void(ViewCode& code, size_t i)>& each);


 private:
  ViewCodePool() = default;
  void Work(size_t worker, const ViewCode* like);
  void StopWorkers();

  std::vector<std::unique_ptr<ViewCode>> codes_;  // [0]: the caller's; [k]: worker k's
  std::vector<std::thread> workers_;              // worker k runs codes_[k + 1]

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  size_t loading_ = 0;       // workers still making their runtime
  Status load_error_;        // the first worker's that failed
  uint64_t generation_ = 0;  // a new job
  bool stopping_ = false;
  size_t pending_ = 0;       // workers still on the job
  // The job: its size and work (valid while a ForEach runs).
  size_t n_ = 0;
  const Slice* each_ = nullptr;
  std::exception_ptr failure_;  // what a slice threw
};

// What a sink's Prepare does with a pool (ViewSink, the aggregate sink): the
// pool is made from the sink's code at the first batch (a sink the engine
// never prepares for, such as the writer's push sinks, makes none), and
// `make` returns what to set as the `prepared` of each event of a slice,
// running the code of the whole slice at once (ViewCode's *Many). When the pool
// cannot be made, or `make` throws, events are left unprepared (the sink's
// Apply runs its code itself) and it is logged.
//
// Threads: the engine's preparer (Prepare's) only; `code` must outlive it and
// only its text is read here.
class CodeAhead {
 public:
  using Make =
      std::function<std::vector<std::shared_ptr<const PreparedEvent>>(ViewCode& code, ViewCode::Events slice)>;
  // `who` names the sink in log lines.
  CodeAhead(const ViewCode& code, std::string who) : code_(code), who_(std::move(who)) {}
  void Prepare(std::span<ChangeEvent> events, const Make& make);
  // What a Make returns, from what the sink's code made of each event.
  template <class T>
  static std::vector<std::shared_ptr<const PreparedEvent>> Shared(std::vector<T> made) {
    std::vector<std::shared_ptr<const PreparedEvent>> out;
    out.reserve(made.size());
    for (T& m : made) out.push_back(std::make_shared<const T>(std::move(m)));
    return out;
  }

 private:
  const ViewCode& code_;
  const std::string who_;
  std::unique_ptr<ViewCodePool> pool_;
  bool failed_ = false;  // the pool could not be made
};

}  // namespace sluice::connectors
