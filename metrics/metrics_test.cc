#include "metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "metrics/metrics_server.h"

namespace sluice::metrics {
namespace {

// Names of the metric families in a text exposition (from "# TYPE" lines).
std::set<std::string> FamilyNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    names.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  return names;
}

// The value of the one sample line that starts with `series` (name{labels}).
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  ADD_FAILURE() << "no sample " << series << " in:\n" << text;
  return -1;
}

// Builds one handle of every kind, as a process with a writer and an engine does.
void BuildAll(Registry& r) {
  WriterMetrics w(r);
  w.ForCommand("account", "create").Record(CommandOutcome::kApplied, 0.001);
  w.ForType("account").BatchCommitted(3);
  w.ForPush("cache").Succeeded(2, 0.0005);
  SinkMetrics s(r, "cache", 2);
  StorageMetrics storage(r);
  HttpListenerMetrics http(r, "metrics");
  DurabilityBarrierMetrics barrier(r);
  barrier.Round(0.001, true);
  HeadWatcherMetrics heads(r);
  heads.Look();
  ArchiveMetrics archive(r, "account", 2);
  archive.Segment(10, 8, 1000);
  archive.Partition(1, 10, 1000, 2.5, 65536);
}

TEST(Metrics, EveryListedMetricIsExportedAndNothingElse) {
  Registry r;
  BuildAll(r);
  const std::set<std::string> exported = FamilyNames(r.Text());
  std::set<std::string> listed;
  for (const MetricInfo& m : kMetricList) listed.emplace(m.name);
  EXPECT_EQ(exported, listed);
  for (const MetricInfo& m : kMetricList) {
    EXPECT_EQ(m.name.rfind("sluice_", 0), 0u) << m.name;
    EXPECT_FALSE(m.help.empty()) << m.name;
    if (m.type == "counter") {
      EXPECT_TRUE(m.name.ends_with("_total")) << m.name;
    }
  }
}

TEST(Metrics, CommandOutcomesAndReplaysAreCountedByLabel) {
  Registry r;
  WriterMetrics w(r);
  CommandMetrics& create = w.ForCommand("account", "create");
  EXPECT_EQ(&create, &w.ForCommand("account", "create"));  // resolved once
  create.Record(OutcomeOfStatus(200, false), 0.002);
  create.Record(OutcomeOfStatus(200, true), 0.001);
  create.Record(OutcomeOfStatus(409, false), 0.001);
  create.Record(OutcomeOfStatus(422, false), 0.001);
  create.Record(OutcomeOfStatus(503, false), 0.001);
  create.Record(OutcomeOfStatus(500, false), 0.001);
  const std::string text = r.Text();
  const std::string base = R"(sluice_writer_commands_total{command="create",outcome=")";
  EXPECT_EQ(Sample(text, base + R"(applied",type="account"})"), 1);
  EXPECT_EQ(Sample(text, base + R"(replayed",type="account"})"), 1);
  EXPECT_EQ(Sample(text, base + R"(rejected",type="account"})"), 2);
  EXPECT_EQ(Sample(text, base + R"(unavailable",type="account"})"), 1);
  EXPECT_EQ(Sample(text, base + R"(error",type="account"})"), 1);
  EXPECT_EQ(Sample(text, R"(sluice_writer_idempotent_replays_total{command="create",type="account"})"), 1);
  EXPECT_EQ(Sample(text, R"(sluice_writer_command_duration_seconds_count{command="create",type="account"})"), 6);
}

TEST(Metrics, ConflictsAreCountedByKeyName) {
  Registry r;
  WriterMetrics w(r);
  WriterTypeMetrics& t = w.ForType("account");
  t.Conflict(ConflictKeyOf("PRIMARY"));
  t.Conflict(ConflictKeyOf("uk_entity_version"));
  t.Conflict(ConflictKeyOf("uk_entity_version"));
  t.Conflict(ConflictKeyOf("uk_entity_command"));
  t.Conflict(ConflictKeyOf("something_else"));
  const std::string text = r.Text();
  EXPECT_EQ(Sample(text, R"(sluice_writer_conflicts_total{key="PRIMARY",type="account"})"), 1);
  EXPECT_EQ(Sample(text, R"(sluice_writer_conflicts_total{key="uk_entity_version",type="account"})"), 2);
  EXPECT_EQ(Sample(text, R"(sluice_writer_conflicts_total{key="uk_entity_command",type="account"})"), 1);
  EXPECT_EQ(Sample(text, R"(sluice_writer_conflicts_total{key="other",type="account"})"), 1);
}

TEST(Metrics, TransactionsCountThePartitionsTheyStored) {
  Registry r;
  WriterMetrics w(r);
  w.TransactionCommitted(1);
  w.TransactionCommitted(3);
  const std::string text = r.Text();
  EXPECT_EQ(Sample(text, "sluice_writer_transaction_partitions_count"), 2);
  EXPECT_EQ(Sample(text, "sluice_writer_transaction_partitions_sum"), 4);
}

TEST(Metrics, PushResultsBySinkAndReason) {
  Registry r;
  WriterMetrics w(r);
  w.PushResult("cache", true, 0.001, 5);
  w.PushResult("cache", false, 0.05, 5, PushFailure::kTimeout);
  const std::string text = r.Text();
  EXPECT_EQ(Sample(text, R"(sluice_writer_push_events_total{sink="cache"})"), 5);
  EXPECT_EQ(Sample(text, R"(sluice_writer_push_failures_total{reason="timeout",sink="cache"})"), 1);
  EXPECT_EQ(Sample(text, R"(sluice_writer_push_failures_total{reason="unavailable",sink="cache"})"), 0);
  EXPECT_EQ(Sample(text, R"(sluice_writer_push_duration_seconds_count{sink="cache"})"), 2);
  EXPECT_EQ(Sample(text, R"(sluice_writer_push_wait_seconds_count{sink="cache"})"), 0);
  w.ForPush("cache").Started(0.0004);
  const std::string after = r.Text();
  EXPECT_EQ(Sample(after, R"(sluice_writer_push_wait_seconds_count{sink="cache"})"), 1);
  EXPECT_EQ(Sample(after, R"(sluice_writer_push_wait_seconds_bucket{sink="cache",le="0.0005"})"), 1);
}

TEST(Metrics, SinkStateLagAndOutcomes) {
  Registry r;
  SinkMetrics s(r, "cache", 2);
  s.Read(10);
  s.Applied(6, 3, 1);
  s.SetState(SinkState::kBackoff);
  s.SetLag(1, 42, 1.5);
  s.SetLag(7, 1, 1);  // no such partition: ignored
  s.SetPartitionsOwned(3);
  s.Retry(RetryClass::kSinkUnavailable);
  const std::string text = r.Text();
  EXPECT_EQ(Sample(text, R"(sluice_engine_events_read_total{sink="cache"})"), 10);
  EXPECT_EQ(Sample(text, R"(sluice_engine_events_applied_total{sink="cache"})") +
                Sample(text, R"(sluice_engine_events_stale_total{sink="cache"})") +
                Sample(text, R"(sluice_engine_events_dead_lettered_total{sink="cache"})"),
            10);
  EXPECT_EQ(Sample(text, R"(sluice_engine_sink_healthy{sink="cache"})"), 0);
  EXPECT_EQ(Sample(text, R"(sluice_engine_sink_state{sink="cache",state="backoff"})"), 1);
  EXPECT_EQ(Sample(text, R"(sluice_engine_sink_state{sink="cache",state="running"})"), 0);
  EXPECT_EQ(Sample(text, R"(sluice_engine_lag_events{partition="1",sink="cache"})"), 42);
  EXPECT_EQ(Sample(text, R"(sluice_engine_lag_seconds{partition="1",sink="cache"})"), 1.5);
  EXPECT_EQ(Sample(text, R"(sluice_engine_lag_events{partition="0",sink="cache"})"), 0);
  EXPECT_EQ(Sample(text, R"(sluice_engine_retries_total{error_class="sink_unavailable",sink="cache"})"), 1);
  EXPECT_EQ(Sample(text, R"(sluice_engine_partitions_owned{sink="cache"})"), 3);
}

// The engine counts an event as read before it can be settled; a scrape taken
// while that goes on, one family after another, must still never show more
// events settled than read.
TEST(Metrics, EveryScrapeDuringALoadSettlesNoMoreThanItRead) {
  Registry r;
  SinkMetrics s(r, "cache", 1);
  std::atomic<bool> done{false};
  std::thread engine([&] {
    for (uint64_t i = 0; !done; ++i) {
      s.Read(3);
      s.Applied(1, 1, i % 2);
      s.Applied(0, 0, 1 - i % 2);
    }
  });
  double last_read = 0;
  for (int scrape = 0; scrape < 2000; ++scrape) {
    const std::string text = r.Text();
    const double read = Sample(text, R"(sluice_engine_events_read_total{sink="cache"})");
    const double settled = Sample(text, R"(sluice_engine_events_applied_total{sink="cache"})") +
                           Sample(text, R"(sluice_engine_events_stale_total{sink="cache"})") +
                           Sample(text, R"(sluice_engine_events_dead_lettered_total{sink="cache"})");
    ASSERT_LE(settled, read) << "scrape " << scrape;
    last_read = read;
  }
  done = true;
  engine.join();
  EXPECT_GT(last_read, 0);  // the scrapes overlapped the counting
}

// A blocking GET on 127.0.0.1:port; returns "STATUS BODY" or "" on failure.
std::string Get(uint16_t port, const std::string& path, int* status) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    *status = 0;
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  (void)::write(fd, req.data(), req.size());
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  *status = resp.size() > 12 ? std::stoi(resp.substr(9, 3)) : 0;
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

TEST(MetricsServer, ServesMetricsHealthAndReadiness) {
  Registry r;
  SinkMetrics s(r, "cache", 1);
  s.Read(3);
  // Families from outside the module (plugin metrics) are collected at each scrape.
  std::atomic<int> collected{0};
  r.AddCollector([&collected] {
    prometheus::ClientMetric m;
    m.label = {{"plugin", "p"}, {"sink", "cache"}};
    m.counter.value = 7;
    ++collected;
    return std::vector<prometheus::MetricFamily>{
        {"sluice_plugin_lines_total", "Lines.", prometheus::MetricType::Counter, {m}}};
  });
  std::atomic<bool> ready{true};
  HttpListenerMetrics listener(r, "metrics");
  http::ServerOptions options;
  listener.Attach(options);
  ReadinessRoutes routes;
  routes.process = [&] {
    return Readiness{ready.load(), ready ? R"({"ready":true})" : R"({"ready":false,"sinks":["cache"]})"};
  };
  routes.checks.emplace_back("sinks", [] { return Readiness{false, R"({"ready":false})"}; });
  auto server = MetricsServer::Start(options, r, routes);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  ASSERT_NE(port, 0);
  int status = 0;
  const std::string metrics = Get(port, "/metrics", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(Sample(metrics, R"(sluice_engine_events_read_total{sink="cache"})"), 3);
  EXPECT_EQ(Sample(metrics, R"(sluice_plugin_lines_total{plugin="p",sink="cache"})"), 7);
  EXPECT_NE(metrics.find("# TYPE sluice_plugin_lines_total counter"), std::string::npos) << metrics;
  EXPECT_EQ(Sample(r.Text(), R"(sluice_plugin_lines_total{plugin="p",sink="cache"})"), 7);
  EXPECT_EQ(collected.load(), 2);  // once per scrape
  EXPECT_EQ(Get(port, "/healthz", &status), R"({"status":"ok"})");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(Get(port, "/readyz", &status), R"({"ready":true})");
  EXPECT_EQ(status, 200);
  ready = false;
  EXPECT_EQ(Get(port, "/readyz", &status), R"({"ready":false,"sinks":["cache"]})");
  EXPECT_EQ(status, 503);
  Get(port, "/nothing-here", &status);
  EXPECT_EQ(status, 404);
  // One check alone; an unknown one names the checks there are.
  EXPECT_EQ(Get(port, "/readyz/sinks", &status), R"({"ready":false})");
  EXPECT_EQ(status, 503);
  EXPECT_NE(Get(port, "/readyz/writer", &status).find("(checks: sinks)"), std::string::npos);
  EXPECT_EQ(status, 404);
  // Every request above came on its own connection, each closed by the client.
  const std::string text = r.Text();
  EXPECT_GE(Sample(text, R"(sluice_http_connections_total{listener="metrics"})"), 7);

  // A second server cannot take the same port, and says so.
  http::ServerOptions same;
  same.port = port;
  auto clash = MetricsServer::Start(same, r, ReadinessRoutes{});
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(clash.status().message().find(std::to_string(port)), std::string::npos);
}

TEST(MetricsServer, RoutesAndMethods) {
  Registry r;
  ReadinessRoutes routes;
  routes.process = [] { return Readiness{true, R"({"ready":true})"}; };
  routes.checks.emplace_back("writer", [] { return Readiness{true, R"({"ready":true,"check":"writer"})"}; });
  auto server = MetricsServer::Start(http::ServerOptions{}, r, routes);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto call = [&](const std::string& method, const std::string& target) {
    http::Request req;
    req.method = method;
    req.target = target;
    return (*server)->Handle(req);
  };
  EXPECT_EQ(call("GET", "/readyz/writer?verbose").status, 200);
  EXPECT_EQ(call("HEAD", "/healthz").status, 200);
  EXPECT_EQ(call("GET", "/metrics").content_type, "text/plain; version=0.0.4; charset=utf-8");
  const http::Response post = call("POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  ASSERT_EQ(post.headers.size(), 1u);
  EXPECT_EQ(post.headers[0].second, "GET, HEAD");
  EXPECT_EQ(call("GET", "/v1/status").status, 404);
  // A process without a readiness callback is not ready.
  auto bare = MetricsServer::Start(http::ServerOptions{}, r, ReadinessRoutes{});
  ASSERT_TRUE(bare.ok());
  http::Request req;
  req.method = "GET";
  req.target = "/readyz";
  EXPECT_EQ((*bare)->Handle(req).status, 503);
}

}  // namespace
}  // namespace sluice::metrics
