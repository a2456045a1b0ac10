#include "connectors/elasticsearch/rest_client.h"

#include <curl/curl.h>

#include <mutex>
#include <string>
#include <utility>

namespace sluice::connectors::elasticsearch {
namespace {

size_t AppendBody(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

struct SlistFree {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

bool GlobalInit() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] { ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; });
  return ok;
}

// What went wrong, for a message: libcurl's detail (for TLS, OpenSSL's
// reason) when it has one, under a heading that says what the reader should
// look at.
std::string FailureText(CURLcode rc, const char* detail) {
  const std::string more = detail[0] != '\0' ? detail : curl_easy_strerror(rc);
  // Under TLS 1.3 a server that refuses the client's certificate (or its
  // absence) says so with an alert the client reads after the handshake.
  if (more.find("alert bad certificate") != std::string::npos ||
      more.find("alert certificate required") != std::string::npos ||
      more.find("alert unknown ca") != std::string::npos) {
    return "TLS: the server refused the client certificate or its absence (tls_cert, tls_key): " + more;
  }
  switch (rc) {
    case CURLE_PEER_FAILED_VERIFICATION:
      return "TLS: the server's certificate is refused: " + more;
    case CURLE_SSL_CONNECT_ERROR:
      return "TLS handshake failed: " + more;
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CRL_BADFILE:
      return "TLS: " + more;
    default:
      return more;
  }
}

}  // namespace

struct RestClient::Handle {
  CURL* curl = nullptr;
  std::unique_ptr<curl_slist, SlistFree> json_headers;
  std::unique_ptr<curl_slist, SlistFree> ndjson_headers;
  std::string body;
  char error[CURL_ERROR_SIZE] = {};  // libcurl's detail of the last failure (CURLOPT_ERRORBUFFER)
  ~Handle() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
};

RestClient::RestClient(RestClientOptions options) : options_(std::move(options)) {}

RestClient::~RestClient() = default;

Result<std::unique_ptr<RestClient>> RestClient::Make(RestClientOptions options) {
  if (!GlobalInit()) return Internal("libcurl: curl_global_init failed");
  std::unique_ptr<RestClient> client(new RestClient(std::move(options)));
  auto h = std::make_unique<Handle>();
  h->curl = curl_easy_init();
  if (h->curl == nullptr) return Internal("libcurl: curl_easy_init failed");
  // An empty "Expect:" stops libcurl from waiting for "100 Continue" before
  // sending a large body, which costs a round trip per bulk request.
  const std::pair<std::unique_ptr<curl_slist, SlistFree>*, const char*> lists[] = {
      {&h->json_headers, "Content-Type: application/json"},
      {&h->ndjson_headers, "Content-Type: application/x-ndjson"}};
  for (const auto& [list, type] : lists) {
    curl_slist* l = curl_slist_append(nullptr, type);
    l = curl_slist_append(l, "Expect:");
    if (!client->options_.api_key.empty() && client->options_.username.empty()) {
      l = curl_slist_append(l, ("Authorization: ApiKey " + client->options_.api_key).c_str());
    }
    if (l == nullptr) return Internal("libcurl: out of memory");
    list->reset(l);
  }
  CURL* c = h->curl;
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: safe in threads
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(client->options_.connect_timeout.count()));
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(client->options_.request_timeout.count()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &AppendBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &h->body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->error);
  if (!client->options_.username.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERNAME, client->options_.username.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, client->options_.password.c_str());
  }
  // libcurl checks the chain and the host name by default; set both anyway,
  // so that nothing but verify_host can turn either off.
  const RestClientOptions& o = client->options_;
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, o.verify_host ? 2L : 0L);
  if (!o.tls_ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, o.tls_ca.c_str());
  if (!o.tls_cert.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, o.tls_cert.c_str());
    curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(c, CURLOPT_SSLKEY, o.tls_key.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
  }
  client->handle_ = std::move(h);
  return client;
}

Result<HttpResponse> RestClient::Send(std::string_view method, std::string_view path, std::string_view body,
                                      std::string_view content_type) {
  CURL* c = handle_->curl;
  const std::string url = options_.base_url + std::string(path);
  const std::string verb(method);
  handle_->body.clear();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  const bool head = verb == "HEAD";
  curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
  if (!head) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, verb.c_str());
  } else {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, nullptr);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, content_type == "application/x-ndjson" ? handle_->ndjson_headers.get()
                                                                                 : handle_->json_headers.get());
  handle_->error[0] = '\0';
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    return Unavailable(verb + " " + options_.base_url + std::string(path.substr(0, path.find('?'))) + ": " +
                       FailureText(rc, handle_->error));
  }
  HttpResponse r;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  r.body = std::move(handle_->body);
  handle_->body = std::string();
  return r;
}

void RestClient::Disconnect() {
  // curl_easy_reset keeps the connection cache; a fresh handle drops it.
  auto fresh = Make(options_);
  if (fresh.ok()) handle_ = std::move((*fresh)->handle_);
}

std::string EncodePathSegment(std::string_view s) { return PathTo("", s); }

std::string PathTo(std::string_view prefix, std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out(prefix);
  out.reserve(prefix.size() + s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                            c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace sluice::connectors::elasticsearch
