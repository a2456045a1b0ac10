// The vocabulary of the lag run (engine_bench_lag.h) that its views share:
// the run's options, its entity ids, and what watches a view.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/engine_bench_util.h"
#include "core/status.h"

namespace sluice::bench {

// The id of the lag run's entity k.
inline std::string LagEntityId(const std::string& run_id, uint64_t k) { return run_id + "-l" + std::to_string(k); }

// What the lag run watches: when each new version of the sampled entities
// first shows in the view.
class LagObserver {
 public:
  struct Seen {
    uint32_t entity;  // the sampled entity's number
    uint64_t version;
    int64_t at_us;    // wall clock, us since the epoch
  };
  virtual ~LagObserver() = default;
  virtual void Start() = 0;
  // Stops and joins; the loop's error, if any.
  virtual Status Stop() = 0;
  virtual uint64_t last(size_t k) const = 0;  // the highest version seen of entity k
  virtual uint64_t polls() const = 0;
  virtual uint64_t went_back() const = 0;     // a version older than (or the same as) one seen before
  // Versions skipped in a view that must show every one (a Kafka topic):
  // after an entity's first, a version other than the last one + 1.
  virtual uint64_t gaps() const { return 0; }
  virtual size_t observations() const = 0;
  virtual double cycle_ms() const = 0;        // mean time between two polls
  // After Stop().
  virtual const std::vector<Seen>& seen() const = 0;
};

struct LagOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  std::string run_id;
  Endpoint redis;                // where the sampler reads the view
  double rate = 10000;           // commands (one event each) per second
  double seconds = 20;           // measured window
  double warmup_seconds = 3;     // before it, same rate, not counted
  uint32_t connections = 64;
  uint64_t entities = 10000;
  uint32_t sample = 300;         // entities the sampler watches
  uint32_t poll_interval_us = 1000;  // sampler pause between two MGETs
  double catchup_timeout_seconds = 30;
  uint32_t max_attempts = 50;
  std::vector<std::pair<std::string, pid_t>> watch;  // processes for the CPU split
  std::string dump_path;  // when set: one line per lag sample, "committed_at_us lag_us entity version"
  // Where the events come from: "http", patch commands to a running writer
  // (serve or writer); "storage", rows inserted straight into the event
  // tables by `storage_writers` threads (each owning the partitions p with
  // p % storage_writers == its number, one transaction per round of due
  // events), for a running `sluice sync`: the pull path alone under a rate
  // that no writer on this machine has to sustain; "kafka_raw" (a kafka
  // sink only, no sluice): the records the sink would write for those
  // events, produced straight into its topic (KafkaRawLoad), the baseline.
  std::string source = "http";
  uint32_t storage_writers = 4;
  // storage: each round's commit announced to the engines as a writer
  // announces it (writer/notice_sender.h), so that they read the partition
  // at once instead of at their next look at the heads.
  bool notices = false;
  // kafka_raw with a transactional sink: producers per source partition,
  // taking the rounds in turn (1: as the sink).
  uint32_t raw_tx_producers = 1;
};

}  // namespace sluice::bench
