// The kafka sink's keys as the config loader reads them (kafka_options.cc), with
// librdkafka's own validation of pass-through properties.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "connectors/kafka/kafka_options.h"
#include "tests/support/config_support.h"

namespace sluice::config {
namespace {

using connectors::kafka::KafkaSinkOptions;
using testing::LoadConfigFromString;

Result<Config> Load(const std::string& sink_lines) {
  return LoadConfigFromString("storage:\n  mysql: {host: 127.0.0.1}\n"
                              "entities:\n  account: {partitions: 4}\n"
                              "sinks:\n  - name: feed\n    type: kafka\n    entity: account\n" +
                                  sink_lines,
                              "k.yaml");
}

std::string Errors(const std::string& sink_lines) {
  auto c = Load(sink_lines);
  return c.ok() ? "" : c.status().message();
}

TEST(KafkaConfig, ReadsEveryKey) {
  ::setenv("SLUICE_TEST_KAFKA_SECRET", "s3cret", 1);
  auto c = Load("    brokers: \"127.0.0.1:19092,localhost:9092\"\n    topic: \"sluice.{type}\"\n"
                "    format: protobuf\n    create_topic: true\n    partitions: 12\n    replication_factor: 1\n"
                "    delivery_timeout: 5s\n    transactional: false\n"
                "    properties: {linger.ms: 7, compression.type: lz4, sasl.password: \"${env:SLUICE_TEST_KAFKA_SECRET}\"}\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const KafkaSinkOptions& k = c->sinks.at(0).Options<KafkaSinkOptions>();
  EXPECT_EQ(k.brokers, "127.0.0.1:19092,localhost:9092");
  EXPECT_EQ(k.topic, "sluice.{type}");
  EXPECT_EQ(k.format, KafkaSinkOptions::Format::kProtobuf);
  EXPECT_TRUE(k.create_topic);
  EXPECT_EQ(k.partitions, 12u);
  EXPECT_EQ(k.delivery_timeout, std::chrono::seconds(5));
  EXPECT_FALSE(k.transactional);
  EXPECT_NE(c->Redacted().find("transactional: false"), std::string::npos);
  EXPECT_EQ(k.properties.at("linger.ms"), "7");
  EXPECT_EQ(k.properties.at("sasl.password"), "s3cret");
  const std::string redacted = c->Redacted();
  EXPECT_EQ(redacted.find("s3cret"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("compression.type: lz4"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("sasl.password: \"${env:SLUICE_TEST_KAFKA_SECRET}\""), std::string::npos) << redacted;
}

// security, tls_* and sasl_*: documented keys for librdkafka's TLS and SASL
// properties, each only where its protocol needs it.
TEST(KafkaConfig, SecurityKeys) {
  const std::string ca = ::testing::TempDir() + "kafka_tls_ca.pem";
  std::ofstream(ca) << "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  ::setenv("SLUICE_TEST_KAFKA_SASL", "scram-s3cret", 1);
  auto c = Load("    brokers: h:9093\n    topic: t\n    security: sasl_ssl\n    tls_ca: " + ca +
                "\n    sasl_mechanism: SCRAM-SHA-512\n    sasl_username: sluice\n"
                "    sasl_password: \"${env:SLUICE_TEST_KAFKA_SASL}\"\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const KafkaSinkOptions& k = c->sinks.at(0).Options<KafkaSinkOptions>();
  using P = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(k.SecurityProperties(), (P{{"security.protocol", "sasl_ssl"},
                                       {"ssl.ca.location", ca},
                                       {"ssl.endpoint.identification.algorithm", "https"},
                                       {"sasl.mechanisms", "SCRAM-SHA-512"},
                                       {"sasl.username", "sluice"},
                                       {"sasl.password", "scram-s3cret"}}));
  const std::string redacted = c->Redacted();
  EXPECT_EQ(redacted.find("scram-s3cret"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("sasl_password: \"${env:SLUICE_TEST_KAFKA_SASL}\""), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("security: sasl_ssl"), std::string::npos) << redacted;
  // tls_verify: ca turns librdkafka's host name check off, and is warned of.
  c = Load("    brokers: h:9093\n    topic: t\n    security: ssl\n    tls_verify: ca\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->sinks[0].Options<KafkaSinkOptions>().SecurityProperties(),
            (P{{"security.protocol", "ssl"}, {"ssl.endpoint.identification.algorithm", "none"}}));
  const auto warnings = connectors::kafka::KafkaSinkType().config.warnings(c->sinks[0]);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("WARNING: sink 'feed' has tls_verify: ca"), std::string::npos) << warnings[0];
  // Plaintext adds nothing.
  c = Load("    brokers: h:9092\n    topic: t\n");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->sinks[0].Options<KafkaSinkOptions>().SecurityProperties().empty());

  EXPECT_EQ(Errors("    brokers: h:1\n    topic: t\n    tls_ca: " + ca + "\n"),
            "k.yaml:11:5: sinks[0].tls_ca: only with security: ssl or sasl_ssl");
  EXPECT_EQ(Errors("    brokers: h:1\n    topic: t\n    security: ssl\n    sasl_username: u\n"),
            "k.yaml:12:5: sinks[0].sasl_username: only with security: sasl_ssl or sasl_plaintext");
  EXPECT_EQ(Errors("    brokers: h:1\n    topic: t\n    security: sasl_ssl\n    sasl_username: u\n"),
            "k.yaml:11:15: sinks[0].security: needs sasl_mechanism, sasl_password");
  EXPECT_EQ(Errors("    brokers: h:1\n    topic: t\n    security: tls\n"),
            "k.yaml:11:15: sinks[0].security: must be plaintext, ssl, sasl_ssl or sasl_plaintext, got \"tls\"");
  EXPECT_EQ(Errors("    brokers: h:1\n    topic: t\n    security: sasl_ssl\n    sasl_mechanism: GSSAPI\n"
                   "    sasl_username: u\n    sasl_password: p\n"),
            "k.yaml:12:21: sinks[0].sasl_mechanism: must be SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN, got \"GSSAPI\"");
  EXPECT_EQ(Errors("    brokers: h:1\n    topic: t\n    security: ssl\n    properties: {security.protocol: ssl}\n"),
            "k.yaml:12:18: sinks[0].properties.security.protocol: is set by the sink's security, tls_* or sasl_* "
            "keys: give it there only");
}

TEST(KafkaConfig, InlineSecretPropertiesAreNeverPrinted) {
  // Properties whose names say they are secret, given inline (issue 18, item 8).
  auto c = Load("    brokers: 127.0.0.1:19092\n    topic: t\n    properties:\n"
                "      sasl.username: sluice\n      sasl.password: inline-sasl-pw\n"
                "      ssl.key.password: inline-key-pw\n      ssl.keystore.password: inline-store-pw\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->sinks[0].Options<KafkaSinkOptions>().properties.at("ssl.key.password"), "inline-key-pw");
  const std::string redacted = c->Redacted();
  EXPECT_EQ(redacted.find("inline-"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("sasl.password: \"***\""), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("ssl.key.password: \"***\""), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("sasl.username: sluice"), std::string::npos) << redacted;
  // librdkafka's refusal of a secret value keeps its reason but not the value.
  ::setenv("SLUICE_TEST_KAFKA_CODEC", "s3cret-codec", 1);
  const std::string e = Errors("    brokers: h:1\n    topic: t\n"
                               "    properties: {compression.type: \"${env:SLUICE_TEST_KAFKA_CODEC}\"}\n");
  EXPECT_EQ(e.find("s3cret"), std::string::npos) << e;
  EXPECT_NE(e.find("sinks[0].properties.compression.type: librdkafka refuses it: Invalid value \"***\" for "
                   "configuration property"),
            std::string::npos)
      << e;
}

TEST(KafkaConfig, DefaultsAndTheSharedFormatKey) {
  auto c = Load("    brokers: 127.0.0.1:19092\n    topic: t\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->sinks[0].Options<KafkaSinkOptions>().format, KafkaSinkOptions::Format::kJson);
  EXPECT_FALSE(c->sinks[0].Options<KafkaSinkOptions>().create_topic);
  EXPECT_TRUE(c->sinks[0].Options<KafkaSinkOptions>().transactional);  // fenced producers unless told otherwise
  EXPECT_EQ(c->sinks[0].Options<KafkaSinkOptions>().producer_idle, std::chrono::seconds(60));
  EXPECT_NE(c->Redacted().find("producer_idle: 1m"), std::string::npos) << c->Redacted();
  auto idle = Load("    brokers: h:1\n    topic: t\n    producer_idle: 250ms\n");
  ASSERT_TRUE(idle.ok()) << idle.status().message();
  EXPECT_EQ(idle->sinks[0].Options<KafkaSinkOptions>().producer_idle, std::chrono::milliseconds(250));
  EXPECT_EQ(c->sinks[0].Options<KafkaSinkOptions>().read_back_concurrency, 8u);
  EXPECT_NE(c->Redacted().find("read_back_concurrency: 8"), std::string::npos) << c->Redacted();
  auto serial = Load("    brokers: h:1\n    topic: t\n    transactional: false\n    read_back_concurrency: 1\n");
  ASSERT_TRUE(serial.ok()) << serial.status().message();
  EXPECT_EQ(serial->sinks[0].Options<KafkaSinkOptions>().read_back_concurrency, 1u);
  EXPECT_NE(serial->Redacted().find("read_back_concurrency: 1"), std::string::npos) << serial->Redacted();
  // The properties that would undo the fencing are the sink's own.
  EXPECT_NE(Errors("    brokers: h:1\n    topic: t\n    properties: {transactional.id: x}\n")
                .find("sinks[0].properties.transactional.id: is set by the kafka sink"),
            std::string::npos);
  EXPECT_NE(Errors("    brokers: h:1\n    topic: t\n    properties: {isolation.level: read_uncommitted}\n")
                .find("read_committed"),
            std::string::npos);
  // A kafka sink's own default; other sinks keep 1000, and a given value wins.
  EXPECT_EQ(c->sinks[0].batch_max, connectors::kafka::kBatchMaxDefault);
  EXPECT_NE(c->Redacted().find("batch_max: 20000"), std::string::npos) << c->Redacted();
  auto given = Load("    brokers: 127.0.0.1:19092\n    topic: t\n    batch_max: 500\n");
  ASSERT_TRUE(given.ok()) << given.status().message();
  EXPECT_EQ(given->sinks[0].batch_max, 500u);
  auto redis = LoadConfigFromString("storage:\n  mysql: {host: 127.0.0.1}\nentities:\n  account: {partitions: 4}\n"
                                    "sinks:\n  - {name: r, type: redis, entity: account}\n", "r.yaml");
  ASSERT_TRUE(redis.ok()) << redis.status().message();
  EXPECT_EQ(redis->sinks[0].batch_max, 1000u);
  // format is also a redis key; a kafka sink reads it as its own.
  EXPECT_NE(Errors("    brokers: h:1\n    topic: t\n    format: hash\n").find("must be json or protobuf"),
            std::string::npos);
}

TEST(KafkaConfig, ReportsEachProblemWithItsPosition) {
  const std::string e = Errors(
      "    brokers: \"nohost\"\n"
      "    topic: \"bad topic!\"\n"
      "    partitions: 3\n"
      "    key: \"{id}\"\n"
      "    properties:\n"
      "      linger.ms: not-a-number\n"
      "      no.such.property: 1\n"
      "      acks: 1\n"
      "    producer_idle: 10ms\n");
  EXPECT_NE(e.find("k.yaml:9:14: sinks[0].brokers: must be a list of host:port"), std::string::npos) << e;
  EXPECT_NE(e.find("k.yaml:10:12: sinks[0].topic: must be a topic name"), std::string::npos) << e;
  EXPECT_NE(e.find("sinks[0].partitions: only with create_topic: true"), std::string::npos) << e;
  EXPECT_NE(e.find("sinks[0].key: only for redis sinks"), std::string::npos) << e;
  // librdkafka's own words for its properties.
  EXPECT_NE(e.find("sinks[0].properties.linger.ms: librdkafka refuses it: Invalid value"), std::string::npos) << e;
  EXPECT_NE(e.find("sinks[0].properties.no.such.property: librdkafka refuses it: No such configuration property"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("sinks[0].properties.acks: is set by the kafka sink"), std::string::npos) << e;
  EXPECT_NE(e.find("k.yaml:17:20: sinks[0].producer_idle:"), std::string::npos) << e;
  EXPECT_NE(Errors("    brokers: h:1\n    topic: t\n    transactional: false\n    producer_idle: 5s\n")
                .find("sinks[0].producer_idle: only with transactional: true"),
            std::string::npos);
  EXPECT_NE(Errors("    brokers: h:1\n    topic: t\n    read_back_concurrency: 0\n")
                .find("sinks[0].read_back_concurrency:"),
            std::string::npos);
  EXPECT_NE(Errors("    brokers: h:1\n    topic: t\n    read_back_concurrency: 65\n")
                .find("sinks[0].read_back_concurrency:"),
            std::string::npos);
}

// librdkafka dlopens these while its config is set, so reading the config
// (even `sluice config check`) would run the library's code.
TEST(KafkaConfig, PropertiesThatLoadCodeAreRefused) {
  const std::string e = Errors("    properties:\n"
                               "      plugin.library.paths: /tmp/evil.so\n"
                               "      ssl.engine.location: /tmp/engine.so\n");
  EXPECT_NE(e.find("sinks[0].properties.plugin.library.paths: is set by the kafka sink: librdkafka would load"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("sinks[0].properties.ssl.engine.location: is set by the kafka sink: librdkafka would load"),
            std::string::npos)
      << e;
}

TEST(KafkaConfig, RequiresBrokersAndTopic) {
  const std::string e = Errors("    format: json\n");
  EXPECT_NE(e.find("sinks[0].brokers: required key is missing"), std::string::npos) << e;
  EXPECT_NE(e.find("sinks[0].topic: required key is missing"), std::string::npos) << e;
}

TEST(KafkaConfig, KafkaKeysAreMisplacedOnOtherSinks) {
  auto c = LoadConfigFromString("storage:\n  mysql: {host: 127.0.0.1}\nentities:\n  account: {partitions: 4}\n"
                                "sinks:\n  - {name: c, type: redis, entity: account, topic: x, format: json}\n",
                                "k.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("sinks[0].topic: only for kafka sinks"), std::string::npos)
      << c.status().message();
  // redis reads its own format key
  EXPECT_EQ(c.status().message().find("format"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace sluice::config
