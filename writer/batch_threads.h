// BatchThreads: the threads that run the partition workers' batches, shared
// by every partition of the writer, so that threads and MySQL sessions are
// bounded by `threads`, not by the partition count (a writer of 1,024 busy
// partitions used to hold 1,024 threads and sessions, past MariaDB's
// max_connections).
//
// Partition k of the writer (counted over its entity types) is always served
// by thread k mod `threads`, one worker at a time, in the order they asked:
// a worker's batches keep their order, and a JavaScript handler's realm
// stays on the thread that built it (a realm used on another thread is
// rebuilt). The thread lends the worker its Lane, the session that reads and
// inserts (and, with writer.overlap_commits, the spare session and the stage
// that commits on it), for as long as it serves it. A worker gives the thread
// up after a batch when another worker of the thread waits; otherwise it
// keeps it while commands keep coming. A thread starts at its first worker's
// command and ends with its sessions after idle_exit without one: an idle
// writer holds none. Every idle_exit a thread also asks its workers to drop
// what they cache (the head, the entities) if they have had no command since.
//
// Group commit (group_commit_max > 1, without overlap_commits): a thread
// whose line holds several workers plans one batch of each of up to
// group_commit_max of them, then stores the rows of all in one transaction
// per storage server (one COMMIT and one log flush instead of one per
// partition), their tables in the order of the partitions' keys (so that
// two writers lock them in the same order), and only then lets each worker
// land its batch (caches, push, replies). A batch that is the only one of
// its turn and server is stored alone, in one autocommit INSERT. A batch
// whose INSERT hits a duplicate key leaves the transaction (its worker
// resolves the conflict and stores it alone) and the others are inserted
// again without it, once; after any other failure before the COMMIT (a
// lost session) nothing is stored and each worker plans its batch again
// and stores it alone. A batch planned before an outage the turn met (the
// session found broken) is planned again too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "metrics/metrics.h"
#include "sql/tables.h"
#include "writer/commit_stage.h"

namespace sluice::writer {

class BatchThreads {
 public:
  struct Options {
    std::shared_ptr<sql::Storage> storage;  // where the lanes' sessions go
    size_t threads = 32;                    // >= 1
    bool overlap_commits = false;           // lanes have a spare session and a commit stage
    size_t group_commit_max = 1;            // > 1: group commit (not with overlap_commits)
    metrics::WriterMetrics* metrics = nullptr;  // transactions by partitions; may be null
    std::chrono::milliseconds idle_exit{10000};
  };

  // What a thread lends the worker it serves.
  struct Lane {
    std::unique_ptr<sql::EventLog> log;     // reads, and inserts (staged with overlap)
    std::unique_ptr<sql::EventLog> spare;   // overlap: the other session
    std::unique_ptr<CommitStage> stage;     // overlap: runs the COMMITs
    // Which sessions these are: a new number (NewSessions()) each time a
    // worker opens them again or answers an outage, and each time a group
    // commit's store finds the session broken. A worker whose caches were
    // read under other sessions drops them (the outage may have lost
    // commits).
    uint64_t sessions = 0;
  };
  // A number for newly opened sessions, unique in the process (never 0).
  static uint64_t NewSessions();

  // A partition worker as its thread sees it.
  class Client {
   public:
    virtual ~Client() = default;
    // Runs queued batches on `lane` and gives it back with nothing in
    // flight. True: commands are still queued (the worker stays handed out
    // and goes to the back of the thread's line); false: it no longer is.
    virtual bool Serve(Lane& lane) = 0;
    // Drops what it caches when it is not handed out and had no command
    // since `idle_since`, and returns it (or null): the thread destroys it
    // after releasing its lock, so that a large cache's destruction holds up
    // no Ready() of the thread's other workers. What it returns may be
    // destroyed after the client is gone: it must not refer to it. Called
    // with the thread's lock held: it must not call back into BatchThreads.
    virtual std::shared_ptr<void> DropIfIdleSince(std::chrono::steady_clock::time_point idle_since) = 0;

    // Group commit. A turn: PlanBatch, then Resume when it kept an append,
    // then EndTurn; the lane is lent for each call only.
    // Plans the next queued batch on `lane` and answers what needs no row.
    // When the batch has rows to store it keeps it, unstored, and returns
    // its append (valid until Resume); otherwise null. The thread stores it.
    virtual sql::EventAppend* PlanBatch(Lane& lane) = 0;
    // What became of the append PlanBatch returned.
    enum class Stored {
      kCommitted,  // committed (with others, or alone in one autocommit INSERT)
      kConflict,   // its INSERT failed with `status` (kAborted: a duplicate key, a deadlock); not stored
      kNotStored,  // its transaction was refused at COMMIT: plan it again, alone, one more attempt
      kLeftOut,    // not stored because of the turn (an outage, others' conflicts): plan it again, alone, same attempt
      kUnknown,    // the INSERT or COMMIT failed with `status`: it may have landed (503 for kUnavailable)
    };
    virtual void Resume(Lane& lane, Stored stored, const Status& status) = 0;
    // Ends the turn: true when commands are still queued (the client goes
    // to the back of the line), false when it no longer is handed out.
    virtual bool EndTurn() = 0;
  };

  explicit BatchThreads(Options options);
  ~BatchThreads();  // Stop()
  BatchThreads(const BatchThreads&) = delete;
  BatchThreads& operator=(const BatchThreads&) = delete;

  size_t size() const { return slots_.size(); }
  // Where the lanes' sessions go (a worker reopens its lane's there).
  const std::shared_ptr<sql::Storage>& storage() const { return options_.storage; }

  // The client serves partition `key` of the writer (its thread: key mod
  // size()). Added before its first Ready(), removed (after it stopped)
  // before it is destroyed.
  void Add(size_t key, Client* client);
  void Remove(size_t key, Client* client);
  // The client has queued commands and is not handed out: its thread serves it.
  void Ready(size_t key, Client* client);
  // Called by the client being served after each batch: whether another
  // client of the key's thread waits for it (the served one then gives it
  // up). Also runs the thread's sweep when it is due, so that a thread kept
  // busy by one client still drops its idle clients' caches.
  bool AfterBatch(size_t key);
  // Ends the threads after the clients in line were served; call after
  // every client stopped taking commands.
  void Stop();

  // Threads running now.
  size_t running() const;

 private:
  struct Slot {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<size_t, Client*>> line;  // (key, client)
    std::vector<Client*> clients;
    std::thread thread;
    bool running = false;  // `thread` serves the line (not ended after idle_exit)
    bool stopping = false;
    size_t joining = 0;              // ended threads a Ready() is joining (outside mu)
    std::condition_variable joined;  // joining fell
    std::chrono::steady_clock::time_point last_sweep;
  };
  Slot& SlotOf(size_t key) const { return *slots_[key % slots_.size()]; }
  void Loop(Slot& slot);
  // Group commit: one turn of the clients (with their keys) on `lane`.
  void GroupTurn(const std::vector<std::pair<size_t, Client*>>& clients, Lane& lane);
  struct Member;
  // Store the members' appends (one server's) and set what became of each:
  // one in one autocommit INSERT; at least two in one transaction.
  void StoreAlone(Member& member, Lane& lane);
  void StoreTogether(std::vector<Member*> members, Lane& lane);
  // A store found the session broken: the workers' caches go (Lane::sessions).
  static void Outage(Lane& lane);
  // The failpoint writer.before_commit: true when it fired, the members'
  // stores then failed as after a lost session.
  static bool FailBeforeCommit(const std::vector<Member*>& members, Lane& lane);
  bool grouping() const { return options_.group_commit_max > 1 && !options_.overlap_commits; }
  // Under slot.mu: each client drops what it caches if idle since idle_exit,
  // into `dropped` (destroyed by the caller once slot.mu is released).
  void SweepLocked(Slot& slot, std::chrono::steady_clock::time_point now, std::vector<std::shared_ptr<void>>& dropped);

  const Options options_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace sluice::writer
