#include "objectstore/s3_store.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "objectstore/s3_protocol.h"

namespace sluice::objectstore {
namespace {

// SHA-256 of the empty string: the payload hash of GET and DELETE.
constexpr std::string_view kEmptySha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
// Idle handles kept for reuse; more threads than this still work, their
// extra handles are closed after use.
constexpr size_t kMaxIdleHandles = 8;

std::string Sha256Hex(std::string_view bytes) {
  if (bytes.empty()) return std::string(kEmptySha256);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1) return {};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 0x0f];
  }
  return out;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(b.front()) || !alnum(b.back())) return false;
  return std::all_of(b.begin(), b.end(), [&](char c) { return alnum(c) || c == '-' || c == '.'; });
}

// The upload side of a PUT: libcurl reads the body from here, and may
// rewind it (a kept-alive connection that turns out dead is retried).
struct Upload {
  std::string_view data;
  size_t offset = 0;
};

size_t ReadBody(char* buffer, size_t size, size_t count, void* user) {
  auto* up = static_cast<Upload*>(user);
  size_t n = std::min(size * count, up->data.size() - up->offset);
  std::memcpy(buffer, up->data.data() + up->offset, n);
  up->offset += n;
  return n;
}

int SeekBody(void* user, curl_off_t offset, int origin) {
  auto* up = static_cast<Upload*>(user);
  if (origin != SEEK_SET || offset < 0 || static_cast<size_t>(offset) > up->data.size()) return CURL_SEEKFUNC_FAIL;
  up->offset = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

struct Download {
  CURL* handle = nullptr;
  std::string body;
  bool sized = false;
};

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* down = static_cast<Download*>(user);
  if (!down->sized) {
    down->sized = true;
    curl_off_t length = -1;
    if (curl_easy_getinfo(down->handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK && length > 0) {
      down->body.reserve(static_cast<size_t>(length));
    }
  }
  down->body.append(data, size * count);
  return size * count;
}

enum class Method { kGet, kPut, kDelete };

struct Reply {
  long status = 0;
  std::string body;
};

class S3ObjectStore final : public ObjectStore {
 public:
  S3ObjectStore(const ObjectStoreOptions& o, std::string bucket, std::string prefix, std::string scheme,
                std::string hostport)
      : options_(o),
        bucket_(std::move(bucket)),
        prefix_(std::move(prefix)),
        url_("s3://" + bucket_ + (prefix_.empty() ? "" : "/" + prefix_)),
        sigv4_("aws:amz:" + o.region + ":s3") {
    bucket_url_ = o.path_style ? scheme + "://" + hostport + "/" + bucket_ : scheme + "://" + bucket_ + "." + hostport;
    endpoint_ = scheme + "://" + hostport;
  }

  ~S3ObjectStore() override {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  Status Put(const std::string& key, std::string_view bytes) override {
    RETURN_IF_ERROR(CheckObjectKey(key));
    ASSIGN_OR_RETURN(Reply r, Send(Method::kPut, ObjectUrl(key), bytes, "PUT " + key));
    if (r.status / 100 == 2) return Status::Ok();
    return FromReply(r, "PUT " + key);
  }

  Result<std::string> Get(const std::string& key) override {
    RETURN_IF_ERROR(CheckObjectKey(key));
    ASSIGN_OR_RETURN(Reply r, Send(Method::kGet, ObjectUrl(key), {}, "GET " + key));
    if (r.status == 200) return std::move(r.body);
    return FromReply(r, "GET " + key);
  }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override {
    RETURN_IF_ERROR(CheckObjectPrefix(prefix));
    const std::string strip = prefix_.empty() ? "" : prefix_ + "/";
    const std::string full = strip + prefix;
    const std::string what = "LIST \"" + prefix + "\"";
    std::vector<ObjectInfo> out;
    std::string token;
    while (true) {
      ASSIGN_OR_RETURN(s3::ListPage page, FetchPage(full, token, 1000, what));
      for (ObjectInfo& o : page.objects) {
        if (o.key.compare(0, strip.size(), strip) != 0) continue;
        o.key.erase(0, strip.size());
        out.push_back(std::move(o));
      }
      if (!page.truncated) break;
      if (page.next_token.empty() || page.next_token == token) {
        return Internal(url_ + ": " + what + ": the server said the listing goes on but gave no new continuation token");
      }
      token = std::move(page.next_token);
    }
    std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Status Delete(const std::string& key) override {
    RETURN_IF_ERROR(CheckObjectKey(key));
    ASSIGN_OR_RETURN(Reply r, Send(Method::kDelete, ObjectUrl(key), {}, "DELETE " + key));
    if (r.status / 100 == 2) return Status::Ok();
    Status st = FromReply(r, "DELETE " + key);
    if (st.code() == StatusCode::kNotFound) return Status::Ok();
    return st;
  }

  std::string Describe() const override { return url_; }

  // A listing of at most one key: the bucket must exist and the credentials
  // must be accepted. Writing is not probed (a bucket may forbid deletes).
  Status Check() override {
    const std::string what = "check (LIST of at most one key)";
    auto page = FetchPage(prefix_.empty() ? "" : prefix_ + "/", "", 1, what);
    return page.status();
  }

 private:
  std::string ObjectUrl(const std::string& key) const {
    return bucket_url_ + "/" + s3::UriEncode(prefix_.empty() ? key : prefix_ + "/" + key, true);
  }

  // One ListObjectsV2 page of keys under full_prefix (the store's prefix
  // included), from the continuation token (empty: the first page).
  Result<s3::ListPage> FetchPage(const std::string& full_prefix, const std::string& token, int max_keys,
                                 const std::string& what) {
    std::vector<std::pair<std::string, std::string>> params = {
        {"encoding-type", "url"}, {"list-type", "2"}, {"max-keys", std::to_string(max_keys)}};
    if (!full_prefix.empty()) params.emplace_back("prefix", full_prefix);
    if (!token.empty()) params.emplace_back("continuation-token", token);
    // Path style lists "/bucket?..."; virtual-hosted style "/?...".
    std::string url = bucket_url_ + (options_.path_style ? "?" : "/?") + s3::CanonicalQuery(std::move(params));
    ASSIGN_OR_RETURN(Reply r, Send(Method::kGet, url, {}, what));
    if (r.status != 200) {
      Status st = FromReply(r, what);
      // A listing names no key: a 404 that is not NoSuchBucket is still a
      // bucket (or endpoint) that is not there.
      if (st.code() == StatusCode::kNotFound) return FailedPrecondition(st.message());
      return st;
    }
    auto page = s3::ParseListObjectsV2(r.body);
    if (!page.ok()) return Internal(url_ + ": " + what + ": " + page.status().message());
    return page;
  }

  CURL* TakeHandle() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    GlobalInit();
    return curl_easy_init();
  }

  void GiveBack(CURL* h) {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < kMaxIdleHandles) {
      idle_.push_back(h);
    } else {
      curl_easy_cleanup(h);
    }
  }

  // One request; a Reply for every HTTP answer, an error Status when none
  // came (network, timeout, TLS).
  Result<Reply> Send(Method method, const std::string& url, std::string_view body, const std::string& what) {
    CURL* h = TakeHandle();
    if (h == nullptr) return ResourceExhausted(url_ + ": " + what + ": libcurl could not make a handle");
    struct Lease {
      S3ObjectStore* store;
      CURL* h;
      curl_slist* headers = nullptr;
      ~Lease() {
        curl_slist_free_all(headers);
        store->GiveBack(h);
      }
    } lease{this, h};
    curl_easy_reset(h);

    const std::string sha = Sha256Hex(body);
    if (sha.empty()) return Internal(url_ + ": " + what + ": SHA-256 of the body failed");
    lease.headers = curl_slist_append(nullptr, ("x-amz-content-sha256: " + sha).c_str());
    if (lease.headers == nullptr) return ResourceExhausted(url_ + ": " + what + ": out of memory");

    char error[CURL_ERROR_SIZE] = {0};
    Upload up{body, 0};
    Download down;
    down.handle = h;
    const long low_speed_seconds = std::max(1L, static_cast<long>((options_.timeout_ms + 999) / 1000));
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
    // USERNAME and PASSWORD rather than USERPWD: a secret may hold a ':'.
    curl_easy_setopt(h, CURLOPT_USERNAME, options_.access_key.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, options_.secret_key.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, lease.headers);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.timeout_ms));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, low_speed_seconds);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &down);
    if (!options_.tls_ca.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, options_.tls_ca.c_str());
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, options_.tls_verify ? 1L : 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, options_.tls_verify ? 2L : 0L);
    switch (method) {
      case Method::kGet:
        break;
      case Method::kPut:
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, ReadBody);
        curl_easy_setopt(h, CURLOPT_READDATA, &up);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, SeekBody);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, &up);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
        break;
      case Method::kDelete:
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
        break;
    }
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) return TransportError(rc, error, what);
    Reply reply;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply.status);
    reply.body = std::move(down.body);
    return reply;
  }

  Status TransportError(CURLcode rc, const char* error, const std::string& what) const {
    std::string m = url_ + ": " + what + " at " + endpoint_ + ": " + curl_easy_strerror(rc);
    if (error[0] != '\0') m += " (" + std::string(error) + ")";
    m = Scrub(std::move(m));
    switch (rc) {
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_ISSUER_ERROR:
      case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
        return FailedPrecondition(m + "; check tls_ca and the server's certificate");
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
        return InvalidArgument(m);
      case CURLE_OUT_OF_MEMORY:
        return ResourceExhausted(m);
      default:
        return Unavailable(m);
    }
  }

  // The Status for an HTTP answer that is not a success.
  Status FromReply(const Reply& r, const std::string& what) const {
    s3::ErrorReply e = s3::ParseErrorReply(r.body);
    std::string m = url_ + ": " + what + ": HTTP " + std::to_string(r.status);
    if (!e.code.empty()) m += " " + e.code;
    if (!e.message.empty()) m += ": " + e.message;
    m = Scrub(std::move(m));
    if (e.code == "NoSuchBucket") {
      return FailedPrecondition(Scrub(url_ + ": " + what + ": the bucket \"" + bucket_ + "\" does not exist at " +
                                      endpoint_ + " (HTTP " + std::to_string(r.status) + " NoSuchBucket)"));
    }
    if (r.status >= 500 || r.status == 429 || e.code == "SlowDown" || e.code == "RequestTimeout" ||
        e.code == "ServiceUnavailable" || e.code == "InternalError") {
      return Unavailable(m);
    }
    if (r.status == 401 || r.status == 403) return PermissionDenied(m);
    if (r.status == 404) return NotFound(m);
    if (e.code == "KeyTooLongError" || e.code == "InvalidArgument" || e.code == "EntityTooLarge" ||
        e.code == "InvalidObjectName") {
      return InvalidArgument(m);
    }
    return FailedPrecondition(m);
  }

  // Belt and braces: a server may quote what it was sent; neither the
  // access key id nor the secret may reach a message.
  std::string Scrub(std::string m) const {
    for (const std::string* secret : {&options_.access_key, &options_.secret_key}) {
      if (secret->size() < 4) continue;
      size_t pos = 0;
      while ((pos = m.find(*secret, pos)) != std::string::npos) {
        m.replace(pos, secret->size(), "[redacted]");
        pos += 10;
      }
    }
    return m;
  }

  const ObjectStoreOptions options_;
  const std::string bucket_;
  const std::string prefix_;  // no leading or trailing '/'; empty for none
  const std::string url_;     // what Describe says
  const std::string sigv4_;
  std::string bucket_url_;  // "http://host:port/bucket" or "http://bucket.host:port"
  std::string endpoint_;    // "http://host:port", for messages

  std::mutex mu_;
  std::vector<CURL*> idle_;  // guarded by mu_
};

// Splits "http[s]://host[:port][/]" into its scheme and host[:port].
Status ParseEndpoint(const std::string& endpoint, std::string* scheme, std::string* hostport) {
  size_t sep = endpoint.find("://");
  if (sep == std::string::npos) {
    return InvalidArgument("s3 endpoint must start with http:// or https://");
  }
  *scheme = endpoint.substr(0, sep);
  if (*scheme != "http" && *scheme != "https") {
    return InvalidArgument("s3 endpoint must start with http:// or https://, not " + scheme->substr(0, 10) + "://");
  }
  std::string rest = endpoint.substr(sep + 3);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('@') != std::string::npos) {
    return InvalidArgument("s3 endpoint must not hold credentials (user@host); set access_key and secret_key");
  }
  if (rest.empty() || rest.find_first_of("/?# ") != std::string::npos) {
    return InvalidArgument("s3 endpoint \"" + endpoint + "\" must be scheme://host[:port] with no path");
  }
  *hostport = rest;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenS3Store(const ObjectStoreOptions& o) {
  std::string rest = o.url.substr(std::string_view("s3://").size());
  if (rest.find('@') != std::string::npos) {
    return InvalidArgument("s3 url must not hold credentials (s3://user@bucket); set access_key and secret_key");
  }
  size_t slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!ValidBucket(bucket)) {
    return InvalidArgument("s3 url \"" + o.url + "\": bucket name \"" + bucket +
                           "\" must be 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit");
  }
  if (!prefix.empty()) {
    if (Status st = CheckObjectPrefix(prefix); !st.ok()) {
      return InvalidArgument("s3 url \"" + o.url + "\": prefix: " + st.message());
    }
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  }
  if (o.region.empty() || !std::all_of(o.region.begin(), o.region.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
      })) {
    return InvalidArgument("s3 region \"" + o.region + "\" must be a name like us-east-1");
  }
  std::string scheme;
  std::string hostport;
  RETURN_IF_ERROR(ParseEndpoint(o.endpoint.empty() ? "https://s3." + o.region + ".amazonaws.com" : o.endpoint,
                                &scheme, &hostport));
  if (o.access_key.empty() || o.secret_key.empty()) {
    return InvalidArgument("s3 store " + o.url + " needs both access_key and secret_key");
  }
  if (o.timeout_ms <= 0) return InvalidArgument("s3 timeout_ms must be positive");
  if (!o.tls_ca.empty() && ::access(o.tls_ca.c_str(), R_OK) != 0) {
    return InvalidArgument("s3 tls_ca " + o.tls_ca + " cannot be read: " + std::error_code(errno, std::generic_category()).message());
  }
  return std::unique_ptr<ObjectStore>(
      std::make_unique<S3ObjectStore>(o, std::move(bucket), std::move(prefix), std::move(scheme), std::move(hostport)));
}

}  // namespace sluice::objectstore
