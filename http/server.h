// Server: the asynchronous HTTP/1.1 server (Boost.Beast over Asio) behind
// every listener of a sluice process: the writer's API, the admin endpoint
// and the metrics listener.
//
// Each connection reads one request at a time and hands it to the handler
// with a Responder. The handler may answer at once or later from any thread
// (a partition worker, a reader thread); the write is posted back to the
// connection's event-loop thread. A body over the limit gets 413, headers
// over the limit 431, malformed HTTP 400; each of those closes the
// connection.
//
// Limits, so that slow or idle clients cannot starve the listener:
//   header_timeout  a request's whole header must arrive within it, counted
//                   from the accept (first request) or from its first byte
//                   (later requests on a kept-alive connection)
//   body_timeout    the whole body must arrive within it after the header
//   write_timeout   the whole reply must be written within it (a client that
//                   never reads its reply)
//   idle_timeout    a kept-alive connection may wait this long for the first
//                   byte of its next request
//   max_connections open connections. A new connection over the limit
//                   evicts an open one, in this order of preference: the one
//                   idle or reading its header the longest, then the one
//                   reading its body the longest, then the one writing its
//                   reply the longest. A connection whose request is with the
//                   handler is never evicted; when every connection is, the
//                   newcomer gets 503 and is closed.
// Each loop checks the timeouts every tenth of the shortest timeout (between
// 10 ms and 1 s), so a connection outlives its timeout by at most that.
// Idle connections cost no thread, only a socket and a small buffer.
//
// Threads: Start() runs io_threads event-loop threads, each with its own
// connections from accept to close. Accept hands a new connection to a loop
// below its share of max_connections (the one with the fewest), or, when
// all are full, to the loop with the most connections it may evict; the
// newcomer evicts within that loop. The count against max_connections is
// the server's. Stop() may be called from any thread once; the handler,
// the accept and close callbacks run on the event-loop threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sluice::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query, as sent
  std::string body;
  // Every header field as received, in order.
  std::vector<std::pair<std::string, std::string>> headers;

  // The value of the first field named `name` (compared ignoring case), or
  // nullopt when absent. The view lives as long as the request.
  std::optional<std::string_view> Header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Extra headers, e.g. {"Retry-After", "1"}.
  std::vector<std::pair<std::string, std::string>> headers;
};

// {"error":{"code":...,"message":...}} with `status`.
Response JsonError(int status, std::string_view code, std::string_view message);

// Sends the response; call exactly once, from any thread. Call it (or drop
// it) before the server is destroyed: it holds the connection.
using Responder = std::function<void(Response)>;
using Handler = std::function<void(Request&&, Responder)>;

// Why the server closed a connection (or the client did).
enum class CloseReason : uint8_t {
  kClient,         // the client closed it or reset it
  kServer,         // after a reply that ends the connection (Connection: close, 400, 413, 431)
  kIdleTimeout,    // kept alive without a new request for idle_timeout
  kHeaderTimeout,  // the header did not arrive within header_timeout
  kBodyTimeout,    // the body did not arrive within body_timeout
  kWriteTimeout,   // the reply was not taken within write_timeout
  kEvicted,        // closed to make room for a new connection (max_connections)
  kRefused,        // a new connection over max_connections that nothing could make room for (503)
  kTlsHandshake,   // the TLS handshake failed (no or an untrusted client certificate, not TLS at all...)
};
inline constexpr size_t kCloseReasons = 9;
// "client", "server", "idle_timeout", "header_timeout", "body_timeout",
// "write_timeout", "evicted", "refused", "tls_handshake".
std::string_view CloseReasonName(CloseReason reason);

struct Limits {
  uint32_t max_connections = 64;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds write_timeout{30000};
};

// TLS on a listener (docs/security.md). The PEM files are read by Start()
// and again when one of them changes (looked at, at most once a second, when
// a connection arrives): a renewed certificate is served to the next
// connections without a restart, and a file that does not load (half
// written, a key that is not the certificate's) leaves the previous ones in
// use and is logged.
struct ServerTls {
  std::string cert;       // the certificate chain, the server's first
  std::string key;        // its private key
  std::string client_ca;  // non-empty: each client must present a certificate signed by one of these CAs
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: any free port (see port())
  uint32_t io_threads = 1;
  std::string thread_name = "sluice-http";  // at most 15 bytes are kept
  uint64_t max_body_bytes = 1 << 20;
  uint32_t max_header_bytes = 16 * 1024;  // the request line and every header field together
  Limits limits;
  // TLS when set. Over TLS a kept-alive connection's idle_timeout covers its
  // next request's whole header too (TLS may hold its first bytes where the
  // idle wait cannot see them), and a newcomer nothing can make room for is
  // closed without the 503.
  std::optional<ServerTls> tls;
  // Called on an event-loop thread for every connection accepted, and for
  // every connection closed other than by Stop(). Must not block.
  std::function<void()> on_accept;
  std::function<void(CloseReason)> on_close;
};

class Server {
 public:
  Server(ServerOptions options, Handler handler);
  ~Server();  // calls Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds, listens and starts the event loops. FailedPrecondition when the
  // address cannot be bound or a TLS file does not load, InvalidArgument
  // when it is not an IP address.
  Status Start();
  // Stops accepting, drops every connection (replies not yet written are
  // lost), joins the threads.
  void Stop();
  // The port actually bound, after Start().
  uint16_t port() const;
  // Connections currently open (any thread).
  uint64_t open_connections() const;

  // Implementation detail, public only so that connection objects can reach it.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::http
