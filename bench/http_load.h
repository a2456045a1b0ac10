// HttpLoad: the writer benchmark's load generator. It keeps `connections`
// keep-alive HTTP/1.1 connections to the writer (Boost.Beast over Asio, one
// io_context per thread; HTTPS with HttpLoadOptions::tls, one TLS session per
// connection, made when it connects), each with one command in flight at a time, and
// sends `patch` (or HttpLoadOptions::command) commands with unique Idempotency-Keys:
//
//   POST /v1/entities/<type>/<entity>/commands/patch   {"n":<i>,"note":"..."}
//
// Every reply is checked as it arrives (200, JSON, type and id echoed,
// version > 0, event_id > 0); a 503 or a broken connection is retried with
// the same key, which the writer's idempotency makes safe. CreateEntities()
// first gives every entity a state of a chosen size. After the run,
// VerifyReplies() checks what the replies say together: per entity the
// versions are exactly 1..k, event ids grow with versions, and no two
// replies share a (partition, event_id).
//
// Threads: construct, RunPhase() and VerifyReplies() from one thread.
// RunPhase() starts `threads` event-loop threads and joins them before it
// returns, printing a progress line on stderr about once per second.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/status.h"

namespace sluice::bench {

struct HttpLoadOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  // More writers beside host:port (their ports, same host): connection i
  // goes to the (i mod n)-th of all of them.
  std::vector<uint16_t> more_ports;
  std::string type = "account";
  // The command sent: the built-in patch, or a JavaScript command of the
  // type's handler file that takes the same body (bench/handlers/ledger.js).
  std::string command = "patch";
  uint32_t connections = 256;
  uint32_t threads = 1;
  uint64_t entities = 1;
  uint64_t seed = 1;
  std::string run_id;
  std::string note;           // see MakeNote()
  uint32_t max_attempts = 20;  // tries per command (503s, broken connections)
  // CreateEntities(): the created state's canonical text is about this many
  // bytes, a "pad" string beside the body's members (at least the body).
  uint64_t state_bytes = 0;
  // HTTPS: the writer's certificate must chain to tls_ca (PEM; empty: this
  // machine's CAs) and name `host`. A failed handshake counts as a broken
  // connection.
  bool tls = false;
  std::string tls_ca;
};

// One verified 200 reply.
struct HttpReply {
  uint64_t index = 0;   // command index
  uint64_t entity = 0;  // entity number (see EntityOf)
  uint64_t version = 0;
  uint64_t event_id = 0;
  uint32_t partition = 0;
  uint32_t phase = 0;        // RunPhase() call it belongs to, from 0
  uint64_t latency_ns = 0;   // first send to full reply, retries included
};

struct HttpPhaseResult {
  uint64_t ok = 0;          // verified replies
  uint64_t failures = 0;    // commands that got no verified reply
  uint64_t retries = 0;     // 503s answered by resending
  uint64_t reconnects = 0;  // connections that broke and were reopened
  double seconds = 0;       // from the phase's start to its last reply
  std::vector<uint64_t> latencies_ns;
  std::vector<std::string> failure_samples;  // the first few, for the report
};

class HttpLoad {
 public:
  // Resolves the address; connections are opened by the first phase.
  static Result<std::unique_ptr<HttpLoad>> Create(HttpLoadOptions options);
  ~HttpLoad();
  HttpLoad(const HttpLoad&) = delete;
  HttpLoad& operator=(const HttpLoad&) = delete;

  // Sends commands with indices from `begin` on: at least `count` of them
  // and, when min_seconds > 0, for at least that long. Returns when every
  // sent command has its final reply.
  HttpPhaseResult RunPhase(uint64_t begin, uint64_t count, double min_seconds, const std::string& label);

  // A phase of one `create` per entity, before the phases that write to
  // them: its k-th command creates entity k with the usual body plus a
  // "pad" string, {"n":<i>,"note":"...","pad":"..."}, of about state_bytes
  // in all; the `patch` commands after it then change n of a state that size.
  HttpPhaseResult CreateEntities(const std::string& label);

  // The first command index the next phase may use.
  uint64_t next_index() const;

  // Checks the replies of every phase together (see the file comment).
  // Returns the number of problems; the first few are appended to `samples`.
  uint64_t VerifyReplies(std::vector<std::string>& samples) const;

  // Every verified reply of every phase (the threads are joined).
  std::vector<HttpReply> AllReplies() const;

  // "<run>-hot" / "<run>-e<k>" of entity number k.
  const std::string& entity_id(uint64_t entity) const;

  struct Impl;

 private:
  explicit HttpLoad(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::bench
