#include "tests/support/private_opensearch.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/support/test_support.h"

#ifndef SLUICE_OPENSEARCH_LAUNCHER
#error "SLUICE_OPENSEARCH_LAUNCHER (the launcher's source file) must be defined by the build"
#endif

namespace sluice::testing {
namespace {

constexpr char kReady[] = "OpenSearchLauncher: node up on";

std::string ClasspathFile() {
  const char* file = std::getenv("SLUICE_TEST_OPENSEARCH_CLASSPATH_FILE");
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

// Writes `text` to `path` in one rename, so that the node never reads half a file.
void ReplaceFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, path);
}

}  // namespace

bool PrivateOpenSearch::Available(std::string* why) {
  const std::string file = ClasspathFile();
  if (file.empty() || !std::filesystem::exists(file)) {
    if (why) {
      *why = "no OpenSearch jars: SLUICE_TEST_OPENSEARCH_CLASSPATH_FILE is not set or missing (run scripts/services "
             "up opensearch and source .local/env)";
    }
    return false;
  }
  if (!std::filesystem::exists(SLUICE_OPENSEARCH_LAUNCHER)) {
    if (why) *why = std::string("the launcher's source is missing: ") + SLUICE_OPENSEARCH_LAUNCHER;
    return false;
  }
  std::string out;
  if (RunCommand("javac -version", &out) != 0) {
    if (why) *why = "javac is missing (Debian package openjdk-17-jdk-headless): " + out;
    return false;
  }
  return true;
}

PrivateOpenSearch::PrivateOpenSearch() {
  dir_ = MakeScratchDir("sluice-opensearch");
  port_ = FreePort();
  transport_port_ = FreePort();
}

PrivateOpenSearch::~PrivateOpenSearch() {
  Kill();
  RemoveScratchDir(dir_);
}

void PrivateOpenSearch::Present(const std::string& cert_file, const std::string& key_file) {
  ReplaceFile(dir_ + "/https.pem", ReadFile(cert_file) + ReadFile(key_file));
}

void PrivateOpenSearch::DemandClientCertificates(const std::string& ca_file) {
  if (ca_file.empty()) {
    std::filesystem::remove(dir_ + "/client_ca.pem");
  } else {
    ReplaceFile(dir_ + "/client_ca.pem", ReadFile(ca_file));
  }
}

bool PrivateOpenSearch::Start(std::string* why) {
  if (!Available(why)) return false;
  if (dir_.empty()) {
    if (why) *why = "no temporary directory";
    return false;
  }
  if (!std::filesystem::exists(dir_ + "/https.pem")) {
    if (why) *why = "Present() a certificate before Start()";
    return false;
  }
  const std::string cp = Classpath();
  // scripts/services compiles the launcher into classes/ beside the
  // classpath file; those classes serve when they are newer than the source
  // (and have HTTPS), else the launcher is compiled here (3 s).
  namespace fs = std::filesystem;
  std::string classes = (fs::path(ClasspathFile()).parent_path() / "classes").string();
  std::error_code ec;
  const auto built = fs::last_write_time(fs::path(classes) / "sluice" / "OpenSearchLauncher$HttpsPlugin.class", ec);
  if (ec || built < fs::last_write_time(SLUICE_OPENSEARCH_LAUNCHER, ec) || ec) {
    classes = dir_ + "/classes";
    std::string out;
    if (RunCommand("javac -nowarn -d " + classes + " -cp " + cp + " " + SLUICE_OPENSEARCH_LAUNCHER, &out) != 0) {
      if (why) *why = "the launcher does not compile:\n" + out;
      return false;
    }
  }
  // No modules (the sink needs none of them), a small heap and the client
  // compiler only: the node is up in a few seconds.
  const std::string command =
      "java -Xms256m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true"
      " -Dsluice.https.cert=" + dir_ + "/https.pem -Dsluice.https.key=" + dir_ + "/https.pem" +
      " -Dsluice.https.client_ca=" + dir_ + "/client_ca.pem -Dsluice.modules=org.opensearch.transport.Netty4Plugin" +
      " -cp " + classes + ":" + cp + " sluice.OpenSearchLauncher " + dir_ + "/node " + std::to_string(port_) +
      " " + std::to_string(transport_port_);
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ReadFile(dir_ + "/stdout.log").find(kReady) == std::string::npos) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (why) *why = "the node exited during start-up:\n" + LogTail();
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      if (why) *why = "the node was not ready within 120 s:\n" + LogTail();
      Kill();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

void PrivateOpenSearch::Kill() { KillAndReap(&pid_); }

std::string PrivateOpenSearch::Url() const { return "https://127.0.0.1:" + std::to_string(port_); }

std::string PrivateOpenSearch::LogTail() const {
  const std::string all = ReadFile(dir_ + "/stdout.log");
  return all.size() > 6000 ? all.substr(all.size() - 6000) : all;
}

}  // namespace sluice::testing
