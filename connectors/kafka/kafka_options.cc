#include "connectors/kafka/kafka_options.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "config/redact.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/record_codec.h"
#include "core/names.h"

namespace sluice::connectors::kafka {
namespace {

using config::Field;

// One kafka sink's keys while it is read.
class KafkaKeys : public config::SinkOptionsRead {
 public:
  KafkaKeys(config::SinkOptionReader& reader, config::SinkConfig& sink)
      : r_(reader), sink_(sink), tls_(reader, [this] { return &o().tls; }) {}

  std::vector<config::SinkOptionKey> Keys() override {
    std::vector<config::SinkOptionKey> keys = {
        {"brokers", true, [this](const Field& f) { ReadBrokers(f); }},
        {"topic", true, [this](const Field& f) { ReadTopic(f); }},
        {"format", false, [this](const Field& f) { ReadFormat(f); }},
        {"create_topic", false, [this](const Field& f) { r_.ReadBool(f, &o().create_topic); }},
        {"partitions", false,
         [this](const Field& f) {
           create_options_key_ = r_.Keep(f);
           r_.ReadUint(f, 1, 100000, &o().partitions);
         }},
        {"replication_factor", false,
         [this](const Field& f) {
           create_options_key_ = r_.Keep(f);
           r_.ReadUint(f, 1, 32767, &o().replication_factor);
         }},
        {"delivery_timeout", false,
         [this](const Field& f) {
           r_.ReadDuration(f, std::chrono::milliseconds(std::chrono::seconds(1)),
                           std::chrono::milliseconds(std::chrono::hours(1)), &o().delivery_timeout);
         }},
        {"transactional", false, [this](const Field& f) { r_.ReadBool(f, &o().transactional); }},
        {"producer_idle", false,
         [this](const Field& f) {
           producer_idle_key_ = r_.Keep(f);
           r_.ReadDuration(f, std::chrono::milliseconds(100), std::chrono::milliseconds(std::chrono::hours(24)),
                           &o().producer_idle);
         }},
        {"read_back_concurrency", false,
         [this](const Field& f) { r_.ReadUint(f, 1, 64, &o().read_back_concurrency); }},
        {"properties", false, [this](const Field& f) { ReadProperties(f); }},
        {"security", false, [this](const Field& f) { ReadSecurity(f); }},
        {"sasl_mechanism", false,
         [this](const Field& f) {
           sasl_keys_.push_back(r_.Keep(f));
           sasl_given_.insert("sasl_mechanism");
           const auto text = r_.PlainScalar(f, "SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN");
           if (!text) return;
           if (*text != "SCRAM-SHA-256" && *text != "SCRAM-SHA-512" && *text != "PLAIN") {
             return r_.Expected(f, "SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN", *text);
           }
           o().sasl_mechanism = *text;
         }},
        {"sasl_username", false,
         [this](const Field& f) {
           sasl_keys_.push_back(r_.Keep(f));
           sasl_given_.insert("sasl_username");
           r_.ReadString(f, false, &o().sasl_username);
         }},
        {"sasl_password", false,
         [this](const Field& f) {
           sasl_keys_.push_back(r_.Keep(f));
           sasl_given_.insert("sasl_password");
           r_.ReadSecret(f, &o().sasl_password);
         }},
    };
    tls_.Add(keys);
    return keys;
  }

  // partitions and replication_factor only with create_topic: the last one given.
  void Check(const Field& sink) override {
    const KafkaSinkOptions& k = sink_.Options<KafkaSinkOptions>();
    if (producer_idle_key_ && !k.transactional) {
      r_.KeyProblem(*producer_idle_key_, "only with transactional: true (the idempotent sink has one producer)");
    }
    if (create_options_key_ && !k.create_topic) {
      r_.KeyProblem(*create_options_key_, "only with create_topic: true");
    }
    using Security = KafkaSinkOptions::Security;
    const bool tls = k.security == Security::kSsl || k.security == Security::kSaslSsl;
    const bool sasl = k.security == Security::kSaslSsl || k.security == Security::kSaslPlaintext;
    tls_.Check(tls, "security: ssl or sasl_ssl");
    if (!sasl) {
      for (const auto& f : sasl_keys_) r_.KeyProblem(*f, "only with security: sasl_ssl or sasl_plaintext");
    } else {
      std::string missing;
      for (const char* key : {"sasl_mechanism", "sasl_username", "sasl_password"}) {
        if (sasl_given_.count(key)) continue;
        missing += (missing.empty() ? "" : ", ") + std::string(key);
      }
      if (!missing.empty()) r_.Problem(security_key_ ? *security_key_ : sink, "needs " + missing);
    }
    // A property the documented keys set is not given twice.
    for (const auto& [name, value] : k.SecurityProperties()) {
      if (const auto it = property_keys_.find(name); it != property_keys_.end()) {
        r_.KeyProblem(*it->second, "is set by the sink's security, tls_* or sasl_* keys: give it there only");
      }
    }
  }

 private:
  // "host:port[,host:port...]", as librdkafka's bootstrap.servers.
  void ReadBrokers(const Field& f) {
    constexpr std::string_view kExpected = "a list of host:port separated by commas";
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    std::string_view rest = *text;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view one = rest.substr(0, comma);
      const size_t colon = one.rfind(':');
      const std::string_view digits = colon == std::string_view::npos ? "" : one.substr(colon + 1);
      uint32_t port = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
      const bool port_ok = !digits.empty() && digits.size() <= 19 && ec == std::errc() &&
                           end == digits.data() + digits.size() && port >= 1 && port <= 65535;
      if (colon == std::string_view::npos || !IsValidHostName(std::string(one.substr(0, colon))) || !port_ok) {
        return r_.Expected(f, kExpected, *text);
      }
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    o().brokers = *text;
  }

  // A topic name template: {type} is replaced; the rest must be legal in a
  // Kafka topic name ([A-Za-z0-9._-], at most 249 characters).
  void ReadTopic(const Field& f) {
    constexpr std::string_view kExpected = "a topic name of [A-Za-z0-9._-] (with {type} for the entity type)";
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    std::string literal = *text;
    for (size_t at; (at = literal.find("{type}")) != std::string::npos;) literal.erase(at, 6);
    const bool ok = !text->empty() && text->size() <= 249 && *text != "." && *text != ".." &&
                    std::all_of(literal.begin(), literal.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                             c == '.' || c == '_' || c == '-';
                    });
    if (!ok) return r_.Expected(f, kExpected, *text);
    o().topic = *text;
  }

  void ReadFormat(const Field& f) {
    constexpr std::string_view kExpected = "json or protobuf";
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    if (*text == "json") {
      o().format = KafkaSinkOptions::Format::kJson;
    } else if (*text == "protobuf") {
      o().format = KafkaSinkOptions::Format::kProtobuf;
    } else {
      r_.Expected(f, kExpected, *text);
    }
  }

  void ReadSecurity(const Field& f) {
    constexpr std::string_view kExpected = "plaintext, ssl, sasl_ssl or sasl_plaintext";
    security_key_ = r_.Keep(f);
    const auto text = r_.PlainScalar(f, kExpected);
    if (!text) return;
    using Security = KafkaSinkOptions::Security;
    static const std::map<std::string_view, Security> kValues = {{"plaintext", Security::kPlaintext},
                                                                 {"ssl", Security::kSsl},
                                                                 {"sasl_ssl", Security::kSaslSsl},
                                                                 {"sasl_plaintext", Security::kSaslPlaintext}};
    const auto it = kValues.find(*text);
    if (it == kValues.end()) return r_.Expected(f, kExpected, *text);
    o().security = it->second;
  }

  // librdkafka properties, each checked by librdkafka itself (its message is
  // quoted), except those the sink sets for its guarantees.
  void ReadProperties(const Field& at) {
    static const std::map<std::string_view, std::string_view> kOwned = {
        {"bootstrap.servers", "set brokers instead"},
        {"metadata.broker.list", "set brokers instead"},
        {"enable.idempotence", "the sink always uses the idempotent producer"},
        {"acks", "the sink always uses acks=all"},
        {"request.required.acks", "the sink always uses acks=all"},
        {"transactional.id", "the sink names one per source partition (set transactional instead)"},
        {"transaction.timeout.ms", "the sink sets it from delivery_timeout"},
        {"isolation.level", "the sink reads its topic back with read_committed"},
        {"enable.gapless.guarantee", "the sink always sets it (docs/sinks/kafka.md)"},
        {"message.timeout.ms", "set delivery_timeout instead"},
        {"delivery.timeout.ms", "set delivery_timeout instead"},
        // librdkafka would dlopen these while the config is read, in every
        // command (even `config check`): code runs from a config file only
        // through plugins:.
        {"plugin.library.paths", "librdkafka would load those libraries into sluice; sluice loads no code from "
                                 "sink properties (list connector plugins under plugins:)"},
        {"ssl.engine.location", "librdkafka would load that library into sluice; sluice loads no code from "
                                "sink properties"},
    };
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    r_.ForEachEntry(at, [&](const Field& f) {
      const std::string& name = config::FieldKey(f);
      if (const auto it = kOwned.find(name); it != kOwned.end()) {
        r_.KeyProblem(f, "is set by the kafka sink: " + std::string(it->second));
        return;
      }
      std::string value;
      bool reference = false;
      if (!r_.ReadSecret(f, &value, &reference)) return;
      char errstr[512];
      if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        // librdkafka quotes the value; a secret one is kept out of the message.
        std::string why = errstr;
        const bool secret = reference || config::IsSecretName(name);
        if (secret && !value.empty()) {
          const std::string quoted = "\"" + value + "\"";
          for (size_t i; (i = why.find(quoted)) != std::string::npos;) {
            why.replace(i, quoted.size(), "\"" + std::string(config::kRedactedValue) + "\"");
          }
        }
        r_.Problem(f, secret && !value.empty() && why.find(value) != std::string::npos
                          ? "librdkafka refuses this property (its value is secret)"
                          : "librdkafka refuses it: " + why);
        return;
      }
      o().properties[name] = value;
      property_keys_[name] = r_.Keep(f);
    });
    rd_kafka_conf_destroy(conf);
  }

  // The sink's options, made when one of its keys is read (SinkType::read).
  KafkaSinkOptions& o() { return sink_.MutableOptions<KafkaSinkOptions>(); }

  config::SinkOptionReader& r_;
  config::SinkConfig& sink_;
  std::shared_ptr<const Field> create_options_key_;
  std::shared_ptr<const Field> producer_idle_key_;
  config::TlsKeysRead tls_;
  std::shared_ptr<const Field> security_key_;
  std::vector<std::shared_ptr<const Field>> sasl_keys_;
  std::set<std::string> sasl_given_;
  std::map<std::string, std::shared_ptr<const Field>> property_keys_;
};

void PrintKafkaSink(const config::SinkConfig& sink, config::SinkOptionPrinter& out) {
  const KafkaSinkOptions& k = sink.Options<KafkaSinkOptions>();
  out.Value("brokers", k.brokers);
  out.Value("topic", k.topic);
  out.Value("format", k.format == KafkaSinkOptions::Format::kProtobuf ? "protobuf" : "json");
  out.Value("create_topic", k.create_topic);
  if (k.create_topic) {
    out.Value("partitions", uint64_t{k.partitions});
    out.Value("replication_factor", uint64_t{k.replication_factor});
  }
  out.Duration("delivery_timeout", k.delivery_timeout);
  out.Value("transactional", k.transactional);
  if (k.transactional) out.Duration("producer_idle", k.producer_idle);
  out.Value("read_back_concurrency", uint64_t{k.read_back_concurrency});
  if (!k.properties.empty()) out.SecretMapping("properties", k.properties);
  using Security = KafkaSinkOptions::Security;
  if (k.security != Security::kPlaintext) {
    out.Value("security", k.security == Security::kSsl       ? "ssl"
                          : k.security == Security::kSaslSsl ? "sasl_ssl"
                                                             : "sasl_plaintext");
  }
  config::PrintTls(k.tls, out);
  if (!k.sasl_mechanism.empty()) out.Value("sasl_mechanism", k.sasl_mechanism);
  if (!k.sasl_username.empty()) out.Value("sasl_username", k.sasl_username);
  if (!k.sasl_password.empty()) out.Secret("sasl_password", k.sasl_password);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> KafkaSinkOptions::SecurityProperties() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (security == Security::kPlaintext) return out;
  out.emplace_back("security.protocol", security == Security::kSsl       ? "ssl"
                                        : security == Security::kSaslSsl ? "sasl_ssl"
                                                                         : "sasl_plaintext");
  if (security == Security::kSsl || security == Security::kSaslSsl) {
    if (!tls.ca.empty()) out.emplace_back("ssl.ca.location", tls.ca);
    if (!tls.cert.empty()) {
      out.emplace_back("ssl.certificate.location", tls.cert);
      out.emplace_back("ssl.key.location", tls.key);
    }
    // librdkafka checks the broker's host name unless told "none".
    out.emplace_back("ssl.endpoint.identification.algorithm",
                     tls.verify == config::TlsClientOptions::Verify::kIdentity ? "https" : "none");
  }
  if (security == Security::kSaslSsl || security == Security::kSaslPlaintext) {
    out.emplace_back("sasl.mechanisms", sasl_mechanism);
    out.emplace_back("sasl.username", sasl_username);
    out.emplace_back("sasl.password", sasl_password);
  }
  return out;
}

BuiltinSinkType KafkaSinkType() {
  config::SinkType t;
  t.name = "kafka";
  t.default_batch_max = kBatchMaxDefault;
  t.read = [](config::SinkOptionReader& reader, config::SinkConfig* sink) -> std::unique_ptr<config::SinkOptionsRead> {
    return std::make_unique<KafkaKeys>(reader, *sink);
  };
  t.print = PrintKafkaSink;
  t.warnings = [](const config::SinkConfig& sink) {
    std::vector<std::string> out;
    const KafkaSinkOptions& k = sink.Options<KafkaSinkOptions>();
    if (k.security == KafkaSinkOptions::Security::kSsl || k.security == KafkaSinkOptions::Security::kSaslSsl) {
      if (auto w = config::TlsWarning("sink '" + sink.name + "'", k.tls); !w.empty()) out.push_back(std::move(w));
    }
    if (k.security == KafkaSinkOptions::Security::kSaslPlaintext) {
      out.push_back("WARNING: sink '" + sink.name + "' has security: sasl_plaintext: its password" +
                    (k.sasl_mechanism == "PLAIN" ? "" : "'s proof") + " and every record cross the network unencrypted; "
                    "use sasl_ssl");
    }
    return out;
  };
  t.routes_to = "topic";
  t.destination = [](const config::SinkConfig& sink) {
    return TopicName(sink.Options<KafkaSinkOptions>().topic, sink.entity);
  };
  t.route_to = [](config::SinkConfig* sink, const std::string& topic) {
    sink->MutableOptions<KafkaSinkOptions>().topic = topic;
  };
  return {std::move(t), [](const config::SinkConfig& sink, const config::Config& global) {
            return MakeKafkaSink(sink, global);
          }};
}

}  // namespace sluice::connectors::kafka
