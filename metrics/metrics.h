// The Prometheus metrics of a sluice process (DESIGN 7): one registry per
// process, typed handles for the writer and the engine, and the metric list
// that compose/ and docs/operations.md are checked against.
//
// Handles are resolved once, when a worker or a sink runner is built: the
// hot path increments a prometheus::Counter (an atomic) through a pointer
// and never looks a label set up by string. Every label value is bounded by
// the configuration (entity types, command names, sink names, partitions) or
// by an enum below; never an entity id or an error text.
//
// Threads: construct handles from any thread (prometheus-cpp's families lock
// internally); the handles themselves are lock-free and may be used from any
// thread. A handle must not outlive the Registry it came from.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include "core/sink_state.h"
#include "http/server.h"

namespace sluice::metrics {

// A metric this code exports: its name (without the _bucket/_sum/_count
// suffixes of a histogram), type and help text. kMetricList is the whole
// list; the compose check and the docs are tested against it.
struct MetricInfo {
  std::string_view name;
  std::string_view type;  // "counter" | "gauge" | "histogram"
  std::string_view help;
};
extern const std::vector<MetricInfo> kMetricList;

// The series names Prometheus sees for kMetricList (histograms add _bucket,
// _sum and _count).
std::vector<std::string> ExportedSeriesNames();

// Families computed at scrape time by code outside this module (plugin
// metrics, kept by connectors/plugin). Called on the scraping thread; must
// be thread-safe and cheap.
using Collector = std::function<std::vector<prometheus::MetricFamily>()>;

// The registry of one process, shared by the writer, the engine and the
// metrics listener.
class Registry {
 public:
  Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // For the exposer (it keeps weak references): the typed families, then
  // the collectors added with AddCollector.
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables() const;

  // Adds families that are collected at every scrape, after the typed ones.
  // Their names must not clash with kMetricList. Any thread.
  void AddCollector(Collector collector);

  // Every metric in the Prometheus text format (what /metrics serves).
  std::string Text() const;

  // The families, created on first use. Internal to this module's handles.
  prometheus::Family<prometheus::Counter>& Counter(std::string_view name);
  prometheus::Family<prometheus::Gauge>& Gauge(std::string_view name);
  prometheus::Family<prometheus::Histogram>& Histogram(std::string_view name);

 private:
  class Collectors;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Collectors> collectors_;
  std::mutex mu_;
  std::map<std::string, prometheus::Family<prometheus::Counter>*, std::less<>> counters_;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*, std::less<>> gauges_;
  std::map<std::string, prometheus::Family<prometheus::Histogram>*, std::less<>> histograms_;
};

// A process-wide registry that no listener serves: for components built
// without one (unit tests, one-off tools), so that handles are never null.
Registry& UnexportedRegistry();

// ---- writer ----

// How a command ended, as the caller saw it.
enum class CommandOutcome : uint8_t {
  kApplied,      // 200, a new event was stored
  kReplayed,     // 200, answered from a stored event (same Idempotency-Key)
  kRejected,     // 4xx: bad precondition, rule or request
  kUnavailable,  // 503: storage down or overloaded; retry-safe
  kError,        // any other 5xx
};
inline constexpr size_t kCommandOutcomes = 5;
std::string_view CommandOutcomeName(CommandOutcome o);
// The outcome of an HTTP reply status (replayed only when the reply says so).
CommandOutcome OutcomeOfStatus(int http_status, bool replayed);

// The unique key a duplicate-key conflict named (DESIGN 3.3 step 6).
// kStaleRefusal is not a duplicate key: a command about to be refused (409,
// 422, ...) on a cached entity found it older than storage, so the batch was
// re-planned on the stored version (DESIGN I4; label "stale_refusal").
enum class ConflictKey : uint8_t { kPrimary, kEntityVersion, kEntityCommand, kStaleRefusal, kOther };
inline constexpr size_t kConflictKeys = 5;
// "PRIMARY", "uk_entity_version", "uk_entity_command", other -> kOther.
ConflictKey ConflictKeyOf(std::string_view mysql_key_name);

// Handles of one (entity type, command).
class CommandMetrics {
 public:
  CommandMetrics(Registry& r, const std::string& type, const std::string& command);
  // One command answered `seconds` after it was received.
  void Record(CommandOutcome outcome, double seconds) {
    outcomes_[static_cast<size_t>(outcome)]->Increment();
    if (outcome == CommandOutcome::kReplayed) replays_->Increment();
    latency_->Observe(seconds);
  }

 private:
  std::array<prometheus::Counter*, kCommandOutcomes> outcomes_{};
  prometheus::Counter* replays_;
  prometheus::Histogram* latency_;
};

// Handles of one entity type's partition workers (shared by its workers).
class WriterTypeMetrics {
 public:
  WriterTypeMetrics(Registry& r, const std::string& type);
  // A batch of `events` rows committed in one INSERT.
  void BatchCommitted(size_t events) { batch_events_->Observe(static_cast<double>(events)); }
  // A duplicate-key conflict on `key`; the batch is re-planned.
  void Conflict(ConflictKey key) { conflicts_[static_cast<size_t>(key)]->Increment(); }
  // A command for a partition another writer owns: the owner answered it
  // (forwarded), or could not be reached and this writer handled it.
  void Forwarded(bool answered) { (answered ? forwarded_ : handled_here_)->Increment(); }

 private:
  prometheus::Histogram* batch_events_;
  prometheus::Counter* forwarded_ = nullptr;
  prometheus::Counter* handled_here_ = nullptr;
  std::array<prometheus::Counter*, kConflictKeys> conflicts_{};
};

// Why a push to a point view failed (DESIGN 3.5): a failure is counted and
// forgotten, the pull path applies the events later.
enum class PushFailure : uint8_t { kUnavailable, kTimeout, kRejected, kError };
inline constexpr size_t kPushFailures = 4;
std::string_view PushFailureName(PushFailure f);

// Handles of one push sink (DESIGN 3.5), for the writer's push path.
class PushMetrics {
 public:
  PushMetrics(Registry& r, const std::string& sink);
  // A push of `events` events that the sink acknowledged after `seconds`.
  void Succeeded(size_t events, double seconds) {
    pushed_->Increment(static_cast<double>(events));
    latency_->Observe(seconds);
  }
  // The pusher thread started applying a batch `seconds` after its commit.
  void Started(double seconds) { wait_->Observe(seconds); }
  // A push that failed (or timed out) after `seconds`.
  void Failed(PushFailure why, double seconds) {
    failures_[static_cast<size_t>(why)]->Increment();
    latency_->Observe(seconds);
  }

 private:
  prometheus::Counter* pushed_;
  prometheus::Histogram* latency_;
  prometheus::Histogram* wait_;
  std::array<prometheus::Counter*, kPushFailures> failures_{};
};

// The writer's handles, built once per WriterService. ForCommand/ForType/
// ForPush create on first call and return the same object afterwards: call
// them while setting up (they lock), keep the reference on the hot path.
class WriterMetrics {
 public:
  explicit WriterMetrics(Registry& r);
  CommandMetrics& ForCommand(const std::string& type, const std::string& command);
  // A transaction that stored the batches of `partitions` partitions committed.
  void TransactionCommitted(size_t partitions) { transaction_partitions_->Observe(static_cast<double>(partitions)); }
  WriterTypeMetrics& ForType(const std::string& type);
  PushMetrics& ForPush(const std::string& sink);
  // Convenience for the push path: ForPush(sink) then Succeeded/Failed.
  void PushResult(const std::string& sink, bool ok, double seconds, size_t events = 1,
                  PushFailure why = PushFailure::kError);

 private:
  Registry& registry_;
  prometheus::Histogram* transaction_partitions_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<CommandMetrics>> commands_;  // type '\0' command
  std::map<std::string, std::unique_ptr<WriterTypeMetrics>> types_;
  std::map<std::string, std::unique_ptr<PushMetrics>> pushes_;
};

// ---- engine ----

// Why the engine retried: the sink was unavailable, the sink asked for a
// retry (aborted), or main storage failed (reading events, writing a dead
// letter).
enum class RetryClass : uint8_t { kSinkUnavailable, kSinkAborted, kStorageUnavailable };
inline constexpr size_t kRetryClasses = 3;
std::string_view RetryClassName(RetryClass c);


// What the engine's anti-entropy found when it compared an entity with the
// view: the view lacks it (missing), holds a deleted one (extra), holds an
// older version (version_mismatch), the same version with other content
// (content_mismatch), or a version newer than storage's (ahead: no versioned
// write can fix it; `sluice verify --repair` can).
enum class DifferenceKind : uint8_t { kMissing, kExtra, kVersionMismatch, kContentMismatch, kAhead };
inline constexpr size_t kDifferenceKinds = 5;
std::string_view DifferenceKindLabel(DifferenceKind k);

// Handles of one sink's pull loop. Per sink, once caught up:
//   events_read = applied + stale + dead_lettered
// (the difference is the events in flight between the reader and the sink).
// Call Read() before handing the events to the sink's thread: then any one
// scrape, even during a load, shows applied + stale + dead_lettered <= read.
class SinkMetrics {
 public:
  SinkMetrics(Registry& r, const std::string& sink, uint32_t partitions);

  void Read(size_t events) { read_->Increment(static_cast<double>(events)); }
  // The outcome of one Apply call of `events` events that took `seconds`.
  void Applied(size_t applied, size_t stale, size_t dead_lettered) {
    if (applied) applied_->Increment(static_cast<double>(applied));
    if (stale) stale_->Increment(static_cast<double>(stale));
    if (dead_lettered) dead_lettered_->Increment(static_cast<double>(dead_lettered));
  }
  void ApplyCall(size_t events, double seconds) {
    apply_events_->Observe(static_cast<double>(events));
    apply_latency_->Observe(seconds);
  }
  void Retry(RetryClass c) { retries_[static_cast<size_t>(c)]->Increment(); }
  void Gap() { gaps_->Increment(); }
  void OffsetFlush(bool ok) { (ok ? flushes_ok_ : flushes_failed_)->Increment(); }
  void SetState(SinkState s);
  // Lag of one partition: head - offset, and seconds since the oldest
  // unapplied event was committed (0 when none).
  void SetLag(uint32_t partition, uint64_t events, double seconds);
  // How many of the sink's partitions this engine applies now.
  void SetPartitionsOwned(size_t n) { owned_->Set(static_cast<double>(n)); }

  // The anti-entropy (engine/anti_entropy.h): entities compared with the
  // view, differences found, entities repaired, passes over every entity.
  void EntitiesChecked(size_t n) {
    if (n) checked_->Increment(static_cast<double>(n));
  }
  void DifferencesFound(DifferenceKind k, size_t n) {
    if (n) differences_[static_cast<size_t>(k)]->Increment(static_cast<double>(n));
  }
  void Repaired(size_t n) {
    if (n) repaired_->Increment(static_cast<double>(n));
  }
  void PassCompleted() { passes_->Increment(); }

 private:
  prometheus::Counter* read_;
  prometheus::Gauge* owned_;
  prometheus::Counter* applied_;
  prometheus::Counter* stale_;
  prometheus::Counter* dead_lettered_;
  prometheus::Histogram* apply_events_;
  prometheus::Histogram* apply_latency_;
  std::array<prometheus::Counter*, kRetryClasses> retries_{};
  prometheus::Counter* gaps_;
  prometheus::Counter* flushes_ok_;
  prometheus::Counter* flushes_failed_;
  prometheus::Gauge* healthy_;
  std::array<prometheus::Gauge*, kSinkStates> state_{};
  std::vector<prometheus::Gauge*> lag_events_;   // by partition
  std::vector<prometheus::Gauge*> lag_seconds_;  // by partition
  prometheus::Counter* checked_;
  std::array<prometheus::Counter*, kDifferenceKinds> differences_{};
  prometheus::Counter* repaired_;
  prometheus::Counter* passes_;
};

// ---- HTTP listeners ----

// Handles of one HTTP listener ("writer", "admin" or "metrics"): connections
// accepted, and closed by reason (http::CloseReason). Accepted minus closed
// is the connections open.
class HttpListenerMetrics {
 public:
  HttpListenerMetrics(Registry& r, const std::string& listener);
  void Accepted() { accepted_->Increment(); }
  void Closed(http::CloseReason reason) { closed_[static_cast<size_t>(reason)]->Increment(); }
  // Sets options.on_accept and on_close to count here; this object must
  // outlive the server.
  void Attach(http::ServerOptions& options);

 private:
  prometheus::Counter* accepted_;
  std::array<prometheus::Counter*, http::kCloseReasons> closed_{};
};

// Main storage as the health monitor last saw it (1 reachable, 0 not).
class StorageMetrics {
 public:
  explicit StorageMetrics(Registry& r);
  void SetUp(bool up) { up_->Set(up ? 1 : 0); }

 private:
  prometheus::Gauge* up_;
};

// Handles of the engine's durability barrier (engine/durability_barrier.h).
class DurabilityBarrierMetrics {
 public:
  explicit DurabilityBarrierMetrics(Registry& r);
  // One round that took `seconds`; failed rounds are counted apart too.
  void Round(double seconds, bool ok) {
    duration_->Observe(seconds);
    if (!ok) failures_->Increment();
  }

 private:
  prometheus::Histogram* duration_;
  prometheus::Counter* failures_;
};

// Handles of the engine's head watcher (engine/head_watcher.h).
class HeadWatcherMetrics {
 public:
  explicit HeadWatcherMetrics(Registry& r);
  void Look() { looks_->Increment(); }
  void Unannounced(uint64_t partitions) { unannounced_->Increment(static_cast<double>(partitions)); }

 private:
  prometheus::Counter* looks_;
  prometheus::Counter* unannounced_;
};

// Handles of the archiver of serve and sync (archive/from_config.h), for one
// entity type with an archive policy, by partition (docs/archive.md).
class ArchiveMetrics {
 public:
  ArchiveMetrics(Registry& r, const std::string& type, uint32_t partitions);
  // A segment written and recorded.
  void Segment(uint64_t events, uint64_t stubbed, uint64_t bytes) {
    segments_->Increment();
    events_->Increment(static_cast<double>(events));
    stubbed_->Increment(static_cast<double>(stubbed));
    written_->Increment(static_cast<double>(bytes));
  }
  // Where a partition stands after a round: its watermark, its segments'
  // size, how old its oldest event above the watermark is (0: none) and its
  // hot table's size.
  void Partition(uint32_t p, uint64_t watermark, uint64_t archive_bytes, double unarchived_age_seconds,
                 uint64_t table_bytes) {
    if (p >= watermark_.size()) return;
    watermark_[p]->Set(static_cast<double>(watermark));
    archive_bytes_[p]->Set(static_cast<double>(archive_bytes));
    unarchived_age_[p]->Set(unarchived_age_seconds);
    table_bytes_[p]->Set(static_cast<double>(table_bytes));
  }

 private:
  prometheus::Counter* segments_;
  prometheus::Counter* events_;
  prometheus::Counter* stubbed_;
  prometheus::Counter* written_;
  std::vector<prometheus::Gauge*> watermark_;
  std::vector<prometheus::Gauge*> archive_bytes_;
  std::vector<prometheus::Gauge*> unarchived_age_;
  std::vector<prometheus::Gauge*> table_bytes_;
};

}  // namespace sluice::metrics
