// SinkRunner: the pull loop of ONE sink over every partition of its entity
// type (DESIGN 4.1 and 4.3).
//
//   reader thread   reads `event_id > read position ORDER BY event_id` from
//                   each partition into a queue of batches bounded in events
//                   (engine.inflight_batches x engine.batch_max): a slow sink
//                   stops its own reads and nobody else's. The partitions
//                   whose last read came back short of its limit are read
//                   together, one UNION ALL statement per pass (the queue may
//                   then take one batch per partition past its bound, each
//                   short but for a burst); those that may hold a backlog (at
//                   the start, and after a full read) up to 16 to a
//                   statement, each limited to its share of batch_max. After a full batch it reads again at
//                   once; when every partition is idle it sleeps 1 ms,
//                   doubling up to engine.idle_poll_max, unless Wake() says
//                   new events were committed. With woken_per_partition
//                   (inside a SyncEngine) an idle reader reads only the
//                   partitions a wake-up named (a writer's commit notice, or
//                   the engine's head watcher), and sleeps until the next
//                   one: no statement while nothing is committed.
//   preparer thread only for a sink that prepares (Sink::Prepare: view
//                   code run ahead of the writes): takes each batch the
//                   reader queued, in order, runs the sink's Prepare on it
//                   (with the sink's pool of view-code threads) and hands it
//                   to the applier, so that reading the next batch, waiting
//                   for the durability barrier and running the code of this
//                   one overlap. The read-ahead bound counts its batches too.
//   applier thread  applies each batch in chunks of sink.batch_max (through
//                   connectors::ApplyLoop, as the writer's push does; a
//                   sink that pipelines, Capabilities::pipeline, gets up to
//                   that many chunks in flight, received in order, and
//                   nothing else while any is: controls, flushes and the idle
//                   tick wait for them; a failed one takes back those sent
//                   after it, applied again after the backoff), then
//                   advances the partition's in-memory offset past what the
//                   sink acknowledged: applied, stale, or rejected and written
//                   to the dead-letter table. Unavailable: capped exponential
//                   backoff, offset unchanged. Misconfigured, or a rejection
//                   with on_error: stop: the runner stops and reports why.
//                   Offsets (with counters and state) are saved every
//                   engine.offset_flush_interval and on Stop(), each time
//                   after Sink::Flush() made what the sink acknowledged
//                   since the last flush durable (also before a pause, an
//                   offset move, and closing the sink after a failure). A
//                   failed flush: the saved offsets stay at the last flush,
//                   the sink is closed and those events are read and applied
//                   again, with backoff like an unavailable sink.
//
//   anti-entropy    with engine.anti_entropy enabled and a sink that has
//                   entity checks, an AntiEntropy thread walks the sink's
//                   entities and has each step compared and repaired on the
//                   applier thread, between two chunks (engine/anti_entropy.h).
//
//   ownership       with options.owner set (several engines share the sink,
//                   DESIGN 10), the runner applies only the partitions
//                   SetOwned() gave it (a LeaseKeeper's leases, with their
//                   fencing tokens), and its offsets are saved fenced by
//                   those tokens: a partition whose lease another engine
//                   took is refused there and dropped here. A partition
//                   given is read and applied from its stored offset; one
//                   taken away is flushed and saved first. Past the lease's
//                   validity (SetOwned's valid_until) the applier holds
//                   still until the keeper renews or takes the partitions.
//
//   controls        Pause, Resume, SetOffsets and RunOnApplier (the admin
//                   endpoint's operator commands) are queued for the applier
//                   thread, which runs them between two chunks, so they
//                   never race with an Apply() and the sink keeps one caller.
//                   The calling thread waits for the outcome.
//
// Threads: Start/Stop/Wake/totals/controls from any thread; the sink is only
// called from the applier thread, but for Sink::Prepare (the preparer
// thread, for a sink with Capabilities::prepares: its view code runs while
// the applier writes the batches before and the reader reads the next).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "connectors/apply_loop.h"
#include "connectors/sink.h"
#include "core/sink_state.h"
#include "engine/anti_entropy.h"
#include "engine/durability_barrier.h"
#include "metrics/metrics.h"
#include "offsets/offset_store.h"
#include "sql/connection.h"
#include "sql/tables.h"

namespace sluice::engine {

struct SinkRunnerOptions {
  config::SinkConfig sink;
  uint32_t partitions = 0;
  sql::ConnectParams mysql;
  config::EngineConfig engine;
  // Where the runner counts what it reads, applies and retries; null: a
  // registry nobody scrapes (metrics::UnexportedRegistry).
  std::shared_ptr<metrics::SinkMetrics> metrics;
  // The sink name dead letters are filed under; empty: sink.name. A rebuild's
  // shadow runner files them under the live sink it will replace.
  std::string dead_letter_sink;
  // What every read passes before its events are queued (DESIGN I5), shared
  // by the runners of one process; null: the runner makes its own from
  // mysql and engine.durability_barrier.
  std::shared_ptr<DurabilityBarrier> barrier;
  // The event, offset and dead-letter tables; null: MariaDB at mysql. Unit
  // tests pass sql::MemoryStorage.
  std::shared_ptr<sql::Storage> storage;
  // Whether something outside wakes the runner for each partition that moved
  // (Wake(partition, head): the SyncEngine's head watcher and the writers'
  // commit notices, engine/head_watcher.h). Then an idle reader reads only
  // the partitions it was woken for and sleeps until the next wake-up;
  // without it, it reads every partition after each idle sleep.
  bool woken_per_partition = false;
  // This engine's member name when several engines share the sink: the
  // runner owns no partition until SetOwned() gives it some. Empty: it owns
  // every partition, with unfenced offsets (one engine).
  std::string owner;
  // How long a control (Pause, Resume, SetOffsets, RunOnApplier) waits for
  // the applier to start it; once started it runs to its end.
  std::chrono::milliseconds control_patience{std::chrono::minutes(1)};
};

// What becomes of a control the applier did not start within the patience.
enum class LateControl : uint8_t {
  kStaysQueued,  // it runs when the applier gets to it (an operator's pause)
  kWithdrawn,    // it never runs: the caller gives up and acts on that (a rebuild's switch-over)
};

class SinkRunner {
 public:
  SinkRunner(SinkRunnerOptions options, std::unique_ptr<connectors::Sink> sink);
  ~SinkRunner();  // calls Stop()

  // Loads the stored offsets and starts both threads.
  Status Start();
  // Stops reading, finishes the batch being applied, saves offsets, joins.
  void Stop();
  // New events may have been committed: cut an idle sleep short and read
  // every partition.
  void Wake();
  // Partition `partition` has events up to `head` (0: unknown): read it
  // unless the reader is already there.
  void Wake(uint32_t partition, uint64_t head);

  struct Totals {
    uint64_t read = 0, applied = 0, stale = 0, dead_lettered = 0, gaps = 0, retries = 0;
    SinkState state = SinkState::kRunning;
    std::string last_error;
    bool paused = false;
    std::map<uint32_t, uint64_t> offsets;  // per owned partition: last acknowledged event_id
  };
  Totals totals() const;

  // ---- ownership (options.owner set; any thread) ----
  // The partitions this runner may apply from now on, with their lease
  // tokens, valid until `valid_until` unless renewed by a later call.
  // Returns at once with the call's generation (1, 2, ...); the applier
  // takes the change between two chunks.
  uint64_t SetOwned(std::map<uint32_t, uint64_t> tokens, std::chrono::steady_clock::time_point valid_until);
  // What it applies now: the partitions with their tokens (all, token 0,
  // without an owner), and the generation of the last SetOwned the applier
  // took. A partition given shows once its offset is loaded; one taken away
  // is gone once it was flushed and its offsets saved (kept, and retried at
  // the next SetOwned, while that fails). Nothing once the runner stopped.
  struct Ownership {
    uint64_t generation = 0;
    std::map<uint32_t, uint64_t> tokens;
  };
  Ownership ownership() const;
  std::map<uint32_t, uint64_t> owned() const { return ownership().tokens; }
  // The applier has exited (stopped, or the sink stopped for good).
  bool stopped() const;
  // "sink/NAME": the scope of this sink's leases.
  std::string scope() const { return "sink/" + options_.sink.name; }
  const std::string& entity() const { return options_.sink.entity; }
  uint32_t partitions() const { return options_.partitions; }
  // Whether it shares the sink with other engines (options.owner set).
  bool leased() const { return !options_.owner.empty(); }

  // ---- controls (any thread; each waits until the applier has run it) ----
  // FailedPrecondition once the runner has stopped; Unavailable when the
  // applier did not start it within options.control_patience (a minute):
  // then `late` says whether it still runs later. One the applier started
  // is waited for to its end, however long it takes (a swap of millions of
  // keys).

  // Stops applying after the chunk in flight; offsets are kept and saved
  // with state "paused", which a restart keeps (with an owner, from the
  // start when every partition was paused). Reading stops once the
  // read-ahead queue is full.
  Status Pause(LateControl late = LateControl::kStaysQueued);
  // Carries on from the kept offsets. Unavailable for a pause read from
  // storage at Start() (with an owner, no partitions held yet) while every
  // partition is still stored paused: cleared here, it would come back with
  // them.
  Status Resume();
  // Moves the offsets of the given partitions and restarts reading there:
  // batches already read past another position are dropped. Saved at once.
  Status SetOffsets(const std::map<uint32_t, uint64_t>& offsets);
  // Runs fn on the applier thread between two chunks (paused or not), with
  // the sink; for a rebuild's switch-over.
  Status RunOnApplier(std::function<Status(connectors::Sink&)> fn, LateControl late = LateControl::kStaysQueued);
  const std::string& name() const { return options_.sink.name; }
  // The runner's metric handles (the health monitor sets lag and state there).
  metrics::SinkMetrics& metrics() const { return *metrics_; }

 private:
  struct Batch {
    uint32_t partition = 0;
    uint64_t epoch = 0;  // the partition's epoch_ when read; stale once SetOffsets moved it
    std::vector<connectors::ChangeEvent> events;
  };
  // What the applier hands to the sink: one batch, or several short batches
  // of different reads (each a segment) whose events fit in one chunk, so
  // that a pass over partitions that keep up costs one Apply(), not one per
  // partition. A partition's events stay in order within the work.
  struct Work {
    struct Segment {
      uint32_t partition = 0;
      uint64_t epoch = 0;
      size_t begin = 0, end = 0;  // its events: events[begin, end)
    };
    std::vector<connectors::ChangeEvent> events;
    std::vector<Segment> segments;
    // Appends the batch's events (takes its vector when nothing is held or reserved).
    void Add(Batch&& batch);
    // events[begin, end) moved out, as a batch of segment g's partition and epoch.
    Batch Take(const Segment& g, size_t begin, size_t end);
  };
  struct Control {
    std::function<Status(connectors::Sink&)> fn;
    std::promise<Status> done;
    bool started = false;    // under mu_: the applier took it
    bool withdrawn = false;  // under mu_: its caller gave up before that
  };

  void ReadLoop();
  void PrepareLoop();
  void ApplyLoop();
  // Applier thread: waits up to a flush interval (not at all unless `wait`)
  // for read batches and takes those that fit in one chunk into `work`
  // (none while controls wait); false when the runner stops.
  bool TakeWork(Work& work, bool wait);
  // Under mu_: the events read and not yet taken by the applier.
  size_t InFlightLocked() const;
  // The anti-entropy's Compare: runs CompareAndRepair on the applier thread
  // with the offsets of the moment; a skipped report while the sink is not
  // running (paused, backing off, stopped).
  Result<StepReport> CompareOnApplier(std::vector<connectors::ChangeEvent> latest);
  // Applies the work through loop_ until it is acknowledged or the runner
  // must stop; false when the runner stops.
  bool ApplyWork(Work& work);
  // Under mu_: drops the segments made outdated (SetOffsets, a failed flush,
  // a partition dropped); all of a work of one segment, whose events may be
  // partly applied: the rest goes.
  void DropOutdatedLocked(Work& work) const;
  // A pipelining sink (Capabilities::pipeline above 1), applier thread:
  // sends the work in chunks, each once at most pipeline - 1 others are in
  // flight (Settle), after the checkpoint when it has something to do.
  // False when the runner stops.
  bool SendWork(Work&& work);
  // Receives chunks in flight, oldest first, through AfterChunk until at
  // most `keep` remain. A failed chunk takes back those sent after it and
  // applies them all again, one at a time (ApplyWork) after the backoff.
  // False when the runner stops; then nothing is in flight, and nothing
  // after the chunk it stopped at moved an offset.
  bool Settle(size_t keep);
  // Receives every chunk in flight, dropping the results; their works.
  std::deque<std::unique_ptr<Work>> TakeBackSent();
  // Whether Checkpoint() has something to do (controls, a pause, lapsed
  // leases, a stop).
  bool CheckpointDue() const;
  // After each chunk (ApplyWork's, or one Settle received): files dead
  // letters, moves the offsets past what the sink acknowledged (not those of
  // outdated segments), or backs off (and retries) or stops.
  connectors::ApplyLoop::Next AfterChunk(const Work& work, connectors::ChunkResult& chunk);
  Status DeadLetter(const connectors::ChangeEvent& e, const std::string& reason);
  // Applier thread: makes what the sink acknowledged since its last flush
  // durable (Sink::Flush). On failure the sink is closed and every partition
  // goes back to the last flush (flushed_), to be read and applied again.
  Status FlushSink();
  // Applier thread: FlushSink(), then writes the offsets, which so never
  // pass what the sink made durable. Returns the flush's failure, for the
  // caller to back off or stop as after a failed Apply().
  Status SaveOffsets();
  // Whether every partition of the sink is stored as paused (an operator's
  // pause of the whole sink).
  Result<bool> StoredAsPaused();
  // Applier thread: whether the pause read at Start() (paused_stored_) still
  // stands, storage saying every partition is paused; one that no longer
  // does is dropped here. Called at a lease round that gave no partitions
  // and by Resume().
  Result<bool> StoredPauseStands();
  // Applier thread: closes the sink after a failed Apply() or at a takeover
  // (without Capabilities::stays_open_at_takeover), flushing first.
  void CloseSink();
  // Under mu_: moves the offsets of the given partitions and restarts their
  // reading there; batches read from the old positions are dropped.
  void MoveOffsetsLocked(const std::map<uint32_t, uint64_t>& offsets);
  // Applier thread: makes owned_ what `tokens` says (SetOwned).
  void ApplyOwnership(const std::map<uint32_t, uint64_t>& tokens);
  // Sink::TakeOver of the partitions just taken and of those an earlier call
  // could not settle (applier thread).
  void SettleTakenOver(const std::map<uint32_t, uint64_t>& taken);
  // Under mu_: stops applying the partitions (their batches are dropped).
  void DropOwnedLocked(const std::set<uint32_t>& partitions);
  // Applier thread, after DropOwnedLocked (mu_ not held): Sink::Released,
  // so that the sink lets go of what it holds for them.
  void ReleaseFromSink(const std::set<uint32_t>& partitions);
  // Whether the leases have run past their validity (applier holds still).
  bool LeasesLapsed() const;
  // Applier thread: which of the (partition, event_id) are dead letters of this sink.
  Result<std::set<std::pair<uint32_t, uint64_t>>> DeadLettersAmong(
      const std::vector<std::pair<uint32_t, uint64_t>>& events);
  void SetState(SinkState state, const std::string& error);
  void SetStateLocked(SinkState state, const std::string& error);  // mu_ held
  // Sleeps up to d unless stopping; false when stopping.
  bool SleepUnlessStopping(std::chrono::milliseconds d);
  // Applier thread: sleeps up to d unless stopping or a control arrives.
  bool ApplierSleep(std::chrono::milliseconds d);
  // Applier thread: runs queued controls, then waits while paused (running
  // controls that arrive meanwhile). False when stopping.
  bool Checkpoint();
  void RunControls();
  // Under mu_: whether the batch was read before SetOffsets moved its partition.
  bool Outdated(uint32_t partition, uint64_t epoch) const;
  bool Outdated(const Batch& batch) const { return Outdated(batch.partition, batch.epoch); }

  const SinkRunnerOptions options_;
  std::unique_ptr<connectors::Sink> sink_;
  const std::shared_ptr<DurabilityBarrier> barrier_;
  const std::shared_ptr<sql::Storage> storage_;  // never null
  const std::shared_ptr<metrics::SinkMetrics> metrics_;  // never null
  // Opens, chunks, applies, checks and classifies for the applier thread.
  const std::unique_ptr<connectors::ApplyLoop> loop_;

  mutable std::mutex mu_;
  std::condition_variable queue_cv_;   // queue_ changed or stopping_
  std::condition_variable wake_cv_;    // Wake() or stopping_
  std::deque<Batch> queue_;       // read (and prepared): for the applier
  std::deque<Batch> unprepared_;  // read, for the preparer (prepares_ only)
  size_t preparing_ = 0;          // events of the batch the preparer holds
  bool stopping_ = false;
  bool full_events_ = false;  // the sink's view code needs request, response and the state before
  bool prepares_ = false;     // the reader has the sink Prepare() each batch (its view code)
  bool stays_open_at_takeover_ = false;  // Capabilities::stays_open_at_takeover
  uint64_t wake_seq_ = 0;
  bool wake_all_ = false;                  // Wake(): read every partition
  std::set<uint32_t> woken_;               // Wake(partition, head): read these
  std::map<uint32_t, uint64_t> read_to_;   // per partition: the reader's position (for Wake)
  std::map<uint32_t, uint64_t> start_offsets_;
  std::deque<std::shared_ptr<Control>> controls_;
  bool applier_done_ = false;             // the applier has exited: controls fail
  bool paused_ = false;                   // set at Start(), then set and cleared by the applier thread
  // With an owner and no partitions held yet: paused_ came from storage
  // (every partition stored paused) at Start(). Cleared when partitions
  // come (each then says itself), when storage stops saying so (checked at
  // each lease round), or by a Pause() or Resume() here.
  bool paused_stored_ = false;
  std::map<uint32_t, uint64_t> epoch_;    // per partition, bumped by SetOffsets
  std::map<uint32_t, uint64_t> reread_from_;  // per partition: where the reader restarts
  std::map<uint32_t, uint64_t> owned_;  // partition -> lease token: what the reader reads and the applier applies
  std::map<uint32_t, uint64_t> unsettled_;  // owned partitions (-> token) whose Sink::TakeOver has not succeeded yet
  uint64_t set_generation_ = 0;    // SetOwned calls made
  uint64_t owned_generation_ = 0;  // the last one the applier took
  std::atomic<int64_t> valid_until_ns_{0};  // steady clock: the leases' validity (owner set)

  // Applier-thread state (read under mu_ by totals()).
  std::map<uint32_t, offsets::PartitionProgress> progress_;
  SinkState state_ = SinkState::kRunning;
  std::string last_error_;
  uint64_t read_ = 0, gaps_ = 0, retries_ = 0;

  std::unique_ptr<offsets::OffsetStore> store_;
  std::unique_ptr<sql::DeadLetterTable> dead_letters_;  // applier thread
  // Applier thread: progress_ as of the sink's last successful Flush() (or
  // as loaded); saved offsets never pass it. unflushed_: the sink has
  // acknowledged events since (only while it is open).
  std::map<uint32_t, offsets::PartitionProgress> flushed_;
  bool unflushed_ = false;
  bool flush_failing_ = false;  // the last flush failed: the state stays backoff
  std::chrono::steady_clock::time_point last_flush_;
  bool dirty_ = false;

  // Applier thread: a pipelining sink's chunks in flight, oldest first, and
  // how many it takes (Capabilities::pipeline).
  std::deque<std::unique_ptr<Work>> sent_;
  // Those a failed chunk took back (AfterChunk), for Settle to apply again.
  std::deque<std::unique_ptr<Work>> taken_back_;
  uint32_t pipeline_ = 1;

  std::thread reader_;
  std::thread preparer_;
  std::thread applier_;
  std::unique_ptr<AntiEntropy> anti_entropy_;  // null when off or unsupported
};

}  // namespace sluice::engine
