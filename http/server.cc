#include "http/server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <list>
#include <memory>
#include <optional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include "core/json.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "http/tls_contexts.h"

namespace sluice::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

std::optional<std::string_view> Request::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (beast::iequals(beast::string_view(n), beast::string_view(name.data(), name.size()))) return std::string_view(v);
  }
  return std::nullopt;
}

Response JsonError(int status, std::string_view code, std::string_view message) {
  Response r;
  r.status = status;
  r.body = R"({"error":{"code":)";
  AppendJsonString(r.body, code);
  r.body += R"(,"message":)";
  AppendJsonString(r.body, message);
  r.body += "}}";
  return r;
}

std::string_view CloseReasonName(CloseReason reason) {
  switch (reason) {
    case CloseReason::kClient: return "client";
    case CloseReason::kServer: return "server";
    case CloseReason::kIdleTimeout: return "idle_timeout";
    case CloseReason::kHeaderTimeout: return "header_timeout";
    case CloseReason::kBodyTimeout: return "body_timeout";
    case CloseReason::kWriteTimeout: return "write_timeout";
    case CloseReason::kEvicted: return "evicted";
    case CloseReason::kRefused: return "refused";
    case CloseReason::kTlsHandshake: return "tls_handshake";
  }
  return "client";
}

namespace {

class Session;

// What a connection is doing. The order is the eviction preference: a
// connection in an earlier phase is evicted first.
enum class Phase : uint8_t { kIdle, kHeader, kBody, kWriting, kHandling };
constexpr size_t kEvictablePhases = 3;  // idle and header count as one tier, then body, then writing

size_t EvictionTier(Phase p) {
  switch (p) {
    case Phase::kIdle:
    case Phase::kHeader: return 0;
    case Phase::kBody: return 1;
    case Phase::kWriting: return 2;
    case Phase::kHandling: return kEvictablePhases;
  }
  return kEvictablePhases;
}

// The reply to a connection nothing could make room for. Written without
// waiting: a fresh socket's send buffer is empty.
const std::string& Refusal() {
  static const std::string text = [] {
    const std::string body = JsonError(503, "too_many_connections",
                                       "every connection is busy with a request; retry shortly").body;
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  }();
  return text;
}

}  // namespace

// One event loop: an io_context run by one thread, and the connections that
// live on it from accept to close. Everything but the atomics is touched by
// that thread only (and by Stop's thread once the loop thread has ended).
struct Loop {
  explicit Loop(Server::Impl* s) : server(s) {}

  Server::Impl* const server;
  // Read by the acceptor to pick a loop; written by this loop's thread.
  std::atomic<uint32_t> open{0};
  std::atomic<uint32_t> handling{0};
  // Open connections, in the order they last changed phase (oldest first).
  // Declared before the io_context: connections destroyed with its pending
  // handlers take themselves off it.
  std::list<Session*> sessions;
  net::io_context ioc{1};
  // Keeps run() going while the loop has no connection.
  net::executor_work_guard<net::io_context::executor_type> guard = net::make_work_guard(ioc);
  net::steady_timer sweep{ioc};

  void Admit(tcp::socket socket);
  // Closes the connection that has been in the most evictable phase the
  // longest; false when every connection is with the handler.
  bool EvictOne();
  void Sweep();
};

struct Server::Impl {
  Impl(ServerOptions o, Handler h) : options(std::move(o)), handler(std::move(h)) {
    const Limits& l = options.limits;
    const auto shortest = std::min({l.header_timeout, l.body_timeout, l.idle_timeout, l.write_timeout});
    sweep_interval = std::clamp<std::chrono::milliseconds>(shortest / 10, std::chrono::milliseconds(10),
                                                           std::chrono::milliseconds(1000));
    for (uint32_t i = 0; i < std::max<uint32_t>(options.io_threads, 1); ++i) {
      loops.push_back(std::make_unique<Loop>(this));
    }
  }

  void Accept();
  Loop& PickLoop();
  void Report(CloseReason reason) {
    if (options.on_close) options.on_close(reason);
  }

  // Declared before the loops: connections destroyed with them still count down `open`.
  const ServerOptions options;
  const Handler handler;
  std::chrono::milliseconds sweep_interval{1000};
  std::atomic<uint64_t> open{0};
  std::atomic<bool> stopped{false};
  uint16_t bound_port = 0;
  std::vector<std::unique_ptr<Loop>> loops;  // [0] also runs the acceptor
  std::unique_ptr<TlsContexts> tls;  // when options.tls
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;  // loop 0
  size_t next_loop = 0;                            // the acceptor's handler only
  std::vector<std::thread> threads;
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  // With `tls`, the connection speaks TLS with that context.
  Session(tcp::socket&& socket, Loop& loop, std::shared_ptr<TlsContexts::Context> tls)
      : loop_(loop), socket_(std::move(socket)), tls_context_(std::move(tls)) {
    if (tls_context_) tls_.emplace(socket_, *tls_context_);
    loop_.sessions.push_back(this);
    pos_ = std::prev(loop_.sessions.end());
  }
  // Without Close(): the server is stopping and its loops are gone.
  ~Session() {
    if (!closed_) Forget();
  }

  void Start() {
    Enter(Phase::kHeader);  // the handshake counts against header_timeout
    if (!tls_) return ReadHeader();
    beast::error_code ignored;
    peer_ = socket_.remote_endpoint(ignored).address().to_string();
    tls_->async_handshake(net::ssl::stream_base::server, [self = shared_from_this()](beast::error_code ec) {
      if (self->closed_) return;
      if (ec) return self->HandshakeFailed(ec);
      self->ReadHeader();
    });
  }

  Phase phase() const { return phase_; }
  bool Expired(Clock::time_point now) const { return now >= deadline_; }

  // Closes the connection for `reason`; pending reads and writes end with
  // operation_aborted and find the session closed.
  void Close(CloseReason reason) {
    if (closed_) return;
    Forget();
    loop_.server->Report(reason);
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  void Expire() {
    switch (phase_) {
      case Phase::kIdle: return Close(CloseReason::kIdleTimeout);
      case Phase::kHeader: return Close(CloseReason::kHeaderTimeout);
      case Phase::kBody: return Close(CloseReason::kBodyTimeout);
      case Phase::kWriting: return Close(CloseReason::kWriteTimeout);
      case Phase::kHandling: return;
    }
  }

 private:
  const ServerOptions& options() const { return loop_.server->options; }

  // f(stream): the TLS stream or the plain socket.
  template <typename F>
  void WithStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(socket_);
    }
  }

  void HandshakeFailed(beast::error_code ec) {
    LogRateLimited(LogLevel::kWarn, "http.tls." + options().thread_name,
                   "http: TLS handshake with " + peer_ + " on " + options().host + ":" +
                       std::to_string(loop_.server->bound_port) + " failed: " + ec.message());
    Close(CloseReason::kTlsHandshake);
  }

  // Takes the connection off its loop's books (once).
  void Forget() {
    closed_ = true;
    if (phase_ == Phase::kHandling) loop_.handling.fetch_sub(1, std::memory_order_relaxed);
    loop_.sessions.erase(pos_);
    loop_.open.fetch_sub(1, std::memory_order_relaxed);
    loop_.server->open.fetch_sub(1, std::memory_order_relaxed);
  }

  void Enter(Phase p) {
    const Limits& l = options().limits;
    if (phase_ == Phase::kHandling) loop_.handling.fetch_sub(1, std::memory_order_relaxed);
    if (p == Phase::kHandling) loop_.handling.fetch_add(1, std::memory_order_relaxed);
    phase_ = p;
    const Clock::time_point now = Clock::now();
    switch (p) {
      case Phase::kIdle: deadline_ = now + l.idle_timeout; break;
      case Phase::kHeader: deadline_ = now + l.header_timeout; break;
      case Phase::kBody: deadline_ = now + l.body_timeout; break;
      case Phase::kWriting: deadline_ = now + l.write_timeout; break;
      case Phase::kHandling: deadline_ = Clock::time_point::max(); break;
    }
    // The list stays in the order of the last phase change: the first
    // connection of a phase is the one that has been in it the longest.
    loop_.sessions.splice(loop_.sessions.end(), loop_.sessions, pos_);
  }

  void ReadHeader() {
    parser_.emplace();
    parser_->body_limit(options().max_body_bytes);
    parser_->header_limit(options().max_header_bytes);
    WithStream([this](auto& stream) {
      bhttp::async_read_header(stream, buffer_, *parser_,
                               [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
    });
  }

  void OnHeader(beast::error_code ec) {
    if (closed_) return;
    if (ec) return OnReadError(ec);
    if (parser_->is_done()) return Dispatch();
    Enter(Phase::kBody);
    WithStream([this](auto& stream) {
      bhttp::async_read(stream, buffer_, *parser_,
                        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
    });
  }

  void OnBody(beast::error_code ec) {
    if (closed_) return;
    if (ec) return OnReadError(ec);
    Dispatch();
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      return Reply(JsonError(413, "payload_too_large",
                             "the request body is larger than the limit of " +
                                 std::to_string(options().max_body_bytes) + " bytes"),
                   false);
    }
    if (ec == bhttp::error::header_limit) {
      return Reply(JsonError(431, "headers_too_large", "the request headers are too large"), false);
    }
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted || ec == bhttp::error::partial_message ||
        ec == net::ssl::error::stream_truncated) {
      return Close(CloseReason::kClient);
    }
    Reply(JsonError(400, "malformed_http", "malformed HTTP request: " + ec.message()), false);
  }

  void Dispatch() {
    auto msg = parser_->release();
    parser_.reset();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.body = std::move(msg.body());
    req.headers.reserve(static_cast<size_t>(std::distance(msg.begin(), msg.end())));
    for (const auto& field : msg) req.headers.emplace_back(field.name_string(), field.value());
    head_ = msg.method() == bhttp::verb::head;
    keep_alive_ = msg.keep_alive();
    Enter(Phase::kHandling);
    // The responder may run on any thread: it posts the write back to this loop.
    loop_.server->handler(std::move(req), [self = shared_from_this()](Response resp) {
      net::post(self->loop_.ioc, [self, resp = std::move(resp)]() mutable { self->Reply(std::move(resp), true); });
    });
  }

  void Reply(Response resp, bool keep_alive) {
    if (closed_) return;
    keep_alive_ = keep_alive_ && keep_alive;
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(resp.status));
    res_.set(bhttp::field::content_type, resp.content_type);
    for (auto& [name, value] : resp.headers) res_.set(name, value);
    res_.keep_alive(keep_alive_);
    if (head_) {
      res_.content_length(resp.body.size());
    } else {
      res_.body() = std::move(resp.body);
      res_.prepare_payload();
    }
    head_ = false;
    Enter(Phase::kWriting);
    WithStream([this](auto& stream) {
      bhttp::async_write(stream, res_, [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
    });
  }

  void OnWrite(beast::error_code ec) {
    if (closed_) return;
    if (ec) return Close(CloseReason::kClient);
    if (!keep_alive_) return Close(CloseReason::kServer);
    res_ = {};
    if (buffer_.size() > 0) {  // the next request is already here (pipelined)
      Enter(Phase::kHeader);
      return ReadHeader();
    }
    // Idle: wait for the next request's first byte without holding a buffer.
    Enter(Phase::kIdle);
    buffer_.shrink_to_fit();
    // TLS may already hold that byte in its own buffer, where a wait on the
    // socket would not see it: read the header at once (idle_timeout covers it).
    if (tls_) return ReadHeader();
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (self->closed_) return;
      if (ec) return self->Close(CloseReason::kClient);
      self->Enter(Phase::kHeader);
      self->ReadHeader();
    });
  }

  Loop& loop_;
  tcp::socket socket_;
  std::shared_ptr<TlsContexts::Context> tls_context_;  // null: plain HTTP
  std::optional<net::ssl::stream<tcp::socket&>> tls_;  // over socket_, when tls_context_
  std::string peer_;                                    // the client's address, for a failed handshake's log
  std::list<Session*>::iterator pos_;
  Phase phase_ = Phase::kHeader;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool closed_ = false;
  bool keep_alive_ = true;
  bool head_ = false;  // the request being answered is a HEAD
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> res_;
};

}  // namespace

void Loop::Admit(tcp::socket socket) {
  Server::Impl& s = *server;
  if (s.options.on_accept) s.options.on_accept();
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  // Count the newcomer first, so that two loops admitting at once cannot both take the last place.
  const uint64_t before = s.open.fetch_add(1, std::memory_order_relaxed);
  if (before >= s.options.limits.max_connections && !EvictOne()) {
    s.open.fetch_sub(1, std::memory_order_relaxed);
    s.Report(CloseReason::kRefused);
    LogRateLimited(LogLevel::kWarn, "http.refused." + s.options.thread_name,
                   "http: refused a connection on " + s.options.host + ":" + std::to_string(s.bound_port) +
                       ": all " + std::to_string(s.options.limits.max_connections) +
                       " connections are busy with requests (raise max_connections?)");
    socket.non_blocking(true, ec);
    if (!s.tls) socket.write_some(net::buffer(Refusal()), ec);  // over TLS there is no session to say it in
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    return;
  }
  open.fetch_add(1, std::memory_order_relaxed);
  std::make_shared<Session>(std::move(socket), *this, s.tls ? s.tls->Current() : nullptr)->Start();
}

bool Loop::EvictOne() {
  std::array<Session*, kEvictablePhases> oldest{};
  for (Session* s : sessions) {
    const size_t tier = EvictionTier(s->phase());
    if (tier < kEvictablePhases && oldest[tier] == nullptr) {
      oldest[tier] = s;
      if (tier == 0) break;
    }
  }
  for (Session* s : oldest) {
    if (s == nullptr) continue;
    auto keep = s->shared_from_this();
    s->Close(CloseReason::kEvicted);
    return true;
  }
  return false;
}

void Loop::Sweep() {
  const Clock::time_point now = Clock::now();
  for (auto it = sessions.begin(); it != sessions.end();) {
    Session* s = *it++;  // Expire() takes s off the list
    if (s->Expired(now)) {
      auto keep = s->shared_from_this();
      s->Expire();
    }
  }
  sweep.expires_after(server->sweep_interval);
  sweep.async_wait([this](beast::error_code ec) {
    if (!ec) Sweep();
  });
}

// The loop below its share of max_connections with the fewest connections;
// when every loop is full, the one with the most connections it may evict.
Loop& Server::Impl::PickLoop() {
  const size_t n = loops.size();
  const uint64_t share = (options.limits.max_connections + n - 1) / n;
  Loop* best = nullptr;
  Loop* fullest_evictable = nullptr;
  int64_t most_evictable = -1;
  for (size_t i = 0; i < n; ++i) {
    Loop& l = *loops[(next_loop + i) % n];
    const uint32_t open_here = l.open.load(std::memory_order_relaxed);
    if (open_here < share && (best == nullptr || open_here < best->open.load(std::memory_order_relaxed))) best = &l;
    const int64_t evictable = int64_t{open_here} - l.handling.load(std::memory_order_relaxed);
    if (evictable > most_evictable) {
      most_evictable = evictable;
      fullest_evictable = &l;
    }
  }
  next_loop = (next_loop + 1) % n;
  return best != nullptr ? *best : *fullest_evictable;
}

void Server::Impl::Accept() {
  Loop& target = PickLoop();
  acceptor->async_accept(target.ioc, [this, &target](beast::error_code ec, tcp::socket socket) {
    if (stopped.load()) return;
    if (!ec) {
      net::post(target.ioc, [&target, socket = std::move(socket)]() mutable { target.Admit(std::move(socket)); });
      return Accept();
    }
    if (ec == net::error::operation_aborted) return;
    LogRateLimited(LogLevel::kWarn, "http.accept." + options.thread_name,
                   "http: accept on " + options.host + ":" + std::to_string(bound_port) + " failed: " + ec.message());
    // Out of file descriptors or memory: try again shortly rather than spin.
    if (ec == net::error::no_descriptors || ec == net::error::no_buffer_space || ec == net::error::no_memory) {
      accept_retry->expires_after(std::chrono::milliseconds(100));
      return accept_retry->async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec && !stopped.load()) Accept();
      });
    }
    Accept();
  });
}

Server::Server(ServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

Server::~Server() { Stop(); }

Status Server::Start() {
  const ServerOptions& o = impl_->options;
  beast::error_code ec;
  const auto address = net::ip::make_address(o.host, ec);
  if (ec) return InvalidArgument("cannot listen on '" + o.host + "': not an IP address");
  const tcp::endpoint endpoint(address, o.port);
  const std::string where =
      (o.host.find(':') == std::string::npos ? o.host : "[" + o.host + "]") + ":" + std::to_string(o.port);
  Loop& first = *impl_->loops[0];
  auto& acc = impl_->acceptor.emplace(first.ioc);
  impl_->accept_retry.emplace(first.ioc);
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return FailedPrecondition("cannot listen on " + where + ": " + ec.message());
  impl_->bound_port = acc.local_endpoint().port();
  if (o.tls) {
    const std::string bound = (o.host.find(':') == std::string::npos ? o.host : "[" + o.host + "]") + ":" +
                              std::to_string(impl_->bound_port);
    Result<std::unique_ptr<TlsContexts>> tls = TlsContexts::Load(*o.tls, bound);
    if (!tls.ok()) {
      acc.close(ec);
      return tls.status();
    }
    impl_->tls = std::move(tls).value();
  }
  impl_->Accept();
  for (auto& loop : impl_->loops) {
    net::post(loop->ioc, [l = loop.get()] { l->Sweep(); });
    impl_->threads.push_back(StartNamedThread(o.thread_name, [l = loop.get()] { l->ioc.run(); }));
  }
  return Status::Ok();
}

void Server::Stop() {
  if (impl_->stopped.exchange(true)) return;
  for (auto& loop : impl_->loops) loop->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ignored;
  if (impl_->acceptor) impl_->acceptor->close(ignored);
}

uint16_t Server::port() const { return impl_->bound_port; }
uint64_t Server::open_connections() const { return impl_->open.load(); }

}  // namespace sluice::http
