// The built-in kafka sink in the conformance kit, against the test Kafka, as
// a log: SinkConformance only (see conformance.h). Its view of an entity is
// the last record of its key in the topic: the sluice-version header gives
// the version, and the JSON value says whether it is a delete and holds the
// state. The poison event is a record larger than the topic accepts.
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "connectors/kafka/record_codec.h"
#include "tests/conformance/conformance.h"
#include "tests/support/kafka_support.h"

namespace sluice::conformance {
namespace {

constexpr size_t kMaxMessageBytes = 2000;

class KafkaUnderTest : public ConnectorUnderTest {
 public:
  Status SetUp() override {
    if (!testing::KafkaReachable()) {
      return Unavailable("Kafka is not reachable at " + testing::KafkaBrokers() + "; run scripts/services up kafka");
    }
    topic_ = UniqueName("conf");
    return Status::Ok();
  }

  std::string SinkYaml() override {
    return "type: kafka, brokers: \"" + testing::KafkaBrokers() + "\", topic: " + topic_ +
           ", create_topic: true, partitions: 1, properties: {message.max.bytes: " +
           std::to_string(kMaxMessageBytes) + "}";
  }

  Result<std::optional<ViewRow>> ReadBack(const std::string& entity_id) override {
    std::string error;
    const std::vector<testing::KafkaRecord> records = testing::ReadTopic(topic_, &error);
    if (!error.empty()) return Unavailable("reading topic " + topic_ + ": " + error);
    const testing::KafkaRecord* last = nullptr;
    for (const auto& r : records) {
      if (r.key == entity_id) last = &r;
    }
    if (last == nullptr) return std::optional<ViewRow>();
    ViewRow row;
    const auto version = last->headers.find(std::string(connectors::kafka::kHeaderVersion));
    if (version == last->headers.end()) return Internal("a record of " + entity_id + " has no version header");
    row.version = std::stoull(version->second);
    const auto j = nlohmann::json::parse(last->value, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return Internal("a record of " + entity_id + " is not JSON: " + last->value);
    row.deleted = j.value("deleted", false);
    if (!row.deleted && j.contains("state") && j["state"].is_object() && j["state"].contains("n")) {
      row.n = j["state"]["n"].get<int64_t>();
    }
    return std::optional<ViewRow>(row);
  }

  connectors::ChangeEvent PoisonEvent(connectors::ChangeEvent base) override {
    base.state = R"({"n":1,"name":")" + std::string(2 * kMaxMessageBytes, 'x') + "\"}";
    return base;
  }

 private:
  std::string topic_;
};

}  // namespace

SLUICE_CONFORMANCE_LOG_CONNECTOR(Kafka, KafkaUnderTest);

}  // namespace sluice::conformance
