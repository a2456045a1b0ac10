// Thin RAII helpers over librdkafka's C API for the kafka sink: clients built
// from a sink's config, topic metadata and creation, and reading a range of
// one topic partition (recovery after a crash, verify). None of them retries
// or sleeps beyond its timeout; errors are kUnavailable (the cluster did not
// answer) or kFailedPrecondition / kNotFound (it answered no).
//
// Threads: a handle may be used from any thread; ReadPartition uses the
// legacy per-partition consumer API, one call at a time per handle.
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "connectors/kafka/kafka_options.h"
#include "core/status.h"

namespace sluice::connectors::kafka {

struct KafkaDeleter {
  void operator()(rd_kafka_t* rk) const;
};
using KafkaHandle = std::unique_ptr<rd_kafka_t, KafkaDeleter>;

struct ClientOptions {
  rd_kafka_type_t type = RD_KAFKA_PRODUCER;
  std::string client_id;
  // Producer only: called (on the thread that polls or flushes) once per message.
  void (*delivery_report)(rd_kafka_t*, const rd_kafka_message_t*, void*) = nullptr;
  void* opaque = nullptr;
  // Producer only: a transactional producer with this transactional.id (see
  // kafka_sink.h): its records wait in transactions of at most
  // `transaction_timeout`, and the gapless guarantee gives way to the
  // transaction (a failed record aborts it). Empty: the idempotent producer.
  std::string transactional_id;
  std::chrono::milliseconds transaction_timeout{60000};
  // Consumer only: read_uncommitted. Its QueryWatermarks gives the log's
  // end (the high watermark); a read_committed handle's gives the last
  // stable offset (the start of the oldest open transaction).
  bool read_uncommitted = false;
  // Producer only, when above 0: message.max.bytes and batch.size at most
  // this (the topic's limit less a record batch's framing, see
  // TopicMessageLimit), so that librdkafka refuses a record over it when it
  // is produced and never builds a batch of records the broker refuses whole
  // (a batch stops growing at the smaller of the two, and a record alone in
  // its batch then fits). librdkafka counts records uncompressed.
  int64_t max_message_bytes = 0;
  // Producer only: one record per produce request (batch.num.messages=1),
  // for a topic whose limit is not known.
  bool one_record_per_batch = false;
};

// librdkafka's defaults of message.max.bytes and batch.size, and the least
// message.max.bytes it takes.
inline constexpr int64_t kLibrdkafkaMessageMaxBytes = 1000000;
inline constexpr int64_t kLibrdkafkaBatchSize = 1000000;
inline constexpr int64_t kLibrdkafkaMinMessageMaxBytes = 1000;
// What a record batch adds to its records (Kafka's RecordBatch header:
// offset, length, epoch, magic, crc, attributes, ... the record count). The
// broker holds the whole batch to the topic's max.message.bytes.
inline constexpr int64_t kRecordBatchOverhead = 61;

// A producer (idempotent, acks=all, gapless, records never expire in its queue,
// then the sink's properties; or transactional, see ClientOptions) or a
// consumer for reading ranges (no group, no commits, read_committed unless
// told otherwise: records of aborted or open transactions are never seen;
// fetch.wait.max.ms 10, so that a read ending in a transaction marker ends
// at once). Producer-only properties are left off consumers and
// consumer-only ones off producers. Either pushes no client metrics
// (enable.metrics.push=false); the sink's properties may set these
// otherwise.
Result<KafkaHandle> NewClient(const KafkaSinkOptions& config, const ClientOptions& options);

// The number of partitions of `topic`; kNotFound when the cluster says it
// does not exist, kUnavailable when the cluster does not answer in time.
Result<int32_t> TopicPartitionCount(rd_kafka_t* rk, const std::string& topic, std::chrono::milliseconds timeout);

// The largest record batch the brokers take for `topic`: its effective
// max.message.bytes (the topic's own, else the brokers' default), read with
// DescribeConfigs. kFailedPrecondition when the client may not describe it
// or the cluster cannot; kUnavailable when no answer came, or the broker
// asked does not know the topic yet.
Result<int64_t> TopicMessageLimit(rd_kafka_t* rk, const std::string& topic, std::chrono::milliseconds timeout);

// The producer's message.max.bytes: the sink's property, else librdkafka's
// default.
int64_t ProducerMessageLimit(const KafkaSinkOptions& config);
// The producer's batch.size: the sink's property, else librdkafka's default.
int64_t ProducerBatchSize(const KafkaSinkOptions& config);

// Creates `topic`; ok when it already exists.
Status CreateTopic(rd_kafka_t* rk, const std::string& topic, int32_t partitions, int32_t replication_factor,
                   std::chrono::milliseconds timeout);

// Every topic of the cluster whose name starts with `prefix` (internal
// topics, those starting with "__", never).
Result<std::vector<std::string>> TopicsStartingWith(rd_kafka_t* rk, const std::string& prefix,
                                                    std::chrono::milliseconds timeout);

// Deletes `topics`; ok for a topic that does not exist (any more).
Status DeleteTopics(rd_kafka_t* rk, const std::vector<std::string>& topics, std::chrono::milliseconds timeout);

struct Watermarks {
  int64_t low = 0;   // first offset still stored
  int64_t high = 0;  // next offset to be written
};
Result<Watermarks> QueryWatermarks(rd_kafka_t* rk, const std::string& topic, int32_t partition,
                                   std::chrono::milliseconds timeout);

// Reads offsets [from, to) of one partition with a consumer handle, calling
// `each` for every record in offset order (offsets without a record, such as
// transaction markers and aborted records, are skipped). A read_committed
// handle waits at a transaction still open until it ends. kUnavailable when
// no progress is made for `timeout`.
Status ReadPartition(rd_kafka_t* consumer, const std::string& topic, int32_t partition, int64_t from, int64_t to,
                     const std::function<void(const rd_kafka_message_t&)>& each, std::chrono::milliseconds timeout);

// The value of a record header, or nullopt.
std::optional<std::string_view> HeaderValue(const rd_kafka_message_t& m, std::string_view name);

// The status of a transactional call (rd_kafka_init/begin/commit/
// abort_transaction), which it destroys: ok for nullptr; kFailedPrecondition
// when the cluster cannot do transactions at all; kUnavailable otherwise
// (`what` and librdkafka's reason in the message). *fatal (optional): the
// producer can do nothing more (fenced by a newer one with its id, for one);
// *abort: the transaction must be aborted; *retry: the same call may be
// repeated.
struct TxnError {
  bool fatal = false;
  bool abort = false;
  bool retry = false;
};
Status TransactionStatus(rd_kafka_error_t* error, const std::string& what, TxnError* kind = nullptr);

// True for produce errors that no retry can fix for this record (too large,
// invalid): the record is rejected, not retried.
bool IsPermanentRecordError(rd_kafka_resp_err_t err);

}  // namespace sluice::connectors::kafka
