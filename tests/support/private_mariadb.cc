#include "tests/support/private_mariadb.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

PrivateMariaDb::PrivateMariaDb() {
  dir_ = MakeScratchDir("sluice-mdb");
  port_ = FreePort();
}

PrivateMariaDb::~PrivateMariaDb() {
  Kill();
  RemoveScratchDir(dir_);
}

bool PrivateMariaDb::Start(std::string* why) {
  if (dir_.empty() || port_ == 0) {
    if (why) *why = "no temporary directory or free port";
    return false;
  }
  const std::string cnf = dir_ + "/my.cnf";
  if (!initialised_) {
    std::filesystem::create_directories(dir_ + "/data");
    std::filesystem::create_directories(dir_ + "/tmp");
    std::ofstream(cnf) << "[client]\nport = " << port_ << "\nsocket = " << dir_ << "/mysqld.sock\n\n"
                       << "[mysqld]\ndatadir = " << dir_ << "/data\ntmpdir = " << dir_ << "/tmp\n"
                       << "socket = " << dir_ << "/mysqld.sock\npid-file = " << dir_ << "/mysqld.pid\n"
                       << "log-error = " << dir_ << "/error.log\nport = " << port_
                       << "\nbind-address = 127.0.0.1\nskip-name-resolve\n"
                       // The durability settings of scripts/services: what a crash must not defeat.
                       << "innodb_flush_log_at_trx_commit = 1\ninnodb_doublewrite = 1\n"
                       << "innodb_flush_method = O_DIRECT\nskip-log-bin\nsync_binlog = 1\n"
                       << "innodb_buffer_pool_size = 64M\ninnodb_log_file_size = 48M\n"
                       << "max_connections = 500\ncharacter-set-server = utf8mb4\ncollation-server = utf8mb4_bin\n"
                       << extra_config_;
    const std::string user = ::geteuid() == 0 ? " --user=root" : "";
    std::string out;
    if (RunCommand("mariadb-install-db --defaults-file=" + Quote(cnf) + user + " --datadir=" + Quote(dir_ + "/data") +
                " --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve",
            &out) != 0) {
      if (why) *why = "mariadb-install-db failed:\n" + out;
      return false;
    }
    initialised_ = true;
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    DieWithParent(parent);
    const int fd = ::open("/dev/null", O_RDWR);
    ::dup2(fd, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    const std::string defaults = "--defaults-file=" + cnf;
    if (::geteuid() == 0) {
      ::execlp("mariadbd", "mariadbd", defaults.c_str(), "--user=root", static_cast<char*>(nullptr));
    } else {
      ::execlp("mariadbd", "mariadbd", defaults.c_str(), static_cast<char*>(nullptr));
    }
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!Ping()) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (why) *why = "mariadbd exited during start-up:\n" + LogTail();
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      if (why) *why = "mariadbd did not answer within 120 s:\n" + LogTail();
      Kill();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string out;
  std::string sql;
  for (const char* host : {"127.0.0.1", "localhost"}) {
    // No single quotes: the statement travels inside them on the shell's command line.
    const std::string u = std::string("`sluice`@`") + host + "`";
    sql += "CREATE USER IF NOT EXISTS " + u + " IDENTIFIED BY \"sluice\"; GRANT ALL PRIVILEGES ON *.* TO " + u + "; ";
  }
  if (!Sql(sql, &out)) {
    if (why) *why = "could not create the user sluice: " + out;
    return false;
  }
  return true;
}

void PrivateMariaDb::Kill() {
  KillAndReap(&pid_);
}

bool PrivateMariaDb::Ping() const {
  std::string out;
  return RunCommand("mariadb-admin --defaults-file=" + Quote(dir_ + "/my.cnf") + " -uroot --connect-timeout=2 ping", &out) == 0;
}

bool PrivateMariaDb::Sql(const std::string& statement, std::string* output) const {
  return RunCommand("mariadb --defaults-file=" + Quote(dir_ + "/my.cnf") + " -uroot -e " + Quote(statement), output) == 0;
}

std::string PrivateMariaDb::LogTail() const {
  std::ifstream in(dir_ + "/error.log");
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

}  // namespace sluice::testing
