// ViewCodePool: a sink's view code on several threads, so that the code of
// one batch runs on more than one core (Sink::Prepare of ViewSink and the
// aggregate sink). It holds one runtime of the file per thread: the calling
// thread's and one per worker thread, each runtime only ever called on its
// own thread (a JavaScript runtime is kept on one thread,
// handlers/js_runtime.h).
//
// ForEach(n, each) splits [0, n) into one slice per runtime, runs the
// caller's slice on the calling thread and the others on the workers, and
// returns when every slice is done. `each` must only touch what belongs to
// its index.
//
// Threads: ForEach is called by one thread at a time (the engine's reader);
// the workers live as long as the pool.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "connectors/view_code.h"

namespace sluice::connectors {

class ViewCodePool {
 public:
  // How many runtimes a pool gets by default: the machine's cores, at most 4.
  static size_t DefaultSize();

  // Loads `size` runtimes of `sink`'s code (InvalidArgument as
  // ViewCode::LoadFor) and starts size - 1 worker threads.
  static Result<std::unique_ptr<ViewCodePool>> Load(const config::SinkConfig& sink, ViewCode::Purpose purpose,
                                                    size_t size = DefaultSize());
  ~ViewCodePool();

  // Calls each(code, i) for every i in [0, n), in slices over the runtimes.
  // Batches smaller than a few dozen run on the calling thread alone.
  void ForEach(size_t n, const std::function<void(ViewCode& code, size_t i)>& each);

  size_t size() const { return codes_.size(); }

 private:
  explicit ViewCodePool(std::vector<std::unique_ptr<ViewCode>> codes);
  void Work(size_t worker);

  std::vector<std::unique_ptr<ViewCode>> codes_;  // [0]: the caller's; [k]: worker k's
  std::vector<std::thread> workers_;              // worker k runs codes_[k + 1]

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // a new job
  bool stopping_ = false;
  size_t pending_ = 0;       // workers still on the job
  // The job: its size and work (valid while a ForEach runs).
  size_t n_ = 0;
  const std::function<void(ViewCode&, size_t)>* each_ = nullptr;
};

}  // namespace sluice::connectors
