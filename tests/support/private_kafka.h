// PrivateKafka: a Kafka broker of the test's own (one KRaft node, broker and
// controller, the jars scripts/services fetched: SLUICE_TEST_KAFKA_CLASSPATH_FILE
// in .local/env), for tests that need listeners the shared broker does not
// have: TLS with the test's certificates, SASL/SCRAM users.
//
// It always has a PLAINTEXT listener on port() for the test's own use;
// AddListener adds more (name, security protocol, its properties).
//
// Threads: one thread drives it. The destructor kills the broker and removes
// its directory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::testing {

class PrivateKafka {
 public:
  PrivateKafka();
  ~PrivateKafka();
  PrivateKafka(const PrivateKafka&) = delete;
  PrivateKafka& operator=(const PrivateKafka&) = delete;

  // Whether the jars are there to run one (false: why in *why).
  static bool Available(std::string* why);

  // A listener NAME (upper case) speaking `protocol` (SSL, SASL_SSL...) on a
  // free port, with broker properties for it (without the
  // listener.name.<name>. prefix, which is added); returns the port.
  uint16_t AddListener(const std::string& name, const std::string& protocol,
                       const std::vector<std::string>& properties);
  // Broker properties, one "key=value" per line.
  void AddConfig(const std::string& lines) { extra_ += lines; }
  // A SCRAM credential made when the storage is formatted:
  // mechanism SCRAM-SHA-256 or SCRAM-SHA-512.
  void AddScramUser(const std::string& mechanism, const std::string& name, const std::string& password);

  // Formats the storage and starts the broker; true once it accepts
  // connections on every listener. False with *why.
  bool Start(std::string* why);
  void Kill();

  uint16_t port() const { return port_; }
  std::string LogTail() const;

 private:
  std::string dir_;
  uint16_t port_ = 0;
  uint16_t controller_port_ = 0;
  pid_t pid_ = -1;
  std::string listeners_;   // NAME://127.0.0.1:PORT,...
  std::string protocols_;   // NAME:PROTOCOL,...
  std::vector<uint16_t> ports_;
  std::string extra_;
  std::vector<std::string> scram_;
};

}  // namespace sluice::testing
