#include "http/forwarder.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/thread_name.h"

namespace sluice::http {
namespace {

bool GlobalInit() {
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] { ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; });
  return ok;
}

bool SameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool HopByHop(std::string_view name) {
  for (std::string_view h : {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}) {
    if (SameName(name, h)) return true;
  }
  return false;
}

// One transfer: what to send, what came back, whom to tell.
struct Transfer {
  std::string url;
  std::string method;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  Forwarder::Done done;
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  Response response;
  char error[CURL_ERROR_SIZE] = {0};
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  static_cast<Transfer*>(user)->response.body.append(data, size * n);
  return size * n;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view line(data, size * n);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.rfind("HTTP/", 0) == 0) {
    t->response.headers.clear();  // a new status line (after a 100 Continue): start over
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * n;
  std::string_view name = line.substr(0, colon);
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (SameName(name, "content-type")) {
    t->response.content_type = std::string(value);
  } else if (!HopByHop(name)) {
    t->response.headers.emplace_back(std::string(name), std::string(value));
  }
  return size * n;
}

}  // namespace

struct Forwarder::Impl {
  ForwarderOptions options;
  CURLM* multi = nullptr;
  std::mutex mu;
  std::deque<std::unique_ptr<Transfer>> queued;  // under mu
  bool running = false;                          // under mu: Send() queues only while set
  bool stopping = false;                         // under mu
  std::thread thread;
  std::map<CURL*, std::unique_ptr<Transfer>> transfers;  // the thread's: those started

  void Begin(std::unique_ptr<Transfer> t) {
    CURL* e = curl_easy_init();
    if (e == nullptr) {
      t->done(Unavailable("forwarding to " + t->url + ": libcurl could not make a handle"));
      return;
    }
    t->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, t->url.c_str());
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout.count()));
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(options.request_timeout.count()));
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (!options.tls_ca.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options.tls_ca.c_str());
    if (!options.tls_cert.empty()) {
      curl_easy_setopt(e, CURLOPT_SSLCERT, options.tls_cert.c_str());
      curl_easy_setopt(e, CURLOPT_SSLKEY, options.tls_key.c_str());
    }
    if (t->method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, t->method.c_str());
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.data());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->body.size()));
    }
    // No "Expect: 100-continue" round trip before a body.
    t->header_list = curl_slist_append(t->header_list, "Expect:");
    for (const auto& [name, value] : t->headers) {
      t->header_list = curl_slist_append(t->header_list, (name + ": " + value).c_str());
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->header_list);
    if (const CURLMcode added = curl_multi_add_handle(multi, e); added != CURLM_OK) {
      curl_easy_cleanup(e);
      curl_slist_free_all(t->header_list);
      t->done(Unavailable("forwarding to " + t->url + ": " + curl_multi_strerror(added)));
      return;
    }
    transfers.emplace(e, std::move(t));
  }

  void Finish(CURL* e, CURLcode code) {
    auto it = transfers.find(e);
    if (it == transfers.end()) return;
    std::unique_ptr<Transfer> t = std::move(it->second);
    transfers.erase(it);
    curl_multi_remove_handle(multi, e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    curl_slist_free_all(t->header_list);
    if (code != CURLE_OK || status == 0) {
      const std::string why = t->error[0] != '\0' ? t->error : curl_easy_strerror(code);
      t->done(Unavailable("forwarding to " + t->url + ": " + why));
      return;
    }
    t->response.status = static_cast<int>(status);
    t->done(std::move(t->response));
  }

  void Loop() {
    SetCurrentThreadName(options.thread_name);
    for (;;) {
      std::deque<std::unique_ptr<Transfer>> take;
      {
        std::lock_guard lock(mu);
        if (stopping) break;
        take.swap(queued);
      }
      for (auto& t : take) Begin(std::move(t));
      int still = 0;
      curl_multi_perform(multi, &still);
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg == CURLMSG_DONE) Finish(m->easy_handle, m->data.result);
      }
      curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
    }
    // Stopped: nothing more is answered by a peer.
    while (!transfers.empty()) Finish(transfers.begin()->first, CURLE_ABORTED_BY_CALLBACK);
    std::deque<std::unique_ptr<Transfer>> left;
    {
      std::lock_guard lock(mu);
      running = false;
      left.swap(queued);
    }
    for (auto& t : left) t->done(Unavailable("forwarding to " + t->url + ": the forwarder stopped"));
  }
};

Forwarder::Forwarder(ForwarderOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

Forwarder::~Forwarder() {
  Stop();
  if (impl_->multi != nullptr) curl_multi_cleanup(impl_->multi);
}

Status Forwarder::Start() {
  if (impl_->thread.joinable()) return Status::Ok();
  if (!GlobalInit()) return Internal("libcurl: curl_global_init failed");
  if (impl_->multi == nullptr) impl_->multi = curl_multi_init();
  if (impl_->multi == nullptr) return Internal("libcurl: curl_multi_init failed");
  curl_multi_setopt(impl_->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(impl_->options.max_connections_per_host));
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = false;
    impl_->running = true;
  }
  impl_->thread = std::thread([this] { impl_->Loop(); });
  return Status::Ok();
}

void Forwarder::Stop() {
  if (!impl_->thread.joinable()) return;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  curl_multi_wakeup(impl_->multi);
  impl_->thread.join();
}

void Forwarder::Send(std::string url, std::string method, std::vector<std::pair<std::string, std::string>> headers,
                     std::string body, Done done) {
  auto t = std::make_unique<Transfer>();
  t->url = std::move(url);
  t->method = std::move(method);
  t->headers = std::move(headers);
  t->body = std::move(body);
  t->done = std::move(done);
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->running && !impl_->stopping) impl_->queued.push_back(std::move(t));
  }
  if (t) {
    t->done(Unavailable("forwarding to " + t->url + ": the forwarder is not running"));
    return;
  }
  curl_multi_wakeup(impl_->multi);
}

}  // namespace sluice::http
