// Internal to PartitionWorker: the state of one batch while it is planned,
// inserted and, after a conflict, re-planned. Shared by its files by concern:
//
//   partition_worker.cc           queue, thread, the loop of attempts (ProcessBatch)
//   partition_worker_plan.cc      Plan: run each command on the state the earlier ones leave
//   partition_worker_insert.cc    BeginCommit, Land and Finish: the COMMIT in flight, the commit's bookkeeping, push, replies
//   partition_worker_conflict.cc  refusals confirmed against storage, duplicate keys, retries answered from storage
//
// Worker thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sql/tables.h"
#include "writer/partition_worker.h"

namespace sluice::writer {

// The key of the recent-command cache and of a command in storage.
std::string CommandKey(const std::string& entity_id, const std::string& command_id);
// 409: the same Idempotency-Key with another command or request.
Reply ReuseReply();

// What the planner decided for one command of the batch.
struct PartitionWorker::Planned {
  enum class Kind { kWrite, kReply, kDuplicateOf };
  Kind kind = Kind::kReply;
  Reply reply;                 // kReply; for kWrite filled after the commit
  size_t duplicate_of = 0;     // kDuplicateOf: index of the first command with this key
  bool check_storage = false;  // rejected: a stored event for this key would answer it instead
  // kWrite:
  uint64_t version = 0;
  uint64_t event_id = 0;
  bool deleted = false;
  std::string response_text;
  std::string state_text;  // canonical JSON of the new state; empty when deleted
  std::string delta_text;  // canonical JSON of what changed, when the event stores that instead (docs/delta.md)
  // Canonical JSON of the state before the command, for push sinks with view
  // code (Pusher::full_events); empty when the entity did not exist or none needs it.
  std::string before_text;
};

// The batch across attempts: commands [0, n) are this batch's (the rest were
// cut and go back to the queue); done[i]: command i has been answered.
struct PartitionWorker::BatchState {
  explicit BatchState(std::deque<Command> b) : batch(std::move(b)), n(batch.size()), plan(n), done(n, 0) {}
  std::deque<Command> batch;
  size_t n;
  std::vector<Planned> plan;
  std::vector<char> done;
  // Commands that join the batch while the one before it commits (Grow);
  // the batch holds no cut commands then.
  void Add(std::deque<Command>& more) {
    for (auto& c : more) batch.push_back(std::move(c));
    n = batch.size();
    plan.resize(n);
    done.resize(n, 0);
  }
};

// One attempt's plan.
struct PartitionWorker::Attempt {
  std::unordered_set<std::string> loaded;  // entities read from storage for this attempt
  std::unordered_map<std::string, size_t> first_with_key;  // command key -> the first command with it
  std::unordered_map<std::string, EntityState> overlay;  // per entity: the state the plan leaves
  std::unordered_map<std::string, uint64_t> base_version;  // per entity: the version the plan started from
  std::vector<size_t> writes;    // commands with a row in `insert`, in order
  std::vector<size_t> rejected;  // refusals (If-Match or the handler)
  std::unique_ptr<sql::EventAppend> insert;  // the rows of the last Plan, staged next
};

// A batch staged on `log` whose COMMIT the stage runs.
struct PartitionWorker::InFlight {
  std::unique_ptr<BatchState> b;
  Attempt a;
  std::unique_ptr<sql::EventLog> log;
  std::optional<Status> outcome;  // known without a COMMIT (a failpoint)
};

// Group commit: a planned batch with rows that the batch thread stores
// with other partitions' (BatchThreads::Client::PlanBatch).
struct PartitionWorker::Kept {
  std::unique_ptr<BatchState> b;
  Attempt a;
  uint32_t attempt = 0;  // ProcessBatch's attempt that planned it
};

}  // namespace sluice::writer
