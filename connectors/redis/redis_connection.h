// One blocking connection to a Redis server, in plain TCP or TLS (rediss://),
// for the redis sink. Commands are queued (Append), written together (Flush)
// and their replies read in order (Read): the sink pipelines a batch this way.
//
// Why not hiredis's own connection: Debian 12's hiredis is 0.14, which has
// no TLS, and no newer hiredis (nor another C or C++ Redis client with TLS)
// is packaged. So this class owns the socket and the TLS session (OpenSSL)
// and keeps hiredis for what it does well: the reply parser (redisReader)
// and its reply objects. Plain and TLS connections share every line but the
// read and write calls, so the cost of TLS is measured on the same code.
//
// Errors: every method that fails leaves the connection unusable (the caller
// drops it) and returns kUnavailable whose message says why, naming no
// secret: the TLS failures say which check failed ("certificate has
// expired", "hostname mismatch", "self-signed certificate"...).
//
// Threads: one thread at a time. A write to a peer that closed raises
// SIGPIPE; callers block it (redis_sink_impl.h, SigpipeGuard).
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "config/tls_options.h"
#include "core/status.h"

namespace sluice::connectors::redis {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

struct RedisTransport {
  std::string host;
  uint16_t port = 6379;
  bool tls = false;
  config::TlsClientOptions tls_options;  // when tls
  std::chrono::milliseconds connect_timeout{2000};  // TCP connect and TLS handshake, each
  std::chrono::milliseconds io_timeout{5000};       // each read or write
};

class RedisConnection {
 public:
  // Connects (and, over TLS, completes the handshake and checks the
  // server's certificate).
  static Result<std::unique_ptr<RedisConnection>> Open(const RedisTransport& t);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Queues one command: argc arguments of lens bytes each. No I/O.
  void Append(int argc, const char* const* argv, const size_t* lens);
  // Writes every queued byte.
  Status Flush();
  // The next reply (writing what is still queued first).
  Result<ReplyPtr> Read();
  // Append, then Read.
  Result<ReplyPtr> Command(int argc, const char* const* argv, const size_t* lens);

 private:
  struct Tls;
  RedisConnection() = default;
  Status Fail(std::string why);
  Status WriteSome(const char* data, size_t size, size_t* written);
  Status ReadSome(char* data, size_t size, size_t* got);

  int fd_ = -1;
  std::unique_ptr<Tls> tls_;
  redisReader* reader_ = nullptr;
  std::string out_;  // queued commands, RESP
  std::chrono::milliseconds io_timeout_{0};
  bool broken_ = false;
};

}  // namespace sluice::connectors::redis
