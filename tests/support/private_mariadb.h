// PrivateMariaDb: a MariaDB server of the test's own, for fault tests that
// kill -9 mariadbd itself (the shared server of scripts/services must stay
// up for everything else). Debian's mariadb-install-db and mariadbd, a
// temporary data directory, a free port on 127.0.0.1, and the durability
// settings of scripts/services (innodb_flush_log_at_trx_commit=1,
// doublewrite, O_DIRECT), with a small buffer pool and redo log so that
// start-up and crash recovery take a second or two.
//
// Threads: one thread drives it. The destructor kills the server and
// removes the directory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace sluice::testing {

class PrivateMariaDb {
 public:
  PrivateMariaDb();
  ~PrivateMariaDb();
  PrivateMariaDb(const PrivateMariaDb&) = delete;
  PrivateMariaDb& operator=(const PrivateMariaDb&) = delete;

  // Initialises the data directory (once) and starts the server; creates
  // the user sluice/sluice with every privilege. False with *why on failure.
  bool Start(std::string* why);
  // Lines added to the [mysqld] section (before the first Start), e.g. ssl-cert = PATH.
  void AddConfig(const std::string& lines) { extra_config_ += lines; }
  // SIGKILL, as a power cut or an OOM kill would end it: no clean shutdown.
  void Kill();
  // Start() after Kill(): crash recovery runs, then the server answers.
  bool Restart(std::string* why) { return Start(why); }

  uint16_t port() const { return port_; }
  bool running() const { return pid_ > 0; }
  // Runs statements as root over the server's socket (the mariadb client).
  bool Sql(const std::string& statement, std::string* output) const;
  // The end of the server's error log, for failure messages.
  std::string LogTail() const;

 private:
  bool Ping() const;

  std::string dir_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  bool initialised_ = false;
  std::string extra_config_;
};

}  // namespace sluice::testing
