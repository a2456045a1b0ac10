// LeaseKeeper: how one sync engine shares its sinks' partitions with the
// other engines of the same database (DESIGN 10).
//
// Every round (a quarter of the lease TTL) it
//   1. heartbeats in sluice_members (group "engine") and reads the live
//      members (a heartbeat younger than the TTL);
//   2. computes, alone, which partitions of each sink should be its own
//      (core/assignment.h: every engine computes the same from the same
//      members, and a member joining or leaving moves few partitions);
//   3. renews the leases it holds and takes the free or expired ones it
//      should own (sql::LeaseTable::Acquire, fencing token + 1 on a take),
//      keeping a lease while its runner still applies the partition;
//   4. gives each runner the partitions it holds and should own
//      (SinkRunner::SetOwned, valid for two thirds of the TTL from the
//      round's start), and releases a lease once its runner let go of the
//      partition (flushed and saved it), so the next owner need not wait
//      for the lease to expire: a rebalance moves only the moved partitions,
//      each stopping here before it starts there.
// A round that fails leaves the runners their partitions until that
// validity passes; then they hold still (SinkRunner) and, one round later,
// the keeper takes every partition away from them: an engine cut off from
// the database, or frozen past its lease, applies nothing more once another
// engine may have taken over, and its offset writes are fenced anyway.
//
// The member name (engine.id) must be unique per engine process: the
// keeper claims it (sql::LeaseTable::Claim, a named lock held by its lease
// session) before its first heartbeat. A process restarted under the same
// name gets the claim as soon as the former one's session is gone (at once
// after a crash of the process) and takes its leases over, fencing the
// former process by the higher token. A second process under the name of a
// live one waits up to the TTL for the claim, then fails (Failed() says
// why); the running one carries on.
//
// Threads: Start/Stop from the engine's thread; the rounds run on the
// keeper's own thread. Round() is for tests (never while started).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/sink_runner.h"
#include "sql/tables.h"

namespace sluice::engine {

class LeaseKeeper {
 public:
  struct Options {
    std::string member;   // this engine's name among engines (engine.id)
    std::string address;  // where it can be reached (shown by `sluice status`); may be empty
    std::chrono::milliseconds ttl{10'000};
    std::shared_ptr<sql::Storage> storage;  // the leases' tables
    // Called once, on the keeper's thread, when it fails for good (Failed()).
    std::function<void(const std::string&)> on_failure;
  };
  // runners: the engine's runners, each with options.owner == member; they
  // must outlive the keeper's rounds (Stop before destroying them).
  LeaseKeeper(Options options, std::vector<SinkRunner*> runners);
  ~LeaseKeeper();  // calls Stop()

  // Runs the first round, then one every ttl/4 on the keeper's thread.
  void Start();
  // Stops the rounds; the leases stay until Leave().
  void Stop();
  // After the runners stopped (and saved their offsets): releases every
  // lease held and leaves the group, so the others take over at their next
  // round instead of after the TTL.
  void Leave();

  // One round (see above).
  Status Round();
  // Why the keeper stopped for good (a second process under its name).
  std::optional<std::string> Failed() const;

 private:
  void Loop();
  // Takes every partition from the runners (after validity lapsed).
  void Disown();
  // Whether the runner may still apply a held partition it should not own
  // (it has not yet taken a SetOwned without it, or still applies it).
  bool Holding(const SinkRunner& runner, const std::set<uint32_t>& want) const;
  // Releases the held leases of partitions not wanted that the runner let go.
  Status ReleaseLetGo(const SinkRunner& runner, const std::set<uint32_t>& want);

  const Options options_;
  const std::vector<SinkRunner*> runners_;
  std::unique_ptr<sql::LeaseTable> leases_;
  // Keeper thread: per runner (scope), partition -> token of the leases it holds.
  std::map<std::string, std::map<uint32_t, uint64_t>> held_;
  // Keeper thread: per runner, partition held but not wanted -> the
  // generation of the first SetOwned that left it out.
  std::map<std::string, std::map<uint32_t, uint64_t>> excluded_at_;
  bool claimed_ = false;  // this process holds the member's name
  std::chrono::steady_clock::time_point first_try_{};
  std::chrono::steady_clock::time_point last_ok_{};
  // By scope: the last round that renewed the sink's leases (a storage
  // server of its partitions may fail while the others answer).
  std::map<std::string, std::chrono::steady_clock::time_point> renewed_at_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::optional<std::string> failed_;
  std::thread thread_;
};

}  // namespace sluice::engine
