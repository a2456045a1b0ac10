// RouteKeeper: which writer owns each partition, so that a writer can
// forward a command to the writer that batches its partition (DESIGN 10,
// docs/deployment.md#writers). Ownership is a hint for speed only: any
// writer may write any partition, MySQL's unique keys decide.
//
// Every round (a quarter of writer.lease_ttl) it
//   1. heartbeats in sluice_members (group "writer", with the URL the other
//      writers forward to) and reads the live writers;
//   2. computes which partitions of each entity type should be its own
//      (core/assignment.h, the same computation on every writer);
//   3. renews or takes those leases (scope "writer" of sluice_leases) and
//      releases the ones it holds but should not: no handover is needed,
//      a writer keeps no state another writer must wait for;
//   4. reads every writer lease and publishes, per (type, partition), the
//      URL of the live writer that holds it unexpired, or nothing (this
//      writer, or no one known): OwnerUrl().
// A round that fails leaves the last table in place for one TTL, then
// empties it (every command is handled where it arrives). The member name
// is claimed like an engine's (a named lock on the lease session); while
// another live writer holds the name, this one takes no lease and routes
// nothing, and says so in its log.
//
// Threads: Start/Stop/Leave from one thread; rounds on the keeper's own
// thread; OwnerUrl from any thread (HTTP event loops), without blocking on
// a round.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "sql/tables.h"

namespace sluice::writer {

// The lease scope and member group of writers.
inline constexpr const char* kWriterScope = "writer";
inline constexpr const char* kWriterGroup = "writer";

class RouteKeeper {
 public:
  struct Options {
    std::string member;  // writer.id
    std::chrono::milliseconds ttl{10'000};
    std::shared_ptr<sql::Storage> storage;
    std::map<std::string, uint32_t> types;  // entity type -> partitions
  };
  explicit RouteKeeper(Options options);
  ~RouteKeeper();  // calls Stop()

  // Runs the first round, then one every ttl/4. `url`: where the other
  // writers forward to (writer.advertise), in this writer's heartbeat.
  void Start(std::string url);
  void Stop();
  // After Stop: releases the leases held and leaves the group, so the
  // others route to themselves at their next round.
  void Leave();
  // One round (for tests, after SetUrl; never while started).
  Status Round();
  void SetUrl(std::string url) { url_ = std::move(url); }

  // The URL of the live writer that owns (type, partition); empty when it
  // is this writer or no owner is known.
  std::string OwnerUrl(const std::string& type, uint32_t partition) const;
  // Partitions whose lease this writer holds, per type (for tests, status).
  std::map<std::string, std::vector<uint32_t>> Held() const;

 private:
  struct Table {
    std::map<std::string, std::vector<std::string>> url;  // type -> per partition
    std::chrono::steady_clock::time_point made{};
  };
  void Loop();
  void Publish(std::shared_ptr<const Table> table);

  const Options options_;
  std::string url_;  // set before the rounds start
  std::unique_ptr<sql::LeaseTable> leases_;
  std::map<std::string, std::map<uint32_t, uint64_t>> held_;  // keeper thread: type -> partition -> token
  bool claimed_ = false;

  mutable std::mutex mu_;
  std::shared_ptr<const Table> table_;                         // under mu_
  std::map<std::string, std::vector<uint32_t>> held_copy_;     // under mu_
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace sluice::writer
