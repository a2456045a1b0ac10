// The kafka sink type as sluice registers it (connectors/builtin_sink_types.cc):
// its options (KafkaSinkOptions), the keys a kafka sink accepts in the config
// file, how each is read and checked (properties by librdkafka itself), which
// are secret, how `config check --print` shows them, and the factory. To add
// a kafka sink option: a field in KafkaSinkOptions below (with its default),
// a row in KafkaKeys::Keys() and a line in PrintKafkaSink (kafka_options.cc),
// the key in docs/configuration.md, and tests in kafka_options_test.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/tls_options.h"
#include "connectors/builtin_sink_types.h"

namespace sluice::connectors::kafka {

// A Kafka topic fed with one record per event (docs/sinks/kafka.md): a kafka
// sink's options, as sink.Options<KafkaSinkOptions>() of a loaded
// config::SinkConfig (the defaults when the file leaves them out).
struct KafkaSinkOptions {
  std::string brokers;  // bootstrap servers, "host:port[,host:port...]"
  std::string topic;    // template: {type} is replaced by the entity type
  enum class Format { kJson, kProtobuf } format = Format::kJson;
  bool create_topic = false;        // create the topic when missing
  uint32_t partitions = 0;          // for create_topic; 0: the entity's partition count
  uint32_t replication_factor = 1;  // for create_topic
  std::chrono::milliseconds delivery_timeout{30000};  // a batch not delivered by then is retried
  // One transactional producer per source partition, fenced by whichever
  // engine takes the partition over (docs/sinks/kafka.md); false: one
  // idempotent producer, for a single engine only.
  bool transactional = true;
  // Transactional: a source partition's producer unused that long is closed
  // (its threads and broker connections go); its next batch makes it again.
  std::chrono::milliseconds producer_idle{60000};
  // How many partitions are read back at once when several are (Open, a
  // takeover, a batch after producer_idle), each on a thread with a consumer
  // of its own: transactional, a source partition's producer is made (its
  // transactional id fences the former owner's) and its topic partition read
  // back; idempotent, a topic partition is read back. Each is a few round
  // trips to the brokers; 1: one after another.
  uint32_t read_back_concurrency = 8;
  // librdkafka properties passed through as they are (checked with
  // librdkafka's own validation). Secret: those whose names look secret
  // (IsSecretName) and those given as ${env:...}/${file:...}.
  std::map<std::string, std::string> properties;

  // How the sink connects to the brokers (docs/security.md): Kafka's
  // security.protocol, TLS (security ssl or sasl_ssl) and SASL (sasl_ssl or
  // sasl_plaintext) as documented keys. SecurityProperties() turns them into
  // librdkafka properties.
  enum class Security { kPlaintext, kSsl, kSaslSsl, kSaslPlaintext } security = Security::kPlaintext;
  config::TlsClientOptions tls;
  std::string sasl_mechanism;  // SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN
  std::string sasl_username;
  std::string sasl_password;   // secret
  std::vector<std::pair<std::string, std::string>> SecurityProperties() const;
};

// A kafka sink's batch_max when the file does not give it: each Apply waits
// for its records' delivery reports, so a larger call pays that round trip
// less often.
inline constexpr uint32_t kBatchMaxDefault = 20000;

BuiltinSinkType KafkaSinkType();

}  // namespace sluice::connectors::kafka
