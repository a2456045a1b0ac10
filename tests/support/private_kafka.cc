#include "tests/support/private_kafka.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

std::string ClasspathFile() {
  const char* file = std::getenv("SLUICE_TEST_KAFKA_CLASSPATH_FILE");
  return file != nullptr ? file : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The jars, as one classpath (the file ends with a newline).
std::string Classpath() {
  std::string cp = ReadFile(ClasspathFile());
  while (!cp.empty() && std::isspace(static_cast<unsigned char>(cp.back()))) cp.pop_back();
  return cp;
}

bool Accepts(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

bool PrivateKafka::Available(std::string* why) {
  const std::string file = ClasspathFile();
  if (file.empty() || !std::filesystem::exists(file)) {
    if (why) *why = "no Kafka jars: SLUICE_TEST_KAFKA_CLASSPATH_FILE is not set or missing (run scripts/services up kafka and source .local/env)";
    return false;
  }
  return true;
}

PrivateKafka::PrivateKafka() {
  dir_ = MakeScratchDir("sluice-kafka");
  port_ = FreePort();
  controller_port_ = FreePort();
  listeners_ = "PLAINTEXT://127.0.0.1:" + std::to_string(port_);
  protocols_ = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT";
  ports_.push_back(port_);
}

PrivateKafka::~PrivateKafka() {
  Kill();
  RemoveScratchDir(dir_);
}

uint16_t PrivateKafka::AddListener(const std::string& name, const std::string& protocol,
                                   const std::vector<std::string>& properties) {
  const uint16_t port = FreePort();
  listeners_ += "," + name + "://127.0.0.1:" + std::to_string(port);
  protocols_ += "," + name + ":" + protocol;
  for (const std::string& p : properties) extra_ += "listener.name." + Lower(name) + "." + p + "\n";
  ports_.push_back(port);
  return port;
}

void PrivateKafka::AddScramUser(const std::string& mechanism, const std::string& name, const std::string& password) {
  scram_.push_back(mechanism + "=[name=" + name + ",password=" + password + "]");
}

bool PrivateKafka::Start(std::string* why) {
  if (!Available(why)) return false;
  if (dir_.empty()) {
    if (why) *why = "no temporary directory";
    return false;
  }
  const std::string props = dir_ + "/server.properties";
  std::ofstream(props) << "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:"
                       << controller_port_ << "\nlisteners=" << listeners_ << ",CONTROLLER://127.0.0.1:"
                       << controller_port_ << "\nadvertised.listeners=" << listeners_
                       << "\ncontroller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n"
                       << "listener.security.protocol.map=" << protocols_ << "\nlog.dirs=" << dir_ << "/data\n"
                       << "offsets.topic.replication.factor=1\noffsets.topic.num.partitions=1\n"
                       << "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
                       << "transaction.state.log.num.partitions=1\nnum.partitions=1\n"
                       << "group.initial.rebalance.delay.ms=0\nnum.network.threads=1\nnum.io.threads=2\n"
                       << "background.threads=2\nlog.cleaner.enable=false\n"
                       << extra_;
  std::ofstream(dir_ + "/log4j.properties")
      << "log4j.rootLogger=INFO, file\nlog4j.appender.file=org.apache.log4j.FileAppender\nlog4j.appender.file.File="
      << dir_ << "/kafka.log\nlog4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
      << "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n";
  const std::string java = "java -Xms256m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true "
                           "-Dlog4j.configuration=file:" + dir_ + "/log4j.properties -cp " + Classpath();
  std::string format = java + " kafka.tools.StorageTool format -t MkU3OEVBNTcwNTJENDM2Qk -c " + props;
  for (const std::string& s : scram_) format += " --add-scram '" + s + "'";
  std::string out;
  if (RunCommand(format, &out) != 0) {
    if (why) *why = "formatting the storage failed:\n" + out;
    return false;
  }
  const std::string command = java + " kafka.Kafka " + props;
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    DieWithParent(parent);
    const int fd = ::open((dir_ + "/stdout.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (uint16_t p : ports_) {
    while (!Accepts(p)) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (why) *why = "the broker exited during start-up:\n" + ReadFile(dir_ + "/stdout.log") + LogTail();
        return false;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        if (why) *why = "the broker did not listen on port " + std::to_string(p) + " within 90 s:\n" + LogTail();
        Kill();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return true;
}

void PrivateKafka::Kill() {
  KillAndReap(&pid_);
}

std::string PrivateKafka::LogTail() const {
  const std::string all = ReadFile(dir_ + "/kafka.log");
  return all.size() > 6000 ? all.substr(all.size() - 6000) : all;
}

}  // namespace sluice::testing
