#include "tests/support/private_redis.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

PrivateRedis::PrivateRedis() {
  dir_ = MakeScratchDir("sluice-redis");
  port_ = FreePort();
}

PrivateRedis::~PrivateRedis() {
  Kill();
  RemoveScratchDir(dir_);
}

bool PrivateRedis::Start(std::string* why) {
  if (dir_.empty() || port_ == 0) {
    if (why) *why = "no temporary directory or free port";
    return false;
  }
  const std::string conf = dir_ + "/redis.conf";
  if (!written_) {
    std::ofstream(conf) << "bind 127.0.0.1\nport " << port_ << "\ndir " << dir_ << "\nlogfile " << dir_
                        << "/redis.log\nprotected-mode no\n"
                        << (sentinel_ ? "" : "save \"\"\nappendonly no\n") << extra_config_;
    written_ = true;
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    DieWithParent(parent);
    const int fd = ::open("/dev/null", O_RDWR);
    ::dup2(fd, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (sentinel_) {
      ::execlp("redis-server", "redis-server", conf.c_str(), "--sentinel", static_cast<char*>(nullptr));
    } else {
      ::execlp("redis-server", "redis-server", conf.c_str(), static_cast<char*>(nullptr));
    }
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string out;
  while (Cli({"PING"}, &out) != 0 || out.find("PONG") == std::string::npos) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (why) *why = "redis-server exited during start-up:\n" + LogTail();
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      if (why) *why = "redis-server did not answer within 30 s:\n" + LogTail();
      Kill();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

void PrivateRedis::Kill() {
  KillAndReap(&pid_);
}

int PrivateRedis::Cli(const std::vector<std::string>& args, std::string* out) const {
  std::string command = "redis-cli -h 127.0.0.1 -p " + std::to_string(port_);
  for (const std::string& a : args) command += " " + ShellQuote(a);
  return RunCommand(command, out);
}

std::string PrivateRedis::LogTail() const {
  std::ifstream in(dir_ + "/redis.log");
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

}  // namespace sluice::testing
