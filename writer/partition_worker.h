// PartitionWorker: the single writer of one (entity type, partition) inside
// this process. It drains its queue in batches and appends each batch as one
// multi-row INSERT in one transaction (DESIGN 3.3):
//
//   1. take up to batch_max queued commands;
//   2. for each, in order: answer retries known to the recent-command cache;
//      check If-Match; run the handler on the entity's state as left by the
//      earlier commands of the batch; build the event row with
//      event_id = partition head + 1 (I3) and version = entity version + 1 (I1);
//   3. INSERT all rows in one transaction (one autocommit statement), and
//      only then advance the cached head and entity states and reply to
//      every caller. With overlap_commits the COMMIT runs on a second
//      thread (CommitStage) while this one plans and INSERTs the next batch
//      on a second session; that batch commits only after this one did, and
//      goes back to the queue if this one did not (docs/storage.md,
//      "Overlapping batches");
//   4. on a duplicate key, the key's name says what was stale (PRIMARY: the
//      head, uk_entity_version: an entity, uk_entity_command: a retry already
//      stored): reload, re-plan, retry, up to conflict_retries times (I4).
//
// Replies are held until the batch's outcome is known, so no caller is told
// about a state that was never committed. When MySQL is unreachable every
// command of the batch gets 503 and the caches are dropped; a retry with the
// same Idempotency-Key is then answered from storage if the commit did land.
//
// Every statement goes through sql::EventLog (sql/tables.h), so the batching
// and conflict handling are unit-tested on sql::MemoryStorage
// (partition_worker_test.cc).
//
// Threads: Submit() may be called from any thread. The batches run on one
// of the writer's batch threads (BatchThreads), shared by its partitions:
// the worker is handed to one at a time, which lends it its session(s) while
// it serves it; the caches are the worker's and pass from one to the next
// under the worker's lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/json.h"
#include "writer/batch_threads.h"
#include "metrics/metrics.h"
#include "sql/connection.h"
#include "sql/tables.h"
#include "writer/commands.h"
#include "writer/commit_stage.h"
#include "core/lru_cache.h"
#include "writer/pusher.h"
#include "writer/reply.h"

namespace sluice::writer {

// A commit's announcement: (entity type, partition, head event_id).
using CommitHook = std::function<void(const std::string& type, uint32_t partition, uint64_t head)>;

// One command as the HTTP layer validated it.
struct Command {
  std::string entity_id;
  std::string name;
  std::string command_id;
  std::optional<uint64_t> expected_version;  // If-Match
  uint32_t requeued = 0;  // times its batch conflicted at COMMIT and it went back to the queue
  Json request;
  std::string request_text;  // canonical JSON of request, as stored
  ReplyFn reply;
};

struct PartitionWorkerOptions {
  std::string type;
  uint32_t partition = 0;
  sql::ConnectParams mysql;
  // The event tables of the worker's own threads (when `threads` is null);
  // null: MariaDB at mysql. Unit tests pass sql::MemoryStorage.
  std::shared_ptr<sql::Storage> storage;
  uint32_t batch_max = 1000;
  size_t cache_entries = 100000;
  uint32_t conflict_retries = 16;
  // Plan and insert the next batch on a second session while the last one
  // commits (CommitStage). Off: one session, each batch one autocommit
  // INSERT, planned after the last one's reply.
  bool overlap_commits = false;
  size_t max_queue = 200000;                   // Submit() refuses beyond this
  size_t max_statement_bytes = 8 << 20;        // a batch is cut before its INSERT grows past this
  // The threads that run the batches (shared by the writer's partitions;
  // not owned), and this partition's place among the writer's partitions
  // (its thread: key mod threads->size()). Null: the worker starts its own,
  // of one thread.
  BatchThreads* threads = nullptr;
  size_t thread_key = 0;
  // With no command for this long, the worker drops its cached head and
  // entities (the next command reads them again); its own threads (when
  // `threads` is null) end with their sessions after this long idle.
  std::chrono::milliseconds idle_exit{10000};
  // Deltas (config::DeltaPolicy): an event stores what changed unless the
  // entity is new, deleted, or due a whole state: every snapshot_every
  // versions, or when the deltas since the last whole state would reach
  // snapshot_percent of its size. 1: always the whole state.
  uint32_t snapshot_every = 1;
  uint32_t snapshot_percent = 50;
  // Called on the worker thread after each commit with the type, the
  // partition and its new head event_id (to announce the commit to the sync
  // engines); must be cheap and must not block.
  CommitHook on_commit;
  // Batch sizes and conflicts of this entity type (shared by its workers); may be null.
  metrics::WriterTypeMetrics* metrics = nullptr;
  // The type's JavaScript command handlers (docs/handlers.md); null when it has none.
  std::shared_ptr<const handlers::HandlerScript> handlers;
  // The type's push sinks (DESIGN 3.5), one pusher of each: each committed
  // batch goes to every one of them; a sync one holds the replies until it
  // answers or its push_timeout passes. Not owned: a pusher serves several
  // partitions, is started before the workers that use it and stopped after.
  std::vector<Pusher*> pushers;
};

class PartitionWorker : private BatchThreads::Client {
 public:
  explicit PartitionWorker(PartitionWorkerOptions options);
  ~PartitionWorker();  // calls Stop()
  PartitionWorker(const PartitionWorker&) = delete;
  PartitionWorker& operator=(const PartitionWorker&) = delete;

  void Start();
  // Stops taking commands and waits until the queued ones are answered.
  void Stop();

  // Queues a command; replies 503 at once when the queue is full or stopping.
  void Submit(Command command);

  // What the worker has done; read only after Stop().
  struct Stats {
    uint64_t batches = 0;          // INSERTs committed
    uint64_t events = 0;           // rows committed
    uint64_t conflicts_primary = 0;   // another writer took the event_id
    uint64_t conflicts_version = 0;   // the cached entity was stale
    uint64_t conflicts_command = 0;   // a retry raced its original
    uint64_t stale_refusals = 0;      // a refusal found its cached entity stale and was re-planned
    uint64_t unavailable = 0;      // batches answered 503
  };
  const Stats& stats() const { return stats_; }

 private:
  struct EntityState {
    bool exists = false;
    uint64_t version = 0;
    Json state;
    uint32_t deltas = 0;       // stored since its last whole state
    uint64_t delta_bytes = 0;  // their size
    // The size of the state's text when it was last made (read, stored
    // whole, or changed by a command other than the built-in patch, which
    // changes the state without making its text).
    uint64_t state_bytes = 0;
  };
  struct RecentCommand {
    std::string fingerprint;
    std::string body;  // the reply body sent the first time
  };
  // One batch's state (partition_worker_batch.h).
  struct Planned;
  struct BatchState;
  struct Attempt;
  struct InFlight;  // a batch whose COMMIT runs on the stage
  struct Kept;      // group commit: a planned batch the thread stores
  bool DeltaInstead(const EntityState& entity, const Json& after, Planned& p) const;
  // Whether a delta of `delta_bytes` may follow `entity` (snapshot_every,
  // snapshot_percent of a state of `state_bytes`).
  bool DeltaFits(const EntityState& entity, uint64_t delta_bytes, uint64_t state_bytes) const;
  // The built-in patch of an object state stored as a delta found from the
  // patch alone, without copying the state or making its text: true when it
  // planned the command that way (or cut the batch before it), false when
  // the command takes the general way.
  bool PlanPatchDelta(BatchState& b, Attempt& a, size_t i, uint64_t head, EntityState& entity);
  // Adds command i's row, as planned, to the attempt's append; false when
  // the statement would grow too large: the batch is cut before i.
  bool AddRow(BatchState& b, Attempt& a, size_t i);

  // partition_worker.cc: the queue, serving it on a batch thread, and the loop of attempts.
  bool Serve(BatchThreads::Lane& lane) override;
  std::shared_ptr<void> DropIfIdleSince(std::chrono::steady_clock::time_point idle_since) override;
  sql::EventAppend* PlanBatch(BatchThreads::Lane& lane) override;
  void Resume(BatchThreads::Lane& lane, Stored stored, const Status& status) override;
  bool EndTurn() override;
  // Takes the lane's sessions (and drops the caches when they were read
  // under other sessions); Lend gives them back.
  void Borrow(BatchThreads::Lane& lane);
  void Lend(BatchThreads::Lane& lane);
  // Up to batch_max queued commands.
  std::deque<Command> TakeBatch();
  // Called on the commit stage's thread when a COMMIT returned.
  void CommitReturned();
  // Plans and inserts the batch and begins its COMMIT, or answers it when
  // it writes nothing or fails; what it cut (to keep the INSERT small) goes
  // back to the front of the queue. With `keep` (group commit) a batch
  // with rows is kept in kept_ instead of inserted. Attempts count from
  // `attempt`.
  void ProcessBatch(std::unique_ptr<BatchState> b, bool keep = false, uint32_t attempt = 0);
  // Stores the planned rows in one autocommit INSERT. True: the batch is
  // done with (committed and answered, or failed); false: a conflict was
  // resolved, plan it again.
  bool AppendAlone(BatchState& b, Attempt& a);
  // Puts commands back at the front of the queue, in their order.
  void Requeue(std::deque<Command>& commands);
  // Requeues the commands the plan cut from the batch.
  void RequeueCut(BatchState& b);
  // Waits for the batch in flight, if any, and answers it (Land). True
  // when `b`, the batch being built, went back to the queue behind it (its
  // COMMIT conflicted and it is planned again): `b` is empty then.
  bool SettleBefore(BatchState& b);
  Status EnsureConnected();
  Status LoadHead();
  // `loaded` gets the ids read from storage (the others came from the cache,
  // the batch in flight or the staged part of `growing`).
  Status LoadEntities(const std::deque<Command>& batch, std::unordered_set<std::string>* loaded,
                      const Attempt* growing = nullptr);
  void DropCaches(const std::deque<Command>& batch);
  // Replies every command of the batch not answered yet, then drops them from it.
  void ReplyRest(BatchState& b, const std::function<Reply(size_t)>& reply_for);
  // Answers every command not answered yet with the failure (503 or 500).
  void FailAll(BatchState& b, const Status& st);

  // partition_worker_plan.cc: runs the pending commands from `from` on,
  // on the state the earlier ones leave, building the append of their rows.
  void Plan(BatchState& b, Attempt& a, size_t from = 0);
  // While the batch in flight commits, commands that arrive join the staged
  // batch `b`: planned on it and inserted in its transaction.
  enum class Growth { kGrew, kStop, kReplan };
  Growth Grow(BatchState& b, Attempt& a);

  // partition_worker_conflict.cc.
  // DESIGN I4 for refusals: false when a refusal was decided on a cached
  // entity that storage holds at another version (dropped from the cache):
  // re-plan.
  Result<bool> ConfirmRefusals(BatchState& b, const Attempt& a);
  // After a duplicate key: counts it, drops what was stale, and answers
  // from storage the commands a raced retry already stored.
  Status ResolveConflict(BatchState& b, const Status& st);
  // The stored version of each entity in `versions` (id -> the version the
  // plan started from). Drops from the cache every entity whose stored
  // version differs and returns how many did.
  Result<size_t> DropStaleEntities(const std::unordered_map<std::string, uint64_t>& versions);
  // Answers the commands `which` of the batch that are already stored (same
  // entity and command id) from their event rows, and marks them done.
  Status AnswerFromStorage(BatchState& b, const std::vector<size_t>& which);

  // partition_worker_insert.cc.
  // Hands the staged batch to the stage to commit; the next batch is
  // staged on the spare session meanwhile.
  void BeginCommit(std::unique_ptr<BatchState> b, Attempt a);
  // Waits for the COMMIT in flight. Committed: advances the head and the
  // entity cache, pushes and replies (Finish), true. Not committed: drops
  // the caches; the batch's commands are answered (503, or from storage
  // when another writer or a retry stored them) or, after a conflict,
  // requeued, and then so is `behind` (a batch built after it), emptied;
  // false.
  bool Land(BatchState* behind = nullptr);
  // Waits for the COMMIT in flight and returns its outcome (kept for Land);
  // its session becomes the spare again.
  Status Await();
  // The bookkeeping of a committed batch: head, counters, the commit's
  // announcement, the entity cache.
  void Committed(BatchState& b, Attempt& a);
  // Pushes the committed writes, then replies to every command.
  void Finish(BatchState& b, Attempt& a);
  // Hands the committed `writes` of the batch to the push sinks; for sync
  // ones, waits and notes per command what each view did.
  void Push(const std::deque<Command>& batch, std::vector<Planned>& plan, const std::vector<size_t>& writes);

  static std::string Fingerprint(const std::string& name, std::optional<uint64_t> expected,
                                 const std::string& request_text);

  const PartitionWorkerOptions options_;
  const std::string table_;

  std::unique_ptr<BatchThreads> own_threads_;  // when options_.threads is null
  BatchThreads* const threads_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> queue_;
  bool started_ = false;
  bool stopping_ = false;
  bool handed_out_ = false;  // a batch thread serves the worker, or it is in their line
  std::chrono::steady_clock::time_point last_active_;  // when a thread last served it
  bool commit_done_ = false;  // the stage's COMMIT returned and was not landed yet

  // Serving state: used by the batch thread that serves the worker, handed
  // from one to the next under mu_ (handed_out_).
  // The lane's sessions and stage while a thread serves the worker (Serve):
  std::unique_ptr<sql::EventLog> log_;  // reads, and INSERTs (staged with overlap)
  std::unique_ptr<sql::EventLog> spare_;  // the other session: commits what log_ staged before
  std::unique_ptr<CommitStage> stage_;    // runs the COMMITs
  uint64_t* lane_sessions_ = nullptr;     // the lane's Lane::sessions while served
  uint64_t cached_under_ = 0;             // the Lane::sessions the caches were read under
  std::unique_ptr<InFlight> inflight_;    // the batch whose COMMIT the stage runs
  std::unique_ptr<Kept> kept_;            // group commit: planned, stored by the thread
  std::optional<uint64_t> head_;  // last committed event_id, when known
  LruCache<std::string, EntityState> entities_;
  LruCache<std::string, RecentCommand> recent_;  // key: entity_id '\0' command_id
  Stats stats_;
  CommandRunner commands_;  // built-in and JavaScript commands; ctx.now per batch
  const bool push_full_events_;  // a push sink runs view code: events carry request, response, before
};

}  // namespace sluice::writer
