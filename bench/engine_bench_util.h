// Small pieces the sync-engine benchmark (bench/engine_bench.cc) needs and the
// writer benchmark's bench_common.h does not have: child processes (spawn,
// memory from /proc, stop), a blocking Redis connection, the servers' and
// views' addresses, and the wall clock in microseconds.
//
// Threads: a RedisConn is used by one thread at a time; the free functions
// are safe from any thread.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <atomic>
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
  // The resources the child used (wait4), once it has been reaped; zeros before.
  const rusage& usage() const { return usage_; }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> exit_code_;
  rusage usage_{};
};

// Runs a program to completion with its output appended to log_path; the
// exit code (or 128+signal), or an error when it cannot be started. With
// `usage`, also what that child alone used (ru_maxrss: its peak RSS in KiB).
Result<int> RunProgram(const std::vector<std::string>& argv, const std::string& log_path, rusage* usage = nullptr);

// VmRSS and VmHWM of a process, in KiB, from /proc/PID/status.
struct MemoryKib {
  uint64_t rss = 0;
  uint64_t hwm = 0;
};
std::optional<MemoryKib> ReadMemory(pid_t pid);

// The memory of some processes taken together while a benchmark runs: their
// VmRSS summed, sampled every `interval` on a thread of its own, and their
// VmHWM summed at Stop(). A sample in which one of them cannot be read (it
// has exited) is skipped.
// Threads: construct, Stop() and the accessors other than now_kib() on one
// thread; now_kib() from any (a progress line).
class MemorySampler {
 public:
  // Takes the first sample before returning.
  MemorySampler(std::vector<pid_t> pids, std::chrono::milliseconds interval);
  // Stop().
  ~MemorySampler();
  MemorySampler(const MemorySampler&) = delete;
  MemorySampler& operator=(const MemorySampler&) = delete;

  // Ends the sampling with one last sample of VmRSS and of VmHWM; idempotent.
  void Stop();
  uint64_t now_kib() const { return now_kib_.load(); }  // the latest sample
  uint64_t peak_kib() const { return peak_kib_.load(); }  // the highest sample
  uint64_t hwm_kib() const { return hwm_kib_; }  // after Stop(): the VmHWM sum (0 when unreadable)
  uint64_t samples() const { return samples_.load(); }

 private:
  // One sample; with `hwm`, also the VmHWM sum.
  void Sample(bool hwm);

  const std::vector<pid_t> pids_;
  std::atomic<uint64_t> now_kib_{0}, peak_kib_{0}, samples_{0};
  uint64_t hwm_kib_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

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
