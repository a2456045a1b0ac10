// The three HTTP listeners of a real `sluice` process (writer API, admin
// endpoint, metrics listener) against idle and slow clients, and the
// listeners and readiness of separate processes run from one config
// (issue 18, items 4 and 10):
//   (a) idle connections and slowly-fed headers on every listener: /healthz,
//       /readyz, /metrics, the admin status and a command still answer, and
//       the server closes the slow and idle connections within (a generous
//       bound of) their configured timeouts;
//   (b) more idle and slow connections than max_connections on every
//       listener: newcomers (the health probes) evict them, so health still
//       answers, and the evictions are counted;
//   (c) `sluice writer` and `sluice sync` from the same config run side by
//       side, each with its own metrics listener (config keys, or the
//       --metrics-listen flag), and each is ready by its own job;
//   (d) the writer stays ready while a push sink's Redis is unreachable: view
//       health is reported on /readyz/sinks, not in the writer's readiness;
//   (e) the writer is not ready when an event table it needs is gone.
// Waits are bounded; no speed is asserted.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// A raw TCP connection to 127.0.0.1 that sends only what the test says.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  bool Send(std::string_view bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // True once the server has closed the connection (EOF or reset); waits at most `timeout`.
  bool Closed(std::chrono::milliseconds timeout) {
    if (closed_) return true;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return closed_ = true;  // anything read before (a reply) is dropped
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

// Connections that send a request header one byte per `every`, from one thread.
class Slowloris {
 public:
  Slowloris(uint16_t port, int connections, std::chrono::milliseconds every) {
    for (int i = 0; i < connections; ++i) conns_.push_back(std::make_unique<RawConnection>(port));
    thread_ = std::thread([this, every] {
      const std::string header = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(4000, 's') + "\r\n\r\n";
      for (size_t at = 0; at < header.size() && !stop_; ++at) {
        for (auto& c : conns_) c->Send(header.substr(at, 1));
        std::this_thread::sleep_for(every);
      }
    });
  }
  ~Slowloris() {
    stop_ = true;
    thread_.join();
  }
  // How many of the connections the server closed, waiting at most `timeout` in all.
  int Closed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int closed = 0;
    for (auto& c : conns_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      closed += c->Closed(std::max(left, 0ms)) ? 1 : 0;
    }
    return closed;
  }

 private:
  std::vector<std::unique_ptr<RawConnection>> conns_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Connections opened and left silent.
struct Idle {
  Idle(uint16_t port, int connections) {
    for (int i = 0; i < connections; ++i) conns.push_back(std::make_unique<RawConnection>(port));
  }
  int Closed(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int closed = 0;
    for (auto& c : conns) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      closed += c->Closed(std::max(left, 0ms)) ? 1 : 0;
    }
    return closed;
  }
  std::vector<std::unique_ptr<RawConnection>> conns;
};

// One request on a fresh connection, with a bounded wait.
HttpReply GetOnce(uint16_t port, const std::string& path,
                  const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  HttpClient c(port, 5s);
  return c.Get(path, headers);
}

// The admin endpoint's token in these tests, and the header that carries it.
constexpr char kAdminToken[] = "listeners-token";
const std::vector<std::pair<std::string, std::string>> kAdminAuth = {
    {"Authorization", std::string("Bearer ") + kAdminToken}};

// The sum of the samples of `name` whose labels contain `labels`; -1 when none.
double Sum(const std::string& text, const std::string& name, const std::string& labels = "") {
  std::istringstream in(text);
  double sum = 0;
  bool found = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t end = line.find_first_of("{ ");
    if (line.compare(0, end, name) != 0 || end != name.size()) continue;
    const size_t space = line.rfind(' ');
    if (!labels.empty() && line.substr(0, space).find(labels) == std::string::npos) continue;
    sum += std::stod(line.substr(space + 1));
    found = true;
  }
  return found ? sum : -1;
}

// The limit keys of one listener section, as YAML lines.
std::string Limits(int max_connections, const std::string& header_timeout, const std::string& idle_timeout) {
  return "  max_connections: " + std::to_string(max_connections) + "\n  header_timeout: " + header_timeout +
         "\n  body_timeout: 2s\n  idle_timeout: " + idle_timeout + "\n  write_timeout: 2s\n";
}

struct Serve {
  std::unique_ptr<TestDatabase> db;
  SluiceConfig cfg;
  std::string path;
  uint16_t metrics_port = 0;
  uint16_t admin_port = 0;
  std::unique_ptr<SluiceProcess> process;
};

// `sluice serve` with all three listeners, each with the given limits.
Serve StartServe(const std::string& name, int max_connections, const std::string& header_timeout,
                 const std::string& idle_timeout) {
  Serve s;
  s.db = std::make_unique<TestDatabase>(name);
  s.cfg.database = s.db->name();
  s.cfg.entities = {{"account", 2}};
  s.cfg.port = FreePort();
  s.metrics_port = FreePort();
  s.admin_port = FreePort();
  const std::string limits = Limits(max_connections, header_timeout, idle_timeout);
  s.cfg.extra_writer_yaml = "  io_threads: 1\n" + limits;
  s.cfg.extra_yaml = "metrics:\n  listen: 127.0.0.1:" + std::to_string(s.metrics_port) + "\n" + limits +
                     "admin:\n  listen: 127.0.0.1:" + std::to_string(s.admin_port) + "\n  token: " + kAdminToken +
                     "\n" + limits;
  s.path = s.cfg.Write();
  s.process = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s.path}, s.cfg.port);
  std::string why;
  EXPECT_TRUE(s.process->Start(&why)) << why;
  return s;
}

// Everything a probe or an operator asks of the process answers.
void ExpectEverythingAnswers(const Serve& s, const std::string& when) {
  for (uint16_t port : {s.cfg.port, s.metrics_port}) {
    EXPECT_EQ(GetOnce(port, "/healthz").status, 200) << when << " port " << port;
    EXPECT_EQ(GetOnce(port, "/readyz").status, 200) << when << " port " << port;
  }
  const HttpReply metrics = GetOnce(s.metrics_port, "/metrics");
  EXPECT_EQ(metrics.status, 200) << when << ": " << metrics.error;
  EXPECT_NE(metrics.body.find("sluice_http_connections_total"), std::string::npos) << when;
  EXPECT_EQ(GetOnce(s.admin_port, "/v1/status", kAdminAuth).status, 200) << when;
  HttpClient writer(s.cfg.port, 5s);
  const HttpReply put = writer.Post("/v1/entities/account/a1/commands/put", R"({"n":1})");
  EXPECT_EQ(put.status, 200) << when << ": " << put.body << put.error;
}

TEST(Listeners, IdleAndSlowClientsAreClosedAtTheirTimeoutsWhileEverythingAnswers) {
  SLUICE_REQUIRE_MYSQL();
  // Header timeout 1s; a kept-alive connection may idle 2s.
  Serve s = StartServe("listeners_timeouts", 64, "1s", "2s");
  ASSERT_TRUE(s.process->running());
  const std::map<std::string, uint16_t> listeners = {
      {"writer", s.cfg.port}, {"metrics", s.metrics_port}, {"admin", s.admin_port}};
  // Per listener: 4 silent connections, 4 slowloris ones (a 4 KB header at a
  // byte per 100 ms would take minutes), and 2 that make one request and idle.
  std::vector<std::unique_ptr<Idle>> silent;
  std::vector<std::unique_ptr<Slowloris>> slow;
  std::vector<std::unique_ptr<RawConnection>> kept_alive;
  for (const auto& [name, port] : listeners) {
    silent.push_back(std::make_unique<Idle>(port, 4));
    slow.push_back(std::make_unique<Slowloris>(port, 4, 100ms));
    for (int i = 0; i < 2; ++i) {
      kept_alive.push_back(std::make_unique<RawConnection>(port));
      const std::string request = name == "admin"
                                      ? "GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                            std::string(kAdminToken) + "\r\n\r\n"
                                      : "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
      ASSERT_TRUE(kept_alive.back()->Send(request));
    }
  }
  ExpectEverythingAnswers(s, "with idle and slow clients connected");

  // Each kind is closed by the server (generous bound: 15 s for timeouts of 1-2 s).
  for (size_t i = 0; i < listeners.size(); ++i) {
    EXPECT_EQ(silent[i]->Closed(15s), 4) << "silent connections, listener " << i;
    EXPECT_EQ(slow[i]->Closed(15s), 4) << "slowloris connections, listener " << i;
  }
  for (auto& c : kept_alive) EXPECT_TRUE(c->Closed(15s)) << "kept-alive idle connection";
  ExpectEverythingAnswers(s, "after the timeouts");

  const std::string text = GetOnce(s.metrics_port, "/metrics").body;
  for (const auto& [name, port] : listeners) {
    const std::string l = "listener=\"" + name + "\"";
    EXPECT_GE(Sum(text, "sluice_http_connections_closed_total", l + ",reason=\"header_timeout\""), 8) << name << text;
    EXPECT_GE(Sum(text, "sluice_http_connections_closed_total", l + ",reason=\"idle_timeout\""), 2) << name << text;
  }
  EXPECT_EQ(s.process->Terminate(), 0);
}

TEST(Listeners, ConnectionLimitEvictsIdleAndSlowClientsSoHealthAnswers) {
  SLUICE_REQUIRE_MYSQL();
  // Timeouts far longer than the test: only the connection limit can make room.
  Serve s = StartServe("listeners_limit", 6, "5m", "5m");
  ASSERT_TRUE(s.process->running());
  const std::map<std::string, uint16_t> listeners = {
      {"writer", s.cfg.port}, {"metrics", s.metrics_port}, {"admin", s.admin_port}};
  std::vector<std::unique_ptr<Idle>> silent;
  std::vector<std::unique_ptr<Slowloris>> slow;
  for (const auto& [name, port] : listeners) {
    // 10 connections for 6 places: the limit is reached on every listener.
    silent.push_back(std::make_unique<Idle>(port, 5));
    slow.push_back(std::make_unique<Slowloris>(port, 5, 200ms));
  }
  std::this_thread::sleep_for(500ms);
  for (int round = 0; round < 3; ++round) ExpectEverythingAnswers(s, "at the connection limit");

  // Of the 10 idle or slow connections per listener, at most 6 can be open.
  for (size_t i = 0; i < listeners.size(); ++i) {
    EXPECT_GE(silent[i]->Closed(10s) + slow[i]->Closed(1s), 4) << "listener " << i;
  }
  const std::string text = GetOnce(s.metrics_port, "/metrics").body;
  for (const auto& [name, port] : listeners) {
    EXPECT_GE(Sum(text, "sluice_http_connections_closed_total", "listener=\"" + name + "\",reason=\"evicted\""), 4)
        << name << "\n" << text;
    EXPECT_EQ(Sum(text, "sluice_http_connections_closed_total", "listener=\"" + name + "\",reason=\"refused\""), 0)
        << name;
  }
  EXPECT_EQ(s.process->Terminate(), 0);
}

// A config with a MySQL view, an admin endpoint and the given metrics section.
SluiceConfig SplitConfig(const TestDatabase& db, const std::string& metrics_yaml) {
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  cfg.extra_yaml = "engine:\n  offset_flush_interval: 100ms\n  idle_poll_max: 20ms\n" + metrics_yaml +
                   "admin:\n  listen: 127.0.0.1:" + std::to_string(FreePort()) + "\n"
                   "sinks:\n  - {name: table, type: mysql, entity: account, table: account_view, "
                   "columns: {owner: /owner}}\n";
  return cfg;
}

TEST(Listeners, WriterAndSyncFromOneConfigRunSideBySideEachWithItsOwnMetrics) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("listeners_split");
  const uint16_t serve_port = FreePort();
  const uint16_t writer_metrics = FreePort();
  const uint16_t sync_metrics = FreePort();
  SluiceConfig cfg = SplitConfig(db, "metrics:\n  listen: 127.0.0.1:" + std::to_string(serve_port) +
                                         "\n  writer_listen: 127.0.0.1:" + std::to_string(writer_metrics) +
                                         "\n  sync_listen: 127.0.0.1:" + std::to_string(sync_metrics) + "\n");
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  SluiceProcess writer({"writer", "--config", path}, cfg.port);
  std::string why;
  ASSERT_TRUE(writer.Start(&why)) << why;
  SluiceProcess sync({"sync", "--config", path}, sync_metrics);
  ASSERT_TRUE(sync.Start(&why)) << why;

  HttpClient client(cfg.port, 5s);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(client.Post("/v1/entities/account/e" + std::to_string(i) + "/commands/put", R"({"owner":"o"})").status,
              200);
  }
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out;
  // Each process serves its own metrics on its own address.
  const std::string writer_text = GetOnce(writer_metrics, "/metrics").body;
  const std::string sync_text = GetOnce(sync_metrics, "/metrics").body;
  EXPECT_EQ(Sum(writer_text, "sluice_writer_commands_total", "outcome=\"applied\""), 20) << writer_text;
  EXPECT_EQ(Sum(writer_text, "sluice_engine_events_applied_total"), -1);
  EXPECT_EQ(Sum(sync_text, "sluice_engine_events_applied_total", "sink=\"table\""), 20) << sync_text;
  EXPECT_EQ(Sum(sync_text, "sluice_writer_commands_total"), -1);
  // Each is ready by its own job, and says which checks it runs.
  const HttpReply writer_ready = GetOnce(writer_metrics, "/readyz");
  EXPECT_EQ(writer_ready.status, 200) << writer_ready.body;
  EXPECT_EQ(Json::parse(writer_ready.body)["checks"], Json({{"writer", true}})) << writer_ready.body;
  const HttpReply sync_ready = GetOnce(sync_metrics, "/readyz");
  EXPECT_EQ(sync_ready.status, 200) << sync_ready.body;
  EXPECT_EQ(Json::parse(sync_ready.body)["checks"], Json({{"sinks", true}})) << sync_ready.body;
  EXPECT_EQ(GetOnce(sync_metrics, "/readyz/writer").status, 404);
  // Nothing listens on serve's address.
  EXPECT_EQ(GetOnce(serve_port, "/healthz").status, 0);
  EXPECT_EQ(sync.Terminate(), 0);
  EXPECT_EQ(writer.Terminate(), 0);
}

TEST(Listeners, MetricsListenFlagGivesAProcessItsOwnAddress) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("listeners_flag");
  const uint16_t shared = FreePort();
  // Only metrics.listen: writer and sync would both take it.
  SluiceConfig cfg = SplitConfig(db, "metrics:\n  listen: 127.0.0.1:" + std::to_string(shared) + "\n");
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  SluiceProcess writer({"writer", "--config", path}, cfg.port);
  std::string why;
  ASSERT_TRUE(writer.Start(&why)) << why;
  ASSERT_EQ(GetOnce(shared, "/readyz").status, 200);

  // A second process on the same address is refused, naming the key to change.
  EXPECT_EQ(RunSluice({"sync", "--config", path}, &out), 1) << out;
  EXPECT_NE(out.find("(metrics.sync_listen)"), std::string::npos) << out;

  const uint16_t own = FreePort();
  SluiceProcess sync({"sync", "--config", path, "--metrics-listen", "127.0.0.1:" + std::to_string(own)}, own);
  ASSERT_TRUE(sync.Start(&why)) << why;
  const HttpReply ready = GetOnce(own, "/readyz");
  EXPECT_EQ(ready.status, 200) << ready.body;
  EXPECT_NE(ready.body.find("\"sinks\""), std::string::npos) << ready.body;
  EXPECT_EQ(RunSluice({"sync", "--config", path, "--metrics-listen", "nowhere"}, &out), 2) << out;
  EXPECT_EQ(sync.Terminate(), 0);
  EXPECT_EQ(writer.Terminate(), 0);
}

TEST(Listeners, WriterStaysReadyWhileAPushSinksRedisIsDown) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("listeners_push_down");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  const uint16_t metrics_port = FreePort();
  const uint16_t nothing_there = FreePort();  // no Redis answers here
  cfg.extra_yaml = "engine:\n  retry_backoff_max: 200ms\n"
                   "metrics:\n  listen: 127.0.0.1:" + std::to_string(metrics_port) + "\n"
                   "sinks:\n  - {name: cache, type: redis, entity: account, push: true, push_mode: sync, "
                   "url: \"redis://127.0.0.1:" + std::to_string(nothing_there) + "/0\"}\n";
  const std::string path = cfg.Write();
  SluiceProcess serve({"serve", "--config", path}, cfg.port);
  std::string why;
  ASSERT_TRUE(serve.Start(&why)) << why;

  // A command is stored; its push fails at once (nothing listens), and the
  // engine's sink falls into backoff when it tries to apply it.
  HttpClient client(cfg.port, 5s);
  HttpReply put = client.Post("/v1/entities/account/a/commands/put", R"({"x":1})");
  EXPECT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(put.headers["sluice-push"], "cache=failed");

  // The sinks check fails and names the sink ...
  HttpReply sinks;
  for (int i = 0; i < 100; ++i) {
    sinks = GetOnce(metrics_port, "/readyz/sinks");
    if (sinks.status == 503) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(sinks.status, 503) << sinks.body;
  const Json report = Json::parse(sinks.body);
  ASSERT_EQ(report["sinks"].size(), 1u) << sinks.body;
  EXPECT_EQ(report["sinks"][0]["name"], "cache");
  EXPECT_EQ(report["sinks"][0]["healthy"], false);
  EXPECT_EQ(report["checks"], Json({{"sinks", false}, {"writer", true}})) << sinks.body;
  // ... while the writer is ready on both listeners and serves commands.
  for (const auto& [port, route] : std::vector<std::pair<uint16_t, std::string>>{
           {cfg.port, "/readyz"}, {metrics_port, "/readyz"}, {metrics_port, "/readyz/writer"}}) {
    const HttpReply r = GetOnce(port, route);
    EXPECT_EQ(r.status, 200) << port << route << ": " << r.body;
    EXPECT_EQ(Json::parse(r.body, nullptr, false).value("ready", false), true) << r.body;
  }
  put = client.Post("/v1/entities/account/b/commands/put", R"({"x":2})");
  EXPECT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(put.headers["sluice-push"], "cache=failed");
  EXPECT_EQ(serve.Terminate(), 0);

  // A sync process's readiness is its sinks'.
  SluiceProcess sync({"sync", "--config", path}, metrics_port);
  ASSERT_TRUE(sync.Start(&why)) << why;
  HttpReply sync_ready;
  for (int i = 0; i < 100; ++i) {
    sync_ready = GetOnce(metrics_port, "/readyz");
    if (sync_ready.status == 503) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(sync_ready.status, 503) << sync_ready.body;
  EXPECT_EQ(sync.Terminate(), 0);
}

TEST(Listeners, WriterIsNotReadyWithoutAnEventTableItNeeds) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("listeners_schema");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  SluiceProcess writer({"writer", "--config", path}, cfg.port);
  std::string why;
  ASSERT_TRUE(writer.Start(&why)) << why;
  EXPECT_EQ(GetOnce(cfg.port, "/readyz").status, 200);
  ASSERT_TRUE(db.conn().Execute("DROP TABLE ev_account_p001").ok());
  HttpReply r;
  for (int i = 0; i < 100; ++i) {
    r = GetOnce(cfg.port, "/readyz");
    if (r.status == 503) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("ev_account_p001 is missing"), std::string::npos) << r.body;
  EXPECT_EQ(writer.Terminate(), 0);
}

}  // namespace
}  // namespace sluice::testing
