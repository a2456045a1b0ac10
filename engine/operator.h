// Operator commands that read main storage and the views directly, without a
// running engine: status, verify, dead letters. Each returns what it found as
// data; the CLI (cli/cmd_storage.cc) turns it into tables and text. Call
// from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "archive/from_config.h"
#include "config/config.h"
#include "connectors/sink.h"
#include "core/status.h"
#include "engine/view_compare.h"
#include "engine/view_repair.h"
#include "sql/tables.h"

namespace sluice::engine {

// Every command here first checks that main storage is set up: a database
// that does not exist yet, or one without sluice's tables, is a
// FailedPrecondition that says to run `sluice init`.

// One partition of a sink, as `sluice status` shows it.
struct PartitionStatus {
  uint32_t partition = 0;
  uint64_t offset = 0;       // last applied event_id
  uint64_t head = 0;         // newest event_id of the partition
  uint64_t lag_events = 0;   // head - offset, or 0
  double lag_seconds = 0;    // age of the oldest unapplied event, 0 without lag
  std::string state;         // as stored in sluice_offsets, or "new" before the first save
  uint64_t applied = 0;
  uint64_t stale = 0;
  uint64_t dead_lettered = 0;
  std::string last_error;
  std::string owner;         // the engine whose lease on it runs (engine.id); empty: none
  uint64_t lease_token = 0;  // the lease's fencing token (grows on every takeover)
};

// One sink, its partitions in order.
struct SinkStatus {
  std::string name;
  std::string type;
  std::string entity;
  std::vector<PartitionStatus> partitions;
  bool paused = false;     // every partition paused by an operator (sluice pause)
  std::string last_error;  // the last partition's non-empty last_error, or empty
};

// The engines sharing the sinks, or the writers sharing the partitions:
// each with a heartbeat younger than its lease TTL.
struct EngineStatus {
  std::string member;
  int64_t heartbeat_age_ms = 0;
  std::string address;      // writers: the URL the others forward to
  uint32_t partitions = 0;  // writers: partitions whose lease it holds
};

// Per sink (in config order) and partition: offset, head, lag in events and
// seconds, state, counters and last error.
// `engines`, when given, receives the engines alive within engine.lease_ttl;
// `writers` the writers alive within writer.lease_ttl.
Result<std::vector<SinkStatus>> ReadStatus(const config::Config& config, std::vector<EngineStatus>* engines = nullptr,
                                           std::vector<EngineStatus>* writers = nullptr);

// What comparing one view with main storage found.
struct ViewCheck {
  std::string sink;
  std::string type;              // the sink's type
  bool history = false;          // a log sink: `checked` counts events, else entities
  uint64_t checked = 0;
  DifferenceTally differences;  // counted by kind, the first ones listed
  // Why the view was not compared (an aggregate view has no row per entity:
  // `rebuild` recomputes it); empty when it was.
  std::string not_compared;
};

// Hears where the comparison of a sink's view stands (a progress line).
using VerifyProgress = std::function<void(const std::string& sink, const CompareProgress&)>;

// Compares every view (or only `sink`) with main storage, appending one
// ViewCheck per view to `checks` as each is done (so that on an error the
// views already compared are there). Returns the number of differences.
// Views with entity checks are compared page by page, in bounded memory
// (engine/view_compare.h); `progress` hears each page of those.
Result<uint64_t> Verify(const config::Config& config, const std::optional<std::string>& sink,
                        std::vector<ViewCheck>& checks, const VerifyProgress& progress = {});

// `sluice verify --repair`: compares like Verify, then rewrites in each view
// (or only `sink`) the entities that differ from their latest event in main
// storage and compares them again (engine/view_repair.h); `repaired` gets
// each view's RepairReport, also the partial one of a repair that failed.
// Sinks without entity checks (kafka, plugins) are only verified:
// `not_repairable` gets their ViewCheck. Returns the number of differences
// that remain.
Result<uint64_t> VerifyAndRepair(const config::Config& config, const std::optional<std::string>& sink,
                                 const std::function<void(const ViewCheck&)>& not_repairable,
                                 const std::function<void(const RepairReport&)>& repaired,
                                 const VerifyProgress& progress = {});

// The dead letters a retry or discard acts on: the one with `id`, else the
// unresolved ones of `sink`, else (neither) every unresolved one.
struct DeadLetterFilter {
  std::optional<uint64_t> id;
  std::optional<std::string> sink;
};

// One row of sluice_dead_letters.
struct DeadLetter {
  uint64_t id = 0;
  std::string sink;
  std::string entity_type;
  uint64_t partition = 0;
  uint64_t event_id = 0;
  std::string entity_id;
  uint64_t version = 0;
  std::string created_at;
  std::optional<std::string> resolved_at;  // nullopt: unresolved
  std::string resolution;                  // applied | stale | discarded, or empty
  std::string error;
};

// The archive (docs/archive.md), per entity type with a policy and
// partition: watermark, segments and their size, the hot table's rows,
// stubs and size, its oldest event that is not a stub, and the slowest sink.
Result<std::vector<archive::PartitionArchiveStatus>> ReadArchiveStatus(const config::Config& config);
// `sluice archive run`: archives what may leave the hot tables now, for
// every entity type with a policy (or `type`), at most `max_steps` segments
// per type; `progress` hears each step.
Result<std::vector<archive::StepReport>> RunArchive(const config::Config& config, const std::optional<std::string>& type,
                                                    uint64_t max_steps,
                                                    const std::function<void(const archive::StepReport&)>& progress);

// Dead letters (unresolved only unless `all`), optionally of one sink, by id.
Result<std::vector<DeadLetter>> ListDeadLetters(const config::Config& config, const std::optional<std::string>& sink,
                                                bool all);

// What a retry or a discard did to one dead letter.
struct DeadLetterAction {
  enum class Kind {
    kAlreadyResolved,  // left as it is; `detail` is its resolution
    kEventGone,        // retry: its event no longer exists in main storage
    kRejectedAgain,    // retry: `detail` is the new error
    kApplied,          // retry: resolved
    kStale,            // retry: resolved (the view had it already)
    kDiscarded,        // discard --id
  };
  Kind kind;
  uint64_t id = 0;
  std::string sink;
  std::string entity_id;
  std::string version;  // kDiscarded only
  std::string detail;
};

// What a retry or a discard did, in order. `finished`: the retry went
// through every selected dead letter (false when the one selected by id was
// resolved already). `discarded_sink`: a discard by sink, counted as a whole.
struct DeadLetterReport {
  std::vector<DeadLetterAction> actions;
  bool finished = false;
  std::optional<std::string> discarded_sink;
};

// Re-applies the selected unresolved dead letters to their sinks: those now
// applied or stale are marked resolved; those rejected again keep their row
// with the new error. Returns how many of them are still unresolved. A
// selected id that does not exist is NotFound; one already resolved is
// reported and left as it is. `report` holds what was done, also on error.
Result<uint64_t> RetryDeadLetters(const config::Config& config, const DeadLetterFilter& filter,
                                  DeadLetterReport& report);

// Gives up on the selected unresolved dead letters without applying them:
// each is marked resolved with resolution "discarded" (the row stays, for
// `list --all`). Needs `filter.id` or `filter.sink` (InvalidArgument
// otherwise: never every sink's at once). `filter.sink` may name a sink the
// config no longer declares, as long as it has dead letters. Returns how
// many were discarded.
Result<uint64_t> DiscardDeadLetters(const config::Config& config, const DeadLetterFilter& filter,
                                    DeadLetterReport& report);

// Makes the sink `sink` of the config (connectors::MakeSink above).
using SinkMaker = std::function<Result<std::unique_ptr<connectors::Sink>>(const config::SinkConfig& sink)>;

// The dead-letter commands above on `storage`, which the caller has checked
// is set up (the overloads above open MariaDB and check it; unit tests pass
// sql::MemoryStorage and fake sinks).
Result<std::vector<DeadLetter>> ListDeadLetters(sql::Storage& storage, const config::Config& config,
                                                const std::optional<std::string>& sink, bool all);
Result<uint64_t> RetryDeadLetters(sql::Storage& storage, const config::Config& config, const SinkMaker& make_sink,
                                  const DeadLetterFilter& filter, DeadLetterReport& report);
Result<uint64_t> DiscardDeadLetters(sql::Storage& storage, const config::Config& config,
                                    const DeadLetterFilter& filter, DeadLetterReport& report);

}  // namespace sluice::engine
