// The checks every TLS client of ours makes of the server it connects to,
// in one place: the certificate must name the host it was asked for (a DNS
// name, or an IP address in its subjectAltName), and a refusal says why in
// OpenSSL's words ("certificate has expired", "hostname mismatch").
// Used by the redis sink's connection and the operator commands' admin
// client; libcurl and librdkafka make the same checks themselves.
//
// Pure functions over one SSL session; thread-safe as OpenSSL is.
#pragma once

#include <openssl/ssl.h>

#include <string>

namespace sluice::http {

// Before the handshake: SNI for a host name, and, when `check_name`, the
// host (or IP address) the peer's certificate must name. False when
// OpenSSL cannot take the name.
bool ExpectPeer(SSL* ssl, const std::string& host, bool check_name);

// After a failed handshake: why the peer's certificate was refused, or ""
// when the failure was not the certificate's (a closed connection...).
std::string PeerRefusal(const SSL* ssl);

}  // namespace sluice::http
