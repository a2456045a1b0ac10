// ReaderPool: a few threads, each with its own event log (sql/tables.h, its
// own session to main storage), that serve the writer's GET requests
// straight from main storage (strongly consistent even with several writers
// on one partition).
//
// Threads: Submit() from any thread; jobs run on the pool's threads. A job is
// given its thread's event log, with a usable session, or the error that
// kept it from connecting.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "sql/tables.h"

namespace sluice::writer {

class ReaderPool {
 public:
  // Receives the thread's event log, or the connect error.
  using Job = std::function<void(Result<sql::EventLog*>)>;

  // Each thread opens its event log from `storage`.
  ReaderPool(std::shared_ptr<sql::Storage> storage, uint32_t threads, size_t max_queue);
  ~ReaderPool();  // calls Stop()

  void Start();
  // Runs the queued jobs, then joins the threads.
  void Stop();
  // False (and the job is dropped) when the queue is full or stopping.
  bool Submit(Job job);

 private:
  void Run();

  const std::shared_ptr<sql::Storage> storage_;
  const uint32_t thread_count_;
  const size_t max_queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::writer
