#include "engine/lease_keeper.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "core/log.h"
#include "core/thread_name.h"
#include "engine/assignment.h"

namespace sluice::engine {

namespace {

constexpr const char* kGroup = "engine";

std::string RandomInstance() {
  std::random_device rd;
  char buf[33];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::string PartitionsText(const std::map<uint32_t, uint64_t>& m) {
  std::string out;
  for (const auto& [p, token] : m) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

}  // namespace

LeaseKeeper::LeaseKeeper(Options options, std::vector<SinkRunner*> runners)
    : options_(std::move(options)),
      runners_(std::move(runners)),
      instance_(RandomInstance()),
      leases_(options_.storage->OpenLeases()) {}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Start() {
  if (Status st = Round(); !st.ok()) {
    LogRateLimited(LogLevel::kWarn, "engine.leases", "engine: lease round failed: " + st.message());
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  thread_ = StartNamedThread("sluice-lease", [this] { Loop(); });
}

void LeaseKeeper::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::Leave() {
  if (failed_) return;  // the twin under our name holds them
  for (SinkRunner* r : runners_) {
    auto& held = held_[r->scope()];
    if (Status st = leases_->Release(r->scope(), r->entity(), held, options_.member); !st.ok()) {
      Log(LogLevel::kWarn, "engine: releasing the leases of sink " + r->name() +
                               " failed (they expire by themselves): " + st.message());
    }
    held.clear();
  }
  (void)leases_->Leave(kGroup, options_.member);
}

std::optional<std::string> LeaseKeeper::Failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

void LeaseKeeper::Loop() {
  const auto every = std::max(options_.ttl / 4, std::chrono::milliseconds(1));
  const auto validity = options_.ttl * 2 / 3;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, every, [this] { return stopping_; });
      if (stopping_ || failed_) return;
    }
    Status st = Round();
    if (st.ok()) continue;
    if (st.code() == StatusCode::kFailedPrecondition) {
      Log(LogLevel::kError, "engine: " + st.message());
      Disown();
      {
        std::lock_guard lock(mu_);
        failed_ = st.message();
      }
      if (options_.on_failure) options_.on_failure(st.message());
      return;
    }
    LogRateLimited(LogLevel::kWarn, "engine.leases", "engine: lease round failed: " + st.message());
    if (std::chrono::steady_clock::now() - last_ok_ > validity) Disown();
  }
}

void LeaseKeeper::Disown() {
  // Their leases may be another engine's by now; what the runners hold is
  // flushed and saved fenced (refused where taken).
  for (SinkRunner* r : runners_) r->SetOwned({}, std::chrono::steady_clock::now());
  held_.clear();
}

Status LeaseKeeper::Round() {
  const auto began = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::string before, leases_->Heartbeat(kGroup, options_.member, "", instance_));
  if (beats_++ > 0 && before != instance_) {
    return FailedPrecondition("another engine process runs under the name '" + options_.member +
                              "' (engine.id): each engine needs its own; this one stops applying");
  }
  ASSIGN_OR_RETURN(auto members, leases_->Members(kGroup, options_.ttl));
  std::vector<std::string> names;
  for (const auto& m : members) names.push_back(m.member);
  if (std::find(names.begin(), names.end(), options_.member) == names.end()) names.push_back(options_.member);

  // Per runner: what it should own, and the leases to give back once it let go.
  struct Step {
    SinkRunner* runner;
    std::set<uint32_t> want;
  };
  std::vector<Step> steps;
  for (SinkRunner* r : runners_) {
    Step step{r, {}};
    for (const auto& [p, member] : Assign(r->scope(), r->entity(), r->partitions(), names)) {
      if (member == options_.member) step.want.insert(p);
    }
    auto& held = held_[r->scope()];
    const auto applying = r->owned();
    // Held leases of partitions neither wanted nor applied any more: given back.
    std::map<uint32_t, uint64_t> release;
    for (const auto& [p, token] : held) {
      if (!step.want.count(p) && !applying.count(p)) release[p] = token;
    }
    if (!release.empty()) {
      RETURN_IF_ERROR(leases_->Release(r->scope(), r->entity(), release, options_.member));
      for (const auto& [p, token] : release) held.erase(p);
    }
    // Renewed: what it wants, and what it holds and still applies (a
    // partition moving away keeps its lease until the runner let go).
    std::vector<uint32_t> ask(step.want.begin(), step.want.end());
    for (const auto& [p, token] : held) {
      if (!step.want.count(p)) ask.push_back(p);
    }
    std::sort(ask.begin(), ask.end());
    ASSIGN_OR_RETURN(auto got, leases_->Acquire(r->scope(), r->entity(), ask, options_.member, options_.ttl, held));
    for (const auto& [p, token] : got) {
      const auto was = held.find(p);
      if (was == held.end() || was->second != token) {
        Log(LogLevel::kInfo, "engine " + options_.member + ": sink " + r->name() + " takes partition " + std::to_string(p) + " (token " +
                                 std::to_string(token) + ")");
      }
    }
    held = got;
    steps.push_back(std::move(step));
  }
  last_ok_ = began;
  const auto valid_until = began + options_.ttl * 2 / 3;
  bool letting_go = false;
  for (const Step& step : steps) {
    std::map<uint32_t, uint64_t> give;
    for (const auto& [p, token] : held_[step.runner->scope()]) {
      if (step.want.count(p)) give[p] = token;
      else letting_go = true;
    }
    step.runner->SetOwned(std::move(give), valid_until);
  }
  if (!letting_go) return Status::Ok();
  // A partition moving away is released as soon as its runner let go
  // (usually within a chunk), not a round later: the next owner takes it at
  // its own next round.
  const auto deadline = began + options_.ttl / 8;
  for (const Step& step : steps) {
    auto& held = held_[step.runner->scope()];
    std::map<uint32_t, uint64_t> release;
    for (;;) {
      const auto applying = step.runner->owned();
      release.clear();
      bool waiting = false;
      for (const auto& [p, token] : held) {
        if (step.want.count(p)) continue;
        if (applying.count(p)) {
          waiting = true;
        } else {
          release[p] = token;
        }
      }
      if (!waiting || std::chrono::steady_clock::now() >= deadline) break;
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(5), [this] { return stopping_; })) break;
    }
    if (release.empty()) continue;
    RETURN_IF_ERROR(leases_->Release(step.runner->scope(), step.runner->entity(), release, options_.member));
    Log(LogLevel::kInfo, "engine " + options_.member + ": sink " + step.runner->name() + " hands partition" +
                             (release.size() > 1 ? "s " : " ") + PartitionsText(release) + " over");
    for (const auto& [p, token] : release) held.erase(p);
  }
  return Status::Ok();
}

}  // namespace sluice::engine
