#include "config/tls_options.h"

#include <string>

namespace sluice::config {

void TlsKeysRead::Add(std::vector<SinkOptionKey>& keys) {
  keys.push_back({"tls_ca", false, [this](const Field& f) {
                    given_.push_back(r_.Keep(f));
                    r_.ReadPemFile(f, "CA file ", &target_()->ca);
                  }});
  keys.push_back({"tls_cert", false, [this](const Field& f) {
                    given_.push_back(cert_ = r_.Keep(f));
                    r_.ReadPemFile(f, "certificate file ", &target_()->cert);
                  }});
  keys.push_back({"tls_key", false, [this](const Field& f) {
                    given_.push_back(key_ = r_.Keep(f));
                    r_.ReadPemFile(f, "private key file ", &target_()->key);
                  }});
  keys.push_back({"tls_verify", false, [this](const Field& f) {
                    given_.push_back(r_.Keep(f));
                    const auto text = r_.PlainScalar(f, "identity or ca");
                    if (!text) return;
                    if (*text == "identity") {
                      target_()->verify = TlsClientOptions::Verify::kIdentity;
                    } else if (*text == "ca") {
                      target_()->verify = TlsClientOptions::Verify::kCa;
                    } else {
                      r_.Expected(f, "identity or ca", *text);
                    }
                  }});
}

void TlsKeysRead::Check(bool tls_on, std::string_view tls_on_means) {
  if (!tls_on) {
    for (const auto& f : given_) r_.KeyProblem(*f, "only with " + std::string(tls_on_means));
    return;
  }
  if (cert_ && !key_) r_.KeyProblem(*cert_, "needs tls_key, the certificate's private key");
  if (key_ && !cert_) r_.KeyProblem(*key_, "needs tls_cert, the certificate of this key");
}

void PrintTls(const TlsClientOptions& tls, SinkOptionPrinter& out) {
  if (!tls.ca.empty()) out.Value("tls_ca", tls.ca);
  if (!tls.cert.empty()) out.Value("tls_cert", tls.cert);
  if (!tls.key.empty()) out.Value("tls_key", tls.key);
  if (tls.verify == TlsClientOptions::Verify::kCa) out.Value("tls_verify", "ca");
}

std::string TlsWarning(std::string_view what, const TlsClientOptions& tls) {
  if (tls.verify != TlsClientOptions::Verify::kCa) return "";
  return "WARNING: " + std::string(what) + " has tls_verify: ca: any server with a certificate from " +
         (tls.ca.empty() ? std::string("a CA this machine trusts") : tls.ca) +
         " is accepted, whatever host it was issued to; remove tls_verify to check the host name too";
}

}  // namespace sluice::config
