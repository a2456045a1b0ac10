#include "tests/support/test_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include "sql/schema.h"

#include <hiredis/hiredis.h>
#include <nlohmann/json.hpp>

namespace sluice::testing {
namespace {

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string RandomSuffix() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(::getpid()));
  std::lock_guard lock(mu);
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string s;
  for (int i = 0; i < 8; ++i) s += kAlnum[rng() % 36];
  return s;
}

std::string TempDir() {
  static std::string dir = [] {
    std::string tmpl = Env("TMPDIR", "/tmp") + "/sluice-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char* made = ::mkdtemp(buf.data());
    return std::string(made ? made : "/tmp");
  }();
  return dir;
}

}  // namespace

sql::ConnectParams MysqlParams() {
  sql::ConnectParams p;
  p.host = Env("SLUICE_TEST_MYSQL_HOST", "127.0.0.1");
  p.port = static_cast<uint16_t>(std::stoi(Env("SLUICE_TEST_MYSQL_PORT", "13306")));
  p.user = Env("SLUICE_TEST_MYSQL_USER", "sluice");
  p.password = Env("SLUICE_TEST_MYSQL_PASSWORD", "sluice");
  p.connect_timeout = std::chrono::seconds(3);
  p.io_timeout = std::chrono::seconds(60);
  return p;
}

bool InCi() { return Env("CI", "") == "true"; }

std::unique_ptr<sql::Connection> Connect(const std::string& database) {
  auto p = MysqlParams();
  p.database = database;
  auto c = sql::Connection::Open(p);
  if (!c.ok()) return nullptr;
  return std::move(c).value();
}

TestDatabase::TestDatabase(const std::string& prefix) : TestDatabase(prefix, MysqlParams()) {}

TestDatabase::TestDatabase(const std::string& prefix, sql::ConnectParams server) : server_(std::move(server)) {
  name_ = "t_" + prefix + "_" + RandomSuffix();
  conn_ = Open();
  if (!conn_) throw std::runtime_error("MariaDB is not reachable");
  auto st = conn_->Execute("CREATE DATABASE " + sql::QuoteIdent(name_));
  if (!st.ok()) throw std::runtime_error(st.status().ToString());
  st = conn_->Execute("USE " + sql::QuoteIdent(name_));
  if (!st.ok()) throw std::runtime_error(st.status().ToString());
}

std::unique_ptr<sql::Connection> TestDatabase::Open() const {
  auto c = sql::Connection::Open(server_);
  return c.ok() ? std::move(c).value() : nullptr;
}

TestDatabase::~TestDatabase() {
  if (!conn_ || !conn_->healthy()) conn_ = Open();
  if (conn_) (void)conn_->Execute("DROP DATABASE IF EXISTS " + sql::QuoteIdent(name_));
}

std::vector<sql::Row> TestDatabase::Query(const std::string& q) {
  if (!conn_->healthy()) {
    conn_ = Open();
    if (conn_) (void)conn_->Execute("USE " + sql::QuoteIdent(name_));
  }
  auto rows = conn_->Query(q);
  if (!rows.ok() && !conn_->healthy()) {  // the server restarted since: once more on a new session
    conn_ = Open();
    if (conn_) (void)conn_->Execute("USE " + sql::QuoteIdent(name_));
    if (conn_) rows = conn_->Query(q);
  }
  EXPECT_TRUE(rows.ok()) << q << ": " << rows.status().ToString();
  return rows.ok() ? std::move(rows).value() : std::vector<sql::Row>{};
}

int64_t TestDatabase::Scalar(const std::string& q) {
  auto rows = Query(q);
  if (rows.empty() || rows[0].empty() || !rows[0][0]) return -1;
  return std::stoll(*rows[0][0]);
}

std::string SluiceConfig::Write() const {
  const auto mysql = MysqlParams();
  std::ostringstream y;
  y << "storage:\n  mysql:\n"
    << "    host: " << (mysql_host.empty() ? mysql.host : mysql_host) << "\n"
    << "    port: " << (mysql_port ? mysql_port : mysql.port) << "\n"
    << "    user: " << mysql.user << "\n"
    << "    password: \"${env:SLUICE_TEST_MYSQL_PASSWORD}\"\n"
    << "    database: " << database << "\n"
    << "    connect_timeout: 2s\n    io_timeout: 10s\n"
    << extra_storage_yaml << "entities:\n";
  for (const auto& [type, partitions] : entities) {
    const auto more = entity_yaml.find(type);
    y << "  " << type << ": {partitions: " << partitions << (more != entity_yaml.end() ? ", " + more->second : "")
      << "}\n";
  }
  y << "writer:\n  listen: 127.0.0.1:" << port << "\n" << extra_writer_yaml << extra_yaml;
  const std::string path = TempDir() + "/" + database + "-" + RandomSuffix() + ".yaml";
  std::ofstream(path) << y.str();
  ::setenv("SLUICE_TEST_MYSQL_PASSWORD", mysql.password.c_str(), 0);
  return path;
}

std::string RedisUrl() { return Env("SLUICE_TEST_REDIS_URL", "redis://127.0.0.1:16379/0"); }

uint16_t RedisPort() {
  const std::string url = RedisUrl();
  const size_t colon = url.rfind(':');
  return static_cast<uint16_t>(std::stoi(url.substr(colon + 1)));
}

uint16_t OpenSearchPort() {
  const std::string url = Env("SLUICE_TEST_OPENSEARCH_URL", "http://127.0.0.1:19200");
  const size_t colon = url.rfind(':');
  return static_cast<uint16_t>(std::stoi(url.substr(colon + 1)));
}

bool OpenSearchReachable() { return HttpClient(OpenSearchPort(), std::chrono::seconds(5)).Get("/").status == 200; }

IndexDeleter::IndexDeleter(IndexDeleter&& other) noexcept : index_(std::exchange(other.index_, std::string())) {}

IndexDeleter& IndexDeleter::operator=(IndexDeleter&& other) noexcept {
  std::swap(index_, other.index_);
  return *this;
}

IndexDeleter::~IndexDeleter() {
  if (index_.empty()) return;
  HttpClient c(OpenSearchPort(), std::chrono::seconds(10));
  // DELETE refuses an alias by name; its indices go by the pattern.
  for (const std::string& target : {index_, index_ + "__rebuild_*"}) {
    c.Send("DELETE /" + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  }
}

RedisClient::RedisClient(uint16_t port) {
  timeval tv{5, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (c == nullptr || c->err) {
    if (c) redisFree(c);
    return;
  }
  redisSetTimeout(c, tv);
  ctx_ = c;
}

RedisClient::~RedisClient() {
  if (ctx_) redisFree(static_cast<redisContext*>(ctx_));
}

std::optional<std::string> RedisClient::Run(const std::vector<std::string>& words) {
  if (!ctx_) return std::nullopt;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& w : words) {
    argv.push_back(w.data());
    lens.push_back(w.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(static_cast<redisContext*>(ctx_), static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (r == nullptr) {
    redisFree(static_cast<redisContext*>(ctx_));
    ctx_ = nullptr;
    return std::nullopt;
  }
  std::optional<std::string> out;
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) out = std::string(r->str, r->len);
  if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
  freeReplyObject(r);
  return out;
}

std::optional<std::string> RedisClient::Get(const std::string& key) { return Run({"GET", key}); }

std::map<std::string, std::string> RedisClient::Dump(const std::string& pattern) {
  std::map<std::string, std::string> out;
  if (!ctx_) return out;
  std::string cursor = "0";
  do {
    const char* argv[] = {"SCAN", cursor.c_str(), "MATCH", pattern.c_str(), "COUNT", "1000"};
    auto* r = static_cast<redisReply*>(redisCommandArgv(static_cast<redisContext*>(ctx_), 6, argv, nullptr));
    if (r == nullptr || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      if (r) freeReplyObject(r);
      break;
    }
    cursor = std::string(r->element[0]->str, r->element[0]->len);
    std::vector<std::string> keys;
    for (size_t i = 0; i < r->element[1]->elements; ++i) {
      keys.emplace_back(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
    }
    freeReplyObject(r);
    for (const auto& k : keys) {
      auto type = Run({"TYPE", k});
      if (type == "string") {
        out[k] = Get(k).value_or("");
      } else if (type == "hash") {
        auto* h = static_cast<redisReply*>(redisCommand(static_cast<redisContext*>(ctx_), "HGETALL %b", k.data(), k.size()));
        std::map<std::string, std::string> fields;
        if (h && h->type == REDIS_REPLY_ARRAY) {
          for (size_t i = 0; i + 1 < h->elements; i += 2) {
            fields[std::string(h->element[i]->str, h->element[i]->len)] =
                std::string(h->element[i + 1]->str, h->element[i + 1]->len);
          }
        }
        if (h) freeReplyObject(h);
        out[k] = nlohmann::json(fields).dump();
      }
    }
  } while (cursor != "0");
  return out;
}

bool WaitCaughtUp(const std::string& config_path, std::chrono::seconds timeout, std::string* status) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string out;
    if (RunSluice({"status", "--config", config_path, "--json"}, &out) == 0) {
      if (status) *status = out;
      auto j = nlohmann::json::parse(out.substr(out.find('{')), nullptr, false);
      bool caught_up = !j.is_discarded();
      if (caught_up) {
        for (const auto& s : j["sinks"]) {
          for (const auto& p : s["partitions"]) caught_up = caught_up && p["lag_events"] == 0;
        }
      }
      if (caught_up) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

std::string MakeScratchDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  return ::mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
}

void DieWithParent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent was gone before the line above
}

void RemoveScratchDir(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

void KillAndReap(pid_t* pid) {
  if (*pid <= 0) return;
  ::kill(*pid, SIGKILL);
  int status = 0;
  ::waitpid(*pid, &status, 0);
  *pid = -1;
}

uint16_t FreePort() {
  // Below the kernel's range for outgoing connections (32768-60999), so no
  // client socket takes it before the test's server binds it (or while a
  // killed server is down), and never the same port twice in one process
  // (the kernel may hand a just-released port out again).
  static std::mutex mu;
  static std::set<uint16_t> given;
  static std::mt19937 rng(std::random_device{}());
  std::lock_guard lock(mu);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const auto port = static_cast<uint16_t>(20000 + rng() % 12000);
    if (given.count(port)) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (!ok) continue;
    given.insert(port);
    return port;
  }
  ADD_FAILURE() << "no free port in 20000-31999";
  return 0;
}

std::string SluiceBinary() { return SLUICE_BINARY; }

int RunCommand(const std::string& command, std::string* output) {
  FILE* p = ::popen(("(" + command + ") 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  std::string out;
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

int RunSluice(const std::vector<std::string>& args, std::string* output) {
  std::string cmd = "'" + SluiceBinary() + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

SluiceProcess::SluiceProcess(std::vector<std::string> args, uint16_t port) : args_(std::move(args)), port_(port) {
  log_path_ = TempDir() + "/sluice-" + std::to_string(port) + "-" + RandomSuffix() + ".log";
}

SluiceProcess::~SluiceProcess() { Kill(); }

bool SluiceProcess::StartNoHttp(std::string* why, const std::string& marker, std::chrono::seconds timeout) {
  Spawn();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (why) *why = "sluice exited during start-up:\n" + Log();
      return false;
    }
    if (Log().find(marker) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (why) *why = "sluice did not print '" + marker + "' in time:\n" + Log();
  Kill();
  return false;
}

void SluiceProcess::Spawn() {
  // Each start appends to a fresh log so markers of earlier runs do not count.
  log_path_ += "+";
  pid_ = ::fork();
  if (pid_ == 0) {
    const int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<std::string> argv_s;
    argv_s.push_back(SluiceBinary());
    for (const auto& a : args_) argv_s.push_back(a);
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
}

bool SluiceProcess::Start(std::string* why, std::chrono::seconds timeout) {
  Spawn();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  HttpClient probe(port_, std::chrono::milliseconds(1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (why) *why = "sluice exited during start-up:\n" + Log();
      return false;
    }
    if (probe.Get("/healthz").status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (why) *why = "sluice did not answer /healthz in time:\n" + Log();
  Kill();
  return false;
}

void SluiceProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

int SluiceProcess::Terminate() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string SluiceProcess::Log() const {
  std::ifstream f(log_path_);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct HttpClient::Connection {
  boost::asio::io_context io;
  boost::beast::tcp_stream stream{io};
  boost::beast::flat_buffer buffer;  // bytes read past the last reply
};

HttpClient::HttpClient(uint16_t port, std::chrono::milliseconds timeout) : port_(port), timeout_(timeout) {}
HttpClient::~HttpClient() { Close(); }

void HttpClient::Close() {
  if (!conn_) return;
  boost::beast::error_code ignored;
  conn_->stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
  conn_->stream.close();
  conn_.reset();
}

bool HttpClient::Connect() {
  Close();
  auto c = std::make_unique<Connection>();
  boost::beast::error_code ec;
  c->stream.expires_after(timeout_);
  c->stream.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::address_v4::loopback(), port_), ec);
  if (ec) return false;
  c->stream.socket().set_option(boost::asio::ip::tcp::no_delay(true), ec);
  conn_ = std::move(c);
  return true;
}

HttpReply HttpClient::Post(const std::string& path, const std::string& body,
                           const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string r = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  for (const auto& [k, v] : headers) r += k + ": " + v + "\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return Roundtrip(r);
}

HttpReply HttpClient::Get(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string r = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& [k, v] : headers) r += k + ": " + v + "\r\n";
  return Roundtrip(r + "\r\n");
}

HttpReply HttpClient::Send(const std::string& raw) { return Roundtrip(raw); }

// The request goes out as the caller's bytes (Send is for malformed ones);
// Beast parses the reply.
HttpReply HttpClient::Roundtrip(const std::string& request) {
  namespace http = boost::beast::http;
  HttpReply reply;
  if (!conn_ && !Connect()) {
    reply.error = "connect failed";
    return reply;
  }
  boost::beast::error_code ec;
  conn_->stream.expires_after(timeout_);
  boost::asio::write(conn_->stream, boost::asio::buffer(request), ec);
  if (ec) {
    Close();
    reply.error = "send failed: " + ec.message();
    return reply;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  parser.header_limit(1 << 20);
  http::read(conn_->stream, conn_->buffer, parser, ec);
  if (ec) {
    Close();
    reply.error = (parser.is_header_done() ? "truncated body: " : "no reply: ") + ec.message();
    return reply;
  }
  const http::response<http::string_body>& res = parser.get();
  reply.status = static_cast<int>(res.result_int());
  for (const auto& field : res) {
    std::string name(field.name_string());
    for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    reply.headers[name] = std::string(field.value());
  }
  reply.body = res.body();
  if (!res.keep_alive()) Close();
  return reply;
}

struct TcpProxy::Impl {
  std::string host;
  uint16_t target;
  int listen_fd = -1;
  uint16_t port = 0;
  std::atomic<bool> enabled{true};
  std::atomic<bool> stalled{false};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::set<int> open_fds;
  std::vector<std::thread> threads;
  std::thread acceptor;

  void Pipe(int a, int b) {
    char buf[65536];
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    while (!stop && enabled) {
      if (stalled) {  // hold every byte: the peer sees a server that stopped answering
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      if (::poll(p, 2, 100) < 0) break;
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          const ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
          if (n <= 0 || ::send(p[1 - i].fd, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) done = true;
        }
      }
      if (done) break;
    }
    std::lock_guard lock(mu);
    for (int fd : {a, b}) {
      if (open_fds.erase(fd)) {
        ::shutdown(fd, SHUT_RDWR);
        ::close(fd);
      }
    }
  }

  void Accept() {
    while (!stop) {
      pollfd p{listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int client = ::accept(listen_fd, nullptr, nullptr);
      if (client < 0) continue;
      if (!enabled) {
        ::close(client);
        continue;
      }
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
      a.sin_port = htons(target);
      if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(server);
        ::close(client);
        continue;
      }
      std::lock_guard lock(mu);
      open_fds.insert(client);
      open_fds.insert(server);
      threads.emplace_back([this, client, server] { Pipe(client, server); });
    }
  }
};

TcpProxy::TcpProxy(std::string target_host, uint16_t target_port) : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(target_host);
  impl_->target = target_port;
  impl_->listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(impl_->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(impl_->listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(impl_->listen_fd, 128);
  socklen_t len = sizeof a;
  ::getsockname(impl_->listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
  impl_->port = ntohs(a.sin_port);
  impl_->acceptor = std::thread([this] { impl_->Accept(); });
}

TcpProxy::~TcpProxy() {
  impl_->stop = true;
  impl_->acceptor.join();
  for (auto& t : impl_->threads) t.join();
  ::close(impl_->listen_fd);
}

uint16_t TcpProxy::port() const { return impl_->port; }

void TcpProxy::SetStalled(bool stalled) { impl_->stalled = stalled; }

void TcpProxy::SetEnabled(bool enabled) {
  impl_->enabled = enabled;
  if (!enabled) {
    std::lock_guard lock(impl_->mu);
    for (int fd : impl_->open_fds) ::shutdown(fd, SHUT_RDWR);
  }
}

int64_t ExpectDenseEventIds(TestDatabase& db) {
  int64_t total = 0;
  auto tables = db.Query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema=DATABASE() AND table_name LIKE 'ev\\_%'");
  for (const auto& t : tables) {
    const std::string q = "SELECT COUNT(*), COALESCE(MIN(event_id),0), COALESCE(MAX(event_id),0), COUNT(DISTINCT event_id) FROM " +
                          sql::QuoteIdent(*t[0]);
    auto r = db.Query(q);
    const int64_t count = std::stoll(*r[0][0]), min = std::stoll(*r[0][1]), max = std::stoll(*r[0][2]),
                  distinct = std::stoll(*r[0][3]);
    if (count > 0) {
      EXPECT_EQ(min, 1) << *t[0];
      EXPECT_EQ(max, count) << *t[0] << ": event_ids have a gap";
      EXPECT_EQ(distinct, count) << *t[0];
    }
    total += count;
  }
  return total;
}

void ExpectDenseVersions(TestDatabase& db) {
  auto tables = db.Query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema=DATABASE() AND table_name LIKE 'ev\\_%'");
  for (const auto& t : tables) {
    auto bad = db.Query("SELECT entity_id, COUNT(*), MIN(version), MAX(version), COUNT(DISTINCT version) FROM " +
                        sql::QuoteIdent(*t[0]) +
                        " GROUP BY entity_id HAVING MIN(version) <> 1 OR MAX(version) <> COUNT(*) OR "
                        "COUNT(DISTINCT version) <> COUNT(*) LIMIT 5");
    for (const auto& row : bad) {
      ADD_FAILURE() << *t[0] << ": entity " << *row[0] << " has versions " << *row[2] << ".." << *row[3] << " in "
                    << *row[1] << " events";
    }
  }
}

std::string UniquePrefix(const std::string& what) {
  return "t" + std::to_string(::getpid()) + "_" + what + "_" + std::to_string(std::random_device{}() % 100000);
}

int64_t MixedLoad(uint16_t port, int count, int entities, int threads, uint32_t seed,
                  const std::atomic<bool>* stop) {
  std::atomic<int64_t> answered{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      HttpClient c(port);
      std::mt19937 rng(seed * 1000 + t);
      for (int i = t; i < count; i += threads) {
        if (stop && *stop) return;
        const int e = static_cast<int>(rng() % entities);
        const int dice = static_cast<int>(rng() % 100);
        const std::string cmd = dice < 85 ? "patch" : dice < 93 ? "delete" : "create";
        const std::string body = R"({"owner":"o)" + std::to_string(e) + R"(","balance":)" + std::to_string(i) +
                                 R"(,"note":"n)" + std::to_string(i % 7) + R"("})";
        auto r = c.Post("/v1/entities/account/e" + std::to_string(e) + "/commands/" + cmd, body,
                        {{"Idempotency-Key", "s" + std::to_string(seed) + "-" + std::to_string(i)}});
        if (r.status >= 200 && r.status < 500) ++answered;
      }
    });
  }
  for (auto& t : ts) t.join();
  return answered;
}

std::unique_ptr<SluiceProcess> StartSluice(const std::string& mode, const std::string& config_path, uint16_t port) {
  auto p = std::make_unique<SluiceProcess>(std::vector<std::string>{mode, "--config", config_path}, port);
  std::string why;
  if (mode == "sync") {
    EXPECT_TRUE(p->StartNoHttp(&why, "syncing")) << why;
  } else {
    EXPECT_TRUE(p->Start(&why)) << why;
  }
  return p;
}

ViewSampler::ViewSampler(std::string redis_prefix, std::string database, int entities, uint32_t seed) {
  thread_ = std::thread([this, redis_prefix = std::move(redis_prefix), database = std::move(database), entities,
                         seed] {
    RedisClient redis(RedisPort());
    auto conn = Connect(database);
    std::map<std::string, int64_t> seen_redis, seen_mysql;
    std::mt19937 rng(seed);
    auto see = [this](std::map<std::string, int64_t>& seen, const std::string& id, int64_t version) {
      if (version < seen[id]) ++backwards_;
      seen[id] = std::max(seen[id], version);
    };
    while (!done_) {
      const std::string id = "e" + std::to_string(rng() % static_cast<uint32_t>(entities));
      if (auto v = redis.Get(redis_prefix + ":" + id)) {
        auto j = nlohmann::json::parse(*v, nullptr, false);
        if (!j.is_discarded() && j.contains("_version")) see(seen_redis, id, j["_version"].get<int64_t>());
      }
      if (conn) {
        auto rows = conn->Query("SELECT _version FROM account_view WHERE id='" + id + "'");
        if (rows.ok() && !rows->empty()) see(seen_mysql, id, std::stoll(*(*rows)[0][0]));
      }
      ++samples_;
    }
  });
}

ViewSampler::~ViewSampler() { Stop(); }

void ViewSampler::Stop() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
}

int VerifyViews(const std::string& config_path, std::string* out) {
  return RunSluice({"verify", "--config", config_path}, out);
}

nlohmann::json StatusJson(const std::string& config_path) {
  std::string out;
  RunSluice({"status", "--config", config_path, "--json"}, &out);
  const size_t brace = out.find('{');
  return nlohmann::json::parse(brace == std::string::npos ? std::string() : out.substr(brace), nullptr, false);
}

uint64_t SinkTotal(const nlohmann::json& status, const std::string& sink, const std::string& field) {
  uint64_t total = 0;
  if (!status.is_object() || !status.contains("sinks")) return 0;
  for (const auto& s : status["sinks"]) {
    if (s["name"] != sink) continue;
    for (const auto& p : s["partitions"]) total += p[field].get<uint64_t>();
  }
  return total;
}

}  // namespace sluice::testing
