// PrivateOpenSearch: an OpenSearch node of the test's own that serves HTTPS
// with certificates the test chooses (issue 22: TLS to the elasticsearch
// sink). It runs scripts/jvm/opensearch's launcher (as scripts/services
// compiled it when that is up to date, else compiled by Start() into the
// node's directory) on the jars scripts/services resolved
// (SLUICE_TEST_OPENSEARCH_CLASSPATH_FILE in .local/env), with no modules, a
// small heap and OpenSearch's secure HTTP transport on a free port below
// 32768 (the shared node on 19200 stays plain HTTP).
//
// The node reads its certificate files again at each new connection, so
// Present() and DemandClientCertificates() take effect for the next
// connection, without a restart.
//
// Threads: one thread drives it. The destructor kills the node and removes
// its directory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace sluice::testing {

class PrivateOpenSearch {
 public:
  PrivateOpenSearch();
  ~PrivateOpenSearch();
  PrivateOpenSearch(const PrivateOpenSearch&) = delete;
  PrivateOpenSearch& operator=(const PrivateOpenSearch&) = delete;

  // Whether the jars, the launcher's source and javac are there to run one
  // (false: why in *why).
  static bool Available(std::string* why);

  // The PEM certificate (chain) and key the node shows from its next
  // connection on; call it at least once before Start().
  void Present(const std::string& cert_file, const std::string& key_file);
  // From the next connection on, clients must show a certificate signed by
  // the PEM CAs of `ca_file`; with "" they need none.
  void DemandClientCertificates(const std::string& ca_file);

  // Compiles the launcher if needed and starts the node; true once it has reported
  // that the cluster is ready. False with *why.
  bool Start(std::string* why);
  void Kill();

  uint16_t port() const { return port_; }
  // "https://127.0.0.1:<port>"
  std::string Url() const;
  std::string LogTail() const;

 private:
  std::string dir_;
  uint16_t port_ = 0;
  uint16_t transport_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace sluice::testing
