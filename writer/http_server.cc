#include "writer/http_server.h"

#include <algorithm>
#include <memory>
#include <optional>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/log.h"
#include "core/thread_name.h"

namespace sluice::writer {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

constexpr auto kIdleTimeout = std::chrono::seconds(300);
constexpr uint32_t kHeaderLimit = 16 * 1024;

}  // namespace

// One io_context per io thread, each run by its thread alone: a connection
// lives on one thread from accept to close, so its handlers need no strand
// and no lock, and a worker's reply is posted straight to that thread. (One
// shared io_context with a strand per connection cost the HTTP threads about
// a fifth more CPU per request in type-erased executor copies, shared_ptr
// counts and mutexes: docs/BENCHMARKS.md.) New connections go to the
// threads in turn.
struct HttpServer::Impl {
  // Declared before the contexts: sessions destroyed with them still count down `open`.
  HttpServerOptions options;
  HttpHandler handler;
  std::atomic<uint64_t> open{0};
  std::atomic<bool> stopped{false};
  uint16_t bound_port = 0;
  std::vector<std::unique_ptr<net::io_context>> contexts;  // [0] also runs the acceptor
  // Keep each thread's run() going while its context has no connection yet.
  std::vector<net::executor_work_guard<net::io_context::executor_type>> idle_guards;
  size_t next_context = 0;                                 // the acceptor's handler only
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;

  Impl(HttpServerOptions o, HttpHandler h) : options(std::move(o)), handler(std::move(h)) {
    for (uint32_t i = 0; i < std::max<uint32_t>(options.io_threads, 1); ++i) {
      contexts.push_back(std::make_unique<net::io_context>(1));
      idle_guards.push_back(net::make_work_guard(*contexts.back()));
    }
  }

  void Accept();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl* server) : stream_(std::move(socket)), server_(server) {
    server_->open.fetch_add(1, std::memory_order_relaxed);
  }
  ~Session() { server_->open.fetch_sub(1, std::memory_order_relaxed); }

  void Start() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::Read, shared_from_this()));
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(kHeaderLimit);
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::OnRead, shared_from_this()));
  }

  void OnRead(beast::error_code ec, size_t) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == beast::error::timeout || ec == net::error::operation_aborted) {
      return Close();
    }
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return Write(ErrorResponse(413, "payload_too_large",
                                 "the request body is larger than the limit of " +
                                     std::to_string(server_->options.max_body_bytes) + " bytes"));
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      return Write(ErrorResponse(431, "headers_too_large", "the request headers are too large"));
    }
    if (ec) {
      keep_alive_ = false;
      return Write(ErrorResponse(400, "malformed_http", "malformed HTTP request: " + ec.message()));
    }
    auto msg = parser_->release();
    keep_alive_ = msg.keep_alive();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.body = std::move(msg.body());
    if (auto it = msg.find("Idempotency-Key"); it != msg.end()) {
      req.has_idempotency_key = true;
      req.idempotency_key = std::string(it->value());
    }
    if (auto it = msg.find(http::field::authorization); it != msg.end()) {
      req.authorization = std::string(it->value());
    }
    if (auto it = msg.find(http::field::if_match); it != msg.end()) {
      req.has_if_match = true;
      req.if_match = std::string(it->value());
    }
    auto self = shared_from_this();
    server_->handler(std::move(req), [self](HttpResponse resp) {
      net::post(self->stream_.get_executor(),
                [self, resp = std::move(resp)]() mutable { self->Write(std::move(resp)); });
    });
  }

  static HttpResponse ErrorResponse(int status, const std::string& code, const std::string& message) {
    HttpResponse r;
    r.status = status;
    r.body = R"({"error":{"code":")" + code + R"(","message":")" + message + "\"}}";
    return r;
  }

  void Write(HttpResponse resp) {
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(resp.status));
    res_.set(http::field::content_type, resp.content_type);
    for (auto& [name, value] : resp.headers) res_.set(name, value);
    res_.body() = std::move(resp.body);
    res_.keep_alive(keep_alive_);
    res_.prepare_payload();
    stream_.expires_after(kIdleTimeout);
    http::async_write(stream_, res_, beast::bind_front_handler(&Session::OnWrite, shared_from_this()));
  }

  void OnWrite(beast::error_code ec, size_t) {
    if (ec || !keep_alive_) return Close();
    Read();
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  bool keep_alive_ = true;
};

}  // namespace

void HttpServer::Impl::Accept() {
  net::io_context& target = *contexts[next_context];
  next_context = (next_context + 1) % contexts.size();
  acceptor->async_accept(target, [this](beast::error_code ec, tcp::socket socket) {
    if (stopped.load()) return;
    if (!ec) {
      socket.set_option(tcp::no_delay(true), ec);
      std::make_shared<Session>(std::move(socket), this)->Start();
    } else if (ec != net::error::operation_aborted) {
      LogRateLimited(LogLevel::kWarn, "http.accept", "http: accept failed: " + ec.message());
    }
    Accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  beast::error_code ec;
  const auto address = net::ip::make_address(impl_->options.host, ec);
  if (ec) return InvalidArgument("cannot listen on '" + impl_->options.host + "': not an IP address");
  const tcp::endpoint endpoint(address, impl_->options.port);
  const std::string where = impl_->options.host + ":" + std::to_string(impl_->options.port);
  auto& acc = impl_->acceptor.emplace(*impl_->contexts[0]);
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return FailedPrecondition("cannot listen on " + where + ": " + ec.message());
  impl_->bound_port = acc.local_endpoint().port();
  impl_->Accept();
  for (auto& context : impl_->contexts) {
    impl_->threads.push_back(StartNamedThread("sluice-http", [&ioc = *context] { ioc.run(); }));
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  if (impl_->stopped.exchange(true)) return;
  net::post(*impl_->contexts[0], [this] {
    beast::error_code ignored;
    if (impl_->acceptor) impl_->acceptor->close(ignored);
  });
  for (auto& context : impl_->contexts) context->stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
}

uint16_t HttpServer::port() const { return impl_->bound_port; }
uint64_t HttpServer::open_connections() const { return impl_->open.load(); }

}  // namespace sluice::writer
