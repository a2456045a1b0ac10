// Certificates a test makes with openssl (issue 22, item 4), in a
// temporary directory removed with the object: a CA, and PEM files for
// 127.0.0.1 / localhost signed by it, for another host name, self-signed,
// and expired, plus a client certificate for mutual TLS.
#pragma once

#include <string>

namespace sluice::testing {

class TestCerts {
 public:
  TestCerts();  // makes every file; ok() says whether it could
  ~TestCerts();
  TestCerts(const TestCerts&) = delete;
  TestCerts& operator=(const TestCerts&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // A file of the set: "ca.pem"; "<kind>.pem" and "<kind>.key" for each
  // kind: "server" (127.0.0.1 and localhost, signed by the CA),
  // "wrong_host" (elsewhere.invalid, signed by the CA), "self_signed"
  // (127.0.0.1, signed by itself), "expired" (127.0.0.1, signed by the CA,
  // its validity ended yesterday), "client" (a client, signed by the CA).
  std::string Path(const std::string& file) const { return dir_ + "/" + file; }
  const std::string& dir() const { return dir_; }

 private:
  bool Make(const std::string& kind, const std::string& subject_alt_names, bool self_signed, int days);
  std::string dir_;
  std::string error_;
};

}  // namespace sluice::testing
