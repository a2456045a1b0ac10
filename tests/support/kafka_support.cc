#include "tests/support/kafka_support.h"

#include <librdkafka/rdkafka.h>

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

namespace sluice::testing {
namespace {

struct Destroy {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using Handle = std::unique_ptr<rd_kafka_t, Destroy>;

struct DestroyEvent {
  void operator()(rd_kafka_event_t* ev) const { rd_kafka_event_destroy(ev); }
};
using Event = std::unique_ptr<rd_kafka_event_t, DestroyEvent>;

// Sends one admin request (`issue`, given the reply queue) and waits for the
// reply: the event, or null with *error (`what` names the request).
Event AdminCall(rd_kafka_t* rk, const std::string& what, const std::function<void(rd_kafka_queue_t*)>& issue,
                std::string* error) {
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  issue(q);
  Event ev(rd_kafka_queue_poll(q, 20000));
  rd_kafka_queue_destroy(q);
  if (!ev) {
    *error = "no answer to " + what;
  } else if (rd_kafka_event_error(ev.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    *error = what + ": " + rd_kafka_event_error_string(ev.get());
    ev.reset();
  }
  return ev;
}

// Test clients stay quiet: a refused connection is what some tests expect.
void Quiet(const rd_kafka_t*, int, const char*, const char*) {}

Handle NewHandle(rd_kafka_type_t type, std::string* error, bool uncommitted = false,
                 const std::string& transactional_id = "") {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  rd_kafka_conf_set(conf, "bootstrap.servers", KafkaBrokers().c_str(), errstr, sizeof(errstr));
  if (type == RD_KAFKA_CONSUMER) {
    rd_kafka_conf_set(conf, "enable.partition.eof", "true", errstr, sizeof(errstr));
    rd_kafka_conf_set(conf, "isolation.level", uncommitted ? "read_uncommitted" : "read_committed", errstr,
                      sizeof(errstr));
    // A read to a partition's end ends with an empty fetch, which the broker
    // would hold for librdkafka's default 500 ms (the sink's readers ask 10).
    rd_kafka_conf_set(conf, "fetch.wait.max.ms", "10", errstr, sizeof(errstr));
  } else {
    if (!transactional_id.empty()) {
      rd_kafka_conf_set(conf, "transactional.id", transactional_id.c_str(), errstr, sizeof(errstr));
    }
    rd_kafka_conf_set(conf, "acks", "all", errstr, sizeof(errstr));
  }
  rd_kafka_conf_set_log_cb(conf, Quiet);
  rd_kafka_t* rk = rd_kafka_new(type, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    if (error != nullptr) *error = errstr;
    return nullptr;
  }
  return Handle(rk);
}

int PartitionCount(rd_kafka_t* rk, const std::string& topic, std::string* error) {
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
  rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (error != nullptr) *error = rd_kafka_err2str(err);
    return -1;
  }
  int n = -1;
  if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) n = md->topics[0].partition_cnt;
  if (n < 0 && error != nullptr) {
    *error = md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "no such topic";
  }
  rd_kafka_metadata_destroy(md);
  return n;
}

}  // namespace

std::string KafkaBrokers() {
  const char* v = std::getenv("SLUICE_TEST_KAFKA_BROKERS");
  return v != nullptr && *v != '\0' ? v : "127.0.0.1:19092";
}

bool KafkaRequiredByCi() {
  const char* v = std::getenv("CI");
  return v != nullptr && std::string(v) == "true";
}

bool KafkaReachable() {
  Handle rk = NewHandle(RD_KAFKA_PRODUCER, nullptr);
  if (!rk) return false;
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk.get(), 0, nullptr, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) return false;
  rd_kafka_metadata_destroy(md);
  return true;
}

std::vector<KafkaRecord> ReadTopic(const std::string& topic, std::string* error, bool uncommitted) {
  std::vector<KafkaRecord> out;
  Handle rk = NewHandle(RD_KAFKA_CONSUMER, error, uncommitted);
  if (!rk) return out;
  // The log's end from a read_uncommitted handle (a read_committed one
  // answers the last stable offset, which lags a just-committed transaction
  // until its commit markers are written).
  Handle ends = NewHandle(RD_KAFKA_CONSUMER, error, /*uncommitted=*/true);
  if (!ends) return out;
  const int partitions = PartitionCount(rk.get(), topic, error);
  for (int p = 0; p < partitions; ++p) {
    int64_t low = 0, high = 0;
    if (const auto err = rd_kafka_query_watermark_offsets(ends.get(), topic.c_str(), p, &low, &high, 10000); err) {
      if (error != nullptr) *error = rd_kafka_err2str(err);
      return {};
    }
    if (low >= high) continue;
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
    rd_kafka_consume_start(rkt, p, low);
    auto last = std::chrono::steady_clock::now();
    // Read_committed stops where a transaction is still open: its markers
    // come within moments of its commit, so that end is waited for 2 s;
    // after that the transaction is taken to be one left open (a frozen
    // producer's), and what comes before it is what a consumer sees.
    std::optional<std::chrono::steady_clock::time_point> stopped_at;
    for (int64_t next = low; next < high;) {
      rd_kafka_message_t* m = rd_kafka_consume(rkt, p, 200);
      if (m == nullptr) {
        if (stopped_at && std::chrono::steady_clock::now() - *stopped_at > std::chrono::seconds(2)) break;
        if (std::chrono::steady_clock::now() - last > std::chrono::seconds(20)) {
          if (error != nullptr) *error = "no progress reading " + topic;
          rd_kafka_consume_stop(rkt, p);
          rd_kafka_topic_destroy(rkt);
          return {};
        }
        continue;
      }
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (m->offset >= high) {
          next = high;
        } else if (!stopped_at) {
          stopped_at = std::chrono::steady_clock::now();
        }
      } else if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        last = std::chrono::steady_clock::now();
        stopped_at.reset();
        KafkaRecord r;
        r.partition = p;
        r.offset = m->offset;
        if (m->key != nullptr) r.key.assign(static_cast<const char*>(m->key), m->key_len);
        if (m->payload != nullptr) r.value.assign(static_cast<const char*>(m->payload), m->len);
        rd_kafka_headers_t* hdrs = nullptr;
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
          const char* name = nullptr;
          const void* value = nullptr;
          size_t size = 0;
          for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
               ++i) {
            r.headers[name] = value != nullptr ? std::string(static_cast<const char*>(value), size) : "";
          }
        }
        next = m->offset + 1;
        out.push_back(std::move(r));
      }
      rd_kafka_message_destroy(m);
    }
    rd_kafka_consume_stop(rkt, p);
    rd_kafka_topic_destroy(rkt);
  }
  return out;
}

bool CreateTopic(const std::string& topic, int partitions, std::string* error,
                 const std::map<std::string, std::string>& configs) {
  Handle rk = NewHandle(RD_KAFKA_PRODUCER, error);
  if (!rk) return false;
  char errstr[512];
  rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, errstr, sizeof(errstr));
  if (nt == nullptr) {
    *error = errstr;
    return false;
  }
  for (const auto& [name, value] : configs) {
    if (rd_kafka_resp_err_t err = rd_kafka_NewTopic_set_config(nt, name.c_str(), value.c_str())) {
      *error = name + ": " + rd_kafka_err2str(err);
      rd_kafka_NewTopic_destroy(nt);
      return false;
    }
  }
  const Event ev = AdminCall(rk.get(), "CreateTopics", [&](rd_kafka_queue_t* q) {
    rd_kafka_CreateTopics(rk.get(), &nt, 1, nullptr, q);
  }, error);
  rd_kafka_NewTopic_destroy(nt);
  bool ok = false;
  if (ev) {
    size_t n = 0;
    const rd_kafka_topic_result_t** res =
        rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev.get()), &n);
    ok = n == 1 && (rd_kafka_topic_result_error(res[0]) == RD_KAFKA_RESP_ERR_NO_ERROR ||
                    rd_kafka_topic_result_error(res[0]) == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS);
    if (!ok) *error = n == 1 ? rd_kafka_err2str(rd_kafka_topic_result_error(res[0])) : "no result";
  }
  // Metadata reaches the broker's cache shortly after creation.
  for (int i = 0; ok && i < 50 && PartitionCount(rk.get(), topic, nullptr) != partitions; ++i) {
    rd_kafka_poll(rk.get(), 100);
  }
  return ok;
}

namespace {

// True when the cluster describes `topic` with every one of `configs`.
bool TopicConfigsAre(rd_kafka_t* rk, const std::string& topic, const std::map<std::string, std::string>& configs) {
  rd_kafka_ConfigResource_t* res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
  std::string error;
  const Event ev = AdminCall(rk, "DescribeConfigs", [&](rd_kafka_queue_t* q) {
    rd_kafka_DescribeConfigs(rk, &res, 1, nullptr, q);
  }, &error);
  rd_kafka_ConfigResource_destroy(res);
  size_t matched = 0;
  if (ev) {
    size_t n = 0;
    const rd_kafka_ConfigResource_t** rs =
        rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(ev.get()), &n);
    size_t count = 0;
    const rd_kafka_ConfigEntry_t** entries = n == 1 ? rd_kafka_ConfigResource_configs(rs[0], &count) : nullptr;
    for (size_t i = 0; i < count; ++i) {
      const auto it = configs.find(rd_kafka_ConfigEntry_name(entries[i]));
      const char* value = rd_kafka_ConfigEntry_value(entries[i]);
      if (it != configs.end() && value != nullptr && it->second == value) ++matched;
    }
  }
  return matched == configs.size();
}

}  // namespace

bool SetTopicConfigs(const std::string& topic, const std::map<std::string, std::string>& configs,
                     std::string* error) {
  Handle rk = NewHandle(RD_KAFKA_PRODUCER, error);
  if (!rk) return false;
  rd_kafka_ConfigResource_t* res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
  for (const auto& [name, value] : configs) rd_kafka_ConfigResource_set_config(res, name.c_str(), value.c_str());
  const Event ev = AdminCall(rk.get(), "AlterConfigs", [&](rd_kafka_queue_t* q) {
    rd_kafka_AlterConfigs(rk.get(), &res, 1, nullptr, q);
  }, error);
  rd_kafka_ConfigResource_destroy(res);
  bool ok = false;
  if (ev) {
    size_t n = 0;
    const rd_kafka_ConfigResource_t** rs =
        rd_kafka_AlterConfigs_result_resources(rd_kafka_event_AlterConfigs_result(ev.get()), &n);
    ok = n == 1 && rd_kafka_ConfigResource_error(rs[0]) == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (!ok) *error = n == 1 ? rd_kafka_err2str(rd_kafka_ConfigResource_error(rs[0])) : "no result";
  }
  // The brokers apply the change a moment after the controller took it: the
  // call returns once a broker describes the topic with it.
  for (int i = 0; ok && i < 100; ++i) {
    if (TopicConfigsAre(rk.get(), topic, configs)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (ok) *error = "the brokers did not describe topic " + topic + " with the new configs in time";
  return false;
}

namespace {

// Queues every record on one partition; false with *error.
bool ProduceAll(rd_kafka_t* rk, const std::string& topic, int32_t partition, const std::vector<KafkaRecord>& records,
                std::string* error) {
  for (const KafkaRecord& r : records) {
    rd_kafka_headers_t* hdrs = rd_kafka_headers_new(r.headers.size());
    for (const auto& [name, value] : r.headers) {
      rd_kafka_header_add(hdrs, name.data(), static_cast<ssize_t>(name.size()), value.data(),
                          static_cast<ssize_t>(value.size()));
    }
    const auto err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                       RD_KAFKA_V_KEY(r.key.data(), r.key.size()),
                                       RD_KAFKA_V_VALUE(const_cast<char*>(r.value.data()), r.value.size()),
                                       RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_headers_destroy(hdrs);
      *error = rd_kafka_err2str(err);
      return false;
    }
  }
  if (rd_kafka_flush(rk, 20000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    *error = "records not delivered within 20 s";
    return false;
  }
  return true;
}

// librdkafka's reason, or empty for no error (which it destroys).
std::string Reason(rd_kafka_error_t* e) {
  if (e == nullptr) return "";
  std::string out = rd_kafka_error_string(e);
  rd_kafka_error_destroy(e);
  return out.empty() ? "error" : out;
}

}  // namespace

bool ProduceRaw(const std::string& topic, int32_t partition, const std::vector<KafkaRecord>& records,
                std::string* error) {
  Handle rk = NewHandle(RD_KAFKA_PRODUCER, error);
  return rk && ProduceAll(rk.get(), topic, partition, records, error);
}

std::unique_ptr<OpenTransaction> OpenTransaction::Start(const std::string& topic, int32_t partition,
                                                        const std::string& transactional_id,
                                                        const std::vector<KafkaRecord>& records,
                                                        std::string* error) {
  Handle rk = NewHandle(RD_KAFKA_PRODUCER, error, false, transactional_id);
  if (!rk) return nullptr;
  std::string why = Reason(rd_kafka_init_transactions(rk.get(), 20000));
  if (why.empty()) why = Reason(rd_kafka_begin_transaction(rk.get()));
  if (!why.empty()) {
    *error = why;
    return nullptr;
  }
  if (!ProduceAll(rk.get(), topic, partition, records, error)) return nullptr;
  return std::unique_ptr<OpenTransaction>(new OpenTransaction(rk.release()));
}

OpenTransaction::~OpenTransaction() { rd_kafka_destroy(static_cast<rd_kafka_t*>(rk_)); }

std::string OpenTransaction::Commit() {
  return Reason(rd_kafka_commit_transaction(static_cast<rd_kafka_t*>(rk_), 20000));
}

std::vector<std::string> CheckVersionsPerKey(const std::vector<KafkaRecord>& records,
                                             std::map<std::string, uint64_t>* last_versions, size_t max_problems) {
  std::vector<std::string> problems;
  std::map<std::string, uint64_t> last;
  for (const KafkaRecord& r : records) {
    const auto h = r.headers.find("sluice-version");
    const std::string where = r.key + " at " + std::to_string(r.partition) + "/" + std::to_string(r.offset);
    if (h == r.headers.end()) {
      if (problems.size() < max_problems) problems.push_back(where + ": no sluice-version header");
      continue;
    }
    const uint64_t v = std::stoull(h->second);
    uint64_t& prev = last[r.key];
    if (v != prev + 1 && problems.size() < max_problems) {
      problems.push_back(where + ": version " + std::to_string(v) + " after " + std::to_string(prev) +
                         (v <= prev ? " (repeated or backwards)" : " (missing versions)"));
    }
    prev = std::max(prev, v);
  }
  if (last_versions != nullptr) *last_versions = std::move(last);
  return problems;
}

int KafkaService(const std::string& action) {
  const std::string cmd = "'" + std::string(SLUICE_SOURCE_DIR) + "/scripts/services' " + action + " kafka";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

}  // namespace sluice::testing
