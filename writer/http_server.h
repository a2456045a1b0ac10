// HttpServer: an asynchronous HTTP/1.1 server (Boost.Beast over Asio) with
// keep-alive, a request body limit and a small header limit.
//
// Each connection reads one request at a time and hands it to the handler
// with a Responder. The handler may answer at once or later from any thread
// (a partition worker, a reader thread); the write is posted back to the
// connection's event-loop thread. A body over the limit gets 413 and the connection is
// closed; malformed HTTP gets 400 and the connection is closed.
//
// Threads: Start() runs io_threads event-loop threads, each with its own
// connections; Stop() may be called from any thread once; the handler runs
// on the connection's event-loop thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"

namespace sluice::writer {

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // path and query, as sent
  std::string body;
  std::string idempotency_key;  // header Idempotency-Key, empty when absent
  std::string if_match;         // header If-Match, empty when absent
  std::string authorization;    // header Authorization, empty when absent
  bool has_idempotency_key = false;
  bool has_if_match = false;
};

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Extra headers, e.g. {"Retry-After", "1"}.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Sends the response; call exactly once, from any thread.
using Responder = std::function<void(HttpResponse)>;
using HttpHandler = std::function<void(HttpRequest&&, Responder)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see port())
  uint32_t io_threads = 2;
  uint64_t max_body_bytes = 1 << 20;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();  // calls Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the event loops.
  Status Start();
  // Stops accepting, closes connections, joins the threads.
  void Stop();
  // The port actually bound, after Start().
  uint16_t port() const;
  // Connections currently open.
  uint64_t open_connections() const;

  // Implementation detail, public only so that connection objects can reach it.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::writer
