#include "metrics/metrics.h"

#include <sstream>
#include <stdexcept>

#include <prometheus/text_serializer.h>

namespace sluice::metrics {
namespace {

using prometheus::Histogram;

// Seconds: 100 us .. 10 s.
// 2 ms is a bucket edge because it is the push path's target (DESIGN 3.5).
const Histogram::BucketBoundaries kLatencyBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.0025, 0.005,
                                                     0.01,   0.025,   0.05,   0.1,   0.25,  0.5,    1,
                                                     2.5,    5,       10};
// Events or commands per batch: 1 .. 100k (the largest batch_max).
const Histogram::BucketBoundaries kSizeBuckets = {1,    2,    5,    10,    20,    50,    100,   200,
                                                  500,  1000, 2000, 5000,  10000, 20000, 50000, 100000};

constexpr std::string_view kWriterCommands = "sluice_writer_commands_total";
constexpr std::string_view kWriterCommandDuration = "sluice_writer_command_duration_seconds";
constexpr std::string_view kWriterReplays = "sluice_writer_idempotent_replays_total";
constexpr std::string_view kWriterBatchEvents = "sluice_writer_batch_events";
constexpr std::string_view kWriterConflicts = "sluice_writer_conflicts_total";
constexpr std::string_view kWriterTransactionPartitions = "sluice_writer_transaction_partitions";
constexpr std::string_view kWriterPushed = "sluice_writer_push_events_total";
constexpr std::string_view kWriterForwarded = "sluice_writer_forwarded_total";
constexpr std::string_view kWriterPushDuration = "sluice_writer_push_duration_seconds";
constexpr std::string_view kWriterPushWait = "sluice_writer_push_wait_seconds";
constexpr std::string_view kWriterPushFailures = "sluice_writer_push_failures_total";
constexpr std::string_view kEngineRead = "sluice_engine_events_read_total";
constexpr std::string_view kEngineApplied = "sluice_engine_events_applied_total";
constexpr std::string_view kEngineStale = "sluice_engine_events_stale_total";
constexpr std::string_view kEngineDeadLettered = "sluice_engine_events_dead_lettered_total";
constexpr std::string_view kEngineApplyEvents = "sluice_engine_apply_batch_events";
constexpr std::string_view kEngineApplyDuration = "sluice_engine_apply_duration_seconds";
constexpr std::string_view kEngineRetries = "sluice_engine_retries_total";
constexpr std::string_view kEngineGaps = "sluice_engine_gaps_total";
constexpr std::string_view kEngineFlushes = "sluice_engine_offset_flushes_total";
constexpr std::string_view kEngineLagEvents = "sluice_engine_lag_events";
constexpr std::string_view kEngineAntiEntropyChecked = "sluice_engine_anti_entropy_checked_total";
constexpr std::string_view kEngineAntiEntropyDifferences = "sluice_engine_anti_entropy_differences_total";
constexpr std::string_view kEngineAntiEntropyRepaired = "sluice_engine_anti_entropy_repaired_total";
constexpr std::string_view kEngineAntiEntropyPasses = "sluice_engine_anti_entropy_passes_total";
constexpr std::string_view kEngineLagSeconds = "sluice_engine_lag_seconds";
constexpr std::string_view kEngineSinkHealthy = "sluice_engine_sink_healthy";
constexpr std::string_view kEngineSinkState = "sluice_engine_sink_state";
constexpr std::string_view kEnginePartitionsOwned = "sluice_engine_partitions_owned";
constexpr std::string_view kStorageUp = "sluice_storage_up";
constexpr std::string_view kEngineBarrierDuration = "sluice_engine_durability_barrier_duration_seconds";
constexpr std::string_view kEngineBarrierFailures = "sluice_engine_durability_barrier_failures_total";
constexpr std::string_view kEngineHeadLooks = "sluice_engine_head_looks_total";
constexpr std::string_view kEngineUnannounced = "sluice_engine_unannounced_commits_total";
constexpr std::string_view kArchiveSegments = "sluice_archive_segments_total";
constexpr std::string_view kArchiveEvents = "sluice_archive_events_total";
constexpr std::string_view kArchiveStubbed = "sluice_archive_stubbed_rows_total";
constexpr std::string_view kArchiveWritten = "sluice_archive_written_bytes_total";
constexpr std::string_view kArchiveWatermark = "sluice_archive_watermark";
constexpr std::string_view kArchiveBytes = "sluice_archive_bytes";
constexpr std::string_view kArchiveUnarchivedAge = "sluice_archive_unarchived_age_seconds";
constexpr std::string_view kStorageTableBytes = "sluice_storage_table_bytes";
constexpr std::string_view kHttpConnections = "sluice_http_connections_total";
constexpr std::string_view kHttpConnectionsClosed = "sluice_http_connections_closed_total";

std::string_view HelpOf(std::string_view name) {
  for (const MetricInfo& m : kMetricList) {
    if (m.name == name) return m.help;
  }
  throw std::logic_error("metric " + std::string(name) + " is not in kMetricList");
}

template <typename Builder, typename Map>
auto& FamilyOf(std::mutex& mu, Map& families, prometheus::Registry& registry, std::string_view name,
               Builder builder) {
  std::lock_guard lock(mu);
  auto it = families.find(name);
  if (it == families.end()) {
    auto& family = builder.Name(std::string(name)).Help(std::string(HelpOf(name))).Register(registry);
    it = families.emplace(std::string(name), &family).first;
  }
  return *it->second;
}

}  // namespace

const std::vector<MetricInfo> kMetricList = {
    {kWriterCommands, "counter", "Commands answered, by entity type, command and outcome."},
    {kWriterCommandDuration, "histogram",
     "Seconds from receiving a command to sending its reply, by entity type and command."},
    {kWriterReplays, "counter",
     "Commands answered from a stored event because their Idempotency-Key was seen before."},
    {kWriterBatchEvents, "histogram", "Events committed per multi-row INSERT, by entity type."},
    {kWriterConflicts, "counter",
     "Duplicate-key conflicts that made a batch reload and re-plan, by entity type and unique key."},
    {kWriterTransactionPartitions, "histogram",
     "Partitions whose batches one committed transaction stored (group commit: more than 1)."},
    {kWriterForwarded, "counter",
     "Commands for a partition another writer owns, by entity type and outcome: forwarded (the owner "
     "answered) or handled_here (the owner could not be reached)."},
    {kWriterPushed, "counter", "Events the writer pushed to a point view right after commit, by sink."},
    {kWriterPushDuration, "histogram", "Seconds per push to a point view (success or failure), by sink."},
    {kWriterPushWait, "histogram",
     "Seconds from a batch's commit until its sink's pusher thread took it, by sink; batches refused at "
     "once (queue full, view down) are not in it."},
    {kWriterPushFailures, "counter",
     "Pushes that failed or timed out, by sink and reason; the pull path applies those events later."},
    {kEngineRead, "counter", "Events the engine read from main storage for a sink."},
    {kEngineApplied, "counter", "Events a sink applied (its view changed)."},
    {kEngineStale, "counter", "Events a sink skipped because the view already had that version or a newer one."},
    {kEngineDeadLettered, "counter", "Events a sink rejected for good and the engine wrote to the dead-letter table."},
    {kEngineApplyEvents, "histogram", "Events per Apply call to a sink."},
    {kEngineApplyDuration, "histogram", "Seconds per Apply call to a sink, including failed calls."},
    {kEngineRetries, "counter", "Retries with backoff, by sink and error class."},
    {kEngineGaps, "counter", "Times a reader saw a gap in event_id and waited for it (must stay 0)."},
    {kEngineFlushes, "counter", "Offset flushes to the sluice_offsets table, by sink and result."},
    {kEngineLagEvents, "gauge", "Events committed but not yet applied to a sink, by sink and partition."},
    {kEngineLagSeconds, "gauge",
     "Seconds since the oldest event not yet applied to a sink was committed, by sink and partition."},
    {kEngineSinkHealthy, "gauge", "1 while a sink is running (or paused by an operator), 0 while it backs off or is stopped."},
    {kEnginePartitionsOwned, "gauge", "Partitions of the sink this engine applies now (its leases; all of them with one engine)."},
    {kEngineSinkState, "gauge", "1 for the sink's current state (running, backoff, paused, stopped), 0 for the others."},
    {kEngineAntiEntropyChecked, "counter",
     "Entities the engine's anti-entropy compared with a sink's view (those the sink had already passed)."},
    {kEngineAntiEntropyDifferences, "counter",
     "Entities whose view differed from main storage when the anti-entropy compared them, by sink and kind: "
     "missing, extra, version_mismatch, content_mismatch, ahead."},
    {kEngineAntiEntropyRepaired, "counter",
     "Entities the anti-entropy rewrote in a sink's view from their latest event in main storage."},
    {kEngineAntiEntropyPasses, "counter",
     "Passes of the anti-entropy over every entity of a sink's entity type."},
    {kStorageUp, "gauge", "1 when the last health check reached main storage (MySQL), 0 otherwise."},
    {kEngineBarrierDuration, "histogram",
     "Seconds per durability barrier round: how long events read from storage waited until the MySQL redo "
     "log was flushed past them; one round covers every read of the process that arrived before it."},
    {kEngineBarrierFailures, "counter",
     "Durability barrier rounds that failed (the server went away); the events read are read again."},
    {kEngineHeadLooks, "counter",
     "Times the engine read the head of every partition to find commits no writer announced (one statement "
     "per storage server and entity type)."},
    {kEngineUnannounced, "counter",
     "Partitions whose commits a head look found before (or without) any writer's commit notice: writers "
     "that cannot reach this engine, or notices lost. The engine then looks more often."},
    {kArchiveSegments, "counter", "Segments the archiver wrote and recorded, by entity type."},
    {kArchiveEvents, "counter", "Events the archiver wrote into segments, by entity type."},
    {kArchiveStubbed, "counter",
     "Hot event rows the archiver turned into stubs (bodies cleared, keys kept), by entity type."},
    {kArchiveWritten, "counter", "Bytes of segment objects the archiver wrote to its store, by entity type."},
    {kArchiveWatermark, "gauge",
     "The last archived event_id of each partition: every event at or below it is in a segment."},
    {kArchiveBytes, "gauge", "The size of each partition's segments in the archive's store, in bytes."},
    {kArchiveUnarchivedAge, "gauge",
     "Seconds since the oldest event above each partition's watermark committed (0: none); grows when "
     "archiving is held back (a slow sink) or fails."},
    {kStorageTableBytes, "gauge",
     "The size of each partition's event table (data and indexes) as the storage server estimates it, in bytes; "
     "set by the archiver."},
    {kHttpConnections, "counter", "Connections an HTTP listener accepted, by listener (writer, admin, metrics)."},
    {kHttpConnectionsClosed, "counter",
     "Connections an HTTP listener closed (or its client did), by listener and reason: client, server, "
     "idle_timeout, header_timeout, body_timeout, write_timeout, evicted, refused."},
};

std::vector<std::string> ExportedSeriesNames() {
  std::vector<std::string> out;
  for (const MetricInfo& m : kMetricList) {
    if (m.type == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) out.push_back(std::string(m.name) + suffix);
    } else {
      out.emplace_back(m.name);
    }
  }
  return out;
}

// The collectors added with AddCollector, as one Collectable for the exposer.
class Registry::Collectors : public prometheus::Collectable {
 public:
  void Add(Collector c) {
    std::lock_guard lock(mu_);
    collectors_.push_back(std::move(c));
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<Collector> collectors;
    {
      std::lock_guard lock(mu_);
      collectors = collectors_;
    }
    std::vector<prometheus::MetricFamily> out;
    for (const Collector& c : collectors) {
      for (prometheus::MetricFamily& f : c()) out.push_back(std::move(f));
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Collector> collectors_;
};

Registry::Registry()
    : registry_(std::make_shared<prometheus::Registry>()), collectors_(std::make_shared<Collectors>()) {}

std::vector<std::shared_ptr<prometheus::Collectable>> Registry::collectables() const {
  return {registry_, collectors_};
}

void Registry::AddCollector(Collector collector) { collectors_->Add(std::move(collector)); }

std::string Registry::Text() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : collectors_->Collect()) families.push_back(std::move(f));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

prometheus::Family<prometheus::Counter>& Registry::Counter(std::string_view name) {
  return FamilyOf(mu_, counters_, *registry_, name, prometheus::BuildCounter());
}

prometheus::Family<prometheus::Gauge>& Registry::Gauge(std::string_view name) {
  return FamilyOf(mu_, gauges_, *registry_, name, prometheus::BuildGauge());
}

prometheus::Family<prometheus::Histogram>& Registry::Histogram(std::string_view name) {
  return FamilyOf(mu_, histograms_, *registry_, name, prometheus::BuildHistogram());
}

Registry& UnexportedRegistry() {
  static Registry registry;
  return registry;
}

// ---- writer ----

std::string_view CommandOutcomeName(CommandOutcome o) {
  switch (o) {
    case CommandOutcome::kApplied: return "applied";
    case CommandOutcome::kReplayed: return "replayed";
    case CommandOutcome::kRejected: return "rejected";
    case CommandOutcome::kUnavailable: return "unavailable";
    case CommandOutcome::kError: return "error";
  }
  return "error";
}

CommandOutcome OutcomeOfStatus(int http_status, bool replayed) {
  if (http_status >= 200 && http_status < 300) {
    return replayed ? CommandOutcome::kReplayed : CommandOutcome::kApplied;
  }
  if (http_status == 503) return CommandOutcome::kUnavailable;
  if (http_status >= 400 && http_status < 500) return CommandOutcome::kRejected;
  return CommandOutcome::kError;
}

ConflictKey ConflictKeyOf(std::string_view key) {
  if (key == "PRIMARY") return ConflictKey::kPrimary;
  if (key == "uk_entity_version") return ConflictKey::kEntityVersion;
  if (key == "uk_entity_command") return ConflictKey::kEntityCommand;
  return ConflictKey::kOther;
}

CommandMetrics::CommandMetrics(Registry& r, const std::string& type, const std::string& command) {
  auto& outcomes = r.Counter(kWriterCommands);
  for (size_t i = 0; i < kCommandOutcomes; ++i) {
    outcomes_[i] = &outcomes.Add({{"type", type},
                                  {"command", command},
                                  {"outcome", std::string(CommandOutcomeName(static_cast<CommandOutcome>(i)))}});
  }
  replays_ = &r.Counter(kWriterReplays).Add({{"type", type}, {"command", command}});
  latency_ = &r.Histogram(kWriterCommandDuration).Add({{"type", type}, {"command", command}}, kLatencyBuckets);
}

WriterMetrics::WriterMetrics(Registry& r)
    : registry_(r), transaction_partitions_(&r.Histogram(kWriterTransactionPartitions).Add({}, kSizeBuckets)) {}

WriterTypeMetrics::WriterTypeMetrics(Registry& r, const std::string& type) {
  batch_events_ = &r.Histogram(kWriterBatchEvents).Add({{"type", type}}, kSizeBuckets);
  static constexpr std::array<std::string_view, kConflictKeys> kKeys = {
      "PRIMARY", "uk_entity_version", "uk_entity_command", "stale_refusal", "other"};
  auto& conflicts = r.Counter(kWriterConflicts);
  for (size_t i = 0; i < kConflictKeys; ++i) {
    conflicts_[i] = &conflicts.Add({{"type", type}, {"key", std::string(kKeys[i])}});
  }
  auto& forwarded = r.Counter(kWriterForwarded);
  forwarded_ = &forwarded.Add({{"type", type}, {"outcome", "forwarded"}});
  handled_here_ = &forwarded.Add({{"type", type}, {"outcome", "handled_here"}});
}

std::string_view PushFailureName(PushFailure f) {
  switch (f) {
    case PushFailure::kUnavailable: return "unavailable";
    case PushFailure::kTimeout: return "timeout";
    case PushFailure::kRejected: return "rejected";
    case PushFailure::kError: return "error";
  }
  return "error";
}

PushMetrics::PushMetrics(Registry& r, const std::string& sink) {
  pushed_ = &r.Counter(kWriterPushed).Add({{"sink", sink}});
  latency_ = &r.Histogram(kWriterPushDuration).Add({{"sink", sink}}, kLatencyBuckets);
  wait_ = &r.Histogram(kWriterPushWait).Add({{"sink", sink}}, kLatencyBuckets);
  auto& failures = r.Counter(kWriterPushFailures);
  for (size_t i = 0; i < kPushFailures; ++i) {
    failures_[i] =
        &failures.Add({{"sink", sink}, {"reason", std::string(PushFailureName(static_cast<PushFailure>(i)))}});
  }
}

CommandMetrics& WriterMetrics::ForCommand(const std::string& type, const std::string& command) {
  std::lock_guard lock(mu_);
  auto& slot = commands_[type + '\0' + command];
  if (!slot) slot = std::make_unique<CommandMetrics>(registry_, type, command);
  return *slot;
}

WriterTypeMetrics& WriterMetrics::ForType(const std::string& type) {
  std::lock_guard lock(mu_);
  auto& slot = types_[type];
  if (!slot) slot = std::make_unique<WriterTypeMetrics>(registry_, type);
  return *slot;
}

PushMetrics& WriterMetrics::ForPush(const std::string& sink) {
  std::lock_guard lock(mu_);
  auto& slot = pushes_[sink];
  if (!slot) slot = std::make_unique<PushMetrics>(registry_, sink);
  return *slot;
}

void WriterMetrics::PushResult(const std::string& sink, bool ok, double seconds, size_t events, PushFailure why) {
  PushMetrics& m = ForPush(sink);
  if (ok) {
    m.Succeeded(events, seconds);
  } else {
    m.Failed(why, seconds);
  }
}

// ---- engine ----

std::string_view DifferenceKindLabel(DifferenceKind k) {
  switch (k) {
    case DifferenceKind::kMissing: return "missing";
    case DifferenceKind::kExtra: return "extra";
    case DifferenceKind::kVersionMismatch: return "version_mismatch";
    case DifferenceKind::kContentMismatch: return "content_mismatch";
    case DifferenceKind::kAhead: return "ahead";
  }
  return "missing";
}

std::string_view RetryClassName(RetryClass c) {
  switch (c) {
    case RetryClass::kSinkUnavailable: return "sink_unavailable";
    case RetryClass::kSinkAborted: return "sink_aborted";
    case RetryClass::kStorageUnavailable: return "storage_unavailable";
  }
  return "sink_unavailable";
}

SinkMetrics::SinkMetrics(Registry& r, const std::string& sink, uint32_t partitions) {
  const prometheus::Labels labels = {{"sink", sink}};
  // A scrape collects families in the order they were registered, one after
  // the other while the engine runs. The outcomes are registered before
  // `read` so that a scrape reads them first: an event is counted as read
  // before it can be counted as settled, so every single scrape then shows
  // applied + stale + dead_lettered <= read.
  applied_ = &r.Counter(kEngineApplied).Add(labels);
  stale_ = &r.Counter(kEngineStale).Add(labels);
  dead_lettered_ = &r.Counter(kEngineDeadLettered).Add(labels);
  read_ = &r.Counter(kEngineRead).Add(labels);
  apply_events_ = &r.Histogram(kEngineApplyEvents).Add(labels, kSizeBuckets);
  apply_latency_ = &r.Histogram(kEngineApplyDuration).Add(labels, kLatencyBuckets);
  auto& retries = r.Counter(kEngineRetries);
  for (size_t i = 0; i < kRetryClasses; ++i) {
    retries_[i] =
        &retries.Add({{"sink", sink}, {"error_class", std::string(RetryClassName(static_cast<RetryClass>(i)))}});
  }
  gaps_ = &r.Counter(kEngineGaps).Add(labels);
  flushes_ok_ = &r.Counter(kEngineFlushes).Add({{"sink", sink}, {"result", "ok"}});
  flushes_failed_ = &r.Counter(kEngineFlushes).Add({{"sink", sink}, {"result", "error"}});
  healthy_ = &r.Gauge(kEngineSinkHealthy).Add(labels);
  owned_ = &r.Gauge(kEnginePartitionsOwned).Add(labels);
  auto& state = r.Gauge(kEngineSinkState);
  for (size_t i = 0; i < kSinkStates; ++i) {
    state_[i] = &state.Add({{"sink", sink}, {"state", std::string(SinkStateName(static_cast<SinkState>(i)))}});
  }
  for (uint32_t p = 0; p < partitions; ++p) {
    const prometheus::Labels lp = {{"sink", sink}, {"partition", std::to_string(p)}};
    lag_events_.push_back(&r.Gauge(kEngineLagEvents).Add(lp));
    lag_seconds_.push_back(&r.Gauge(kEngineLagSeconds).Add(lp));
  }
  checked_ = &r.Counter(kEngineAntiEntropyChecked).Add(labels);
  auto& differences = r.Counter(kEngineAntiEntropyDifferences);
  for (size_t i = 0; i < kDifferenceKinds; ++i) {
    differences_[i] = &differences.Add(
        {{"sink", sink}, {"kind", std::string(DifferenceKindLabel(static_cast<DifferenceKind>(i)))}});
  }
  repaired_ = &r.Counter(kEngineAntiEntropyRepaired).Add(labels);
  passes_ = &r.Counter(kEngineAntiEntropyPasses).Add(labels);
  SetState(SinkState::kRunning);
}

void SinkMetrics::SetState(SinkState s) {
  for (size_t i = 0; i < kSinkStates; ++i) state_[i]->Set(i == static_cast<size_t>(s) ? 1 : 0);
  healthy_->Set(SinkStateHealthy(s) ? 1 : 0);
}

void SinkMetrics::SetLag(uint32_t partition, uint64_t events, double seconds) {
  if (partition >= lag_events_.size()) return;
  lag_events_[partition]->Set(static_cast<double>(events));
  lag_seconds_[partition]->Set(seconds);
}

StorageMetrics::StorageMetrics(Registry& r) { up_ = &r.Gauge(kStorageUp).Add({}); }

DurabilityBarrierMetrics::DurabilityBarrierMetrics(Registry& r) {
  duration_ = &r.Histogram(kEngineBarrierDuration).Add({}, kLatencyBuckets);
  failures_ = &r.Counter(kEngineBarrierFailures).Add({});
}

HeadWatcherMetrics::HeadWatcherMetrics(Registry& r) {
  looks_ = &r.Counter(kEngineHeadLooks).Add({});
  unannounced_ = &r.Counter(kEngineUnannounced).Add({});
}

ArchiveMetrics::ArchiveMetrics(Registry& r, const std::string& type, uint32_t partitions) {
  const prometheus::Labels labels{{"entity_type", type}};
  segments_ = &r.Counter(kArchiveSegments).Add(labels);
  events_ = &r.Counter(kArchiveEvents).Add(labels);
  stubbed_ = &r.Counter(kArchiveStubbed).Add(labels);
  written_ = &r.Counter(kArchiveWritten).Add(labels);
  for (uint32_t p = 0; p < partitions; ++p) {
    const prometheus::Labels at{{"entity_type", type}, {"partition", std::to_string(p)}};
    watermark_.push_back(&r.Gauge(kArchiveWatermark).Add(at));
    archive_bytes_.push_back(&r.Gauge(kArchiveBytes).Add(at));
    unarchived_age_.push_back(&r.Gauge(kArchiveUnarchivedAge).Add(at));
    table_bytes_.push_back(&r.Gauge(kStorageTableBytes).Add(at));
  }
}

HttpListenerMetrics::HttpListenerMetrics(Registry& r, const std::string& listener) {
  accepted_ = &r.Counter(kHttpConnections).Add({{"listener", listener}});
  auto& closed = r.Counter(kHttpConnectionsClosed);
  for (size_t i = 0; i < http::kCloseReasons; ++i) {
    const auto reason = static_cast<http::CloseReason>(i);
    closed_[i] = &closed.Add({{"listener", listener}, {"reason", std::string(http::CloseReasonName(reason))}});
  }
}

void HttpListenerMetrics::Attach(http::ServerOptions& options) {
  options.on_accept = [this] { Accepted(); };
  options.on_close = [this](http::CloseReason reason) { Closed(reason); };
}

}  // namespace sluice::metrics
