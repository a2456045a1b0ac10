// How large a record batch the kafka sink may send to its topic, and what a
// size refusal means (see docs/sinks/kafka.md, "Outcomes").
//
// The broker holds a whole record batch to the topic's max.message.bytes,
// which may be below the producer's own message.max.bytes. Held to the
// topic's limit (ClientOptions::max_message_bytes), librdkafka refuses a
// record over it before sending it and never builds a batch of records that
// each fit but that the broker refuses whole. The limit is read at every
// Open (it may have changed since); without the right to read it, the
// producers keep their own limit, and a record the broker refuses as too
// large may owe that to the records sharing its request: its first size
// refusal is not final (the batch fails, the sink re-opens, producers made
// then send one record per request), only a second one is.
//
// Threads: one at a time, like the sink that owns it.
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>

#include "core/status.h"

namespace sluice::connectors::kafka {

// One record of the sink: (source partition, event id).
using RecordKey = std::pair<uint32_t, uint64_t>;

class TopicLimit {
 public:
  // Reads a topic's max.message.bytes (TopicMessageLimit; a fake in tests).
  using Reader = std::function<Result<int64_t>(rd_kafka_t*, const std::string& topic, std::chrono::milliseconds)>;
  // At most this many records refused once as too large are remembered
  // (more than the largest batch): past it, a size refusal is final at once.
  static constexpr size_t kMaxRemembered = 1000000;

  // For sink `sink` (its name, in messages) writing to `topic`;
  // `producer_limit` is the producer's own message.max.bytes
  // (ProducerMessageLimit).
  TopicLimit(const std::string& sink, std::string topic, int64_t producer_limit, Reader read,
             size_t max_remembered = kMaxRemembered);

  // Forgets the limit read: producers made now keep their own (Open makes
  // its first handle before it can read the topic's).
  void Forget() { limit_ = 0; }
  // Reads the topic's limit (with `rk`), which producers made from now on
  // are held to. kUnavailable when the cluster did not answer; a limit that
  // may not be read (kFailedPrecondition from the reader) warns once and is
  // ok: records are then held to the producer's limit only.
  Status Read(rd_kafka_t* rk, std::chrono::milliseconds timeout);

  // ClientOptions::max_message_bytes for a producer made now (0: its own).
  int64_t producer_cap() const { return limit_ > 0 ? limit_ : 0; }
  // True when the producers are held to the topic's limit, below their own.
  bool Held() const { return limit_ > 0 && limit_ < producer_limit_; }
  // True when a producer made now sends one record per request: the topic's
  // limit is unknown and records refused as too large wait for their second
  // try, which then refuses only a record over the limit, not the records
  // that share its request.
  bool OneRecordPerBatch() const { return limit_ < 0 && !first_refused_.empty(); }

  // A new batch: RefusalStands may read the limit again, once.
  void NewBatch() { checked_ = false; }
  // librdkafka refused a record as too large before sending it. Ok when the
  // refusal stands; kUnavailable when the producers are held to a topic
  // limit that was raised since Read (read again, once per batch: the sink
  // re-opens to follow it) or the cluster did not answer that question.
  Status RefusalStands(rd_kafka_t* rk, std::chrono::milliseconds timeout);
  // Why librdkafka refused a record as too large (`err`), for its result.
  std::string TooLarge(rd_kafka_resp_err_t err) const;

  // The broker refused record `key` with `err` (a permanent record error):
  // for good? A size refusal is for good only the second time (see above).
  bool RefusedForGood(const RecordKey& key, rd_kafka_resp_err_t err);
  // Record `key` is in the topic (delivered, or found stale): its first
  // refusal, if any, is forgotten.
  void InTopic(const RecordKey& key) {
    if (!first_refused_.empty()) first_refused_.erase(key);
  }

 private:
  const std::string context_;  // "sink 'x'"
  const std::string where_;    // "sink 'x': "
  const std::string topic_;
  const int64_t producer_limit_;
  const Reader read_;
  const size_t max_remembered_;
  // What producers made from now on hold records to: the topic's batch
  // limit less a batch's framing; 0 while not read, -1 when it may not be.
  int64_t limit_ = 0;
  bool checked_ = false;  // in this batch (RefusalStands)
  bool unreadable_warned_ = false;
  bool full_warned_ = false;
  std::set<RecordKey> first_refused_;  // refused once as too large
};

}  // namespace sluice::connectors::kafka
