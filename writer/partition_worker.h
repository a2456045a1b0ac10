// PartitionWorker: the single writer of one (entity type, partition) inside
// this process. It drains its queue in batches and appends each batch as one
// multi-row INSERT in one transaction (DESIGN 3.3), in a two-stage pipeline:
//
//   planner thread (the worker):
//     1. take up to batch_max queued commands;
//     2. for each, in order: answer retries known to the recent-command cache;
//        check If-Match; run the handler on the entity's state as left by the
//        earlier commands (of this batch, of the batch being committed, then
//        the committed state); build the event row with
//        event_id = partition head + 1 (I3) and version = entity version + 1 (I1);
//     3. hand the INSERT to the committer, then plan the next batch while it
//        runs, on top of the state the batch in flight will leave;
//   committer thread:
//     4. INSERT all rows (autocommit: one transaction) and only then push the
//        events and reply to every caller of the batch;
//   planner again, once the batch in flight is done:
//     5. on success, advance the cached head, entity states and recent
//        replies, and submit the next batch;
//     6. on a duplicate key, whose name says what was stale (PRIMARY: the
//        head, uk_entity_version: an entity, uk_entity_command: a retry already
//        stored): drop the caches, throw away the next batch's plan (it was
//        built on the failed batch), and plan both again from storage, up to
//        conflict_retries times in a row (I4).
//
// At most one batch is in flight, and the next one is submitted only after
// it committed, so event ids are committed in order and never leave a gap
// behind a committed one. Replies are held until the batch's outcome is
// known, so no caller is told about a state that was never committed; a
// plan built on a batch that then fails is never answered. When MySQL is
// unreachable every command of the batch gets 503 and the caches are
// dropped; a retry with the same Idempotency-Key is then answered from
// storage if the commit did land.
//
// Threads: Submit() may be called from any thread. The planner owns the
// read connection, the caches and the JavaScript runtime; the committer owns
// the write connection and the pushers; a batch belongs to the committer
// from its submission until the committer reports it done.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/json.h"
#include "metrics/metrics.h"
#include "sql/connection.h"
#include "writer/commands.h"
#include "writer/lru_cache.h"
#include "writer/pusher.h"
#include "writer/reply.h"

namespace sluice::writer {

// One command as the HTTP layer validated it.
struct Command {
  std::string entity_id;
  std::string name;
  std::string command_id;
  std::optional<uint64_t> expected_version;  // If-Match
  Json request;
  std::string request_text;  // canonical JSON of request, as stored
  ReplyFn reply;
};

struct PartitionWorkerOptions {
  std::string type;
  uint32_t partition = 0;
  sql::ConnectParams mysql;
  uint32_t batch_max = 1000;
  size_t cache_entries = 100000;
  uint32_t conflict_retries = 16;
  size_t max_queue = 200000;                   // Submit() refuses beyond this
  size_t max_statement_bytes = 8 << 20;        // a batch is cut before its INSERT grows past this
  // Called on the committer thread after each commit (e.g. to wake the sync
  // engine of the same process); must be cheap and must not block.
  std::function<void()> on_commit;
  // Batch sizes and conflicts of this entity type (shared by its workers); may be null.
  metrics::WriterTypeMetrics* metrics = nullptr;
  // The type's JavaScript command handlers (docs/handlers.md); null when it has none.
  std::shared_ptr<const handlers::HandlerScript> handlers;
  // The type's push sinks (DESIGN 3.5): each committed batch goes to every
  // one of them; a sync one holds the replies until it answers or its
  // push_timeout passes. Started and stopped with the worker.
  std::vector<std::unique_ptr<Pusher>> pushers;
};

class PartitionWorker {
 public:
  explicit PartitionWorker(PartitionWorkerOptions options);
  ~PartitionWorker();  // calls Stop()
  PartitionWorker(const PartitionWorker&) = delete;
  PartitionWorker& operator=(const PartitionWorker&) = delete;

  void Start();
  // Stops taking commands, finishes the queued ones, joins the thread.
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
    uint64_t unavailable = 0;      // batches answered 503
  };
  const Stats& stats() const { return stats_; }
  const std::vector<std::unique_ptr<Pusher>>& pushers() const { return options_.pushers; }

 private:
  struct EntityState {
    bool exists = false;
    uint64_t version = 0;
    Json state;
  };
  struct RecentCommand {
    std::string fingerprint;
    std::string body;  // the reply body sent the first time
  };
  struct Planned;
  struct Batch;

  void Run();        // the planner thread
  void CommitLoop();  // the committer thread
  // Moves up to batch_max commands from the front of `pending` into a new
  // batch and plans it on top of `base` (the batch in flight, or null).
  // Commands after a cut (statement size, or a retry of a command still in
  // flight) go back to the front of `pending`. An error means storage could
  // not be read; the batch's unanswered commands are then still in it.
  Status Plan(std::deque<Command>& pending, const Batch* base, Batch& out);
  // The committer's work on one batch: INSERT, then push and replies.
  Status Commit(Batch& batch);
  // Planner, after the committer is done with `batch`: advances the caches on
  // success; on failure answers or requeues (at the front of `pending`) the
  // batch's unanswered commands.
  void Absorb(Batch& batch, const Status& status, std::deque<Command>& pending);
  // Replies every unanswered command of the batch (writes after their commit).
  void SendReplies(Batch& batch);
  // Answers the unanswered commands of the batch with one error reply.
  void FailBatch(Batch& batch, const Status& status);
  // Puts the batch's unanswered commands back at the front of `pending`, in order.
  static void Requeue(Batch& batch, std::deque<Command>& pending);
  void SubmitToCommitter(Batch* batch);
  Status WaitForCommitter();

  Status EnsureConnected();
  Status LoadHead();
  Status LoadEntities(const Batch& batch, const Batch* base);
  // Answers the commands `which` of the batch that are already stored (same
  // entity and command id) from their event rows, and marks them done.
  Status AnswerFromStorage(Batch& batch, const std::vector<size_t>& which);
  void DropCaches(const Batch& batch);
  // Hands the committed writes of the batch to the push sinks; for sync
  // ones, waits and notes per command what each view did.
  void Push(Batch& batch);

  static std::string Fingerprint(const std::string& name, std::optional<uint64_t> expected,
                                 const std::string& request_text);

  const PartitionWorkerOptions options_;
  const std::string table_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> queue_;
  bool stopping_ = false;
  std::thread thread_;

  // Planner -> committer hand-off: at most one batch in flight.
  std::mutex commit_mu_;
  std::condition_variable commit_cv_;
  Batch* commit_job_ = nullptr;    // submitted, not yet taken up
  bool commit_done_ = false;       // the committer finished the last job
  Status commit_status_;           // and how
  bool commit_stopping_ = false;
  std::thread committer_;

  // Planner-thread state.
  std::unique_ptr<sql::Connection> conn_;  // reads: head, entities, stored commands
  std::optional<uint64_t> head_;  // last committed event_id, when known
  LruCache<std::string, EntityState> entities_;
  LruCache<std::string, RecentCommand> recent_;  // key: entity_id '\0' command_id
  uint32_t conflict_streak_ = 0;  // conflicts since the last successful commit
  CommandRunner commands_;  // built-in and JavaScript commands; ctx.now per batch

  // Committer-thread state.
  std::unique_ptr<sql::Connection> commit_conn_;  // the INSERTs

  Stats stats_;  // planner
};

}  // namespace sluice::writer
