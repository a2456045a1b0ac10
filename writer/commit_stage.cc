#include "writer/commit_stage.h"

#include "core/thread_name.h"

namespace sluice::writer {

CommitStage::CommitStage() {
  thread_ = StartNamedThread("sluice-txcommit", [this] { Loop(); });
}

CommitStage::~CommitStage() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommitStage::Begin(sql::EventLog* log, std::function<void()> on_done) {
  {
    std::lock_guard lock(mu_);
    job_ = log;
    on_done_ = std::move(on_done);
    busy_ = true;
    done_ = false;
  }
  cv_.notify_all();
}

bool CommitStage::busy() const {
  std::lock_guard lock(mu_);
  return busy_;
}

Status CommitStage::Take() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_ || !busy_; });
  busy_ = false;
  done_ = false;
  return std::move(result_);
}

void CommitStage::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    // A job begun before the stage is destroyed is still committed: the
    // destructor waits for it.
    cv_.wait(lock, [this] { return stopping_ || job_ != nullptr; });
    if (job_ == nullptr) return;
    sql::EventLog* log = job_;
    job_ = nullptr;
    std::function<void()> on_done = std::move(on_done_);
    lock.unlock();
    Status st = log->Commit();
    // Before Take() can return: a waiter that it wakes sees the outcome.
    if (on_done) on_done();
    lock.lock();
    result_ = std::move(st);
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace sluice::writer
