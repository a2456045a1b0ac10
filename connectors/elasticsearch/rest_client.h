// A small blocking HTTP client for the Elasticsearch/OpenSearch REST API,
// over one libcurl easy handle: requests reuse its connection (keep-alive)
// until the server or a failure closes it, and libcurl reconnects on the
// next request.
//
// Transport failures (connection refused or reset, timeouts, DNS, a TLS
// handshake that fails or a server certificate that is refused) come back
// as kUnavailable, with the request's URL and libcurl's and OpenSSL's reason
// (e.g. "certificate has expired"); every HTTP status, including 4xx and
// 5xx, comes back as a response for the caller to classify.
//
// Threads: one thread at a time per instance (a sink's applier thread).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace sluice::connectors::elasticsearch {

struct RestClientOptions {
  std::string base_url;  // "http://host:port" or with a path prefix; no trailing slash
  // Basic auth when username is set; else "Authorization: ApiKey" when
  // api_key is set; else no credentials.
  std::string username;
  std::string password;
  std::string api_key;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds request_timeout{30000};  // the whole request, end to end
  // TLS, for an https:// base_url. The server's certificate must chain to
  // the PEM CAs in tls_ca (empty: the CAs this machine trusts) and, with
  // verify_host, name the url's host; tls_cert and tls_key (PEM files, both
  // or neither) are presented when the server asks for a client certificate.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  bool verify_host = true;
};

struct HttpResponse {
  long status = 0;   // HTTP status code
  std::string body;  // empty for HEAD
};

class RestClient {
 public:
  // Fails (kInternal) only when libcurl cannot be initialised.
  static Result<std::unique_ptr<RestClient>> Make(RestClientOptions options);
  ~RestClient();
  RestClient(const RestClient&) = delete;
  RestClient& operator=(const RestClient&) = delete;

  // Sends `method` (GET, HEAD, PUT, POST, DELETE) to base_url + path, where
  // path starts with '/' and is already URL-encoded. A non-empty body is sent
  // with `content_type`.
  Result<HttpResponse> Send(std::string_view method, std::string_view path, std::string_view body = {},
                            std::string_view content_type = "application/json");

  // Drops the kept-alive connection; the next Send connects afresh.
  void Disconnect();

  // base_url without credentials, for messages.
  const std::string& base_url() const { return options_.base_url; }

 private:
  struct Handle;
  explicit RestClient(RestClientOptions options);

  RestClientOptions options_;
  std::unique_ptr<Handle> handle_;
};

// Percent-encodes s for one URL path segment (RFC 3986 unreserved kept).
std::string EncodePathSegment(std::string_view s);

// prefix followed by the encoded segment, e.g. PathTo("/", index). (Built
// in one string: "lit" + std::string&& trips GCC 12's -Wrestrict at -O3.)
std::string PathTo(std::string_view prefix, std::string_view segment);

}  // namespace sluice::connectors::elasticsearch
