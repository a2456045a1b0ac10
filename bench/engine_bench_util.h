// Small pieces the sync-engine benchmark (bench/engine_bench.cc) needs and the
// writer benchmark's bench_common.h does not have: child processes (spawn,
// memory from /proc, stop), a blocking Redis connection, the servers' and
// views' addresses, and the wall clock in microseconds.
//
// Threads: a RedisConn is used by one thread at a time; the free functions
// are safe from any thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "config/config.h"
#include "core/status.h"

struct redisContext;
struct redisReply;

namespace sluice::bench {

// A server the benchmark reads or writes beside a sink: its address comes
// from the command line (--redis, --opensearch), never from a sink's
// options, so that the benchmarks use only the public sink interface
// (connectors/sink.h, MakeSink) and no sink's internals.
struct Endpoint {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string Describe() const { return host + ":" + std::to_string(port); }
};

// HOST:PORT, as given to --redis or --opensearch.
Result<Endpoint> ParseHostPort(std::string_view text);

// Where a benchmark finds the views it measures.
struct ViewServers {
  Endpoint redis{"127.0.0.1", 16379};       // database 0, no password
  Endpoint opensearch{"127.0.0.1", 19200};  // plain HTTP, no credentials
};

// The benchmarks name their views literally, so that finding a key or an
// index needs no sink code: a redis sink's key is "<prefix>{id}", an
// elasticsearch sink's index has no {type}. Anything else is refused.
struct RedisKeys {
  std::string prefix;
  std::string Key(std::string_view id) const { return prefix + std::string(id); }
  std::string ScanPattern() const { return prefix + "*"; }  // also covers <key>:_tomb
};
Result<RedisKeys> BenchRedisKeys(const config::SinkConfig& sink);
Result<std::string> BenchIndexName(const config::SinkConfig& sink);

// Microseconds since the Unix epoch (CLOCK_REALTIME): comparable with
// MySQL's UNIX_TIMESTAMP(committed_at) on the same host.
int64_t RealtimeMicros();

// A child process started with its stdout and stderr appended to a log file.
// Not copyable; the destructor SIGKILLs a child still running.
class ChildProcess {
 public:
  // argv[0] is the program's path.
  static Result<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                     const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // True while the child has not exited (reaps it when it has).
  bool Running();
  // SIGTERM, then wait up to `patience` (SIGKILL after it); the exit code,
  // or 128+signal when it was killed.
  int Terminate(std::chrono::milliseconds patience = std::chrono::seconds(30));
  // Waits for the child to exit by itself; its exit code (128+signal if killed).
  int Wait();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> exit_code_;
};

// Runs a program to completion with its output appended to log_path; the
// exit code (or 128+signal), or an error when it cannot be started.
Result<int> RunProgram(const std::vector<std::string>& argv, const std::string& log_path);

// VmRSS and VmHWM of a process, in KiB, from /proc/PID/status.
struct MemoryKib {
  uint64_t rss = 0;
  uint64_t hwm = 0;
};
std::optional<MemoryKib> ReadMemory(pid_t pid);

// A blocking hiredis connection (no AUTH beyond a password, db via SELECT).
class RedisConn {
 public:
  struct ReplyFree {
    void operator()(redisReply* r) const;
  };
  using ReplyPtr = std::unique_ptr<redisReply, ReplyFree>;

  // url: redis://[:password@]host[:port][/db]
  static Result<std::unique_ptr<RedisConn>> Open(const Endpoint& server);
  ~RedisConn();
  RedisConn(const RedisConn&) = delete;
  RedisConn& operator=(const RedisConn&) = delete;

  // One command, waiting for its reply; an error status for a broken
  // connection or an error reply.
  Result<ReplyPtr> Run(const std::vector<std::string_view>& args);
  // Pipelining: queue commands, then read one reply per queued command.
  Status Append(const std::vector<std::string_view>& args);
  Status AppendArgv(int argc, const char** argv, const size_t* lens);
  Result<ReplyPtr> Read();
  // Deletes every key matching a SCAN pattern (UNLINK in pipelines); how many.
  Result<uint64_t> DeleteMatching(const std::string& pattern);
  // Microseconds the server has spent inside EVALSHA and SET since it
  // started (INFO commandstats): take the difference around a run for the
  // server's own time per event, whatever else the machine is doing.
  Result<double> WriteCommandMicros();

 private:
  explicit RedisConn(redisContext* ctx) : ctx_(ctx) {}
  redisContext* ctx_;
};

// The version at the start of a redis json value `{"_version":N,...`; 0 when
// the value does not start that way.
uint64_t VersionOfJsonValue(std::string_view value);

}  // namespace sluice::bench
