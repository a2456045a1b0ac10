#include "bench/http_load.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace sluice::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using TlsStream = asio::ssl::stream<tcp::socket>;

namespace {

constexpr size_t kMaxFailureSamples = 8;
constexpr auto kRetryDelay = std::chrono::milliseconds(50);

}  // namespace

class Connection;

// One event-loop thread and the connections it drives.
struct Worker {
  asio::io_context io{1};
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<HttpReply> replies;
  std::vector<std::string> failure_samples;
  Clock::time_point last_reply{};
};

struct HttpLoad::Impl {
  HttpLoadOptions o;
  std::vector<tcp::endpoint> endpoints;  // one per writer
  std::string host_header;
  // HTTPS only; shared by every thread's connections (OpenSSL makes a
  // session from it on any thread).
  std::unique_ptr<asio::ssl::context> tls;
  std::vector<std::string> entity_ids;
  // During CreateEntities(): command create_begin + k creates entity k, with a "pad" member.
  bool creating = false;
  uint64_t create_begin = 0;
  std::string pad;
  WorkQueue queue;
  uint32_t phase = 0;
  uint64_t next_index = 0;
  std::atomic<uint64_t> ok{0}, failures{0}, retries{0}, reconnects{0};
  // Declared last: connections hold references to everything above.
  std::vector<std::unique_ptr<Worker>> workers;

  void AddFailure(Worker& w, std::string what) {
    failures.fetch_add(1, std::memory_order_relaxed);
    if (w.failure_samples.size() < kMaxFailureSamples) w.failure_samples.push_back(std::move(what));
  }
};

// One keep-alive connection with at most one command in flight. All its
// handlers run on its worker's thread.
class Connection {
 public:
  Connection(Worker& worker, HttpLoad::Impl& load, const tcp::endpoint& endpoint)
      : worker_(worker), load_(load), endpoint_(endpoint), socket_(worker.io), timer_(worker.io) {}

  // Begins the phase: claims a command and sends it (connecting first if needed).
  void Start() { Next(); }

 private:
  void Next() {
    pending_ = false;
    if (dead_ || !load_.queue.Claim(index_)) return;  // idle until the next phase
    pending_ = true;
    attempts_ = 0;
    entity_ = load_.creating ? index_ - load_.create_begin : EntityOf(index_, load_.o.entities, load_.o.seed);
    BuildRequest();
    start_ = Clock::now();
    if (open_) {
      Send();
    } else {
      Connect();
    }
  }

  void BuildRequest() {
    std::string body = CommandBody(index_, load_.o.note);
    if (load_.creating) {
      body.pop_back();
      body += R"(,"pad":")";
      body += load_.pad;
      body += "\"}";
    }
    request_.clear();
    request_ += "POST /v1/entities/";
    request_ += load_.o.type;
    request_ += '/';
    request_ += load_.entity_ids[entity_];
    request_ += "/commands/";
    request_ += load_.creating ? std::string_view("create") : std::string_view(load_.o.command);
    request_ += " HTTP/1.1\r\nHost: ";
    request_ += load_.host_header;
    request_ += "\r\nContent-Type: application/json\r\nIdempotency-Key: ";
    request_ += CommandId(load_.o.run_id, index_);
    request_ += "\r\nContent-Length: ";
    request_ += std::to_string(body.size());
    request_ += "\r\n\r\n";
    request_ += body;
  }

  void Connect() {
    ++attempts_;
    if (load_.tls) {
      // A TLS session per connection. The previous stream may be the one
      // whose handler is running now, so it is kept until the next connect.
      retired_ = std::move(tls_);
      tls_ = std::make_unique<TlsStream>(worker_.io, *load_.tls);
      tls_->set_verify_mode(asio::ssl::verify_peer);
      tls_->set_verify_callback(asio::ssl::host_name_verification(load_.o.host));
    }
    Socket().async_connect(endpoint_, [this](beast::error_code ec) {
      if (ec) return OnBroken(ec, "connect");
      Socket().set_option(tcp::no_delay(true), ec);
      if (!tls_) return OnOpen();
      tls_->async_handshake(asio::ssl::stream_base::client, [this](beast::error_code ec) {
        if (ec) return OnBroken(ec, "TLS handshake");
        OnOpen();
      });
    });
  }

  void OnOpen() {
    open_ = true;
    connect_failures_ = 0;
    SendAgain();
  }

  tcp::socket& Socket() { return tls_ ? tls_->next_layer() : socket_; }

  // Sends the pending request without counting an attempt (Connect() did).
  void SendAgain() {
    auto done = [this](beast::error_code ec, size_t) {
      if (ec) return OnBroken(ec, "write");
      Read();
    };
    if (tls_) {
      asio::async_write(*tls_, asio::buffer(request_), done);
    } else {
      asio::async_write(socket_, asio::buffer(request_), done);
    }
  }

  void Send() {
    ++attempts_;
    SendAgain();
  }

  void Read() {
    parser_.emplace();
    parser_->body_limit(1 << 20);
    auto done = [this](beast::error_code ec, size_t) {
      if (ec) return OnBroken(ec, "read");
      OnResponse();
    };
    if (tls_) {
      http::async_read(*tls_, buffer_, *parser_, done);
    } else {
      http::async_read(socket_, buffer_, *parser_, done);
    }
  }

  void OnResponse() {
    const auto& res = parser_->get();
    const bool keep_alive = res.keep_alive();
    const unsigned status = res.result_int();
    if (!keep_alive) Close();
    if (status == 503 && attempts_ < load_.o.max_attempts) {
      // Storage unavailable or queue full: retry-safe with the same key.
      load_.retries.fetch_add(1, std::memory_order_relaxed);
      RetryLater();
      return;
    }
    Finish(status, res.body());
    Next();
  }

  void RetryLater() {
    timer_.expires_after(kRetryDelay);
    timer_.async_wait([this](beast::error_code) {
      if (open_) {
        Send();
      } else {
        Connect();
      }
    });
  }

  void OnBroken(beast::error_code ec, const char* what) {
    const bool was_open = open_;
    Close();
    load_.reconnects.fetch_add(1, std::memory_order_relaxed);
    if (!was_open) ++connect_failures_;
    if (attempts_ >= load_.o.max_attempts) {
      load_.AddFailure(worker_, CommandId(load_.o.run_id, index_) + ": gave up after " + std::to_string(attempts_) +
                                    " attempts; last " + what + " error: " + ec.message());
      // A server that keeps refusing connections: stop claiming commands.
      if (connect_failures_ >= load_.o.max_attempts) dead_ = true;
      Next();
      return;
    }
    timer_.expires_after(kRetryDelay);
    timer_.async_wait([this](beast::error_code) { Connect(); });
  }

  // Over TLS without a close_notify: the writer sees the TCP connection end,
  // as when a client goes away.
  void Close() {
    beast::error_code ignored;
    Socket().shutdown(tcp::socket::shutdown_both, ignored);
    Socket().close(ignored);
    buffer_.consume(buffer_.size());
    open_ = false;
  }

  void Finish(unsigned status, const std::string& body) {
    const auto now = Clock::now();
    worker_.last_reply = now;
    const std::string key = CommandId(load_.o.run_id, index_);
    if (status != 200) {
      return load_.AddFailure(worker_, key + ": HTTP " + std::to_string(status) + " " + body.substr(0, 300));
    }
    const auto json = nlohmann::json::parse(body, nullptr, false);
    auto bad = [&](const std::string& why) { load_.AddFailure(worker_, key + ": " + why + ": " + body.substr(0, 300)); };
    if (json.is_discarded() || !json.is_object()) return bad("reply is not a JSON object");
    auto uint_field = [&](const char* name) -> std::optional<uint64_t> {
      auto it = json.find(name);
      if (it == json.end() || !it->is_number_unsigned()) return std::nullopt;
      return it->get<uint64_t>();
    };
    const auto version = uint_field("version");
    const auto event_id = uint_field("event_id");
    const auto partition = uint_field("partition");
    if (!version || *version == 0) return bad("no positive version");
    if (!event_id || *event_id == 0) return bad("no positive event_id");
    if (!partition) return bad("no partition");
    if (json.value("type", "") != load_.o.type) return bad("wrong type");
    if (json.value("id", "") != load_.entity_ids[entity_]) return bad("wrong id");
    if (!json.contains("response")) return bad("no response");
    HttpReply r;
    r.index = index_;
    r.entity = entity_;
    r.version = *version;
    r.event_id = *event_id;
    r.partition = static_cast<uint32_t>(*partition);
    r.phase = load_.phase;
    r.latency_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count());
    worker_.replies.push_back(r);
    load_.ok.fetch_add(1, std::memory_order_relaxed);
  }

  Worker& worker_;
  HttpLoad::Impl& load_;
  const tcp::endpoint endpoint_;  // the writer this connection talks to
  tcp::socket socket_;                // plain HTTP
  std::unique_ptr<TlsStream> tls_;    // HTTPS: the current connection's
  std::unique_ptr<TlsStream> retired_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::string_body>> parser_;
  std::string request_;
  bool open_ = false;
  bool pending_ = false;
  bool dead_ = false;
  uint32_t attempts_ = 0;
  uint32_t connect_failures_ = 0;
  uint64_t index_ = 0;
  uint64_t entity_ = 0;
  Clock::time_point start_;
};

Result<std::unique_ptr<HttpLoad>> HttpLoad::Create(HttpLoadOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->o = std::move(options);
  const HttpLoadOptions& o = impl->o;
  if (o.connections == 0 || o.threads == 0 || o.entities == 0) {
    return InvalidArgument("connections, threads and entities must be at least 1");
  }
  {
    asio::io_context io;
    tcp::resolver resolver(io);
    beast::error_code ec;
    std::vector<uint16_t> ports = {o.port};
    ports.insert(ports.end(), o.more_ports.begin(), o.more_ports.end());
    for (const uint16_t port : ports) {
      auto results = resolver.resolve(o.host, std::to_string(port), ec);
      if (ec || results.empty()) return Unavailable("cannot resolve " + o.host + ": " + ec.message());
      impl->endpoints.push_back(results.begin()->endpoint());
    }
  }
  impl->host_header = o.host + ":" + std::to_string(o.port);
  if (o.tls) {
    impl->tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    beast::error_code ec;
    if (o.tls_ca.empty()) {
      impl->tls->set_default_verify_paths(ec);
    } else {
      impl->tls->load_verify_file(o.tls_ca, ec);
    }
    if (ec) return InvalidArgument("cannot load the CAs " + (o.tls_ca.empty() ? "of this machine" : o.tls_ca) + ": " + ec.message());
  }
  impl->entity_ids.reserve(o.entities);
  for (uint64_t e = 0; e < o.entities; ++e) impl->entity_ids.push_back(EntityId(o.run_id, e, o.entities));
  const uint32_t threads = std::min(o.threads, o.connections);
  for (uint32_t t = 0; t < threads; ++t) impl->workers.push_back(std::make_unique<Worker>());
  for (uint32_t c = 0; c < o.connections; ++c) {
    Worker& w = *impl->workers[c % threads];
    w.connections.push_back(std::make_unique<Connection>(w, *impl, impl->endpoints[c % impl->endpoints.size()]));
  }
  return std::unique_ptr<HttpLoad>(new HttpLoad(std::move(impl)));
}

HttpLoad::HttpLoad(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpLoad::~HttpLoad() {
  // Connections first: their sockets belong to the workers' io_contexts.
  for (auto& w : impl_->workers) w->connections.clear();
}

uint64_t HttpLoad::next_index() const { return impl_->next_index; }

const std::string& HttpLoad::entity_id(uint64_t entity) const { return impl_->entity_ids.at(entity); }

HttpPhaseResult HttpLoad::CreateEntities(const std::string& label) {
  Impl& im = *impl_;
  // The body without the pad, then the pad's own framing: ,"pad":"".
  const size_t framing = CommandBody(0, im.o.note).size() + 9;
  im.pad.clear();
  for (size_t i = framing; i < im.o.state_bytes; ++i) im.pad += static_cast<char>('a' + i % 26);
  im.creating = true;
  im.create_begin = im.next_index;
  HttpPhaseResult r = RunPhase(im.next_index, im.o.entities, 0, label);
  im.creating = false;
  return r;
}

HttpPhaseResult HttpLoad::RunPhase(uint64_t begin, uint64_t count, double min_seconds, const std::string& label) {
  Impl& im = *impl_;
  im.ok = 0;
  im.failures = 0;
  im.retries = 0;
  im.reconnects = 0;
  std::vector<size_t> replies_before;
  std::vector<size_t> samples_before;
  for (auto& w : im.workers) {
    replies_before.push_back(w->replies.size());
    samples_before.push_back(w->failure_samples.size());
  }
  im.queue.Open(begin, count, min_seconds);
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress(label, [&](double t) {
      const uint64_t done = im.ok.load() + im.failures.load();
      const double rate = t > last_t ? static_cast<double>(done - last_done) / (t - last_t) : 0;
      last_done = done;
      last_t = t;
      return WithCommas(done) + "/" + WithCommas(count) + " replies, " + WithCommas(static_cast<uint64_t>(rate)) +
             "/s now, failures " + std::to_string(im.failures.load()) + ", 503 retries " +
             std::to_string(im.retries.load()) + ", reconnects " + std::to_string(im.reconnects.load());
    });
    std::vector<std::thread> threads;
    for (auto& w : im.workers) {
      threads.emplace_back([&w] {
        w->io.restart();
        for (auto& c : w->connections) c->Start();
        w->io.run();
      });
    }
    for (auto& t : threads) t.join();
  }

  HttpPhaseResult r;
  r.ok = im.ok.load();
  r.failures = im.failures.load();
  r.retries = im.retries.load();
  r.reconnects = im.reconnects.load();
  Clock::time_point last = im.queue.started();
  for (size_t i = 0; i < im.workers.size(); ++i) {
    Worker& w = *im.workers[i];
    last = std::max(last, w.last_reply);
    for (size_t k = replies_before[i]; k < w.replies.size(); ++k) r.latencies_ns.push_back(w.replies[k].latency_ns);
    for (size_t k = samples_before[i]; k < w.failure_samples.size(); ++k) r.failure_samples.push_back(w.failure_samples[k]);
  }
  r.seconds = std::chrono::duration<double>(last - im.queue.started()).count();
  // Commands the phase was asked for but never sent (every connection gave up).
  const uint64_t sent = r.ok + r.failures;
  if (sent < count) {
    r.failures += count - sent;
    r.failure_samples.push_back(std::to_string(count - sent) + " commands were never sent");
  }
  im.next_index = im.queue.end();
  ++im.phase;
  return r;
}

std::vector<HttpReply> HttpLoad::AllReplies() const {
  std::vector<HttpReply> all;
  for (const auto& w : impl_->workers) all.insert(all.end(), w->replies.begin(), w->replies.end());
  return all;
}

uint64_t HttpLoad::VerifyReplies(std::vector<std::string>& samples) const {
  uint64_t problems = 0;
  auto problem = [&](std::string what) {
    ++problems;
    if (samples.size() < 10) samples.push_back(std::move(what));
  };
  std::vector<HttpReply> all = AllReplies();

  // Per entity: versions exactly 1..k, each with a larger event_id than the
  // one before, all in one partition.
  std::sort(all.begin(), all.end(), [](const HttpReply& a, const HttpReply& b) {
    return a.entity != b.entity ? a.entity < b.entity : a.version < b.version;
  });
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    uint64_t expected = 1;
    for (; j < all.size() && all[j].entity == all[i].entity; ++j, ++expected) {
      const HttpReply& r = all[j];
      const std::string& id = entity_id(r.entity);
      if (r.version != expected) {
        if (r.version < expected) {
          problem(id + ": version " + std::to_string(r.version) + " was given to two commands");
        } else {
          problem(id + ": no reply carried version " + std::to_string(expected) + " (next seen: " +
                  std::to_string(r.version) + ")");
        }
        expected = r.version;
      }
      if (j > i && r.partition != all[j - 1].partition) problem(id + ": replies name two partitions");
      if (j > i && r.event_id <= all[j - 1].event_id && r.version > all[j - 1].version) {
        problem(id + ": version " + std::to_string(r.version) + " has event_id " + std::to_string(r.event_id) +
                ", not after version " + std::to_string(all[j - 1].version) + "'s " +
                std::to_string(all[j - 1].event_id));
      }
    }
    i = j;
  }

  // No two commands were told the same (partition, event_id).
  std::sort(all.begin(), all.end(), [](const HttpReply& a, const HttpReply& b) {
    return a.partition != b.partition ? a.partition < b.partition : a.event_id < b.event_id;
  });
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i].partition == all[i - 1].partition && all[i].event_id == all[i - 1].event_id) {
      problem("partition " + std::to_string(all[i].partition) + ": event_id " + std::to_string(all[i].event_id) +
              " was given to two commands");
    }
  }
  return problems;
}

}  // namespace sluice::bench
