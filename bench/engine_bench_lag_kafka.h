// The lag run (engine_bench_lag.h) on a kafka sink: when each record is first
// readable, and its same-run baseline, a plain producer on the same schedule.
//
//   KafkaLagObserver  a consumer (read_committed, no group) assigned every
//                     partition of the sink's topic from its end when it
//                     starts; notes when each record of a watched entity is
//                     first read (the key is the entity id, the
//                     sluice-version header its version). A version read a
//                     second time, or after a later one, counts as went_back
//   KafkaRawLoad      the "kafka_raw" source: the records the sink would
//                     write for the storage source's events (same key, value
//                     and headers, topic partition = source partition mod
//                     the topic's), produced straight into the sink's topic
//                     with the sink's properties: for an idempotent sink
//                     (acks=all) by one librdkafka producer, each round of
//                     due records produced as it comes due, no flush; for a
//                     transactional sink by a producer per source partition
//                     (or raw_tx_producers of them, taking the rounds in
//                     turn), each on a thread of its own that puts the
//                     records due since its last round into one transaction
//                     and commits it. What librdkafka and the broker do for
//                     that rate without sluice. Its "committed_at" is when
//                     the record came due (handed to librdkafka, or to its
//                     partition's thread)
//
// Threads: each runs one thread of its own; the accessors are safe from any
// thread, seen() and produced() only after Stop() / Run().
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_common.h"
#include "bench/engine_bench_lag_types.h"
#include "config/config.h"

typedef struct rd_kafka_headers_s rd_kafka_headers_t;

namespace sluice::bench {

// `ids`: the watched entity ids; Seen::entity is the index in it.
Result<std::unique_ptr<LagObserver>> KafkaLagObserver(const config::SinkConfig& sink, std::vector<std::string> ids);

class KafkaRawLoad {
 public:
  KafkaRawLoad(const LagOptions& o, const config::SinkConfig& sink, uint32_t partitions);
  ~KafkaRawLoad();
  // Creates the topic when missing (the source's partition count) and the producer.
  Status Open();
  // Runs the schedule to its end and flushes; the caller's thread.
  void Run(Clock::time_point start, uint64_t total, Clock::time_point window_begin, Clock::time_point end);

  std::atomic<uint64_t> produced_count{0}, window_events{0}, unsent{0}, backlog{0};
  // Per entity, the last version produced (after Run()).
  uint64_t version(uint64_t k) const { return version_[k]; }
  // (entity, version) -> when it came due (handed to librdkafka, or to its
  // partition's thread), us since the epoch (after Run()).
  const std::map<std::pair<uint32_t, uint64_t>, int64_t>& produced() const { return produced_; }
  std::vector<std::string> problems() const;

 private:
  struct Client;
  struct Lane;
  struct Record {
    std::string key, value;
    rd_kafka_headers_t* headers = nullptr;  // owned until produced
    int32_t topic_partition = 0;
  };
  Result<std::unique_ptr<Client>> NewProducer(const std::string& transactional_id);
  bool Produce(Client& c, Record& r, Clock::time_point give_up);
  void RunLane(uint32_t p, Lane& lane, Clock::time_point give_up);
  void Problem(std::string p);

  const LagOptions& o_;
  const config::SinkConfig sink_;
  const uint32_t partitions_;
  const bool transactional_;
  int32_t topic_partitions_ = 0;
  std::vector<std::unique_ptr<Client>> clients_;  // idempotent: one; transactional: raw_tx_producers per partition
  std::vector<uint64_t> version_;
  std::map<std::pair<uint32_t, uint64_t>, int64_t> produced_;
  mutable std::mutex problems_mu_;
  std::vector<std::string> problems_;
};

}  // namespace sluice::bench
