// CommitStage: the thread on which the COMMITs of the partition worker a
// batch thread serves run (BatchThreads::Lane), so that the worker plans and
// inserts its next batch while the last one commits (docs/storage.md,
// "Overlapping batches"). One COMMIT at a time:
// Begin() hands it a session with a staged append, Take() waits for the
// outcome. The thread starts with the stage and ends with it.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/status.h"
#include "sql/tables.h"

namespace sluice::writer {

class CommitStage {
 public:
  CommitStage();
  ~CommitStage();  // waits for a COMMIT in flight
  CommitStage(const CommitStage&) = delete;
  CommitStage& operator=(const CommitStage&) = delete;

  // Commits what `log` has staged, on the stage's thread. Nothing may be
  // in flight; `log` is the stage's until Take() returns. on_done is
  // called on the stage's thread once the COMMIT returned, so that a
  // worker waiting for more than this can wake up; it must not block.
  void Begin(sql::EventLog* log, std::function<void()> on_done);
  // Whether a COMMIT was begun and not yet taken.
  bool busy() const;
  // Waits for the COMMIT begun last and returns its outcome.
  Status Take();

 private:
  void Loop();

  std::function<void()> on_done_;  // the job's
  mutable std::mutex mu_;
  std::condition_variable cv_;
  sql::EventLog* job_ = nullptr;  // begun, not yet committing
  bool busy_ = false;             // begun, not yet taken
  bool done_ = false;             // its outcome is in result_
  bool stopping_ = false;
  Status result_;
  std::thread thread_;
};

}  // namespace sluice::writer
