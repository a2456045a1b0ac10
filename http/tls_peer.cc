#include "http/tls_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace sluice::http {
namespace {

bool IsIpAddress(const std::string& host) {
  in6_addr any{};
  return inet_pton(AF_INET, host.c_str(), &any) == 1 || inet_pton(AF_INET6, host.c_str(), &any) == 1;
}

}  // namespace

bool ExpectPeer(SSL* ssl, const std::string& host, bool check_name) {
  const bool ip = IsIpAddress(host);
  if (!ip) SSL_set_tlsext_host_name(ssl, host.c_str());  // SNI is for names only (RFC 6066)
  if (!check_name) return true;
  return (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str())
             : SSL_set1_host(ssl, host.c_str())) == 1;
}

std::string PeerRefusal(const SSL* ssl) {
  const long verified = SSL_get_verify_result(ssl);
  if (verified == X509_V_OK) return "";
  return X509_verify_cert_error_string(verified);
}

}  // namespace sluice::http
