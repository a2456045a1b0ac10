// The settings NewClient gives every librdkafka client, read back from the
// client it made (no broker needed: rd_kafka_new does not wait for one).
#include "connectors/kafka/kafka_client.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace sluice::connectors::kafka {
namespace {

// librdkafka 2.5 added KIP-714's client metrics push (enable.metrics.push).
constexpr int kMetricsPushVersion = 0x020500ff;

std::string Property(rd_kafka_t* rk, const char* name) {
  char value[512];
  size_t size = sizeof(value);
  if (rd_kafka_conf_get(rd_kafka_conf(rk), name, value, &size) != RD_KAFKA_CONF_OK) return "<unknown>";
  return value;
}

// Whether a test about the push is moot: the library predates it. Under CI,
// where scripts/bootstrap builds librdkafka 2.8, it never is.
bool NoMetricsPush() {
  const char* ci = std::getenv("CI");
  return rd_kafka_version() < kMetricsPushVersion && (ci == nullptr || std::string(ci) != "true");
}

KafkaSinkOptions Options() {
  KafkaSinkOptions o;
  o.brokers = "127.0.0.1:1";  // never reached
  o.topic = "t";
  return o;
}

// `name` of a client NewClient makes with `o` (no transactional id).
std::string PropertyOf(rd_kafka_type_t type, const KafkaSinkOptions& o, const char* name) {
  ClientOptions co;
  co.type = type;
  co.client_id = "test";
  auto client = NewClient(o, co);
  if (!client.ok()) return "<no client: " + client.status().message() + ">";
  return Property(client->get(), name);
}

// With the push on, librdkafka waited a second in some destroys, and a stop
// with 1,024 transactional producers open took minutes.
TEST(KafkaClient, EveryClientPushesNoClientMetrics) {
  if (NoMetricsPush()) GTEST_SKIP() << "librdkafka " << rd_kafka_version_str() << " has no client metrics push";
  for (const rd_kafka_type_t type : {RD_KAFKA_PRODUCER, RD_KAFKA_CONSUMER}) {
    ClientOptions co;
    co.type = type;
    co.client_id = "test";
    if (type == RD_KAFKA_PRODUCER) co.transactional_id = "sluice-test-t-0";
    auto client = NewClient(Options(), co);
    ASSERT_TRUE(client.ok()) << client.status().message();
    EXPECT_EQ(Property(client->get(), "enable.metrics.push"), "false") << (type == RD_KAFKA_PRODUCER ? "producer" : "consumer");
  }
}

// The sink's consumers read up to an end they know: a transactional
// partition's last offset is a commit marker, never delivered, so each read
// ends with an empty fetch, which the broker would otherwise hold 500 ms.
TEST(KafkaClient, ConsumersDoNotLetTheBrokerHoldAnEmptyFetch) {
  EXPECT_EQ(PropertyOf(RD_KAFKA_CONSUMER, Options(), "fetch.wait.max.ms"), "10");
  KafkaSinkOptions o = Options();
  o.properties["fetch.wait.max.ms"] = "100";  // the sink's properties still decide
  EXPECT_EQ(PropertyOf(RD_KAFKA_CONSUMER, o, "fetch.wait.max.ms"), "100");
  // A consumer's property stays off the producers (librdkafka would warn).
  EXPECT_EQ(PropertyOf(RD_KAFKA_PRODUCER, o, "fetch.wait.max.ms"), "500");
}

// Whether this librdkafka knows fetch.queue.backoff.ms (Debian's 2.0.2 does
// not; the 2.8 scripts/bootstrap builds, which CI uses, does).
bool HasFetchQueueBackoff() {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char error[512];
  const bool known = rd_kafka_conf_set(conf, "fetch.queue.backoff.ms", "10", error, sizeof(error)) == RD_KAFKA_CONF_OK;
  rd_kafka_conf_destroy(conf);
  return known;
}

// A consumer reads ahead 20,000 records and fetches again 10 ms after its
// queue was full, both or neither: without the short wait, the smaller
// read-ahead alone made a verify three times slower, so a librdkafka
// without it keeps its own read-ahead. The sink's properties still decide;
// producers get neither.
TEST(KafkaClient, ConsumersReadAheadLessOnlyWhereTheyFetchAgainSoon) {
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    ASSERT_TRUE(HasFetchQueueBackoff()) << rd_kafka_version_str();
  }
  if (HasFetchQueueBackoff()) {
    EXPECT_EQ(PropertyOf(RD_KAFKA_CONSUMER, Options(), "queued.min.messages"), "20000");
    EXPECT_EQ(PropertyOf(RD_KAFKA_CONSUMER, Options(), "fetch.queue.backoff.ms"), "10");
  } else {
    EXPECT_EQ(PropertyOf(RD_KAFKA_CONSUMER, Options(), "queued.min.messages"), "100000") << rd_kafka_version_str();
  }
  KafkaSinkOptions o = Options();
  o.properties["queued.min.messages"] = "5000";
  EXPECT_EQ(PropertyOf(RD_KAFKA_CONSUMER, o, "queued.min.messages"), "5000");
  EXPECT_EQ(PropertyOf(RD_KAFKA_PRODUCER, Options(), "queued.min.messages"), "100000");
}

TEST(KafkaClient, TheSinksPropertiesCanTurnTheMetricsPushBackOn) {
  if (NoMetricsPush()) GTEST_SKIP() << "librdkafka " << rd_kafka_version_str() << " has no client metrics push";
  KafkaSinkOptions o = Options();
  o.properties["enable.metrics.push"] = "true";
  ClientOptions co;
  co.client_id = "test";
  auto client = NewClient(o, co);
  ASSERT_TRUE(client.ok()) << client.status().message();
  EXPECT_EQ(Property(client->get(), "enable.metrics.push"), "true");
}

}  // namespace
}  // namespace sluice::connectors::kafka
