#include "connectors/kafka/kafka_sink.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/kafka_options.h"
#include "connectors/kafka/record_codec.h"
#include "connectors/kafka/topic_limit.h"
#include "connectors/kafka/topic_readback.h"
#include "connectors/kafka/topic_verify.h"
#include "core/log.h"
#include "core/on_threads.h"

namespace sluice::connectors::kafka {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kMetadataTimeout{10000};
constexpr milliseconds kHealthTimeout{2000};
constexpr milliseconds kReadTimeout{10000};
// How long Close waits for requests already sent after a failed batch.
constexpr int kCloseGrace = 2000;
// Idle producers closed per Sink::Idle() call (about one a second).
constexpr size_t kClosePerIdle = 32;
// Producers destroyed at once (CloseProducers).
constexpr size_t kClosesAtOnce = 8;

class KafkaSink final : public Sink {
 public:
  KafkaSink(config::SinkConfig config, uint32_t source_partitions)
      : config_(std::move(config)),
        source_partitions_(source_partitions),
        topic_(TopicName(options().topic, config_.entity)),
        limit_(config_.name, topic_, ProducerMessageLimit(options()), &TopicMessageLimit) {}
  ~KafkaSink() override { Close(); }

  const std::string& name() const override { return config_.name; }
  const KafkaSinkOptions& options() const { return config_.Options<KafkaSinkOptions>(); }

  Capabilities capabilities() const override {
    Capabilities c;
    c.can_push = false;  // a log of every event, not one row per entity
    c.verifies_history = true;
    c.record_keys = true;
    c.stays_open_at_takeover = true;  // TakeOver() reads back what the topic holds of the partitions
    return c;
  }

  Status Open() override {
    if (producer_) return Status::Ok();
    limit_.Forget();  // read again below; the first handle is made without it
    // Transactional: this handle only asks for metadata and where each topic
    // partition ends (read_uncommitted: past any open transaction); each
    // source partition gets its own producer (Fence).
    auto producer = transactional() ? Client(RD_KAFKA_CONSUMER, "", nullptr, "", /*read_uncommitted=*/true)
                                    : Client(RD_KAFKA_PRODUCER, "", &KafkaSink::OnDelivery);
    if (!producer.ok()) return producer.status();
    auto count = TopicPartitionCount(producer->get(), topic_, kMetadataTimeout);
    if (!count.ok() && count.status().code() == StatusCode::kNotFound) {
      if (!options().create_topic) {
        return FailedPrecondition(Where() + "topic " + topic_ +
                                  " does not exist; create it or set create_topic: true");
      }
      const int32_t partitions =
          static_cast<int32_t>(options().partitions != 0 ? options().partitions : source_partitions_);
      Status created = CreateTopic(producer->get(), topic_, partitions,
                                   static_cast<int32_t>(options().replication_factor), kMetadataTimeout);
      if (!created.ok()) return created.WithContext("sink '" + config_.name + "'");
      // The new topic reaches the broker's metadata cache a moment later:
      // part of creating it, so waited for here (up to the metadata timeout).
      const auto visible_by = Clock::now() + kMetadataTimeout;
      // So are its partition leaders: ready once every partition answers.
      do {
        count = TopicPartitionCount(producer->get(), topic_, kMetadataTimeout);
        if (count.ok() && AllPartitionsAnswer(producer->get(), *count)) break;
        if (!count.ok() && count.status().code() != StatusCode::kNotFound &&
            count.status().code() != StatusCode::kUnavailable) {
          break;
        }
        rd_kafka_poll(producer->get(), 50);
      } while (Clock::now() < visible_by);
      if (!count.ok() && count.status().code() == StatusCode::kNotFound) {
        return Unavailable(Where() + "topic " + topic_ + " was created but is not visible yet");
      }
    }
    if (!count.ok()) return count.status().WithContext("sink '" + config_.name + "'");
    const int32_t partitions = *count;
    RETURN_IF_ERROR(limit_.Read(producer->get(), kMetadataTimeout));
    if (!transactional() && (limit_.Held() || limit_.OneRecordPerBatch())) {
      // Made before the topic's limit was known (nothing produced yet): made
      // again, held to it.
      producer = Client(RD_KAFKA_PRODUCER, "", &KafkaSink::OnDelivery);
      if (!producer.ok()) return producer.status();
    }
    if (!transactional()) {
      if (Status st = Recover(partitions); !st.ok()) return st.WithContext("sink '" + config_.name + "'");
      rkt_ = rd_kafka_topic_new(producer->get(), topic_.c_str(), nullptr);
      if (rkt_ == nullptr) return Internal(Where() + rd_kafka_err2str(rd_kafka_last_error()));
    }
    producer_ = std::move(producer).value();
    topic_partitions_ = partitions;
    just_opened_ = true;
    return Status::Ok();
  }

  ApplyResult Apply(std::span<const ChangeEvent> events) override {
    ApplyResult out;
    if (!producer_) {
      out.status = Unavailable(Where() + "not open");
      return out;
    }
    out.results.resize(events.size());
    pending_.assign(events.size(), Pending{});
    limit_.NewBatch();
    just_opened_ = false;
    // Transactional: every source partition of the batch is fenced first:
    // whatever a former owner left in an open transaction is aborted, and
    // what it committed is read back into delivered_ before anything is
    // skipped. Idempotent: a partition taken over whose topic partition
    // TakeOver() could not read back is read back first.
    std::set<uint32_t> partitions;
    for (const ChangeEvent& e : events) partitions.insert(e.partition);
    if (Status st = LearnAll(partitions); !st.ok()) {
      out.results.clear();
      out.status = st;
      return out;
    }
    const std::vector<size_t> send = ToSend(events, out);
    const Status failure = transactional() ? ProduceInTransactions(events, send, out)
                                           : ProduceIdempotent(events, send, out);
    if (!failure.ok()) {
      // Kept: what was delivered (delivered_) and refused (refused_); the
      // engine closes, re-opens (reading the topic back) and retries.
      out.results.clear();
      out.status = failure;
    }
    return out;
  }

  // The sink stays open when the engine takes partitions over
  // (Capabilities::stays_open_at_takeover): what the topic holds of each
  // partition taken (under a token not already learned) is learned here, at
  // once. Transactional: its producer is made again, which fences whoever
  // held it (their open transaction aborted) and reads back what they
  // committed. Idempotent: its topic partition is read back. What fails here
  // is done before the partition's next batch (Apply).
  Status TakeOver(const TakenOver& taken) override {
    if (!producer_) return Status::Ok();  // Open() learns every partition
    // Idempotent: an Open() with no Apply() since has just read every topic
    // partition back (the engine opens the sink at its first takeover).
    const bool just_read = just_opened_;
    just_opened_ = false;
    std::vector<uint32_t> forget;
    for (const auto& [p, token] : taken.tokens) {
      if (const auto it = learned_.find(p); it != learned_.end() && it->second == token) continue;
      learned_.erase(p);
      if (!just_read) forget.push_back(p);
    }
    Forget(forget);
    std::set<uint32_t> learn;
    for (const auto& [p, token] : taken.tokens) {
      if (learned_.count(p) == 0) learn.insert(p);
    }
    // Those learned count even when others failed: a retry (the engine's
    // next lease round, or Apply) learns only the rest.
    const Status st = LearnAll(learn);
    for (const uint32_t p : learn) {
      if (Knows(p)) learned_[p] = taken.tokens.at(p);
    }
    return st;
  }

  Status Health() override {
    if (producer_) {
      auto count = TopicPartitionCount(producer_.get(), topic_, kHealthTimeout);
      return count.ok() ? Status::Ok() : count.status().WithContext("sink '" + config_.name + "'");
    }
    auto producer = Client(RD_KAFKA_PRODUCER, "health");
    if (!producer.ok()) return producer.status();
    auto count = TopicPartitionCount(producer->get(), topic_, kHealthTimeout);
    if (!count.ok() && count.status().code() == StatusCode::kNotFound && options().create_topic) {
      return Status::Ok();  // Open creates it
    }
    if (!count.ok() && count.status().code() == StatusCode::kNotFound) {
      return FailedPrecondition(Where() + count.status().message());
    }
    return count.ok() ? Status::Ok() : count.status().WithContext("sink '" + config_.name + "'");
  }

  void Close() override {
    // A transaction left open is aborted by the next producer of its
    // partition (this sink's, when it opens again) or by the broker after
    // the transaction timeout; read_committed consumers never see it.
    std::vector<std::unique_ptr<FencedProducer>> gone;
    for (auto& [p, f] : fenced_) gone.push_back(std::move(f));
    fenced_.clear();
    CloseProducers(std::move(gone));
    unread_.clear();    // Open() reads every topic partition back
    learned_.clear();
    reader_.reset();
    if (rkt_ != nullptr) {
      rd_kafka_topic_destroy(rkt_);
      rkt_ = nullptr;
    }
    if (producer_) {
      // Every record of a returned Apply is delivered or given up; whatever a
      // failed Apply left behind is dropped here (it will be produced again
      // after Open has read the topic back). Queued records go at once;
      // requests already sent get a moment to be answered, so that the
      // broker is done with them before the topic is read back (a record
      // appended after that read would be produced twice).
      if (!transactional()) {
        rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE);
        if (rd_kafka_outq_len(producer_.get()) > 0) rd_kafka_flush(producer_.get(), kCloseGrace);
        rd_kafka_purge(producer_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(producer_.get(), 0);
      }
      producer_.reset();
    }
    outstanding_ = 0;
  }

  // The engine no longer applies these partitions: what was learned of
  // them goes, so that a TakeOver() that gives one back learns it again.
  // Transactional: their producers go now (another engine's producer of the
  // partition fences them anyway) instead of at producer_idle, every one
  // (CloseProducers), where a cap (Idle's) would keep fenced producers'
  // threads for longer.
  void Released(std::span<const uint32_t> partitions) override {
    for (const uint32_t p : partitions) learned_.erase(p);
    if (transactional()) Forget(partitions);
  }

  // Transactional: the producers of partitions without a batch for
  // producer_idle go (a producer holds several librdkafka threads and broker
  // connections: an engine idle over 1,024 partitions held 4,100 threads).
  // A partition's next batch makes its producer again, which fences and
  // reads back as at a takeover.
  // At most kClosePerIdle per call: a producer's destruction can take a
  // while, and the applier waits meanwhile.
  void Idle() override {
    if (!transactional()) return;
    const auto now = Clock::now();
    std::vector<std::unique_ptr<FencedProducer>> gone;
    for (auto it = fenced_.begin(); it != fenced_.end() && gone.size() < kClosePerIdle;) {
      if (now - it->second->last_used < options().producer_idle) {
        ++it;
        continue;
      }
      gone.push_back(std::move(it->second));
      it = fenced_.erase(it);
    }
    CloseProducers(std::move(gone));
  }

  // A topic is a log, not a view: there is nothing to swap. And rewind does
  // not help, since Open() recovers what the topic holds and skips it.
  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override {
    return FailedPrecondition("sink " + config_.name + " cannot be rebuilt: a kafka topic is a log that consumers "
                              "replay, not a view to swap in; consumers rebuild their views by reading the topic "
                              "from its beginning. To publish the whole history again, add a sink with a new name "
                              "and topic (a new sink starts from offset 0); `sluice rewind` on this sink adds no "
                              "record, as the sink skips what the topic already holds");
  }

  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override {
    return CompareLatest(topic_, [this](const EachRecord& each) { return ReadEveryRecord(each); }, truth, differences);
  }

  Status VerifyHistory(HistoryPages& history, std::vector<Difference>& differences) override {
    ASSIGN_OR_RETURN(TopicNow now, ReadTopicEnds());
    return CompareHistory(
        topic_, static_cast<int32_t>(now.ends.size()), [this](uint32_t p) { return TopicPartitionOf(p); },
        [&](int32_t t, const EachRecord& each) { return ReadRecords(now, t, each); }, history, differences);
  }

 private:
  struct Pending {
    bool reported = false;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  };

  std::string Where() const { return "sink '" + config_.name + "': "; }

  // The topic as verify reads it: where each partition ends now (past any
  // open transaction, whose records the read_committed consumer waits for),
  // and the consumer that reads them.
  struct TopicNow {
    KafkaHandle consumer;
    std::vector<Watermarks> ends;  // per topic partition
  };
  Result<TopicNow> ReadTopicEnds() {
    TopicNow now;
    ASSIGN_OR_RETURN(now.consumer, Client(RD_KAFKA_CONSUMER, "verify"));
    auto ends = Client(RD_KAFKA_CONSUMER, "verify-ends", nullptr, "", /*read_uncommitted=*/true);
    if (!ends.ok()) return ends.status();
    auto count = TopicPartitionCount(now.consumer.get(), topic_, kMetadataTimeout);
    if (!count.ok()) return count.status().WithContext("sink '" + config_.name + "'");
    // The ends handle learns the topic's partitions and leaders first: asked
    // cold, a watermark query can answer "Unknown partition" (seen under load).
    if (auto known = TopicPartitionCount(ends->get(), topic_, kMetadataTimeout); !known.ok()) {
      return known.status().WithContext("sink '" + config_.name + "'");
    }
    for (int32_t t = 0; t < *count; ++t) {
      ASSIGN_OR_RETURN(Watermarks w, QueryWatermarks(ends->get(), topic_, t, kMetadataTimeout));
      now.ends.push_back(w);
    }
    return now;
  }

  // Decodes the records of topic partition t up to where it ended.
  Status ReadRecords(TopicNow& now, int32_t t, const EachRecord& each) {
    const Watermarks& w = now.ends[static_cast<size_t>(t)];
    Status decode_error = Status::Ok();
    RETURN_IF_ERROR(ReadPartition(now.consumer.get(), topic_, t, w.low, w.high, [&](const rd_kafka_message_t& m) {
      auto e = DecodeValue(std::string_view(static_cast<const char*>(m.payload), m.len), options().format);
      if (!e.ok()) {
        if (decode_error.ok()) decode_error = e.status();
        return;
      }
      each(std::move(e).value(), t, m.offset);
    }, kReadTimeout));
    if (!decode_error.ok()) return decode_error.WithContext(Where() + "a record of topic " + topic_);
    return Status::Ok();
  }

  // Every record of the topic, partition by partition (Verify).
  Status ReadEveryRecord(const EachRecord& each) {
    ASSIGN_OR_RETURN(TopicNow now, ReadTopicEnds());
    for (int32_t t = 0; t < static_cast<int32_t>(now.ends.size()); ++t) RETURN_IF_ERROR(ReadRecords(now, t, each));
    return Status::Ok();
  }

  // A client of the sink's cluster named sluice-<sink>[-<purpose>]; a config
  // librdkafka refuses is a misconfiguration (kFailedPrecondition).
  Result<KafkaHandle> Client(rd_kafka_type_t type, const std::string& purpose,
                             void (*delivery_report)(rd_kafka_t*, const rd_kafka_message_t*, void*) = nullptr,
                             const std::string& transactional_id = "", bool read_uncommitted = false) {
    ClientOptions client_options;
    client_options.transactional_id = transactional_id;
    client_options.read_uncommitted = read_uncommitted;
    // Longer than any batch (Apply gives up after delivery_timeout), short
    // enough that a transaction nobody ends stops holding back read_committed
    // consumers soon.
    // At most 15 minutes, the brokers' default transaction.max.timeout.ms.
    client_options.transaction_timeout =
        std::min<milliseconds>(options().delivery_timeout + std::chrono::seconds(10), std::chrono::minutes(15));
    client_options.type = type;
    client_options.client_id = "sluice-" + config_.name + (purpose.empty() ? "" : "-" + purpose);
    client_options.delivery_report = delivery_report;
    if (delivery_report != nullptr) client_options.opaque = this;
    client_options.max_message_bytes = limit_.producer_cap();
    client_options.one_record_per_batch = type == RD_KAFKA_PRODUCER && limit_.OneRecordPerBatch();
    if (client_options.one_record_per_batch) {
      Log(LogLevel::kWarn, Where() + "the broker refused a request as too large and the topic's max.message.bytes "
                                     "is unknown: this producer sends one record per request");
    }
    auto client = NewClient(options(), client_options);
    if (!client.ok()) return FailedPrecondition(Where() + client.status().message());
    return client;
  }

  // Event e (at index i) refused by librdkafka before it was sent (`why`:
  // too large): rejected, unless TopicLimit::RefusalStands says the batch
  // fails instead.
  Status RefuseBeforeSending(const ChangeEvent& e, size_t i, const Status& why, ApplyResult& out) {
    RETURN_IF_ERROR(limit_.RefusalStands(producer_.get(), kHealthTimeout));
    out.results[i] = {Outcome::kRejected, why.message()};
    refused_[{e.partition, e.event_id}] = why.message();
    return Status::Ok();
  }

  int32_t TopicPartitionOf(uint32_t source_partition) const {
    return static_cast<int32_t>(source_partition % static_cast<uint32_t>(topic_partitions_));
  }

  // "p:e,..." for every source partition of topic partition tp: what is
  // delivered so far, raised by this batch.
  std::string PositionsAfterBatch(int32_t tp, const Positions& batch_max) const {
    Positions mine;
    for (const auto& [p, e] : delivered_) {
      if (TopicPartitionOf(p) == tp) mine[p] = e;
    }
    for (const auto& [p, e] : batch_max) {
      if (TopicPartitionOf(p) == tp) mine[p] = std::max(mine[p], e);
    }
    return EncodePositions(mine);
  }

  // Queues one record; kInvalidArgument when librdkafka refuses this record
  // itself (too large), kUnavailable when its queue stays full.
  Status Produce(rd_kafka_t* producer, rd_kafka_topic_t* rkt, const ChangeEvent& e, int32_t tp, size_t index,
                 const std::string& positions, Clock::time_point deadline) {
    std::string& value = value_buffer_;  // reused: librdkafka copies it (RD_KAFKA_MSG_F_COPY)
    value.clear();
    AppendValue(value, e, options().format);
    const std::string version = std::to_string(e.version);
    const std::string event_id = std::to_string(e.event_id);
    const std::string partition = std::to_string(e.partition);
    for (;;) {
      rd_kafka_headers_t* headers = rd_kafka_headers_new((positions.empty() ? 4 : 5) + e.record_headers.size());
      auto add = [&](std::string_view name, std::string_view v) {
        rd_kafka_header_add(headers, name.data(), static_cast<ssize_t>(name.size()), v.data(),
                            static_cast<ssize_t>(v.size()));
      };
      add(kHeaderEntityType, e.entity_type);
      add(kHeaderVersion, version);
      add(kHeaderEventId, event_id);
      add(kHeaderPartition, partition);
      if (!positions.empty()) add(kHeaderPositions, positions);
      for (const auto& [name, v] : e.record_headers) add(name, v);
      const std::string& key = e.record_key.empty() ? e.entity_id : e.record_key;
      const rd_kafka_resp_err_t err = rd_kafka_producev(
          producer, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(tp), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_KEY(key.data(), key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()), RD_KAFKA_V_HEADERS(headers),
          RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<uintptr_t>(index))), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();  // the record owns the headers now
      rd_kafka_headers_destroy(headers);
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && Clock::now() < deadline) {
        rd_kafka_poll(producer, 10);  // serves delivery reports, which frees room
        continue;
      }
      if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) return InvalidArgument(limit_.TooLarge(err));
      return Unavailable(Where() + "cannot queue a record: " + rd_kafka_err2str(err));
    }
  }

  bool transactional() const { return options().transactional; }

  // Which events to produce: not yet in the topic (recovered or delivered by
  // this process) and not already refused by the broker; the others get
  // their result in `out` here.
  std::vector<size_t> ToSend(std::span<const ChangeEvent> events, ApplyResult& out) {
    std::vector<size_t> send;
    send.reserve(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      const ChangeEvent& e = events[i];
      if (const auto it = delivered_.find(e.partition); it != delivered_.end() && e.event_id <= it->second) {
        out.results[i].outcome = Outcome::kStale;
        limit_.InTopic({e.partition, e.event_id});  // in the topic after all
        continue;
      }
      if (const auto it = refused_.find({e.partition, e.event_id}); it != refused_.end()) {
        out.results[i] = {Outcome::kRejected, it->second};
        continue;
      }
      send.push_back(i);
    }
    return send;
  }

  // The idempotent producer: one producer for every partition, the last
  // record of each topic partition in the batch carrying sluice-positions.
  Status ProduceIdempotent(std::span<const ChangeEvent> events, const std::vector<size_t>& send, ApplyResult& out) {
    std::map<int32_t, size_t> last_of_partition;  // topic partition -> index of its last record
    Positions batch_max;
    for (size_t i : send) {
      const ChangeEvent& e = events[i];
      last_of_partition[TopicPartitionOf(e.partition)] = i;
      uint64_t& m = batch_max[e.partition];
      m = std::max(m, e.event_id);
    }
    const auto deadline = Clock::now() + options().delivery_timeout;
    outstanding_ = 0;
    Status failure = Status::Ok();
    for (size_t i : send) {
      const ChangeEvent& e = events[i];
      const int32_t tp = TopicPartitionOf(e.partition);
      std::string positions;
      if (last_of_partition[tp] == i) positions = PositionsAfterBatch(tp, batch_max);
      Status st = Produce(producer_.get(), rkt_, e, tp, i, positions, deadline);
      if (st.code() == StatusCode::kInvalidArgument) st = RefuseBeforeSending(e, i, st, out);
      if (!st.ok()) {
        failure = st;
        break;
      }
      if (out.results[i].outcome == Outcome::kRejected) continue;
      ++outstanding_;
    }
    // The offset may pass an event only once its delivery report is in.
    while (outstanding_ > 0 && Clock::now() < deadline) {
      rd_kafka_flush(producer_.get(), 200);
      if (char reason[512]; rd_kafka_fatal_error(producer_.get(), reason, sizeof(reason)) != 0) {
        if (failure.ok()) failure = Unavailable(Where() + "producer failed: " + reason);
        break;
      }
    }
    if (outstanding_ > 0 && failure.ok()) {
      failure = Unavailable(Where() + std::to_string(outstanding_) + " records not delivered in time");
    }
    for (size_t i : send) {
      const Pending& p = pending_[i];
      if (!p.reported) continue;
      const ChangeEvent& e = events[i];
      if (p.err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        limit_.InTopic({e.partition, e.event_id});
        uint64_t& d = delivered_[e.partition];
        d = std::max(d, e.event_id);
        out.results[i].outcome = Outcome::kApplied;
      } else if (IsPermanentRecordError(p.err) && limit_.RefusedForGood({e.partition, e.event_id}, p.err)) {
        const std::string reason = std::string("kafka refused the record: ") + rd_kafka_err2str(p.err);
        out.results[i] = {Outcome::kRejected, reason};
        refused_[{e.partition, e.event_id}] = reason;
      } else if (failure.ok()) {
        failure = Unavailable(Where() + "delivery failed: " + rd_kafka_err2str(p.err));
      }
    }
    return failure;
  }

  // Transactional: one transaction per source partition of the batch, each
  // on that partition's own producer (its transactional id is the
  // partition's, so the engine that takes the partition over fences this
  // one). A source partition's records count as delivered only once its
  // transaction committed; one that fails is aborted (read_committed
  // consumers never see its records) and the batch is retried.
  Status ProduceInTransactions(std::span<const ChangeEvent> events, const std::vector<size_t>& send,
                               ApplyResult& out) {
    std::map<uint32_t, std::vector<size_t>> of_partition;
    for (size_t i : send) of_partition[events[i].partition].push_back(i);
    const auto deadline = Clock::now() + options().delivery_timeout;
    Status failure = Status::Ok();
    std::vector<uint32_t> begun;
    for (const auto& [p, indexes] : of_partition) {
      FencedProducer& f = *fenced_.at(p);
      f.last_used = Clock::now();
      TxnError kind;
      Status st = TransactionStatus(rd_kafka_begin_transaction(f.producer.get()), PartitionWhere(p) + "begin", &kind);
      if (!st.ok()) {
        if (kind.fatal) fenced_.erase(p);
        failure = st;
        break;
      }
      begun.push_back(p);
      for (size_t i : indexes) {
        const ChangeEvent& e = events[i];
        st = Produce(f.producer.get(), f.rkt, e, TopicPartitionOf(p), i, "", deadline);
        // Refused before it was sent: the transaction goes on.
        if (st.code() == StatusCode::kInvalidArgument) st = RefuseBeforeSending(e, i, st, out);
        if (!st.ok()) break;
      }
      if (!st.ok()) {
        failure = st;
        break;
      }
    }
    // Each begun partition waits for its delivery reports and commits on a
    // thread of its own (the first on this one), at the same time: each is a
    // round trip or two to the brokers, and a flush is what sends a
    // producer's records at once (one after the other, each producer's
    // records would wait for the flushes before it, or for linger.ms). A
    // partition whose records did not all make it, or whose commit failed,
    // is aborted afterwards, here.
    std::vector<TxnEnd> ended(begun.size());
    {
      const bool produced = failure.ok();
      const auto until = std::max(deadline, Clock::now() + kMetadataTimeout);  // each commit gets its own time
      OnThreads(begun.size(), [&](size_t k) {
        const uint32_t p = begun[k];
        ended[k] = EndTransaction(p, fenced_.at(p)->producer.get(), produced, of_partition.at(p), events, out, deadline, until);
      });
    }
    for (size_t k = 0; k < begun.size(); ++k) {
      const uint32_t p = begun[k];
      TxnEnd& e = ended[k];
      for (auto& [key, err] : e.refused) {
        if (limit_.RefusedForGood(key, err)) refused_[key] = std::string("kafka refused the record: ") + rd_kafka_err2str(err);
      }
      if (!e.status.ok() && failure.ok()) failure = e.status;
      if (!e.committed) {
        // Not committed (or not known to be): aborted, or dropped when the
        // producer can do nothing more; the next producer of p reads back
        // whatever did commit.
        if (e.kind.fatal) {
          fenced_.erase(p);
        } else {
          Abort(p);
        }
        continue;
      }
      for (size_t i : of_partition[p]) {
        if (!pending_[i].reported) continue;
        limit_.InTopic({p, events[i].event_id});
        uint64_t& d = delivered_[p];
        d = std::max(d, events[i].event_id);
        out.results[i].outcome = Outcome::kApplied;
      }
    }
    return failure;
  }

  // How a partition's transaction ended (EndTransaction).
  struct TxnEnd {
    bool committed = false;
    Status status = Status::Ok();  // why not
    TxnError kind;                 // of a failed commit
    std::vector<std::pair<std::pair<uint32_t, uint64_t>, rd_kafka_resp_err_t>> refused;  // by the broker
  };

  // Source partition p's part of a transactional batch, after its records
  // were produced (`produced`: every partition's were): waits for their
  // delivery reports until `deadline` and commits by `until` when each was
  // delivered (or refused before it was sent). Reads pending_ and out only
  // at `indexes` (its records, whose reports this thread serves); touches
  // nothing else of the sink (runs on its own thread).
  TxnEnd EndTransaction(uint32_t p, rd_kafka_t* rk, bool produced, const std::vector<size_t>& indexes,
                        std::span<const ChangeEvent> events, const ApplyResult& out, Clock::time_point deadline,
                        Clock::time_point until) const {
    TxnEnd end;
    while (rd_kafka_outq_len(rk) > 0 && Clock::now() < deadline) rd_kafka_flush(rk, 200);
    bool sent = produced;
    for (size_t i : indexes) {
      const Pending& r = pending_[i];
      if (out.results[i].outcome == Outcome::kRejected && !r.reported) continue;  // refused before sending
      if (r.reported && r.err == RD_KAFKA_RESP_ERR_NO_ERROR) continue;
      sent = false;
      const ChangeEvent& e = events[i];
      if (r.reported && IsPermanentRecordError(r.err)) {
        // Refused by the broker inside the transaction, which it spoils: the
        // retried batch leaves this record out.
        end.refused.push_back({{e.partition, e.event_id}, r.err});
      }
      if (end.status.ok()) {
        end.status = Unavailable(PartitionWhere(p) +
                                 (r.reported ? std::string("delivery failed: ") + rd_kafka_err2str(r.err)
                                             : std::string("records not delivered in time")) +
                                 "; its transaction is aborted");
      }
    }
    if (!sent) return end;
    std::tie(end.status, end.kind) = Commit(rk, until, PartitionWhere(p));
    end.committed = end.status.ok();
    return end;
  }

  // Commits a producer's open transaction, repeating what librdkafka says
  // may be repeated until `until`; the status and what kind of error it was.
  // Touches nothing of the sink (runs on its own thread).
  static std::pair<Status, TxnError> Commit(rd_kafka_t* rk, Clock::time_point until, const std::string& where) {
    for (;;) {
      const auto left =
          std::max<int64_t>(1, std::chrono::duration_cast<milliseconds>(until - Clock::now()).count());
      TxnError kind;
      Status st = TransactionStatus(rd_kafka_commit_transaction(rk, static_cast<int>(left)), where + "commit", &kind);
      if (st.ok() || !kind.retry || kind.fatal || kind.abort || Clock::now() >= until) return {st, kind};
    }
  }

  void Abort(uint32_t p) {
    const auto it = fenced_.find(p);
    if (it == fenced_.end()) return;
    TxnError kind;
    const Status st = TransactionStatus(
        rd_kafka_abort_transaction(it->second->producer.get(), static_cast<int>(kMetadataTimeout.count())),
        PartitionWhere(p) + "abort", &kind);
    // Not aborted: dropped; the next producer of the partition fences it,
    // which aborts its transaction.
    if (!st.ok()) fenced_.erase(it);
  }

  // The transactional id of source partition p: the same in every engine,
  // so that the one that takes p over fences the one that had it.
  std::string TransactionalId(uint32_t p) const {
    return "sluice-" + config_.name + "-" + topic_ + "-" + std::to_string(p);
  }

  std::string PartitionWhere(uint32_t p) const {
    return Where() + "partition " + std::to_string(p) + ": ";
  }

  // Transactional: the producer of one source partition.
  struct FencedProducer {
    KafkaHandle producer;
    rd_kafka_topic_t* rkt = nullptr;
    Clock::time_point last_used = Clock::now();  // made, or its last transaction begun
    FencedProducer() = default;
    FencedProducer(const FencedProducer&) = delete;
    FencedProducer& operator=(const FencedProducer&) = delete;
    // Drops what is queued or in flight, before the producer goes.
    void Purge() {
      rd_kafka_purge(producer.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      rd_kafka_poll(producer.get(), 0);
    }
    ~FencedProducer() {
      if (rkt != nullptr) rd_kafka_topic_destroy(rkt);
    }
  };

  // Source partition p's producer, made: its transactional id fences every
  // earlier producer of p (their open transaction is aborted, their later
  // records refused), and then `reader` reads back what the topic holds of
  // p (its last record's event id; none when it holds nothing of p).
  // Changes nothing of the sink (FenceAll keeps what it made): several run at
  // once, each with a reader of its own (FenceAll).
  struct Made {
    std::unique_ptr<FencedProducer> producer;
    std::optional<uint64_t> last;
  };
  Result<Made> MakeProducer(uint32_t p, rd_kafka_t* reader) {
    auto producer = Client(RD_KAFKA_PRODUCER, "p" + std::to_string(p), &KafkaSink::OnDelivery, TransactionalId(p));
    if (!producer.ok()) return producer.status();
    RETURN_IF_ERROR(TransactionStatus(
        rd_kafka_init_transactions(producer->get(), static_cast<int>(kMetadataTimeout.count())),
        PartitionWhere(p) + "taking the transactional id " + TransactionalId(p)));
    Made made;
    made.producer = std::make_unique<FencedProducer>();
    made.producer->rkt = rd_kafka_topic_new(producer->get(), topic_.c_str(), nullptr);
    if (made.producer->rkt == nullptr) return Internal(Where() + rd_kafka_err2str(rd_kafka_last_error()));
    made.producer->producer = std::move(producer).value();
    ASSIGN_OR_RETURN(made.last, LastOfPartition(p, reader));
    return made;
  }

  // Keeps a producer MakeProducer made.
  void Keep(uint32_t p, Made made) {
    if (made.last) {
      uint64_t& d = delivered_[p];
      d = std::max(d, *made.last);
    }
    fenced_[p] = std::move(made.producer);
  }

  // Makes a T for every i below n with make(i, reader), up to
  // read_back_concurrency at once (each a few round trips to the brokers:
  // at a takeover of 64 partitions, making their producers one after
  // another took about 24 ms each, 8 at once a third of that in all), each
  // thread with a read_committed consumer of its own: the calling thread
  // with Reader(), the others with one made for the call. `make` only reads
  // the sink. After a failure no thread starts another (each may wait for a
  // broker up to kReadTimeout, and the caller fails anyway). Then, on the
  // calling thread, keep(i, T) for each one made; returns the first failure.
  template <class T, class Make, class KeepMade>
  Status OnReaders(size_t n, Make&& make, KeepMade&& keep) {
    const size_t threads = std::max<size_t>(1, std::min<size_t>(options().read_back_concurrency, n));
    std::vector<std::optional<Result<T>>> made(n);  // not done: a failure first, or no reader
    std::vector<Status> started(threads);            // per thread: whether it had a reader
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    auto shared = Reader();  // made before the others start
    const auto caller = std::this_thread::get_id();
    auto run = [&](size_t k) {
      // A thread that could not be started (the process's limit): the
      // calling thread does its share with Reader() (k == 0) instead of
      // making a client, and its threads, of its own.
      if (k != 0 && std::this_thread::get_id() == caller) return;
      KafkaHandle own;
      rd_kafka_t* reader = nullptr;
      if (k == 0) {
        if (shared.ok()) reader = *shared;
        else started[k] = shared.status();
      } else if (auto made_reader = Client(RD_KAFKA_CONSUMER, "recover"); made_reader.ok()) {
        own = std::move(made_reader).value();
        reader = own.get();
      } else {
        started[k] = made_reader.status();
      }
      if (reader == nullptr) return;
      for (size_t i = next++; i < n && !failed; i = next++) {
        made[i] = make(i, reader);
        if (!made[i]->ok()) failed = true;
      }
    };
    OnThreads(threads, run);
    Status first = Status::Ok();
    for (const Status& st : started) {
      if (!st.ok() && first.ok()) first = st;
    }
    for (size_t i = 0; i < n; ++i) {
      if (!made[i].has_value()) continue;
      if (!made[i]->ok()) {
        if (first.ok()) first = made[i]->status();
        continue;
      }
      keep(i, std::move(*made[i]).value());
    }
    return first;
  }

  // Makes the producers of `partitions` (OnReaders), and keeps them.
  Status FenceAll(const std::vector<uint32_t>& partitions) {
    return OnReaders<Made>(
        partitions.size(), [&](size_t i, rd_kafka_t* reader) { return MakeProducer(partitions[i], reader); },
        [&](size_t i, Made made) { Keep(partitions[i], std::move(made)); });
  }

  // Idempotent: reads topic partitions back (PositionsOf, through
  // OnReaders): what each holds raises delivered_, and those read leave
  // unread_.
  Status ReadBack(const std::vector<int32_t>& topic_partitions) {
    return OnReaders<Positions>(
        topic_partitions.size(),
        [&](size_t i, rd_kafka_t* reader) { return PositionsOf(reader, topic_, topic_partitions[i], kReadTimeout); },
        [&](size_t i, const Positions& found) {
          for (const auto& [p, e] : found) {
            uint64_t& d = delivered_[p];
            d = std::max(d, e);
          }
          unread_.erase(topic_partitions[i]);
        });
  }

  // What the topic holds of source partition p (topic_readback.h); where
  // the log ends is asked of producer_, a read_uncommitted client that
  // several threads may ask at once.
  Result<std::optional<uint64_t>> LastOfPartition(uint32_t p, rd_kafka_t* reader) {
    return LastEventOf(producer_.get(), reader, topic_, TopicPartitionOf(p), p, kReadTimeout);
  }

  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<KafkaSink*>(opaque);
    const auto index = static_cast<size_t>(reinterpret_cast<uintptr_t>(m->_private));
    if (index >= self->pending_.size() || self->pending_[index].reported) return;
    self->pending_[index] = Pending{true, m->err};
    // Idempotent only (its Apply counts them); the transactional partitions'
    // threads (EndTransaction) leave it at 0.
    if (self->outstanding_ > 0) --self->outstanding_;
  }

  bool AllPartitionsAnswer(rd_kafka_t* rk, int32_t partitions) const {
    for (int32_t t = 0; t < partitions; ++t) {
      if (!QueryWatermarks(rk, topic_, t, kHealthTimeout).ok()) return false;
    }
    return true;
  }

  // Reads back what an earlier run of this sink delivered: for each topic
  // partition, the records after (and including) the last one that carries
  // sluice-positions.
  // Its reader goes afterwards: an idempotent sink reads back again only
  // at a takeover.
  Status Recover(int32_t partitions) {
    std::vector<int32_t> all(static_cast<size_t>(partitions));
    for (int32_t t = 0; t < partitions; ++t) all[static_cast<size_t>(t)] = t;
    const Status st = ReadBack(all);
    reader_.reset();
    return st;
  }

  // What this sink knew of source partitions goes (they were taken over,
  // and another engine may have written them meanwhile): transactional,
  // their producers (CloseProducers); idempotent, their topic partitions
  // are to be read back.
  void Forget(std::span<const uint32_t> partitions) {
    std::vector<std::unique_ptr<FencedProducer>> gone;
    for (const uint32_t p : partitions) {
      if (!transactional()) {
        unread_.insert(TopicPartitionOf(p));
      } else if (const auto it = fenced_.find(p); it != fenced_.end()) {
        gone.push_back(std::move(it->second));
        fenced_.erase(it);
      }
    }
    CloseProducers(std::move(gone));
  }

  // Producers go: what each has queued or in flight is dropped here, on the
  // calling thread (which serves their delivery reports); then they are
  // destroyed up to kClosesAtOnce at once. A destroy mostly waits for the
  // producer's threads to end: with 1,024 producers open, one after another
  // took 3.6 ms each (bench/run idle_kafka).
  static void CloseProducers(std::vector<std::unique_ptr<FencedProducer>> gone) {
    for (const auto& f : gone) f->Purge();
    std::atomic<size_t> next{0};
    OnThreads(std::min(kClosesAtOnce, gone.size()), [&](size_t) {
      for (size_t i = next++; i < gone.size(); i = next++) gone[i].reset();
    });
  }

  // Whether this sink knows what the topic holds of source partition p:
  // transactional, it has p's producer; idempotent, Forget() left p's topic
  // partition to be read back.
  bool Knows(uint32_t p) const {
    return transactional() ? fenced_.count(p) != 0 : unread_.count(TopicPartitionOf(p)) == 0;
  }

  // Learns what the topic holds of each of `partitions` this sink does not
  // know: transactional, by making their producers (FenceAll); idempotent,
  // by reading their topic partitions back. Keeps what it learned when it
  // fails.
  Status LearnAll(const std::set<uint32_t>& partitions) {
    std::vector<uint32_t> unknown;
    for (const uint32_t p : partitions) {
      if (!Knows(p)) unknown.push_back(p);
    }
    if (unknown.empty()) return Status::Ok();
    if (transactional()) return FenceAll(unknown);
    std::set<int32_t> unread;  // each topic partition once
    for (const uint32_t p : unknown) unread.insert(TopicPartitionOf(p));
    return ReadBack(std::vector<int32_t>(unread.begin(), unread.end()));
  }

  // The read_committed consumer that reads partitions back, made once.
  Result<rd_kafka_t*> Reader() {
    if (!reader_) {
      ASSIGN_OR_RETURN(reader_, Client(RD_KAFKA_CONSUMER, "recover"));
    }
    return reader_.get();
  }

  const config::SinkConfig config_;
  const uint32_t source_partitions_;
  const std::string topic_;
  KafkaHandle producer_;  // transactional: a consumer for metadata and reading back
  rd_kafka_topic_t* rkt_ = nullptr;  // idempotent only
  std::map<uint32_t, std::unique_ptr<FencedProducer>> fenced_;  // transactional: per source partition
  KafkaHandle reader_;  // a read_committed consumer for reading back (transactional; idempotent: at a takeover or a batch)
  std::set<int32_t> unread_;  // idempotent: topic partitions to read back before their next record (Forget)
  std::map<uint32_t, uint64_t> learned_;  // source partition -> the takeover token TakeOver() learned it under
  bool just_opened_ = false;  // Open() read the topic back (idempotent) and nothing was applied or taken since
  int32_t topic_partitions_ = 0;
  Positions delivered_;  // source partition -> highest event id known to be in the topic
  std::map<std::pair<uint32_t, uint64_t>, std::string> refused_;  // (partition, event id) -> why
  TopicLimit limit_;  // what the producers hold records to, and what a size refusal means
  std::vector<Pending> pending_;  // per event of the Apply in progress
  std::string value_buffer_;      // the record value being produced
  size_t outstanding_ = 0;  // idempotent: records of the Apply without a delivery report
};

}  // namespace

Result<std::unique_ptr<Sink>> MakeKafkaSink(const config::SinkConfig& sink, const config::Config& global) {
  const auto entity = global.entities.find(sink.entity);
  if (entity == global.entities.end()) {
    return InvalidArgument("sink '" + sink.name + "': unknown entity type '" + sink.entity + "'");
  }
  const KafkaSinkOptions& o = sink.Options<KafkaSinkOptions>();
  if (o.brokers.empty() || o.topic.empty()) {
    return InvalidArgument("sink '" + sink.name + "': brokers and topic are required");
  }
  return std::unique_ptr<Sink>(std::make_unique<KafkaSink>(sink, entity->second.partitions));
}

}  // namespace sluice::connectors::kafka
