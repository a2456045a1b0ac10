#include "bench/engine_bench_lag_kafka.h"

#include <librdkafka/rdkafka.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "bench/bench_common.h"
#include "bench/engine_bench_util.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/kafka_options.h"
#include "connectors/kafka/record_codec.h"
#include "core/partitioner.h"

namespace sluice::bench {

namespace kafka = connectors::kafka;

namespace {

constexpr std::chrono::milliseconds kMetadataTimeout{10000};

class KafkaObserver : public LagObserver {
 public:
  KafkaObserver(kafka::KafkaHandle consumer, std::string topic, int32_t partitions, std::vector<std::string> ids)
      : consumer_(std::move(consumer)), topic_(std::move(topic)), partitions_(partitions), last_(ids.size()) {
    for (size_t k = 0; k < ids.size(); ++k) number_of_[ids[k]] = static_cast<uint32_t>(k);
    for (auto& v : last_) v.store(0);
  }

  void Start() override {
    // Every partition from where it ends now (what the run produces, not
    // what an earlier run left), read before the load starts, on one queue:
    // the simple consumer needs no group.
    queue_ = rd_kafka_queue_new(consumer_.get());
    rkt_ = rd_kafka_topic_new(consumer_.get(), topic_.c_str(), nullptr);
    for (int32_t p = 0; p < partitions_; ++p) {
      const auto ends = kafka::QueryWatermarks(consumer_.get(), topic_, p, kMetadataTimeout);
      if (!ends.ok()) {
        status_ = ends.status();
        return;
      }
      if (rd_kafka_consume_start_queue(rkt_, p, ends->high, queue_) != 0) {
        status_ = Unavailable(std::string("kafka: cannot consume ") + topic_ + ": " +
                              rd_kafka_err2str(rd_kafka_last_error()));
        return;
      }
      ++started_;
    }
    thread_ = std::thread([this] { Loop(); });
  }

  Status Stop() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (int32_t p = 0; p < started_; ++p) (void)rd_kafka_consume_stop(rkt_, p);
    if (rkt_ != nullptr) rd_kafka_topic_destroy(rkt_);
    if (queue_ != nullptr) rd_kafka_queue_destroy(queue_);
    rkt_ = nullptr;
    queue_ = nullptr;
    started_ = 0;
    return status_;
  }
  uint64_t last(size_t k) const override { return last_[k].load(); }
  uint64_t polls() const override { return polls_.load(); }
  uint64_t went_back() const override { return went_back_.load(); }
  uint64_t gaps() const override { return gaps_.load(); }
  size_t observations() const override { return observations_.load(); }
  double cycle_ms() const override { return 0; }  // the consumer waits for records, it does not poll a view
  const std::vector<Seen>& seen() const override { return seen_; }

 private:
  void Loop() {
    while (!stop_) {
      rd_kafka_message_t* m = rd_kafka_consume_queue(queue_, 100);
      if (m == nullptr) continue;
      const int64_t now_us = RealtimeMicros();
      polls_.fetch_add(1, std::memory_order_relaxed);
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF || m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) Record(*m, now_us);
      } else {
        status_ = Unavailable(std::string("kafka: consumer: ") + rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        return;
      }
      rd_kafka_message_destroy(m);
    }
  }

  void Record(const rd_kafka_message_t& m, int64_t now_us) {
    if (m.key == nullptr) return;
    const auto it = number_of_.find(std::string(static_cast<const char*>(m.key), m.key_len));
    if (it == number_of_.end()) return;
    const auto header = kafka::HeaderValue(m, kafka::kHeaderVersion);
    const std::optional<uint64_t> v = header ? kafka::ParseDecimalHeader(*header) : std::nullopt;
    if (!v) return;
    const uint32_t k = it->second;
    const uint64_t last = last_[k].load(std::memory_order_relaxed);
    if (*v <= last) {
      went_back_.fetch_add(1);  // a duplicate, or out of order
      return;
    }
    if (last != 0 && *v != last + 1) gaps_.fetch_add(1);  // a version missing in between
    seen_.push_back(Seen{k, *v, now_us});
    last_[k].store(*v);
    observations_.fetch_add(1, std::memory_order_relaxed);
  }

  kafka::KafkaHandle consumer_;
  rd_kafka_queue_t* queue_ = nullptr;
  rd_kafka_topic_t* rkt_ = nullptr;
  int32_t started_ = 0;  // partitions consumed
  const std::string topic_;
  const int32_t partitions_;
  std::unordered_map<std::string, uint32_t> number_of_;
  std::vector<std::atomic<uint64_t>> last_;
  std::vector<Seen> seen_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> polls_{0}, went_back_{0}, gaps_{0};
  std::atomic<size_t> observations_{0};
  Status status_ = Status::Ok();
  std::thread thread_;
};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) static_cast<std::atomic<uint64_t>*>(opaque)->fetch_add(1);
}

}  // namespace

Result<std::unique_ptr<LagObserver>> KafkaLagObserver(const config::SinkConfig& sink, std::vector<std::string> ids) {
  kafka::KafkaSinkOptions options = sink.Options<kafka::KafkaSinkOptions>();
  // A follower, not a reader of ranges: the broker answers its fetch as soon
  // as a record comes, and librdkafka's 500 ms (not the sink's 10 for its
  // read-backs) keeps it from asking a hundred times a second in between,
  // which the broker's CPU per record would count.
  options.properties["fetch.wait.max.ms"] = "500";
  kafka::ClientOptions c;
  c.type = RD_KAFKA_CONSUMER;
  c.client_id = "engine_bench_lag";
  ASSIGN_OR_RETURN(auto consumer, kafka::NewClient(options, c));
  const std::string topic = kafka::TopicName(options.topic, sink.entity);
  ASSIGN_OR_RETURN(const int32_t partitions, kafka::TopicPartitionCount(consumer.get(), topic, kMetadataTimeout));
  return std::unique_ptr<LagObserver>(
      std::make_unique<KafkaObserver>(std::move(consumer), topic, partitions, std::move(ids)));
}

struct KafkaRawLoad::Client {
  kafka::KafkaHandle producer;
  rd_kafka_topic_t* topic = nullptr;
  std::atomic<uint64_t> failed{0};  // delivery reports with an error
  ~Client() {
    if (topic != nullptr) rd_kafka_topic_destroy(topic);
  }
};

// A transactional baseline's source partition: the records due for it, taken
// by its thread a round at a time.
struct KafkaRawLoad::Lane {
  std::mutex mu;
  std::condition_variable ready;
  std::vector<Record> records;
  bool done = false;
};

KafkaRawLoad::KafkaRawLoad(const LagOptions& o, const config::SinkConfig& sink, uint32_t partitions)
    : o_(o),
      sink_(sink),
      partitions_(partitions),
      transactional_(sink.Options<kafka::KafkaSinkOptions>().transactional),
      version_(o.entities, 0) {}

KafkaRawLoad::~KafkaRawLoad() = default;

Result<std::unique_ptr<KafkaRawLoad::Client>> KafkaRawLoad::NewProducer(const std::string& transactional_id) {
  const auto& options = sink_.Options<kafka::KafkaSinkOptions>();
  auto client = std::make_unique<Client>();
  kafka::ClientOptions c;
  c.type = RD_KAFKA_PRODUCER;
  c.client_id = "engine_bench_raw";
  c.delivery_report = &OnDelivery;
  c.opaque = &client->failed;
  c.transactional_id = transactional_id;
  ASSIGN_OR_RETURN(client->producer, kafka::NewClient(options, c));
  if (!transactional_id.empty()) {
    if (rd_kafka_error_t* error = rd_kafka_init_transactions(client->producer.get(), 30000)) {
      const std::string message = rd_kafka_error_string(error);
      rd_kafka_error_destroy(error);
      return Unavailable("kafka_raw: init_transactions " + transactional_id + ": " + message);
    }
  }
  return client;
}

Status KafkaRawLoad::Open() {
  const auto& options = sink_.Options<kafka::KafkaSinkOptions>();
  ASSIGN_OR_RETURN(auto first, NewProducer(""));
  rd_kafka_t* rk = first->producer.get();
  const std::string topic = kafka::TopicName(options.topic, sink_.entity);
  auto count = kafka::TopicPartitionCount(rk, topic, kMetadataTimeout);
  if (!count.ok() && count.status().code() == StatusCode::kNotFound) {
    const int32_t partitions = static_cast<int32_t>(options.partitions != 0 ? options.partitions : partitions_);
    RETURN_IF_ERROR(kafka::CreateTopic(rk, topic, partitions, static_cast<int32_t>(options.replication_factor),
                                       kMetadataTimeout));
    const auto until = Clock::now() + kMetadataTimeout;
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      count = kafka::TopicPartitionCount(rk, topic, kMetadataTimeout);
    } while (!count.ok() && Clock::now() < until);
  }
  if (!count.ok()) return count.status();
  topic_partitions_ = *count;
  if (!transactional_ && o_.raw_tx_producers != 1) {
    return InvalidArgument("kafka_raw: raw_tx_producers needs a transactional sink");
  }
  if (transactional_) {
    // As the sink: a producer (or o_.raw_tx_producers, taking the rounds in
    // turn) per source partition, each transactional id taken before the run.
    for (uint32_t p = 0; p < partitions_; ++p) {
      for (uint32_t j = 0; j < std::max<uint32_t>(1, o_.raw_tx_producers); ++j) {
        ASSIGN_OR_RETURN(auto c, NewProducer(o_.run_id + "-raw-" + std::to_string(p) + "-" + std::to_string(j)));
        clients_.push_back(std::move(c));
      }
    }
  } else {
    clients_.push_back(std::move(first));
  }
  for (auto& c : clients_) {
    c->topic = rd_kafka_topic_new(c->producer.get(), topic.c_str(), nullptr);
    if (c->topic == nullptr) return Internal("kafka: cannot make a topic handle for " + topic);
  }
  return Status::Ok();
}

bool KafkaRawLoad::Produce(Client& c, Record& r, Clock::time_point give_up) {
  rd_kafka_t* rk = c.producer.get();
  rd_kafka_resp_err_t err;
  while ((err = rd_kafka_producev(rk, RD_KAFKA_V_RKT(c.topic), RD_KAFKA_V_PARTITION(r.topic_partition),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_KEY(r.key.data(), r.key.size()),
                                  RD_KAFKA_V_VALUE(r.value.data(), r.value.size()), RD_KAFKA_V_HEADERS(r.headers),
                                  RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL &&
         Clock::now() < give_up) {
    rd_kafka_poll(rk, 1);  // delivery reports free room; a broker gone for good ends the run
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(r.headers);
    Problem(std::string("kafka_raw: cannot produce: ") + rd_kafka_err2str(err));
  }
  r.headers = nullptr;  // librdkafka's now
  return err == RD_KAFKA_RESP_ERR_NO_ERROR;
}

void KafkaRawLoad::Problem(std::string p) {
  std::lock_guard lock(problems_mu_);
  problems_.push_back(std::move(p));
}

std::vector<std::string> KafkaRawLoad::problems() const {
  std::lock_guard lock(problems_mu_);
  return problems_;
}

// A source partition's rounds as transactions: begin, the records due since
// the last round, commit (which waits for them and for the coordinator);
// with several producers, each round on the next one.
void KafkaRawLoad::RunLane(uint32_t p, Lane& lane, Clock::time_point give_up) {
  const uint32_t producers = std::max<uint32_t>(1, o_.raw_tx_producers);
  uint32_t turn = 0;
  std::vector<Record> round;
  auto check = [&](rd_kafka_error_t* error, const char* what) {
    if (error == nullptr) return true;
    Problem(std::string("kafka_raw: partition ") + std::to_string(p) + ": " + what + ": " +
            rd_kafka_error_string(error));
    rd_kafka_error_destroy(error);
    return false;
  };
  // A failed transaction is aborted (not left open to hold back the
  // consumers of its topic partition) and ends the lane: the run reports it.
  auto abort_open = [&](Client& c) {
    if (rd_kafka_error_t* error = rd_kafka_abort_transaction(c.producer.get(), 30000)) {
      rd_kafka_error_destroy(error);
    }
  };
  for (bool ok = true;;) {
    round.clear();
    {
      std::unique_lock lock(lane.mu);
      lane.ready.wait(lock, [&] { return !lane.records.empty() || lane.done; });
      if (lane.records.empty()) return;
      round.swap(lane.records);
    }
    if (!ok) {  // a failed transaction ends the lane: its records are dropped
      for (auto& r : round) rd_kafka_headers_destroy(r.headers);
      continue;
    }
    Client& c = *clients_[p * producers + turn];
    turn = (turn + 1) % producers;
    if (!check(rd_kafka_begin_transaction(c.producer.get()), "begin")) {
      ok = false;
      for (auto& r : round) rd_kafka_headers_destroy(r.headers);
      continue;
    }
    for (auto& r : round) {
      if (ok) {
        ok = Produce(c, r, give_up);
      } else {
        rd_kafka_headers_destroy(r.headers);
      }
    }
    if (ok) ok = check(rd_kafka_commit_transaction(c.producer.get(), 30000), "commit");
    if (!ok) abort_open(c);
  }
}

void KafkaRawLoad::Run(Clock::time_point start, uint64_t total, Clock::time_point window_begin,
                       Clock::time_point end) {
  const auto format = sink_.Options<kafka::KafkaSinkOptions>().format;
  const auto give_up = end + std::chrono::seconds(30);
  const std::string note = MakeNote(o_.run_id, 30);
  std::vector<uint32_t> partition_of(o_.entities);
  for (uint64_t k = 0; k < o_.entities; ++k) partition_of[k] = PartitionOf(LagEntityId(o_.run_id, k), partitions_);
  std::vector<uint64_t> next_event_id(partitions_, 1);
  std::vector<std::unique_ptr<Lane>> lanes;
  std::vector<std::thread> threads;
  if (transactional_) {
    for (uint32_t p = 0; p < partitions_; ++p) {
      lanes.push_back(std::make_unique<Lane>());
      threads.emplace_back([this, p, &lane = *lanes.back(), give_up] { RunLane(p, lane, give_up); });
    }
  }
  auto due_at = [&](uint64_t i) {
    return start +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(static_cast<double>(i) / o_.rate));
  };
  connectors::ChangeEvent e;
  e.entity_type = sink_.entity;
  e.command_name = "patch";
  std::vector<std::vector<Record>> due(partitions_);
  uint64_t i = 0;
  bool failed = false;
  while (i < total && !failed) {
    const auto now = Clock::now();
    if (now >= end) {
      unsent += total - i;
      break;
    }
    uint64_t n = 0;
    for (; i < total && due_at(i) <= now; ++i, ++n) {
      const uint64_t k = EntityOf(i, o_.entities, 7);
      const uint32_t p = partition_of[k];
      e.partition = p;
      e.event_id = next_event_id[p]++;
      e.entity_id = LagEntityId(o_.run_id, k);
      e.version = ++version_[k];
      e.command_id = o_.run_id + "-lc" + std::to_string(i);
      e.state = R"({"balance":)" + std::to_string(i) + R"(,"note":")" + note + R"(","owner":"o)" +
                std::to_string(k % 1000) + "\"}";
      e.committed_at_us = RealtimeMicros();
      Record r;
      r.key = e.entity_id;
      kafka::AppendValue(r.value, e, format);
      const std::string version = std::to_string(e.version), event_id = std::to_string(e.event_id),
                        partition = std::to_string(e.partition);
      r.headers = rd_kafka_headers_new(4);
      auto add = [&](std::string_view name, std::string_view v) {
        rd_kafka_header_add(r.headers, name.data(), static_cast<ssize_t>(name.size()), v.data(),
                            static_cast<ssize_t>(v.size()));
      };
      add(kafka::kHeaderEntityType, e.entity_type);
      add(kafka::kHeaderVersion, version);
      add(kafka::kHeaderEventId, event_id);
      add(kafka::kHeaderPartition, partition);
      r.topic_partition = static_cast<int32_t>(p % static_cast<uint32_t>(topic_partitions_));
      if (transactional_) {
        due[p].push_back(std::move(r));
      } else if (!Produce(*clients_[0], r, give_up)) {
        failed = true;
        break;
      }
      produced_[{static_cast<uint32_t>(k), e.version}] = e.committed_at_us;
      ++produced_count;
      if (now >= window_begin) ++window_events;
    }
    for (uint32_t p = 0; p < due.size(); ++p) {  // the round's records to their partitions' transactions
      if (due[p].empty()) continue;
      Lane& lane = *lanes[p];
      {
        std::lock_guard lock(lane.mu);
        for (auto& r : due[p]) lane.records.push_back(std::move(r));
      }
      due[p].clear();
      lane.ready.notify_one();
    }
    backlog = n;
    if (!transactional_) rd_kafka_poll(clients_[0]->producer.get(), 0);  // delivery reports
    if (i < total && !failed) std::this_thread::sleep_until(std::min(due_at(i), end));
  }
  for (auto& lane : lanes) {
    {
      std::lock_guard lock(lane->mu);
      lane->done = true;
    }
    lane->ready.notify_one();
  }
  for (auto& t : threads) t.join();
  for (auto& c : clients_) {
    if (!transactional_ && rd_kafka_flush(c->producer.get(), 30000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      Problem("kafka_raw: flush timed out");
    }
    if (c->failed.load() > 0) {
      Problem("kafka_raw: " + std::to_string(c->failed.load()) + " records were not delivered");
    }
  }
}

}  // namespace sluice::bench
