#include "writer/reader_pool.h"

#include "core/thread_name.h"

namespace sluice::writer {

ReaderPool::ReaderPool(std::shared_ptr<sql::Storage> storage, uint32_t threads, size_t max_queue)
    : storage_(std::move(storage)), thread_count_(threads == 0 ? 1 : threads), max_queue_(max_queue) {}

ReaderPool::~ReaderPool() { Stop(); }

void ReaderPool::Start() {
  for (uint32_t i = 0; i < thread_count_; ++i) threads_.push_back(StartNamedThread("sluice-read", [this] { Run(); }));
}

void ReaderPool::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

bool ReaderPool::Submit(Job job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= max_queue_) return false;
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void ReaderPool::Run() {
  const std::unique_ptr<sql::EventLog> log = storage_->OpenEventLog();
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!log->healthy()) {
      if (Status opened = log->Open(); !opened.ok()) {
        job(opened);
        continue;
      }
    }
    job(log.get());
  }
}

}  // namespace sluice::writer
