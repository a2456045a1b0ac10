#include "connectors/kafka/kafka_client.h"

#include <openssl/x509.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/log.h"

namespace sluice::connectors::kafka {
namespace {

// The last error librdkafka reported for each live handle (its error
// callback: a failed TLS handshake or SASL login, brokers down), so that a
// call that timed out can say why.
std::mutex& ErrorsMutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<const rd_kafka_t*, std::string>& LastErrors() {
  static auto* errors = new std::unordered_map<const rd_kafka_t*, std::string>();
  return *errors;
}
// And the last broker certificate refused, with OpenSSL's reason, which
// librdkafka's own message about the failed handshake leaves out.
std::unordered_map<const rd_kafka_t*, std::string>& LastRefusals() {
  static auto* refusals = new std::unordered_map<const rd_kafka_t*, std::string>();
  return *refusals;
}

void ErrorCallback(rd_kafka_t* rk, int, const char* reason, void*) {
  std::lock_guard lock(ErrorsMutex());
  LastErrors()[rk] = reason != nullptr ? reason : "";
}

// librdkafka's own log lines (connection refused, broker down, ...) go to
// sluice's log, rate-limited per facility so that an outage is a few lines.
void LogCallback(const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
  const LogLevel l = level <= 3 ? LogLevel::kError : level <= 4 ? LogLevel::kWarn : LogLevel::kInfo;
  if (l == LogLevel::kInfo) return;
  // A connection that failed (TLS handshake, SASL login): the reason a later timeout gives.
  if (l == LogLevel::kError && std::string_view(fac) == "FAIL") {
    std::lock_guard lock(ErrorsMutex());
    LastErrors()[rk] = buf;
  }
  // Said on every start of a producer that sets it, which the sink always does.
  if (std::string_view(buf).find("enable.gapless.guarantee is experimental") != std::string_view::npos) return;
  LogRateLimited(l, std::string("kafka.librdkafka.") + fac, std::string("librdkafka: ") + fac + ": " + buf);
}

// The broker's certificate, as OpenSSL checked it (ssl.certificate.verify_cb):
// refused with the reason OpenSSL gives ("certificate has expired"), which
// librdkafka's own message leaves out.
int CertificateCheck(rd_kafka_t* rk, const char* broker, int32_t, int* x509_error, int depth, const char*, size_t,
                     char* errstr, size_t errstr_size, void*) {
  if (*x509_error == X509_V_OK) return 1;
  std::snprintf(errstr, errstr_size, "the certificate of %s (depth %d in its chain) is refused: %s", broker, depth,
                X509_verify_cert_error_string(*x509_error));
  std::lock_guard lock(ErrorsMutex());
  LastRefusals()[rk] = errstr;
  return 0;
}

// " (last broker error: REASON)" after an Unavailable of `rk`, when it recorded one.
Status WithBrokerError(Status st, const rd_kafka_t* rk) {
  if (st.code() != StatusCode::kUnavailable) return st;
  std::lock_guard lock(ErrorsMutex());
  std::string why;
  if (const auto it = LastErrors().find(rk); it != LastErrors().end() && !it->second.empty()) why = it->second;
  if (const auto it = LastRefusals().find(rk); it != LastRefusals().end()) {
    why += (why.empty() ? "" : "; ") + it->second;
  }
  if (why.empty()) return st;
  return Status(st.code(), st.message() + " (last broker error: " + why + ")");
}

// Whether `rk` met a refusal that waiting will not cure: a broker
// certificate refused, a failed TLS handshake or SASL login, the broker
// refusing our certificate (or its absence).
bool Refused(const rd_kafka_t* rk) {
  std::lock_guard lock(ErrorsMutex());
  if (LastRefusals().contains(rk)) return true;
  const auto it = LastErrors().find(rk);
  if (it == LastErrors().end()) return false;
  const std::string& e = it->second;
  return e.find("SSL handshake failed") != std::string::npos || e.find("Authentication failed") != std::string::npos ||
         e.find("alert bad certificate") != std::string::npos ||  // the broker wants a client certificate
         e.find("alert certificate required") != std::string::npos;
}

Status Set(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
    return InvalidArgument("librdkafka property " + name + ": " + errstr);
  }
  return Status::Ok();
}

Status FromErr(rd_kafka_resp_err_t err, const std::string& what) {
  switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return Status::Ok();
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
      return NotFound(what + ": " + rd_kafka_err2str(err));
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR_INVALID_REPLICATION_FACTOR:
    case RD_KAFKA_RESP_ERR_INVALID_PARTITIONS:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
      return FailedPrecondition(what + ": " + rd_kafka_err2str(err));
    default:
      return Unavailable(what + ": " + rd_kafka_err2str(err));
  }
}

}  // namespace

void KafkaDeleter::operator()(rd_kafka_t* rk) const {
  if (rk == nullptr) return;
  rd_kafka_destroy(rk);
  std::lock_guard lock(ErrorsMutex());
  LastErrors().erase(rk);
  LastRefusals().erase(rk);
}

Result<KafkaHandle> NewClient(const KafkaSinkOptions& config, const ClientOptions& options) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto fail = [&](Status st) -> Result<KafkaHandle> {
    rd_kafka_conf_destroy(conf);
    return st;
  };
  const bool producer = options.type == RD_KAFKA_PRODUCER;
  std::vector<std::pair<std::string, std::string>> settings = {
      {"bootstrap.servers", config.brokers},
      {"client.id", options.client_id},
  };
  const bool transactional = producer && !options.transactional_id.empty();
  if (transactional) {
    const std::string timeout = std::to_string(options.transaction_timeout.count());
    settings.insert(settings.end(), {
        {"transactional.id", options.transactional_id},
        {"transaction.timeout.ms", timeout},
        // At most the transaction's timeout (librdkafka requires it); a record
        // that expires fails its transaction, which is aborted: no gap.
        {"message.timeout.ms", timeout},
    });
  }
  if (producer) {
    settings.insert(settings.end(), {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        // librdkafka's own default, stated: Apply waits for its whole batch
        // (batch_max, 20,000 by default), so the linger delays only the
        // batch's tail, and a longer one gives the broker fewer, larger
        // requests per partition (docs/BENCHMARKS.md, Kafka sink, session 7).
        {"linger.ms", "5"},
    });
    if (!transactional) {
      settings.insert(settings.end(), {
          // A record that fails makes the producer fail instead of letting
          // later records of its partition through: the topic never has a gap
          // that a later record (or its sluice-positions header) would paper
          // over.
          {"enable.gapless.guarantee", "true"},
          // Records never expire in librdkafka's queue: an expired record
          // could leave a gap before later records of its partition (the
          // gapless guarantee does not cover timeouts). Apply bounds its own
          // wait by delivery_timeout, and Close purges what is left.
          {"message.timeout.ms", "0"},
      });
    }
  } else {
    // The sink's consumers read a partition up to an end they asked for
    // first. A transactional partition ends in a commit marker, which is
    // never delivered: the read ends at the partition's end-of-file event,
    // which comes with an empty fetch, and the broker holds an empty fetch
    // for fetch.wait.max.ms (librdkafka's 500 ms by default). With that,
    // every partition read back (a producer made at a takeover or after
    // producer_idle, verify) waited 0.5-1 s instead of 16-24 ms
    // (docs/BENCHMARKS.md, "Taking partitions over").
    settings.insert(settings.end(), {{"enable.partition.eof", "true"},
                                     {"fetch.wait.max.ms", "10"},
                                     {"enable.auto.commit", "false"},
                                     {"isolation.level", options.read_uncommitted ? "read_uncommitted"
                                                                                  : "read_committed"}});
  }
  // Producer-only properties on a consumer, and consumer-only ones on a
  // producer, would only draw librdkafka warnings: each goes to its side.
  static constexpr std::string_view kConsumerOnly[] = {
      "fetch.wait.max.ms", "fetch.min.bytes", "fetch.max.bytes", "fetch.message.max.bytes",
      "max.partition.fetch.bytes", "fetch.error.backoff.ms", "fetch.queue.backoff.ms", "queued.min.messages",
      "queued.max.messages.kbytes", "check.crcs"};
  static constexpr std::string_view kProducerOnly[] = {
      "linger.ms", "queue.buffering.max.ms", "batch.num.messages", "batch.size", "compression.type",
      "compression.codec", "compression.level", "queue.buffering.max.messages", "queue.buffering.max.kbytes",
      "max.in.flight.requests.per.connection", "max.in.flight", "retries", "message.send.max.retries",
      "retry.backoff.ms", "partitioner", "sticky.partitioning.linger.ms", "enable.gapless.guarantee",
      "request.timeout.ms", "message.copy.max.bytes", "queuing.strategy"};
  for (const auto& [name, value] : config.properties) {
    const std::span<const std::string_view> other_side =
        producer ? std::span<const std::string_view>(kConsumerOnly) : std::span<const std::string_view>(kProducerOnly);
    if (std::find(other_side.begin(), other_side.end(), name) == other_side.end()) {
      settings.emplace_back(name, value);
    }
  }
  if (producer && options.max_message_bytes > 0 && options.max_message_bytes < ProducerMessageLimit(config)) {
    // Set last, over the sink's own values: see ClientOptions. A batch stops
    // growing at the smaller of the two; batch.size also goes below the
    // least message.max.bytes librdkafka takes.
    settings.emplace_back("message.max.bytes",
                          std::to_string(std::max(options.max_message_bytes, kLibrdkafkaMinMessageMaxBytes)));
    settings.emplace_back("batch.size", std::to_string(std::min(options.max_message_bytes, ProducerBatchSize(config))));
  }
  if (producer && options.one_record_per_batch) settings.emplace_back("batch.num.messages", "1");
  for (auto& property : config.SecurityProperties()) settings.push_back(std::move(property));
  // No KIP-714 client metrics pushed to the brokers (librdkafka 2.5 and
  // later; unknown to older ones, which push none). With it on, librdkafka
  // waited a second in one in eight to three in eight destroys, and a stop
  // with 1,024 transactional producers open took 86-179 s
  // (docs/BENCHMARKS_LOG.md, 2026-12-02 03:10). Set before the sink's
  // properties, which may turn it back on.
  char unused[512];
  (void)rd_kafka_conf_set(conf, "enable.metrics.push", "false", unused, sizeof(unused));
  if (!producer) {
    // A consumer reads ahead up to 20,000 records (librdkafka's 100,000
    // held a verify's whole partition: 116 against 76 MiB at 1,000,000
    // events, bench/run kafka_verify), fetching again 10 ms after its queue
    // was full (librdkafka's 1 s wait tripled the verify's time). A
    // librdkafka without fetch.queue.backoff.ms (Debian's 2.0.2) keeps its
    // own read-ahead.
    if (rd_kafka_conf_set(conf, "fetch.queue.backoff.ms", "10", unused, sizeof(unused)) == RD_KAFKA_CONF_OK) {
      (void)rd_kafka_conf_set(conf, "queued.min.messages", "20000", unused, sizeof(unused));
    }
  }
  for (const auto& [name, value] : settings) {
    if (Status st = Set(conf, name, value); !st.ok()) return fail(st);
  }
  rd_kafka_conf_set_log_cb(conf, LogCallback);
  rd_kafka_conf_set_error_cb(conf, ErrorCallback);
  if (config.security == KafkaSinkOptions::Security::kSsl || config.security == KafkaSinkOptions::Security::kSaslSsl) {
    if (rd_kafka_conf_set_ssl_cert_verify_cb(conf, CertificateCheck) != RD_KAFKA_CONF_OK) {
      return fail(Internal("librdkafka has no ssl.certificate.verify_cb (built without TLS?)"));
    }
  }
  if (options.delivery_report != nullptr) rd_kafka_conf_set_dr_msg_cb(conf, options.delivery_report);
  if (options.opaque != nullptr) rd_kafka_conf_set_opaque(conf, options.opaque);
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(options.type, conf, errstr, sizeof(errstr));
  if (rk == nullptr) return fail(InvalidArgument(std::string("librdkafka: ") + errstr));
  return KafkaHandle(rk);  // rd_kafka_new owns conf on success
}

Result<int32_t> TopicPartitionCount(rd_kafka_t* rk, const std::string& topic, std::chrono::milliseconds timeout) {
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  if (rkt == nullptr) return InvalidArgument("topic " + topic + ": " + rd_kafka_err2str(rd_kafka_last_error()));
  const rd_kafka_metadata_t* md = nullptr;
  // Asked in slices, so that a refusal no wait will cure (a certificate
  // refused, a failed login) ends the wait at once.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__TIMED_OUT;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    err = rd_kafka_metadata(rk, 0, rkt, &md, static_cast<int>(std::min<int64_t>(left.count(), 500)));
    if ((err != RD_KAFKA_RESP_ERR__TIMED_OUT && err != RD_KAFKA_RESP_ERR__TRANSPORT) || Refused(rk)) break;
  }
  rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return WithBrokerError(FromErr(err, "metadata of topic " + topic), rk);
  Result<int32_t> out = Unavailable("metadata of topic " + topic + ": not in the broker's answer");
  for (int i = 0; i < md->topic_cnt; ++i) {
    const rd_kafka_metadata_topic_t& t = md->topics[i];
    if (topic != t.topic) continue;
    if (t.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      out = FromErr(t.err, "topic " + topic);
    } else if (t.partition_cnt <= 0) {
      out = NotFound("topic " + topic + " has no partitions");
    } else {
      out = t.partition_cnt;
    }
  }
  rd_kafka_metadata_destroy(md);
  return out;
}

namespace {

// Where an admin request's reply is polled from; destroyed with it.
struct AdminReply {
  rd_kafka_queue_t* queue = nullptr;
  rd_kafka_AdminOptions_t* options = nullptr;
  rd_kafka_event_t* event = nullptr;  // nullptr: no answer in time
  AdminReply(const AdminReply&) = delete;
  AdminReply& operator=(const AdminReply&) = delete;
  AdminReply() = default;
  ~AdminReply() {
    if (event != nullptr) rd_kafka_event_destroy(event);
    if (options != nullptr) rd_kafka_AdminOptions_destroy(options);
    if (queue != nullptr) rd_kafka_queue_destroy(queue);
  }
};

// Sends one admin request (`issue`, with its options and reply queue) and
// waits for the reply until `timeout` (and a second more).
void AdminRequest(rd_kafka_t* rk, rd_kafka_admin_op_t op, std::chrono::milliseconds timeout,
                  const std::function<void(rd_kafka_AdminOptions_t*, rd_kafka_queue_t*)>& issue, AdminReply& reply) {
  char errstr[512];
  reply.queue = rd_kafka_queue_new(rk);
  reply.options = rd_kafka_AdminOptions_new(rk, op);
  rd_kafka_AdminOptions_set_request_timeout(reply.options, static_cast<int>(timeout.count()), errstr, sizeof(errstr));
  if (op == RD_KAFKA_ADMIN_OP_CREATETOPICS || op == RD_KAFKA_ADMIN_OP_DELETETOPICS) {
    rd_kafka_AdminOptions_set_operation_timeout(reply.options, static_cast<int>(timeout.count()), errstr,
                                                sizeof(errstr));
  }
  issue(reply.options, reply.queue);
  reply.event = rd_kafka_queue_poll(reply.queue, static_cast<int>(timeout.count()) + 1000);
}

// The error of a whole admin reply (not of one of its topics), or ok.
Status ReplyError(rd_kafka_event_t* ev, const std::string& what) {
  if (ev == nullptr) return Unavailable(what + ": no answer in time");
  if (rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();
  const char* reason = rd_kafka_event_error_string(ev);
  return FromErr(rd_kafka_event_error(ev), what + (reason != nullptr ? std::string(" (") + reason + ")" : ""));
}

// One admin request on topics: `issue` sends it with the options and the
// reply queue, `results` picks the per-topic results out of the reply, and a
// topic whose error `fine` accepts counts as done. `what` names the request
// in errors.
Status TopicAdmin(rd_kafka_t* rk, rd_kafka_admin_op_t op, std::chrono::milliseconds timeout, const std::string& what,
                  const std::function<void(rd_kafka_AdminOptions_t*, rd_kafka_queue_t*)>& issue,
                  const std::function<const rd_kafka_topic_result_t**(rd_kafka_event_t*, size_t*)>& results,
                  const std::function<bool(rd_kafka_resp_err_t)>& fine) {
  AdminReply reply;
  AdminRequest(rk, op, timeout, issue, reply);
  RETURN_IF_ERROR(ReplyError(reply.event, what));
  size_t n = 0;
  const rd_kafka_topic_result_t** topics = results(reply.event, &n);
  if (topics == nullptr) return Internal(what + ": unexpected reply " + rd_kafka_event_name(reply.event));
  Status st = Status::Ok();
  for (size_t i = 0; i < n; ++i) {
    const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(topics[i]);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR || fine(err)) continue;
    const char* msg = rd_kafka_topic_result_error_string(topics[i]);
    st = FromErr(err, what + " (" + rd_kafka_topic_result_name(topics[i]) +
                          (msg != nullptr ? std::string(": ") + msg : "") + ")");
  }
  return st;
}

}  // namespace

Status CreateTopic(rd_kafka_t* rk, const std::string& topic, int32_t partitions, int32_t replication_factor,
                   std::chrono::milliseconds timeout) {
  char errstr[512];
  rd_kafka_NewTopic_t* nt =
      rd_kafka_NewTopic_new(topic.c_str(), partitions, replication_factor, errstr, sizeof(errstr));
  if (nt == nullptr) return InvalidArgument("topic " + topic + ": " + errstr);
  Status st = TopicAdmin(
      rk, RD_KAFKA_ADMIN_OP_CREATETOPICS, timeout, "creating topic " + topic,
      [&](rd_kafka_AdminOptions_t* opts, rd_kafka_queue_t* queue) { rd_kafka_CreateTopics(rk, &nt, 1, opts, queue); },
      [](rd_kafka_event_t* ev, size_t* n) -> const rd_kafka_topic_result_t** {
        const rd_kafka_CreateTopics_result_t* res = rd_kafka_event_CreateTopics_result(ev);
        return res == nullptr ? nullptr : rd_kafka_CreateTopics_result_topics(res, n);
      },
      [](rd_kafka_resp_err_t err) { return err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS; });
  rd_kafka_NewTopic_destroy(nt);
  return st;
}

Result<std::vector<std::string>> TopicsStartingWith(rd_kafka_t* rk, const std::string& prefix,
                                                    std::chrono::milliseconds timeout) {
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, nullptr, &md, static_cast<int>(timeout.count()));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) return WithBrokerError(FromErr(err, "listing topics"), rk);
  std::vector<std::string> out;
  for (int i = 0; i < md->topic_cnt; ++i) {
    const std::string_view name = md->topics[i].topic;
    if (name.rfind("__", 0) != 0 && name.rfind(prefix, 0) == 0) out.emplace_back(name);
  }
  rd_kafka_metadata_destroy(md);
  return out;
}

Status DeleteTopics(rd_kafka_t* rk, const std::vector<std::string>& topics, std::chrono::milliseconds timeout) {
  if (topics.empty()) return Status::Ok();
  std::vector<rd_kafka_DeleteTopic_t*> dts;
  dts.reserve(topics.size());
  for (const std::string& t : topics) dts.push_back(rd_kafka_DeleteTopic_new(t.c_str()));
  Status st = TopicAdmin(
      rk, RD_KAFKA_ADMIN_OP_DELETETOPICS, timeout, "deleting " + std::to_string(topics.size()) + " topics",
      [&](rd_kafka_AdminOptions_t* opts, rd_kafka_queue_t* queue) {
        rd_kafka_DeleteTopics(rk, dts.data(), dts.size(), opts, queue);
      },
      [](rd_kafka_event_t* ev, size_t* n) -> const rd_kafka_topic_result_t** {
        const rd_kafka_DeleteTopics_result_t* res = rd_kafka_event_DeleteTopics_result(ev);
        return res == nullptr ? nullptr : rd_kafka_DeleteTopics_result_topics(res, n);
      },
      [](rd_kafka_resp_err_t err) { return err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART; });
  rd_kafka_DeleteTopic_destroy_array(dts.data(), dts.size());
  return st;
}

Result<int64_t> TopicMessageLimit(rd_kafka_t* rk, const std::string& topic, std::chrono::milliseconds timeout) {
  const std::string what = "configs of topic " + topic;
  // A topic just created may not be known yet to the broker asked (the
  // caller found it in the metadata): asked again later. A cluster that
  // cannot describe configs is told apart from one that did not answer.
  auto error = [&](rd_kafka_resp_err_t err, const char* reason) -> Status {
    const std::string text = what + (reason != nullptr ? std::string(" (") + reason + ")" : "");
    switch (err) {
      case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
      case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        return Unavailable(text + ": " + rd_kafka_err2str(err));
      case RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION:
      case RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE:
      case RD_KAFKA_RESP_ERR_INVALID_REQUEST:
      case RD_KAFKA_RESP_ERR_INVALID_CONFIG:
        return FailedPrecondition(text + ": " + rd_kafka_err2str(err));
      default:
        return FromErr(err, text);
    }
  };
  rd_kafka_ConfigResource_t* resource = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
  AdminReply reply;
  AdminRequest(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS, timeout, [&](rd_kafka_AdminOptions_t* opts, rd_kafka_queue_t* q) {
    rd_kafka_DescribeConfigs(rk, &resource, 1, opts, q);
  }, reply);
  rd_kafka_ConfigResource_destroy(resource);
  if (reply.event == nullptr) return Unavailable(what + ": no answer in time");
  if (const rd_kafka_resp_err_t err = rd_kafka_event_error(reply.event)) {
    return error(err, rd_kafka_event_error_string(reply.event));
  }
  const rd_kafka_DescribeConfigs_result_t* result = rd_kafka_event_DescribeConfigs_result(reply.event);
  size_t n = 0;
  const rd_kafka_ConfigResource_t** resources =
      result == nullptr ? nullptr : rd_kafka_DescribeConfigs_result_resources(result, &n);
  if (resources == nullptr || n != 1) return Internal(what + ": unexpected reply " + rd_kafka_event_name(reply.event));
  if (const rd_kafka_resp_err_t err = rd_kafka_ConfigResource_error(resources[0])) {
    return error(err, rd_kafka_ConfigResource_error_string(resources[0]));
  }
  size_t count = 0;
  const rd_kafka_ConfigEntry_t** entries = rd_kafka_ConfigResource_configs(resources[0], &count);
  for (size_t i = 0; i < count; ++i) {
    if (std::strcmp(rd_kafka_ConfigEntry_name(entries[i]), "max.message.bytes") != 0) continue;
    const char* value = rd_kafka_ConfigEntry_value(entries[i]);
    int64_t limit = 0;
    const std::string_view text = value != nullptr ? value : "";
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), limit);
    if (ec != std::errc() || end != text.data() + text.size() || limit <= 0) {
      return Internal(what + ": max.message.bytes is '" + std::string(text) + "'");
    }
    return limit;
  }
  return Internal(what + ": no max.message.bytes in the reply");
}

namespace {

// A positive integer property of the sink's, else `otherwise`.
int64_t IntegerProperty(const KafkaSinkOptions& config, const std::string& name, int64_t otherwise) {
  const auto it = config.properties.find(name);
  if (it == config.properties.end()) return otherwise;
  const std::string& v = it->second;
  int64_t set = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), set);
  return ec == std::errc() && end == v.data() + v.size() && set > 0 ? set : otherwise;
}

}  // namespace

int64_t ProducerMessageLimit(const KafkaSinkOptions& config) {
  return IntegerProperty(config, "message.max.bytes", kLibrdkafkaMessageMaxBytes);
}

int64_t ProducerBatchSize(const KafkaSinkOptions& config) {
  return IntegerProperty(config, "batch.size", kLibrdkafkaBatchSize);
}

Result<Watermarks> QueryWatermarks(rd_kafka_t* rk, const std::string& topic, int32_t partition,
                                   std::chrono::milliseconds timeout) {
  Watermarks w;
  const rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(rk, topic.c_str(), partition, &w.low, &w.high,
                                                                   static_cast<int>(timeout.count()));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return WithBrokerError(FromErr(err, "offsets of " + topic + "/" + std::to_string(partition)), rk);
  }
  return w;
}

Status ReadPartition(rd_kafka_t* consumer, const std::string& topic, int32_t partition, int64_t from, int64_t to,
                     const std::function<void(const rd_kafka_message_t&)>& each, std::chrono::milliseconds timeout) {
  if (from >= to) return Status::Ok();
  const std::string where = topic + "/" + std::to_string(partition);
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(consumer, topic.c_str(), nullptr);
  if (rkt == nullptr) return InvalidArgument("topic " + topic + ": " + rd_kafka_err2str(rd_kafka_last_error()));
  if (rd_kafka_consume_start(rkt, partition, from) != 0) {
    const Status st = FromErr(rd_kafka_last_error(), "reading " + where);
    rd_kafka_topic_destroy(rkt);
    return st;
  }
  Status st = Status::Ok();
  auto last_progress = std::chrono::steady_clock::now();
  int64_t next = from;
  bool waiting_for_transaction = false;
  while (next < to) {
    rd_kafka_message_t* m = rd_kafka_consume(rkt, partition, 100);
    if (m == nullptr) {
      if (std::chrono::steady_clock::now() - last_progress > timeout) {
        st = Unavailable("reading " + where + ": no record for " + std::to_string(timeout.count()) + " ms at offset " +
                         std::to_string(next) +
                         (waiting_for_transaction ? " (a transaction still open holds the records from there on)" : ""));
        break;
      }
      continue;
    }
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      // The end of what can be read: offsets up to `to` were markers or
      // aborted records, or are gone.
      next = std::max(next, m->offset);
      rd_kafka_message_destroy(m);
      if (next >= to) break;
      // Below `to`: a transaction still open holds the records from `next`
      // on (read_committed stops there until it ends): waited for, without
      // counting as progress. (A log truncated below `to` ends the same
      // way, by the timeout; the caller's next try asks for the end again.)
      waiting_for_transaction = true;
      continue;
    }
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      st = FromErr(m->err, "reading " + where);
      rd_kafka_message_destroy(m);
      break;
    }
    last_progress = std::chrono::steady_clock::now();
    if (m->offset >= to) {
      rd_kafka_message_destroy(m);
      break;
    }
    next = m->offset + 1;
    each(*m);
    rd_kafka_message_destroy(m);
    last_progress = std::chrono::steady_clock::now();  // the wait counts from here, not from before `each`
  }
  rd_kafka_consume_stop(rkt, partition);
  rd_kafka_topic_destroy(rkt);
  return st;
}

std::optional<std::string_view> HeaderValue(const rd_kafka_message_t& m, std::string_view name) {
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(&m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return std::nullopt;
  const void* value = nullptr;
  size_t size = 0;
  if (rd_kafka_header_get_last(headers, std::string(name).c_str(), &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      value == nullptr) {
    return std::nullopt;
  }
  return std::string_view(static_cast<const char*>(value), size);
}

Status TransactionStatus(rd_kafka_error_t* error, const std::string& what, TxnError* kind) {
  if (error == nullptr) return Status::Ok();
  TxnError k;
  k.fatal = rd_kafka_error_is_fatal(error) != 0;
  k.abort = rd_kafka_error_txn_requires_abort(error) != 0;
  k.retry = rd_kafka_error_is_retriable(error) != 0;
  const rd_kafka_resp_err_t code = rd_kafka_error_code(error);
  std::string message = what + ": " + rd_kafka_error_string(error);
  rd_kafka_error_destroy(error);
  if (kind != nullptr) *kind = k;
  if (code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED || code == RD_KAFKA_RESP_ERR__FENCED ||
      code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH) {
    return Unavailable(message + " (a newer producer with this transactional id took over)");
  }
  if (code == RD_KAFKA_RESP_ERR__NOT_CONFIGURED || code == RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION ||
      code == RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED ||
      code == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED || code == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE) {
    return FailedPrecondition(message);
  }
  return Unavailable(message);
}

bool IsPermanentRecordError(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
      return true;
    default:
      return false;
  }
}

}  // namespace sluice::connectors::kafka
