// Metrics and health against real MariaDB and Redis (issue 7, item 3):
//   (a) scraped during a load, every sink's counters never run ahead of what
//       was read, and once caught up read = applied + stale + dead-lettered,
//       equal to the events in main storage, while `sluice verify` finds the
//       views equal to main storage; the writer's applied commands equal the
//       events stored; no gap was seen; /readyz is 200 on both listeners;
//   (b) Redis cut (TCP proxy): its lag in events and seconds rises,
//       /readyz/sinks says 503 and names the sink while /readyz (the writer's
//       job, on both listeners) stays 200, the MySQL view keeps lag 0; Redis
//       back: the lag returns to 0 and /readyz/sinks to 200;
//   (c) a plugin sink's own counters are on /metrics as sluice_plugin_<name>
//       with labels plugin and sink, and agree with what it wrote.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// The sum of every sample of `name` whose labels contain `labels` (e.g.
// sink="cache"); -1 when there is none.
double Sum(const std::string& text, const std::string& name, const std::string& labels = "") {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(in, line)) {
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

struct Counters {
  double read, applied, stale, dead_lettered;
};

Counters SinkCounters(const std::string& text, const std::string& sink) {
  const std::string l = "sink=\"" + sink + "\"";
  return {Sum(text, "sluice_engine_events_read_total", l), Sum(text, "sluice_engine_events_applied_total", l),
          Sum(text, "sluice_engine_events_stale_total", l), Sum(text, "sluice_engine_events_dead_lettered_total", l)};
}

std::string Unique(const std::string& what) {
  return "m" + std::to_string(::getpid()) + "_" + what + "_" + std::to_string(std::random_device{}() % 100000);
}

struct Stack {
  std::unique_ptr<TestDatabase> db;
  SluiceConfig cfg;
  std::string path;
  std::string prefix;
  uint16_t metrics_port = 0;
  std::unique_ptr<SluiceProcess> process;
};

// A serve process with a Redis sink "cache" (at redis_port) and a MySQL sink
// "table" whose note column holds 8 characters (longer notes are dead-lettered).
Stack StartStack(const std::string& name, uint32_t partitions, uint16_t redis_port) {
  Stack s;
  s.db = std::make_unique<TestDatabase>(name);
  s.prefix = Unique(name);
  s.cfg.database = s.db->name();
  s.cfg.entities = {{"account", partitions}};
  s.cfg.port = FreePort();
  s.metrics_port = FreePort();
  s.cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n  retry_backoff_max: 200ms\n"
                     "metrics:\n  listen: 127.0.0.1:" + std::to_string(s.metrics_port) + "\n"
                     "sinks:\n"
                     "  - name: cache\n    type: redis\n    entity: account\n"
                     "    url: redis://127.0.0.1:" + std::to_string(redis_port) + "/0\n"
                     "    key: \"" + s.prefix + ":{id}\"\n"
                     "  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n"
                     "    columns: {owner: /owner, note: {pointer: /note, type: \"VARCHAR(8)\"}}\n";
  s.path = s.cfg.Write();
  s.process = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", s.path}, s.cfg.port);
  std::string why;
  EXPECT_TRUE(s.process->Start(&why)) << why;
  return s;
}

std::string Scrape(uint16_t port) {
  HttpClient c(port, 10s);
  HttpReply r = c.Get("/metrics");
  EXPECT_EQ(r.status, 200) << r.error;
  return r.body;
}

// Polls until pred(scrape) holds; false after `timeout`.
template <typename Pred>
bool ScrapeUntil(uint16_t port, std::chrono::seconds timeout, Pred pred, std::string* last) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    *last = Scrape(port);
    if (pred(*last)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100ms);
  }
}

// Sends `count` commands over `entities` entities from `threads` clients;
// every 50th command carries a note too long for the MySQL view.
void Load(uint16_t port, int count, int entities, int threads, const std::string& tag) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([=] {
      HttpClient c(port);
      std::mt19937 rng(t + 1);
      for (int i = t; i < count; i += threads) {
        const int e = static_cast<int>(rng() % entities);
        const std::string note = i % 50 == 0 ? "far-too-long-for-the-view" : "n" + std::to_string(i % 7);
        const std::string body = R"({"owner":"o)" + std::to_string(e) + R"(","note":")" + note + R"("})";
        c.Post("/v1/entities/account/e" + std::to_string(e) + "/commands/" + (rng() % 10 == 0 ? "delete" : "put"),
               body, {{"Idempotency-Key", tag + std::to_string(i)}});
      }
    });
  }
  for (auto& t : ts) t.join();
}

TEST(Metrics, CountersBalanceDuringALoadAndAgreeWithVerify) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  Stack s = StartStack("metrics_balance", 8, RedisPort());
  ASSERT_TRUE(s.process->running());

  std::atomic<bool> done{false};
  std::thread load([&] {
    Load(s.cfg.port, 6000, 400, 8, "b-");
    done = true;
  });
  // While the load runs, no sink has settled more events than it read, and
  // no counter goes backwards.
  std::map<std::string, Counters> previous;
  int scrapes = 0;
  while (!done) {
    const std::string text = Scrape(s.metrics_port);
    ++scrapes;
    for (const std::string sink : {"cache", "table"}) {
      const Counters c = SinkCounters(text, sink);
      ASSERT_GE(c.read, 0) << text;
      EXPECT_LE(c.applied + c.stale + c.dead_lettered, c.read) << sink;
      auto it = previous.find(sink);
      if (it != previous.end()) {
        EXPECT_GE(c.read, it->second.read) << sink;
        EXPECT_GE(c.applied, it->second.applied) << sink;
        EXPECT_GE(c.dead_lettered, it->second.dead_lettered) << sink;
      }
      previous[sink] = c;
    }
    std::this_thread::sleep_for(50ms);
  }
  load.join();
  EXPECT_GT(scrapes, 1);

  const int64_t events = ExpectDenseEventIds(*s.db);
  ASSERT_GT(events, 0);
  std::string text;
  auto settled = [&](const std::string& t) {
    for (const std::string sink : {"cache", "table"}) {
      const Counters c = SinkCounters(t, sink);
      if (c.read != static_cast<double>(events) || c.applied + c.stale + c.dead_lettered != c.read) return false;
      if (Sum(t, "sluice_engine_lag_events", "sink=\"" + sink + "\"") != 0) return false;
    }
    return true;
  };
  ASSERT_TRUE(ScrapeUntil(s.metrics_port, 60s, settled, &text)) << text;

  // The Redis view took every event; the MySQL view dead-lettered the long notes.
  const Counters cache = SinkCounters(text, "cache");
  const Counters table = SinkCounters(text, "table");
  EXPECT_EQ(cache.dead_lettered, 0);
  EXPECT_GT(table.dead_lettered, 0);
  EXPECT_EQ(table.dead_lettered,
            static_cast<double>(s.db->Scalar("SELECT COUNT(*) FROM sluice_dead_letters WHERE sink='table'")));
  EXPECT_EQ(Sum(text, "sluice_engine_gaps_total"), 0);
  EXPECT_EQ(Sum(text, "sluice_writer_commands_total", "outcome=\"applied\""), static_cast<double>(events));
  EXPECT_EQ(Sum(text, "sluice_writer_batch_events_sum"), static_cast<double>(events));
  EXPECT_EQ(Sum(text, "sluice_storage_up"), 1);
  EXPECT_GT(Sum(text, "sluice_engine_offset_flushes_total", "result=\"ok\""), 0);
  // One engine: it owns every partition of each sink (its leases).
  EXPECT_EQ(Sum(text, "sluice_engine_partitions_owned", "sink=\"cache\""), 8);
  EXPECT_EQ(Sum(text, "sluice_engine_partitions_owned", "sink=\"table\""), 8);

  // verify agrees: the Redis view equals main storage; the MySQL view misses
  // exactly the entities whose last event was dead-lettered (if any), and
  // never more than the dead letters.
  std::string out;
  EXPECT_EQ(RunSluice({"verify", "--config", s.path, "--sink", "cache"}, &out), 0) << out;
  RunSluice({"verify", "--config", s.path, "--sink", "table"}, &out);
  const size_t at = out.find("entities checked, ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_LE(std::stod(out.substr(at + 18)), table.dead_lettered) << out;

  for (uint16_t port : {s.metrics_port, s.cfg.port}) {
    HttpClient c(port);
    HttpReply r = c.Get("/readyz");
    EXPECT_EQ(r.status, 200) << r.body;
    const Json j = Json::parse(r.body, nullptr, false);
    EXPECT_EQ(j.value("ready", false), true) << r.body;
  }
  EXPECT_EQ(s.process->Terminate(), 0);
}

TEST(Metrics, RedisCutRaisesItsLagAndReadyzSaysSoUntilItIsBack) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  TcpProxy proxy("127.0.0.1", RedisPort());
  Stack s = StartStack("metrics_cut", 4, proxy.port());
  ASSERT_TRUE(s.process->running());
  const std::string cache_lag = "sink=\"cache\"";
  const std::string table_lag = "sink=\"table\"";
  std::string text;

  Load(s.cfg.port, 200, 50, 4, "c1-");
  ASSERT_TRUE(ScrapeUntil(s.metrics_port, 30s, [&](const std::string& t) {
    return Sum(t, "sluice_engine_lag_events", cache_lag) == 0 && Sum(t, "sluice_engine_events_read_total", cache_lag) > 0;
  }, &text)) << text;

  proxy.SetEnabled(false);
  Load(s.cfg.port, 200, 50, 4, "c2-");
  // The Redis sink falls behind and says why; the MySQL view keeps up.
  ASSERT_TRUE(ScrapeUntil(s.metrics_port, 30s, [&](const std::string& t) {
    return Sum(t, "sluice_engine_lag_events", cache_lag) > 0 && Sum(t, "sluice_engine_lag_seconds", cache_lag) > 0 &&
           Sum(t, "sluice_engine_sink_healthy", cache_lag) == 0 &&
           Sum(t, "sluice_engine_lag_events", table_lag) == 0;
  }, &text)) << text;
  EXPECT_GT(Sum(text, "sluice_engine_retries_total", "error_class=\"sink_unavailable\",sink=\"cache\""), 0);
  EXPECT_EQ(Sum(text, "sluice_engine_sink_state", "sink=\"cache\",state=\"backoff\""), 1);
  EXPECT_EQ(Sum(text, "sluice_engine_sink_healthy", table_lag), 1);
  const double lag_seconds_first = Sum(text, "sluice_engine_lag_seconds", cache_lag);
  // Lag in seconds keeps growing while nothing reaches Redis.
  ASSERT_TRUE(ScrapeUntil(s.metrics_port, 30s, [&](const std::string& t) {
    return Sum(t, "sluice_engine_lag_seconds", cache_lag) > lag_seconds_first;
  }, &text)) << text;
  // The write API stays ready: a view down does not stop it serving commands.
  for (uint16_t port : {s.metrics_port, s.cfg.port}) {
    HttpClient c(port);
    HttpReply r = c.Get("/readyz");
    EXPECT_EQ(r.status, 200) << r.body;
  }
  {
    HttpClient c(s.metrics_port);
    HttpReply r = c.Get("/readyz/sinks");
    EXPECT_EQ(r.status, 503) << r.body;
    const Json j = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_FALSE(j.value("ready", true));
    EXPECT_TRUE(j["storage"].value("reachable", false)) << r.body;
    for (const auto& sink : j["sinks"]) {
      const bool is_cache = sink.value("name", "") == "cache";
      EXPECT_EQ(sink.value("healthy", is_cache), !is_cache) << r.body;
      if (is_cache) {
        EXPECT_FALSE(sink.value("last_error", "").empty()) << r.body;
        EXPECT_GT(sink.value("lag_events", 0), 0) << r.body;
      }
    }
  }
  // status shows the same state and error from MySQL.
  std::string out;
  ASSERT_TRUE(ScrapeUntil(s.metrics_port, 10s, [&](const std::string&) {
    RunSluice({"status", "--config", s.path}, &out);
    return out.find("backoff") != std::string::npos && out.find("cache last error:") != std::string::npos;
  }, &text)) << out;

  proxy.SetEnabled(true);
  ASSERT_TRUE(ScrapeUntil(s.metrics_port, 60s, [&](const std::string& t) {
    return Sum(t, "sluice_engine_lag_events", cache_lag) == 0 && Sum(t, "sluice_engine_lag_seconds", cache_lag) == 0 &&
           Sum(t, "sluice_engine_sink_healthy", cache_lag) == 1;
  }, &text)) << text;
  HttpClient c(s.metrics_port);
  HttpReply r;
  for (int i = 0; i < 50; ++i) {
    r = c.Get("/readyz/sinks");
    if (r.status == 200) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(RunSluice({"verify", "--config", s.path, "--sink", "cache"}, &out), 0) << out;
  EXPECT_EQ(s.process->Terminate(), 0);
}

TEST(Metrics, PluginCountersAreServedOnTheMetricsEndpoint) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("metrics_plugin");
  const std::string file = (std::filesystem::temp_directory_path() / (Unique("plugin") + ".jsonl")).string();
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  const uint16_t metrics_port = FreePort();
  cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n"
                   "metrics:\n  listen: 127.0.0.1:" + std::to_string(metrics_port) + "\n"
                   "sinks:\n  - {name: audit, type: jsonl, entity: account, path: " + file + ", fsync: false}\n"
                   "plugins: [" + JSONL_PLUGIN + "]\n";
  const std::string path = cfg.Write();
  SluiceProcess serve({"serve", "--config", path}, cfg.port);
  std::string why;
  ASSERT_TRUE(serve.Start(&why)) << why;

  Load(cfg.port, 300, 40, 4, "p-");
  std::string text;
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &text)) << text;
  // Every line in the file was written by this process, and counted.
  size_t lines = 0;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) ++lines;
  ASSERT_GT(lines, 0u);
  const std::string series = "{plugin=\"jsonl_sink\",sink=\"audit\"}";
  ASSERT_TRUE(ScrapeUntil(metrics_port, 10s, [&](const std::string& t) {
    return Sum(t, "sluice_plugin_jsonl_lines_written_total", series) == static_cast<double>(lines);
  }, &text)) << text;
  EXPECT_NE(text.find("# TYPE sluice_plugin_jsonl_lines_written_total counter"), std::string::npos) << text;
  EXPECT_GT(Sum(text, "sluice_plugin_jsonl_bytes_written_total", series), static_cast<double>(lines));
  EXPECT_EQ(serve.Terminate(), 0);
  std::error_code ec;
  std::filesystem::remove(file, ec);
}

}  // namespace
}  // namespace sluice::testing
