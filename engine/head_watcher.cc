#include "engine/head_watcher.h"

#include <algorithm>
#include <numeric>

#include "core/log.h"
#include "core/thread_name.h"

namespace sluice::engine {

HeadWatcher::HeadWatcher(Options options, std::vector<SinkRunner*> runners)
    : options_(std::move(options)), runners_(std::move(runners)) {}

HeadWatcher::~HeadWatcher() { Stop(); }

void HeadWatcher::Start() {
  thread_ = StartNamedThread("sluice-heads", [this] { Run(); });
}

void HeadWatcher::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HeadWatcher::Announce(const std::string& type, uint32_t partition, uint64_t head, bool trusted) {
  // A notice may come from anywhere (a datagram): only what is watched is kept.
  const auto watched = options_.partitions.find(type);
  if (watched == options_.partitions.end() || partition >= watched->second) return;
  {
    std::lock_guard lock(mu_);
    if (trusted) {
      uint64_t& announced = announced_[type][partition];
      if (head <= announced) return;  // the runners were woken for it already
      announced = head;
      uint64_t& known = known_[type][partition];
      known = std::max(known, head);
    } else {
      // Not taken as a head (nor as the dedup of the trusted notices): it
      // counts as an announcement only up to what the next look confirms.
      uint64_t& noticed = noticed_[type][partition];
      noticed = std::max(noticed, head);
    }
  }
  WakeRunners(type, partition, head);  // a runner that read past `head` already ignores it
}

std::map<uint32_t, uint64_t> HeadWatcher::heads(const std::string& type) const {
  std::lock_guard lock(mu_);
  const auto it = known_.find(type);
  return looked_.count(type) && it != known_.end() ? it->second : std::map<uint32_t, uint64_t>{};
}

bool HeadWatcher::looked() const {
  std::lock_guard lock(mu_);
  return looked_.size() == options_.partitions.size();
}

void HeadWatcher::WakeRunners(const std::string& type, uint32_t partition, uint64_t head) {
  for (SinkRunner* r : runners_) {
    if (r->entity() == type) r->Wake(partition, head);
  }
}

Result<bool> HeadWatcher::Look(sql::EventLog& log) {
  uint64_t late = 0;
  Status failed = Status::Ok();
  for (const auto& [type, count] : options_.partitions) {
    std::vector<uint32_t> all(count);
    std::iota(all.begin(), all.end(), 0u);
    // The datagrams' notices as they were before the read: one that comes
    // while the read runs may announce a commit the read just missed (a
    // look over many partitions takes a while), so only older ones are
    // held to what the read found.
    std::map<uint32_t, uint64_t> noticed_before;
    {
      std::lock_guard lock(mu_);
      noticed_before = noticed_[type];
    }
    // One type failing (its server is down) does not keep the others unlooked at.
    auto heads = log.Heads(type, all);
    if (!heads.ok()) {
      if (failed.ok()) failed = heads.status().WithContext(type);
      continue;
    }
    std::vector<std::pair<uint32_t, uint64_t>> moved;
    {
      std::lock_guard lock(mu_);
      auto& known = known_[type];
      auto& announced = announced_[type];
      auto& noticed = noticed_[type];
      auto& pending = unannounced_[type];
      const bool first = !looked_.count(type);
      const auto announced_to = [&](uint32_t p) { return std::max(announced[p], noticed[p]); };
      // What the last look found beyond the notices and no notice announced since.
      for (const auto& [p, head] : pending) {
        if (announced_to(p) < head) {
          ++late;
          announced[p] = head;  // counted once
        }
      }
      pending.clear();
      for (const auto& [p, head] : *heads) {
        // The first look sets the baseline: what was committed before the engine started.
        if (first) announced[p] = std::max(announced[p], head);
        if (head > announced_to(p)) pending[p] = head;
        // A datagram's notice announces no further than what MySQL held
        // when it came (one that came during this read: at the next look).
        if (noticed[p] > head) {
          const auto before = noticed_before.find(p);
          if (before != noticed_before.end() && before->second >= noticed[p]) noticed[p] = head;
        }
        if (head > known[p]) {
          known[p] = head;
          moved.emplace_back(p, head);
        }
      }
      looked_.insert(type);
    }
    for (const auto& [p, head] : moved) WakeRunners(type, p, head);
  }
  if (options_.metrics) {
    options_.metrics->Look();
    if (late > 0) options_.metrics->Unannounced(late);
  }
  if (!failed.ok()) return failed;
  return late > 0;
}

void HeadWatcher::Run() {
  std::unique_ptr<sql::EventLog> log = options_.storage->OpenEventLog();
  std::chrono::milliseconds interval = options_.fast;
  for (;;) {
    Result<bool> late = Look(*log);
    if (!late.ok()) {
      LogRateLimited(LogLevel::kWarn, "engine.heads", "engine: cannot read the partitions' heads: " + late.status().message());
    }
    interval = late.ok() && *late ? options_.fast : std::min(interval * 2, options_.slowest);
    std::unique_lock lock(mu_);
    if (cv_.wait_for(lock, interval, [this] { return stopping_; })) return;
  }
}

}  // namespace sluice::engine
