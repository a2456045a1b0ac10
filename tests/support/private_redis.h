// PrivateRedis: a redis-server of the test's own (Debian's redis-server), on
// free ports of 127.0.0.1 with a temporary directory, for tests that need a
// server set up in a way the shared one of scripts/services is not: TLS
// with the test's certificates, ACL users, Sentinel and Cluster nodes.
//
// It always listens in plain text on port() for the test's own commands
// (Cli); AddConfig adds redis.conf lines (tls-port, tls-cert-file...).
//
// Threads: one thread drives it. The destructor kills the server and
// removes the directory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::testing {

class PrivateRedis {
 public:
  PrivateRedis();
  ~PrivateRedis();
  PrivateRedis(const PrivateRedis&) = delete;
  PrivateRedis& operator=(const PrivateRedis&) = delete;

  // redis.conf lines added before the first Start.
  void AddConfig(const std::string& lines) { extra_config_ += lines; }
  // Runs it as a Redis Sentinel (redis-server --sentinel), which rewrites
  // its own config file as it learns the replicas and fails over.
  void AsSentinel() { sentinel_ = true; }
  // Starts the server and waits until it answers PING (again after Kill:
  // same port, same directory). False with *why.
  bool Start(std::string* why);
  void Kill();  // SIGKILL

  uint16_t port() const { return port_; }
  const std::string& dir() const { return dir_; }
  // Runs redis-cli against port() with `args` (each one argument, quoted
  // for the shell here); its exit code, and its output in *out.
  int Cli(const std::vector<std::string>& args, std::string* out) const;
  // The end of the server's log, for failure messages.
  std::string LogTail() const;

 private:
  std::string dir_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  std::string extra_config_;
  bool sentinel_ = false;
  bool written_ = false;  // the config file (a sentinel's is its own after the first start)
};

}  // namespace sluice::testing
