#include "engine/lease_keeper.h"

#include <algorithm>
#include <set>

#include "core/log.h"
#include "core/thread_name.h"
#include "core/assignment.h"

namespace sluice::engine {

namespace {

constexpr const char* kGroup = sql::kEngineMembers;

std::string PartitionsText(const std::map<uint32_t, uint64_t>& m) {
  std::string out;
  for (const auto& [p, token] : m) out += (out.empty() ? "" : ",") + std::to_string(p);
  return out;
}

}  // namespace

LeaseKeeper::LeaseKeeper(Options options, std::vector<SinkRunner*> runners)
    : options_(std::move(options)),
      runners_(std::move(runners)),
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
  if (failed_ || !claimed_) return;  // the other process under our name holds them
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
  excluded_at_.clear();
}

Status LeaseKeeper::Round() {
  const auto began = std::chrono::steady_clock::now();
  if (!claimed_) {
    // Only one process runs under a name: it holds the name's lock on its
    // lease session. A former process that died lost it with its session.
    if (first_try_ == std::chrono::steady_clock::time_point{}) first_try_ = began;
    ASSIGN_OR_RETURN(claimed_, leases_->Claim(kGroup, options_.member));
    if (!claimed_) {
      if (began - first_try_ < options_.ttl) {
        LogRateLimited(LogLevel::kWarn, "engine.leases.claim",
                       "engine: another process runs under the name '" + options_.member +
                           "' (engine.id); waiting for it to stop");
        return Status::Ok();
      }
      return FailedPrecondition("another engine process runs under the name '" + options_.member +
                                "' (engine.id): each engine needs its own; this one stops");
    }
  }
  RETURN_IF_ERROR(leases_->Heartbeat(kGroup, options_.member, options_.address));
  ASSIGN_OR_RETURN(auto members, leases_->Members(kGroup, options_.ttl));
  std::vector<std::string> names;
  for (const auto& m : members) names.push_back(m.member);
  if (std::find(names.begin(), names.end(), options_.member) == names.end()) names.push_back(options_.member);

  // Per runner: what it should own. A lease is given back only once the
  // runner took a SetOwned without its partition (its generation) and let
  // go of it: until then the runner may still apply it.
  struct Step {
    SinkRunner* runner;
    std::set<uint32_t> want;
  };
  std::vector<Step> steps;
  // Main answered: who runs is known. Each sink's leases are renewed on the
  // servers of its partitions, and a sink whose server fails is left out
  // of this round while the others go on.
  last_ok_ = began;
  const auto validity = options_.ttl * 2 / 3;
  Status failed = Status::Ok();
  for (SinkRunner* r : runners_) {
    Step step{r, {}};
    if (!r->stopped()) {  // a stopped sink applies nothing: its leases go
      for (const auto& [p, member] : Assign(r->scope(), r->entity(), r->partitions(), names)) {
        if (member == options_.member) step.want.insert(p);
      }
    }
    const Status renewed = [&]() -> Status {
      RETURN_IF_ERROR(ReleaseLetGo(*r, step.want));
      auto& held = held_[r->scope()];
      // Renewed: what it wants, and what it holds and may still apply.
      std::vector<uint32_t> ask(step.want.begin(), step.want.end());
      for (const auto& [p, token] : held) {
        if (!step.want.count(p)) ask.push_back(p);
      }
      std::sort(ask.begin(), ask.end());
      ASSIGN_OR_RETURN(auto got, leases_->Acquire(r->scope(), r->entity(), ask, options_.member, options_.ttl, held));
      for (const auto& [p, token] : got) {
        const auto was = held.find(p);
        if (was == held.end() || was->second != token) {
          Log(LogLevel::kInfo, "engine " + options_.member + ": sink " + r->name() + " takes partition " +
                                   std::to_string(p) + " (token " + std::to_string(token) + ")");
        }
      }
      // Held and not renewed: its lease expired (this engine stalled past
      // the TTL) and another engine took it.
      std::map<uint32_t, uint64_t> lost;
      for (const auto& [p, token] : held) {
        if (!got.count(p)) lost[p] = token;
      }
      if (!lost.empty()) {
        Log(LogLevel::kWarn, "engine " + options_.member + ": sink " + r->name() + " lost partition" +
                                 (lost.size() > 1 ? "s " : " ") + PartitionsText(lost) +
                                 " to another engine (lease lost: not renewed within its TTL)");
      }
      held = got;
      return Status::Ok();
    }();
    if (!renewed.ok()) {
      // Not renewed: the runner applies under the validity of its last
      // good round and stops by itself when that lapses; past it, its
      // leases are let go here too (taken again, under new tokens, once
      // the server answers).
      if (failed.ok()) failed = Unavailable("sink " + r->name() + ": " + renewed.message());
      if (began - renewed_at_[r->scope()] > validity) {
        r->SetOwned({}, std::chrono::steady_clock::now());
        held_[r->scope()].clear();
        excluded_at_[r->scope()].clear();
      }
      continue;
    }
    renewed_at_[r->scope()] = began;
    steps.push_back(std::move(step));
  }
  const auto valid_until = began + validity;
  bool letting_go = false;
  for (const Step& step : steps) {
    std::map<uint32_t, uint64_t> give;
    auto& excluded = excluded_at_[step.runner->scope()];
    std::vector<uint32_t> newly_excluded;
    for (const auto& [p, token] : held_[step.runner->scope()]) {
      if (step.want.count(p)) {
        give[p] = token;
        excluded.erase(p);
      } else {
        letting_go = true;
        if (!excluded.count(p)) newly_excluded.push_back(p);
      }
    }
    const uint64_t generation = step.runner->SetOwned(std::move(give), valid_until);
    for (const uint32_t p : newly_excluded) excluded[p] = generation;
  }
  if (!letting_go) return failed;
  // A partition moving away is released as soon as its runner let go
  // (usually within a chunk), not a round later: the next owner takes it at
  // its own next round.
  const auto deadline = began + options_.ttl / 8;
  for (const Step& step : steps) {
    for (;;) {
      if (!Holding(*step.runner, step.want) || std::chrono::steady_clock::now() >= deadline) break;
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(5), [this] { return stopping_; })) break;
    }
    RETURN_IF_ERROR(ReleaseLetGo(*step.runner, step.want));
  }
  return failed;
}

bool LeaseKeeper::Holding(const SinkRunner& runner, const std::set<uint32_t>& want) const {
  const auto it = held_.find(runner.scope());
  if (it == held_.end()) return false;
  if (runner.stopped()) return false;  // applies nothing any more
  const SinkRunner::Ownership now = runner.ownership();
  const auto ex = excluded_at_.find(runner.scope());
  for (const auto& [p, token] : it->second) {
    if (want.count(p)) continue;
    const uint64_t excluded = ex == excluded_at_.end() || !ex->second.count(p) ? 0 : ex->second.at(p);
    if (excluded == 0 || now.generation < excluded || now.tokens.count(p)) return true;
  }
  return false;
}

Status LeaseKeeper::ReleaseLetGo(const SinkRunner& runner, const std::set<uint32_t>& want) {
  auto& held = held_[runner.scope()];
  auto& excluded = excluded_at_[runner.scope()];
  const SinkRunner::Ownership now = runner.ownership();
  std::map<uint32_t, uint64_t> release;
  for (const auto& [p, token] : held) {
    if (want.count(p)) continue;
    const auto ex = excluded.find(p);
    // Let go: the runner took a SetOwned without it and no longer applies
    // it, or it stopped (it applies nothing any more).
    const bool let_go = ex != excluded.end() && now.generation >= ex->second && !now.tokens.count(p);
    if (let_go || runner.stopped()) release[p] = token;
  }
  if (release.empty()) return Status::Ok();
  RETURN_IF_ERROR(leases_->Release(runner.scope(), runner.entity(), release, options_.member));
  Log(LogLevel::kInfo, "engine " + options_.member + ": sink " + runner.name() + " hands partition" +
                           (release.size() > 1 ? "s " : " ") + PartitionsText(release) + " over");
  for (const auto& [p, token] : release) {
    held.erase(p);
    excluded.erase(p);
  }
  return Status::Ok();
}

}  // namespace sluice::engine
