// Forwarder: the HTTP client one sluice process uses to hand a request to
// another (a writer forwarding a command to the writer that owns its
// partition). One thread of its own runs every transfer at once through
// libcurl's multi interface, keeping connections alive per peer, so a
// thousand requests in flight cost no thread each.
//
// A transfer that fails (connection refused or reset, no answer within the
// timeouts, the forwarder stopped) comes back as kUnavailable; every HTTP
// answer, whatever its status, comes back as a Response (the caller
// decides). Hop-by-hop headers (Connection, Keep-Alive, Transfer-Encoding,
// Content-Length, Date, Server) are left out of the Response's headers.
//
// Threads: Send() from any thread; `done` runs on the forwarder's thread
// (keep it short: post heavy work elsewhere), or at once on the caller's
// when the forwarder is not running. Start/Stop from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "http/server.h"

namespace sluice::http {

struct ForwarderOptions {
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds request_timeout{10000};  // the whole transfer, end to end
  uint32_t max_connections_per_host = 256;  // transfers beyond it wait for a connection
  std::string thread_name = "sluice-forward";
  // For https:// peers: the CAs to trust (empty: the machine's) and the
  // client certificate and key to present (empty: none). The peer's host
  // name is always checked.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
};

class Forwarder {
 public:
  using Done = std::function<void(Result<Response>)>;

  explicit Forwarder(ForwarderOptions options);
  ~Forwarder();  // calls Stop()
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // Starts the thread; kInternal when libcurl cannot be set up.
  Status Start();
  // Fails every transfer not yet answered (kUnavailable) and joins the thread.
  void Stop();

  // Sends `method` to `url` (scheme, host, port and the target as sent by
  // the client) with `headers` and `body`; `done` gets the answer once.
  void Send(std::string url, std::string method, std::vector<std::pair<std::string, std::string>> headers,
            std::string body, Done done);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::http
