#include "tests/support/certs.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "tests/support/test_support.h"

namespace sluice::testing {

TestCerts::TestCerts() {
  char tmpl[] = "/tmp/sluice-certs-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    error_ = "no temporary directory";
    return;
  }
  dir_ = tmpl;
  std::string out;
  if (RunCommand("cd '" + dir_ + "' && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 "
                 "-subj '/CN=sluice test CA'",
                 &out) != 0) {
    error_ = "openssl could not make the CA: " + out;
    return;
  }
  (void)(Make("server", "IP:127.0.0.1,DNS:localhost", false, 30) &&
         Make("wrong_host", "DNS:elsewhere.invalid", false, 30) &&
         Make("self_signed", "IP:127.0.0.1,DNS:localhost", true, 30) &&
         Make("expired", "IP:127.0.0.1,DNS:localhost", false, -1) && Make("client", "DNS:sluice-client", false, 30));
}

TestCerts::~TestCerts() {
  if (dir_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

bool TestCerts::Make(const std::string& kind, const std::string& subject_alt_names, bool self_signed, int days) {
  std::ofstream(Path(kind + ".ext")) << "subjectAltName=" << subject_alt_names << "\n";
  const std::string cn = kind == "client" ? "sluice-client" : kind == "wrong_host" ? "elsewhere.invalid" : "127.0.0.1";
  std::string command = "cd '" + dir_ + "' && openssl req -newkey rsa:2048 -nodes -keyout " + kind + ".key -out " +
                        kind + ".csr -subj '/CN=" + cn + "' && openssl x509 -req -in " + kind + ".csr -days " +
                        std::to_string(days) + " -extfile " + kind + ".ext -out " + kind + ".pem ";
  command += self_signed ? "-signkey " + kind + ".key" : "-CA ca.pem -CAkey ca.key -CAcreateserial";
  std::string out;
  if (RunCommand(command, &out) != 0) {
    error_ = "openssl could not make " + kind + ".pem: " + out;
    return false;
  }
  // Servers run as another user may need to read them.
  std::filesystem::permissions(Path(kind + ".key"), std::filesystem::perms::owner_read |
                                                        std::filesystem::perms::owner_write |
                                                        std::filesystem::perms::group_read |
                                                        std::filesystem::perms::others_read);
  return true;
}

}  // namespace sluice::testing
