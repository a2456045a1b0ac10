#include "engine/anti_entropy.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "core/log.h"
#include "core/thread_name.h"
#include "engine/event_reader.h"
#include "sql/mariadb_tables.h"

namespace sluice::engine {

using connectors::ChangeEvent;
using connectors::Difference;
using metrics::DifferenceKind;

EntityWalk::EntityWalk(uint32_t partitions) : partitions_(std::max<uint32_t>(1, partitions)) {}

bool EntityWalk::Advance(size_t read, size_t limit, std::string_view last_id) {
  if (read >= limit && read > 0) {
    after_.assign(last_id);
    return false;
  }
  after_.clear();
  if (++partition_ < partitions_) return false;
  partition_ = 0;
  ++passes_;
  return true;
}

std::chrono::nanoseconds StepInterval(uint32_t rate, uint32_t batch) {
  const uint64_t r = std::max<uint32_t>(1, rate);
  const uint64_t b = std::max<uint32_t>(1, batch);
  return std::chrono::nanoseconds(std::max<uint64_t>(1, b * 1'000'000'000ULL / r));
}

namespace {

DifferenceKind KindOf(Difference::Kind k) {
  switch (k) {
    case Difference::Kind::kMissing: return DifferenceKind::kMissing;
    case Difference::Kind::kExtra: return DifferenceKind::kExtra;
    case Difference::Kind::kVersionMismatch: return DifferenceKind::kVersionMismatch;
    case Difference::Kind::kContentMismatch: return DifferenceKind::kContentMismatch;
    // Only logs report these, and logs have no entity checks.
    case Difference::Kind::kPhantom: return DifferenceKind::kExtra;
    case Difference::Kind::kDuplicate: return DifferenceKind::kContentMismatch;
    case Difference::Kind::kOutOfOrder: return DifferenceKind::kContentMismatch;
  }
  return DifferenceKind::kContentMismatch;
}

}  // namespace

Result<StepReport> CompareAndRepair(connectors::Sink& sink, std::span<const ChangeEvent> latest,
                                    const std::map<uint32_t, uint64_t>& offsets,
                                    const std::function<Status()>& barrier, const DeadLetterLookup& dead_letters) {
  StepReport report;
  std::vector<connectors::EntitySnapshot> truth;
  std::unordered_map<std::string_view, const ChangeEvent*> by_id;
  for (const ChangeEvent& e : latest) {
    const auto offset = offsets.find(e.partition);
    // The sink has not reached this event yet: that is lag, not a difference.
    if (offset == offsets.end() || e.event_id > offset->second) continue;
    truth.push_back(connectors::EntitySnapshot{e.entity_id, e.version, e.deleted, e.deleted ? "" : e.state});
    by_id.emplace(e.entity_id, &e);
  }
  report.checked = truth.size();
  if (truth.empty()) return report;
  std::vector<Difference> diffs;
  RETURN_IF_ERROR(sink.VerifyEntities(truth, diffs));
  if (diffs.empty()) return report;

  // A dead-lettered latest event is a difference sluice deadletters owns.
  std::vector<std::pair<uint32_t, uint64_t>> differing;
  for (const Difference& d : diffs) {
    if (const auto it = by_id.find(d.entity_id); it != by_id.end()) {
      differing.emplace_back(it->second->partition, it->second->event_id);
    }
  }
  ASSIGN_OR_RETURN(const auto dead, dead_letters(differing));

  std::vector<ChangeEvent> repairs;
  for (const Difference& d : diffs) {
    const auto it = by_id.find(d.entity_id);
    if (it == by_id.end()) continue;  // not asked for: the sink broke its contract; ignore it
    const ChangeEvent& e = *it->second;
    if (dead.contains({e.partition, e.event_id})) continue;
    if (d.view_version && *d.view_version > e.version) {
      report.newer.push_back(StepReport::Newer{e.entity_id, e.partition, *d.view_version});
      continue;
    }
    ++report.differences[static_cast<size_t>(KindOf(d.kind))];
    repairs.push_back(e);
    by_id.erase(it);  // one repair per entity, whatever the sink reported
  }
  if (repairs.empty()) return report;

  // What goes to the sink must be durable (DESIGN I5), even though the
  // sink's offset says it has seen these events before.
  if (Status st = barrier(); !st.ok()) {
    report.unrepaired = repairs.size();
    report.repair_error = "the durability barrier failed: " + st.message();
    return report;
  }
  const connectors::ApplyResult r = sink.Repair(repairs, connectors::RepairGuard::kNotOlder);
  if (!r.status.ok() || r.results.size() != repairs.size()) {
    report.unrepaired = repairs.size();
    report.repair_error = r.status.ok() ? "the sink returned " + std::to_string(r.results.size()) + " results for " +
                                              std::to_string(repairs.size()) + " repairs"
                                        : r.status.message();
    return report;
  }
  for (size_t i = 0; i < repairs.size(); ++i) {
    switch (r.results[i].outcome) {
      case connectors::Outcome::kApplied:
        ++report.repaired;
        break;
      case connectors::Outcome::kStale:
        ++report.unrepaired;
        if (report.unrepaired_example.empty()) {
          report.unrepaired_example = "entity " + repairs[i].entity_id + ": the view kept a version at least as new";
        }
        break;
      case connectors::Outcome::kRejected:
        ++report.unrepaired;
        if (report.unrepaired_example.empty()) {
          report.unrepaired_example = "entity " + repairs[i].entity_id + ": refused: " + r.results[i].reason;
        }
        break;
    }
  }
  return report;
}

AntiEntropy::AntiEntropy(Options options, Compare compare) : options_(std::move(options)), compare_(std::move(compare)) {}

AntiEntropy::~AntiEntropy() { Stop(); }

void AntiEntropy::Start() { thread_ = StartNamedThread("sluice-entropy", [this] { Run(); }); }

void AntiEntropy::RequestStop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void AntiEntropy::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

void AntiEntropy::Run() {
  const auto interval = StepInterval(options_.settings.rate, options_.settings.batch);
  // After a failure, no sooner than a second later: a fast rate must not
  // turn into a busy loop against a server that is down.
  const auto after_failure = std::max<std::chrono::nanoseconds>(interval, std::chrono::seconds(1));
  EntityWalk walk(options_.partitions);
  auto next = std::chrono::steady_clock::now() + interval;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      if (cv_.wait_until(lock, next, [this] { return stopping_; })) return;
    }
    const auto started = std::chrono::steady_clock::now();
    next = started + (Step(walk) ? interval : after_failure);
  }
}

bool AntiEntropy::Step(EntityWalk& walk) {
  const std::string site = "engine.anti_entropy." + options_.sink;
  if (!log_) {
    log_ = options_.storage ? options_.storage->OpenEventLog() : sql::MariaDbStorage(options_.mysql).OpenEventLog();
  }
  const uint32_t batch = std::max<uint32_t>(1, options_.settings.batch);
  // A session that cannot be opened fails the read: logged below, retried next step.
  auto latest = ReadLatestEventsAfter(*log_, options_.entity, walk.partition(), walk.after(), batch);
  if (!latest.ok()) {
    LogRateLimited(LogLevel::kWarn, site,
                   "engine: sink " + options_.sink + ": anti-entropy cannot read main storage (will retry): " +
                       latest.status().message());
    return false;
  }
  const size_t read = latest->size();
  const std::string last_id = read > 0 ? latest->back().entity_id : std::string();
  Result<StepReport> report = compare_(std::move(latest).value());
  if (!report.ok()) {
    // Stopping refuses the step; that is no news.
    {
      std::lock_guard lock(mu_);
      if (stopping_) return false;
    }
    LogRateLimited(LogLevel::kWarn, site,
                   "engine: sink " + options_.sink + ": anti-entropy cannot compare the view (will retry): " +
                       report.status().message());
    return false;
  }
  if (report->skipped) return true;  // paused or backing off: try the same entities again later
  if (walk.Advance(read, batch, last_id)) options_.metrics->PassCompleted();
  Report(*report);
  if (!report->newer.empty()) CheckNewer(report->newer);
  return true;
}

void AntiEntropy::Report(const StepReport& report) {
  metrics::SinkMetrics& m = *options_.metrics;
  m.EntitiesChecked(report.checked);
  size_t found = 0;
  std::string kinds;
  for (size_t k = 0; k < metrics::kDifferenceKinds; ++k) {
    m.DifferencesFound(static_cast<DifferenceKind>(k), report.differences[k]);
    found += report.differences[k];
    if (report.differences[k] > 0) {
      kinds += (kinds.empty() ? "" : ", ") + std::string(metrics::DifferenceKindLabel(static_cast<DifferenceKind>(k))) +
               "=" + std::to_string(report.differences[k]);
    }
  }
  m.Repaired(report.repaired);
  if (found == 0) return;
  std::string text = "engine: sink " + options_.sink + ": anti-entropy found " + std::to_string(found) +
                     " entities whose view differed from main storage (" + kinds + ") and repaired " +
                     std::to_string(report.repaired) +
                     "; something changed the view behind sluice's back (a server restarted without its data, "
                     "evicted or expired keys, a manual edit)";
  if (report.unrepaired > 0) {
    text += "; " + std::to_string(report.unrepaired) + " not repaired (" +
            (report.repair_error.empty() ? report.unrepaired_example : report.repair_error) +
            "): `sluice verify --repair --sink " + options_.sink + "` lists what remains";
  }
  LogRateLimited(LogLevel::kWarn, "engine.anti_entropy.found." + options_.sink, text);
}

void AntiEntropy::CheckNewer(const std::vector<StepReport::Newer>& newer) {
  std::map<uint32_t, std::vector<std::string>> ids;
  for (const auto& n : newer) ids[n.partition].push_back(n.entity_id);
  std::unordered_map<std::string, uint64_t> storage;
  for (const auto& [partition, list] : ids) {
    auto latest = log_->LatestVersions(options_.entity, partition, list);
    if (!latest.ok()) {
      LogRateLimited(LogLevel::kWarn, "engine.anti_entropy." + options_.sink,
                     "engine: sink " + options_.sink + ": anti-entropy cannot read main storage: " +
                         latest.status().message());
      return;
    }
    storage.insert(latest->begin(), latest->end());
  }
  size_t ahead = 0;
  std::string example;
  for (const auto& n : newer) {
    const auto it = storage.find(n.entity_id);
    const uint64_t stored = it == storage.end() ? 0 : it->second;
    if (stored >= n.view_version) continue;  // storage moved on after the step read it
    if (ahead++ == 0) {
      example = n.entity_id + ": view " + std::to_string(n.view_version) + ", storage " + std::to_string(stored);
    }
  }
  options_.metrics->DifferencesFound(DifferenceKind::kAhead, ahead);
  if (ahead == 0) return;
  LogRateLimited(LogLevel::kWarn, "engine.anti_entropy.ahead." + options_.sink,
                 "engine: sink " + options_.sink + ": the view holds newer versions than main storage for " +
                     std::to_string(ahead) + " entities (e.g. " + example +
                     "): main storage lost events the view had (a crash with engine.durability_barrier off or weak "
                     "MySQL durability), or something else writes the view; `sluice verify --repair --sink " +
                     options_.sink + "` overwrites them from storage");
}

}  // namespace sluice::engine
