// Support for integration tests that run against the real servers started by
// `scripts/services up` (connection details in the SLUICE_TEST_* variables of
// .local/env).
//
// RequireMysql() skips a test when MariaDB is not reachable, except with
// CI=true, where a missing server is a failure. Every test makes its own
// uniquely named database, so tests can run again and again on one server.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sql/connection.h"

namespace sluice::testing {

// The test server's connection parameters (no database selected).
sql::ConnectParams MysqlParams();

// True when CI=true: a missing server must fail the run, not skip it.
bool InCi();

// Opens a connection; with `database` non-empty, selects it.
std::unique_ptr<sql::Connection> Connect(const std::string& database = "");

// A fresh database dropped when the object dies.
class TestDatabase {
 public:
  explicit TestDatabase(const std::string& prefix);
  // On another server (a Galera node).
  TestDatabase(const std::string& prefix, sql::ConnectParams server);
  ~TestDatabase();
  const std::string& name() const { return name_; }
  sql::Connection& conn() { return *conn_; }
  // Runs a query and returns the rows (fails the test on error).
  std::vector<sql::Row> Query(const std::string& q);
  // The single integer a query returns.
  int64_t Scalar(const std::string& q);

 private:
  std::unique_ptr<sql::Connection> Open() const;
  std::string name_;
  sql::ConnectParams server_;
  std::unique_ptr<sql::Connection> conn_;
};

// A config file for sluice in a temporary directory.
struct SluiceConfig {
  std::string database;
  std::map<std::string, uint32_t> entities;  // type -> partitions
  uint16_t port = 0;
  std::string mysql_host;  // empty: the test server
  uint16_t mysql_port = 0;  // 0: the test server's
  std::string extra_writer_yaml;  // lines added under writer:, each "  key: value\n"
  std::string extra_yaml;         // top-level sections appended as is (engine:, sinks:)
  std::string extra_storage_yaml;  // lines added under storage: (servers:), each indented by 2
  std::map<std::string, std::string> entity_yaml;  // type -> more keys of its mapping ("server: b")
  // Writes the file and returns its path.
  std::string Write() const;
};

// The test Redis server, from SLUICE_TEST_REDIS_URL (redis://127.0.0.1:16379/0).
std::string RedisUrl();
uint16_t RedisPort();

// A minimal blocking Redis client (hiredis) for tests. Not thread-safe.
class RedisClient {
 public:
  explicit RedisClient(uint16_t port);
  ~RedisClient();
  bool ok() const { return ctx_ != nullptr; }
  // GET: the value, or nullopt when absent (or on error).
  std::optional<std::string> Get(const std::string& key);
  // Runs a command given as words; the integer or string reply as text.
  std::optional<std::string> Run(const std::vector<std::string>& words);
  // Every key matching the glob pattern, with its GET value (strings only).
  std::map<std::string, std::string> Dump(const std::string& pattern);

 private:
  void* ctx_ = nullptr;  // redisContext*
};

// The test OpenSearch server's port, from SLUICE_TEST_OPENSEARCH_URL
// (http://127.0.0.1:19200).
uint16_t OpenSearchPort();
bool OpenSearchReachable();

// Deletes a test's OpenSearch index when it dies, as TestDatabase drops its
// database; after a rebuild the name is an alias, and the indices
// "<index>__rebuild_*" behind it go too.
class IndexDeleter {
 public:
  IndexDeleter() = default;
  IndexDeleter(IndexDeleter&& other) noexcept;
  IndexDeleter& operator=(IndexDeleter&& other) noexcept;
  ~IndexDeleter();
  void Set(std::string index) { index_ = std::move(index); }

 private:
  std::string index_;
};

// Polls `sluice status --json` until every sink's lag is 0 in every
// partition; false on timeout. *status gets the last JSON text.
bool WaitCaughtUp(const std::string& config_path, std::chrono::seconds timeout, std::string* status = nullptr);

// A free TCP port on 127.0.0.1 (bound and released) in 20000-31999, below
// the kernel's range for outgoing connections; never the same twice in a
// process.
uint16_t FreePort();

// A new directory /tmp/<prefix>-XXXXXX for a server of the test's own
// (empty when it cannot be made), and its removal with everything in it.
std::string MakeScratchDir(const std::string& prefix);
void RemoveScratchDir(const std::string& dir);

// In a child just forked to run a test's private server: have the kernel
// SIGKILL it when the thread that forked it ends, so that a test process
// that dies without its destructors (an abort, a CTest timeout) leaves no
// server behind. Call it only in children forked by a test's own thread.
void DieWithParent(pid_t parent);
// SIGKILL to a child process (as a power cut would end it), then reaps it;
// *pid becomes -1. Nothing when *pid <= 0.
void KillAndReap(pid_t* pid);

// The sluice binary under test.
std::string SluiceBinary();

// Runs a shell command to completion; its exit code (-1 when it did not
// exit), its stdout and stderr in *output.
int RunCommand(const std::string& command, std::string* output);

// Runs `sluice args...` to completion; returns the exit code, and the
// combined stdout+stderr in *output.
int RunSluice(const std::vector<std::string>& args, std::string* output);

// A `sluice serve|writer` child process.
class SluiceProcess {
 public:
  SluiceProcess(std::vector<std::string> args, uint16_t port);
  ~SluiceProcess();  // SIGKILL if still running

  // Starts and waits until GET /healthz answers; false (with the log in
  // *why) when it exits or does not answer within the timeout.
  bool Start(std::string* why, std::chrono::seconds timeout = std::chrono::seconds(30));
  // Starts and waits until the log contains `marker` (for processes without HTTP).
  bool StartNoHttp(std::string* why, const std::string& marker,
                   std::chrono::seconds timeout = std::chrono::seconds(30));
  void Kill();        // SIGKILL, then reap
  int Terminate();    // SIGTERM, then reap; the exit code
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }
  std::string Log() const;

 private:
  void Spawn();
  std::vector<std::string> args_;
  uint16_t port_;
  pid_t pid_ = -1;
  std::string log_path_;
};

struct HttpReply {
  int status = 0;  // 0: no reply (connection failed or timed out)
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string error;  // why there was no reply
};

// A blocking HTTP/1.1 keep-alive client to 127.0.0.1 with a timeout per
// request, for tests only, built on Boost.Beast (as admin/admin_client.cc).
// Not thread-safe: one per thread. Reconnects after a failure.
class HttpClient {
 public:
  explicit HttpClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  HttpReply Post(const std::string& path, const std::string& body,
                 const std::vector<std::pair<std::string, std::string>>& headers = {});
  HttpReply Get(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers = {});
  HttpReply Send(const std::string& raw_request);  // a whole request, as bytes
  bool Connect();
  void Close();

 private:
  struct Connection;  // the Beast stream and its read buffer
  HttpReply Roundtrip(const std::string& request);
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Connection> conn_;  // null when not connected
};

// A TCP proxy in front of MySQL that a test can cut: while disabled it
// refuses new connections and has closed every open one, as a crashed or
// unreachable server would look to a client.
class TcpProxy {
 public:
  TcpProxy(std::string target_host, uint16_t target_port);
  ~TcpProxy();
  uint16_t port() const;
  void SetEnabled(bool enabled);
  // While stalled, connections stay open (and new ones are accepted) but no
  // byte passes in either direction: a server that hangs, not one that is down.
  void SetStalled(bool stalled);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Asserts I3 for every event table of the database: event_ids are 1..N with
// no gap or duplicate. Returns the total number of events.
int64_t ExpectDenseEventIds(TestDatabase& db);
// Asserts I1 for every entity: versions 1..n with no gap or duplicate.
void ExpectDenseVersions(TestDatabase& db);

}  // namespace sluice::testing

namespace sluice::testing {

// A name unique to this process and call, for keys, tables and topics:
// "t<pid>_<what>_<random>".
std::string UniquePrefix(const std::string& what);

// Sends `count` commands to account entities e0..e<entities-1> from
// `threads` clients: mostly patches of {owner, balance, note}, some deletes
// and re-creations, Idempotency-Key "s<seed>-<i>". Stops early when *stop
// becomes true. Returns the commands answered 2xx or 4xx.
int64_t MixedLoad(uint16_t port, int count, int entities, int threads, uint32_t seed,
                  const std::atomic<bool>* stop = nullptr);

// Starts `sluice MODE --config PATH` (serve, writer or sync) and waits until
// it is ready: GET /healthz on `port` for the HTTP modes, its "syncing" log
// line for sync. A start that fails is a test failure (EXPECT); the process
// is returned either way.
std::unique_ptr<SluiceProcess> StartSluice(const std::string& mode, const std::string& config_path, uint16_t port);

// A thread that reads, until Stop(), the versions of random account entities
// e0..e<entities-1> in a Redis JSON view (keys "<redis_prefix>:<id>") and
// in the MySQL view table `account_view` of `database`, and counts every
// time a view shows a version older than one it showed before.
class ViewSampler {
 public:
  ViewSampler(std::string redis_prefix, std::string database, int entities, uint32_t seed);
  ~ViewSampler();  // calls Stop()
  void Stop();
  int backwards() const { return backwards_; }
  int64_t samples() const { return samples_; }

 private:
  std::atomic<bool> done_{false};
  std::atomic<int> backwards_{0};
  std::atomic<int64_t> samples_{0};
  std::thread thread_;
};

// `sluice verify --config path`: its exit code; its output in *out.
int VerifyViews(const std::string& config_path, std::string* out);
// `sluice status --config path --json`, parsed (discarded when not JSON).
nlohmann::json StatusJson(const std::string& config_path);
// A counter of `sluice status --json` ("applied", "stale", ...) summed over a sink's partitions.
uint64_t SinkTotal(const nlohmann::json& status, const std::string& sink, const std::string& field);

}  // namespace sluice::testing

// Skips the test (or fails it with CI=true) when Redis is not reachable.
#define SLUICE_REQUIRE_REDIS()                                                        \
  do {                                                                                \
    if (!::sluice::testing::RedisClient(::sluice::testing::RedisPort()).ok()) {       \
      if (::sluice::testing::InCi()) FAIL() << "Redis is not reachable (CI=true)";    \
      GTEST_SKIP() << "Redis is not reachable; run scripts/services up";              \
    }                                                                                 \
  } while (0)

// Skips the test (or fails it with CI=true) when OpenSearch is not reachable.
#define SLUICE_REQUIRE_OPENSEARCH()                                                                \
  do {                                                                                             \
    if (!::sluice::testing::OpenSearchReachable()) {                                               \
      if (::sluice::testing::InCi()) FAIL() << "OpenSearch is not reachable (CI=true)";            \
      GTEST_SKIP() << "OpenSearch is not reachable; run scripts/services up opensearch";           \
    }                                                                                              \
  } while (0)

// Skips the test (or fails it with CI=true) when MariaDB is not reachable.
#define SLUICE_REQUIRE_MYSQL()                                                      \
  do {                                                                              \
    if (!::sluice::testing::Connect()) {                                            \
      if (::sluice::testing::InCi()) FAIL() << "MariaDB is not reachable (CI=true)"; \
      GTEST_SKIP() << "MariaDB is not reachable; run scripts/services up";          \
    }                                                                               \
  } while (0)
