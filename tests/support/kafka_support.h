// Kafka helpers for tests against the real broker started by
// `scripts/services up kafka` (SLUICE_TEST_KAFKA_BROKERS in .local/env,
// default 127.0.0.1:19092). An independent librdkafka consumer reads topics
// back so that a test checks what the kafka sink wrote without using the
// sink's own reading code.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sluice::testing {

// host:port of the test broker.
std::string KafkaBrokers();
// True when the broker answers a metadata request within a few seconds.
bool KafkaReachable();

// One record read back.
struct KafkaRecord {
  int32_t partition = 0;
  int64_t offset = 0;
  std::string key;
  std::string value;
  std::map<std::string, std::string> headers;  // the last value of each name
};

// Every record of every partition of `topic`, up to the high watermarks at
// the time of the call, in (partition, offset) order, as a read_committed
// consumer sees them (records of aborted or open transactions left out;
// with uncommitted = true, every record the broker holds). Empty with
// *error set when the topic cannot be read.
std::vector<KafkaRecord> ReadTopic(const std::string& topic, std::string* error = nullptr,
                                   bool uncommitted = false);

// A transactional producer of the test's own (not the sink's code) that
// begins a transaction under `transactional_id`, produces `records` to one
// partition, waits for their delivery and leaves the transaction open, as an
// engine frozen in the middle of a batch does.
class OpenTransaction {
 public:
  // nullptr with *error when any step fails.
  static std::unique_ptr<OpenTransaction> Start(const std::string& topic, int32_t partition,
                                                const std::string& transactional_id,
                                                const std::vector<KafkaRecord>& records, std::string* error);
  ~OpenTransaction();
  // Tries to commit: empty when committed, else librdkafka's reason.
  std::string Commit();

 private:
  explicit OpenTransaction(void* rk) : rk_(rk) {}
  void* rk_;  // rd_kafka_t
};

// Creates a topic (ok when it exists) with the given topic configs
// (max.message.bytes, ...); false with *error on failure.
bool CreateTopic(const std::string& topic, int partitions, std::string* error,
                 const std::map<std::string, std::string>& configs = {});

// Sets a topic's configs to `configs` (AlterConfigs: the topic's other
// configs go back to the brokers' defaults); false with *error on failure.
bool SetTopicConfigs(const std::string& topic, const std::map<std::string, std::string>& configs,
                     std::string* error);

// Produces records with the given headers to one partition and waits for
// delivery (a test uses it to leave what a crashed batch would leave).
bool ProduceRaw(const std::string& topic, int32_t partition, const std::vector<KafkaRecord>& records,
                std::string* error);

// Checks the sink's per-key guarantee over records: for each key the
// sluice-version headers are 1, 2, 3, ... in topic order (strictly
// increasing, none missing, none repeated). Returns the problems found (at
// most `max_problems`), empty when all is well; *last_versions (optional)
// gets the last version per key.
std::vector<std::string> CheckVersionsPerKey(const std::vector<KafkaRecord>& records,
                                             std::map<std::string, uint64_t>* last_versions = nullptr,
                                             size_t max_problems = 20);

// True when CI=true: a missing broker fails the test instead of skipping it.
bool KafkaRequiredByCi();

// Runs scripts/services ACTION kafka (up or down) and returns its exit code.
int KafkaService(const std::string& action);

}  // namespace sluice::testing

// Skips the test (or fails it with CI=true) when the Kafka broker is not reachable.
#define SLUICE_REQUIRE_KAFKA()                                                                 \
  do {                                                                                         \
    if (!::sluice::testing::KafkaReachable()) {                                                \
      if (::sluice::testing::KafkaRequiredByCi()) FAIL() << "Kafka is not reachable (CI=true)";            \
      GTEST_SKIP() << "Kafka is not reachable at " << ::sluice::testing::KafkaBrokers()        \
                   << "; run scripts/services up kafka";                                       \
    }                                                                                          \
  } while (0)
