// Sampled anti-entropy (docs/views.md, "Anti-entropy"): a view that lost
// data behind sluice's back (a Redis restarted empty, a key evicted, a row
// edited by hand) is noticed and repaired without a rewind.
//
// Per sink whose connector has entity checks (capabilities().entity_checks:
// redis, mysql, elasticsearch; not kafka, a log, nor plugins), one thread
// walks every entity of the sink's type, partition by partition and in
// entity_id order within one (a keyset cursor over the event table's
// (entity_id, version) key), `engine.anti_entropy.batch` entities per step,
// one step every batch/rate seconds. A step:
//
//   1. reads the latest event of the next `batch` entities (one statement,
//      through the thread's own sql::EventLog);
//   2. hands them to the sink's applier thread (SinkRunner::RunOnApplier:
//      the sink keeps one caller), which compares only the entities whose
//      latest event the sink has passed (event_id <= its offset in that
//      partition: lag is not a difference) with one batched read of the view
//      (Sink::VerifyEntities); leaves out those whose latest event is a dead
//      letter of the sink, resolved or not (asked only when something
//      differs, on the applier, which writes dead letters before its offset
//      passes them): that difference is known, counted and alerted on
//      already, and `sluice deadletters` owns it (a discarded one stays given
//      up on); and rewrites the others from their latest event with
//      Sink::Repair(kNotOlder) once the durability barrier has passed: never
//      over a newer version, so it is safe beside the pull loop and the
//      writer's push;
//   3. re-reads the versions of entities the view holds NEWER than the
//      step's read (storage may have moved on meanwhile); those still ahead
//      of storage are counted (kind "ahead") and logged: only
//      `sluice verify --repair` can fix them.
//
// Nothing is logged while views match; differences, failures and views
// ahead of storage are logged rate-limited, and counted in the sink's
// metrics (metrics::SinkMetrics: checked, differences by kind, repaired,
// passes).
//
// Threads: an AntiEntropy owns one thread ("sluice-entropy") and the event
// log it reads with (its own session); Compare runs on the sink's applier. Start/Stop from the
// owner's thread. EntityWalk, StepInterval and CompareAndRepair are plain
// logic for one thread at a time.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.h"
#include "connectors/sink.h"
#include "core/status.h"
#include "metrics/metrics.h"
#include "sql/connection.h"
#include "sql/tables.h"

namespace sluice::engine {

// Where a walk over a type's entities stands: partition by partition, and
// within one in entity_id order (bytewise, as the event table's key sorts
// VARBINARY), from after() on.
class EntityWalk {
 public:
  explicit EntityWalk(uint32_t partitions);

  // The partition the next step reads, and the id it reads after (empty:
  // from the partition's first entity).
  uint32_t partition() const { return partition_; }
  const std::string& after() const { return after_; }

  // The step at (partition(), after()) asked for `limit` entities and got
  // `read`, the last of them `last_id`. A full step moves the cursor past
  // `last_id`; a short one ends the partition, and the next step starts the
  // next partition from its first entity. True when that step ended a pass
  // over every partition.
  bool Advance(size_t read, size_t limit, std::string_view last_id);

  // Passes completed.
  uint64_t passes() const { return passes_; }

 private:
  const uint32_t partitions_;
  uint32_t partition_ = 0;
  std::string after_;
  uint64_t passes_ = 0;
};

// The time between the starts of two steps: `batch` entities at `rate`
// entities per second, whatever a step returned (so a sink pays at most
// rate/batch steps per second). At least 1 ns.
std::chrono::nanoseconds StepInterval(uint32_t rate, uint32_t batch);

// What one step found on the applier thread.
struct StepReport {
  bool skipped = false;  // the sink was paused, backing off or stopped: nothing compared
  size_t checked = 0;    // entities compared with the view
  // Differences a versioned write can fix, by metrics::DifferenceKind (never kAhead).
  std::array<size_t, metrics::kDifferenceKinds> differences{};
  size_t repaired = 0;   // of those, rewritten from their latest event
  // Of those, not rewritten: the repair was refused (rejected), kept by the
  // guard (the view moved on, or an index remembers a newer delete), or not
  // tried (the barrier or the sink failed: `repair_error`).
  size_t unrepaired = 0;
  std::string unrepaired_example;  // "entity X: why", for the log
  std::string repair_error;        // why the repair was not tried, when it was not
  // Entities whose view holds a newer version than the step read: storage
  // may have moved on since, so the caller re-reads before calling them ahead.
  struct Newer {
    std::string entity_id;
    uint32_t partition = 0;
    uint64_t view_version = 0;
  };
  std::vector<Newer> newer;

  static StepReport Skipped() {
    StepReport r;
    r.skipped = true;
    return r;
  }
};

// Which of the given events (partition, event_id) are dead letters of the sink.
using DeadLetterLookup = std::function<Result<std::set<std::pair<uint32_t, uint64_t>>>(
    const std::vector<std::pair<uint32_t, uint64_t>>& events)>;

// Step 2 above, on the thread that may call `sink`: compares the entities
// of `latest` (the latest event of each) whose event_id is at most the
// partition's entry in `offsets` (the sink has passed it), drops the
// differing ones whose latest event `dead_letters` names, and repairs the
// rest, below the view's version, once `barrier` returns ok. A failure of
// VerifyEntities or of the lookup is returned; a failure of the barrier or
// of Repair is reported in the StepReport (the differences are still
// counted).
Result<StepReport> CompareAndRepair(connectors::Sink& sink, std::span<const connectors::ChangeEvent> latest,
                                    const std::map<uint32_t, uint64_t>& offsets,
                                    const std::function<Status()>& barrier, const DeadLetterLookup& dead_letters);

// The thread of one sink.
class AntiEntropy {
 public:
  struct Options {
    std::string sink;    // the sink's name, for logs
    std::string entity;  // its entity type
    uint32_t partitions = 0;
    sql::ConnectParams mysql;
    // Where the event log is opened from; null: MariaDB at `mysql`.
    std::shared_ptr<sql::Storage> storage;
    config::AntiEntropyConfig settings;
    std::shared_ptr<metrics::SinkMetrics> metrics;  // never null
  };
  // Runs CompareAndRepair where the sink may be called, and returns its
  // report (the SinkRunner queues it for its applier thread).
  using Compare = std::function<Result<StepReport>(std::vector<connectors::ChangeEvent> latest)>;

  AntiEntropy(Options options, Compare compare);
  ~AntiEntropy();  // calls Stop()
  AntiEntropy(const AntiEntropy&) = delete;
  AntiEntropy& operator=(const AntiEntropy&) = delete;

  // Starts the thread; its first step comes one interval later.
  void Start();
  // Tells the thread to stop after the step in hand, without waiting.
  void RequestStop();
  // RequestStop, then joins the thread. A step waiting on Compare returns
  // when the applier runs or refuses it.
  void Stop();

 private:
  void Run();
  // One step; false when the walk must not move on (the step is retried).
  bool Step(EntityWalk& walk);
  // Counts and logs those of `newer` that storage has not caught up with.
  void CheckNewer(const std::vector<StepReport::Newer>& newer);
  void Report(const StepReport& report);

  const Options options_;
  const Compare compare_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::unique_ptr<sql::EventLog> log_;  // the thread's
  std::thread thread_;
};

}  // namespace sluice::engine
