// A view that silently lost data is noticed and repaired (issue 18, item 7),
// against real MariaDB, Redis and OpenSearch:
//   (a) every key of a Redis view is deleted during a write load (what a
//       Redis restarted without its data looks like): the engine's
//       anti-entropy notices it within a pass and repairs it without a
//       rewind; a key set ahead of storage is counted (kind "ahead") and
//       left alone, and `verify --repair` beside the running engine fixes it;
//   (b) `sluice verify --repair`, with no process running, fixes damaged
//       rows (deleted, older version, altered content, ahead of storage, of
//       no entity) in Redis, MySQL and OpenSearch views and writes nothing
//       else: the writes are counted by the server (Redis's change counter
//       on a private redis-server, triggers on the MySQL table, the index's
//       indexing stats).
// Skipped when a server is unreachable; failed instead with CI=true.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <set>
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

std::string Scrape(uint16_t port) {
  HttpClient c(port, 10s);
  const HttpReply r = c.Get("/metrics");
  EXPECT_EQ(r.status, 200) << r.error;
  return r.body;
}

// The value of one series (name{labels}) in a scrape; 0 when absent.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return 0;
}

// Polls the metrics until pred(scrape) holds; false after `timeout`.
template <typename Pred>
bool ScrapeUntil(uint16_t port, std::chrono::seconds timeout, Pred pred, std::string* last) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    *last = Scrape(port);
    if (pred(*last)) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
}

// Deletes the keys matching `pattern` when it dies (and when asked).
class KeyCleaner {
 public:
  KeyCleaner(uint16_t port, std::string pattern) : port_(port), pattern_(std::move(pattern)) {}
  ~KeyCleaner() { Clean(); }
  size_t Clean() {
    RedisClient redis(port_);
    size_t n = 0;
    for (const auto& [key, value] : redis.Dump(pattern_)) {
      redis.Run({"DEL", key});
      ++n;
    }
    return n;
  }

 private:
  uint16_t port_;
  std::string pattern_;
};

// A redis-server of the test's own, without persistence, so that its change
// counter (INFO's rdb_changes_since_last_save) counts this test's writes only.
class PrivateRedis {
 public:
  PrivateRedis() : port_(FreePort()) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      const std::string port = std::to_string(port_);
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      RedisClient probe(port_);
      if (probe.ok() && probe.Run({"PING"}) == "PONG") {
        ok_ = true;
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  ~PrivateRedis() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool ok() const { return ok_; }
  uint16_t port() const { return port_; }
  // Writes since the server started (keys changed, as Redis counts them).
  int64_t Changes() {
    RedisClient redis(port_);
    const std::string info = redis.Run({"INFO", "persistence"}).value_or("");
    std::smatch m;
    static const std::regex kChanges("rdb_changes_since_last_save:(\\d+)");
    if (!std::regex_search(info, m, kChanges)) {
      ADD_FAILURE() << "no change counter in INFO persistence:\n" << info;
      return -1;
    }
    return std::stoll(m[1]);
  }

 private:
  uint16_t port_;
  pid_t pid_ = -1;
  bool ok_ = false;
};

// `sluice verify --repair --config path [--sink NAME]`: exit code, output in *out.
int RepairViews(const std::string& path, std::string* out, const std::string& sink = "") {
  std::vector<std::string> args = {"verify", "--config", path, "--repair"};
  if (!sink.empty()) args.insert(args.end(), {"--sink", sink});
  return RunSluice(args, out);
}

// The live keys of a Redis JSON view ("<prefix>:<id>" -> parsed value), tombstones left out.
std::map<std::string, Json> LiveKeys(RedisClient& redis, const std::string& prefix) {
  std::map<std::string, Json> out;
  for (const auto& [key, value] : redis.Dump(prefix + ":*")) {
    if (key.ends_with(":_tomb")) continue;
    out[key] = Json::parse(value, nullptr, false);
  }
  return out;
}

TEST(AntiEntropy, NoticesAndRepairsARedisViewEmptiedDuringALoadWithoutARewind) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  TestDatabase db("entropy_flush");
  const std::string prefix = UniquePrefix("entropy");
  KeyCleaner cleaner(RedisPort(), prefix + ":*");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 4}};
  cfg.port = FreePort();
  const uint16_t metrics_port = FreePort();
  // A fast walk, so that a pass over the 300 entities is short:
  // N/rate + partitions * batch/rate = 300/20000 + 4 * 100/20000 s.
  cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 10ms\n"
                   "  anti_entropy: {rate: 20000, batch: 100}\n"
                   "metrics:\n  listen: 127.0.0.1:" + std::to_string(metrics_port) + "\n"
                   "sinks:\n  - name: cache\n    type: redis\n    entity: account\n"
                   "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
                   "    key: \"" + prefix + ":{id}\"\n";
  const std::string path = cfg.Write();
  auto serve = StartSluice("serve", path, cfg.port);
  EXPECT_EQ(MixedLoad(cfg.port, 3000, 300, 4, 1), 3000);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out;
  ASSERT_EQ(VerifyViews(path, &out), 0) << out;

  // The load keeps to e0..e99, so that the pull path cannot restore e100..e299
  // by itself: only the anti-entropy can.
  std::atomic<bool> stop{false};
  std::thread load([&] { MixedLoad(cfg.port, 1'000'000, 100, 2, 2, &stop); });
  std::this_thread::sleep_for(300ms);
  std::string text = Scrape(metrics_port);
  const std::string sink = "{sink=\"cache\"}";
  const double missing = Sample(text, "sluice_engine_anti_entropy_differences_total{kind=\"missing\",sink=\"cache\"}");
  const double repaired = Sample(text, "sluice_engine_anti_entropy_repaired_total" + sink);
  // What Redis restarted without its data looks like: every key of the view gone, tombstones too.
  ASSERT_GT(cleaner.Clean(), 100u);
  // The pass after the one in progress began after the deletion and compares
  // every entity the sink has passed: by its end the loss is noticed.
  const double passes = Sample(Scrape(metrics_port), "sluice_engine_anti_entropy_passes_total" + sink);
  ASSERT_TRUE(ScrapeUntil(metrics_port, 60s, [&](const std::string& t) {
    return Sample(t, "sluice_engine_anti_entropy_passes_total" + sink) >= passes + 2;
  }, &text)) << text;
  EXPECT_GT(Sample(text, "sluice_engine_anti_entropy_differences_total{kind=\"missing\",sink=\"cache\"}"), missing)
      << text;
  EXPECT_GT(Sample(text, "sluice_engine_anti_entropy_repaired_total" + sink), repaired) << text;
  stop = true;
  load.join();

  // The view converges without anyone's help (no rewind, no rebuild).
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out;
  bool equal = false;
  for (int i = 0; i < 100 && !equal; ++i) {
    equal = VerifyViews(path, &out) == 0;
    if (!equal) std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(equal) << out;
  // No replay either: the engine read every event exactly once.
  const int64_t events = ExpectDenseEventIds(db);
  text = Scrape(metrics_port);
  EXPECT_EQ(Sample(text, "sluice_engine_events_read_total" + sink), static_cast<double>(events));
  EXPECT_GT(Sample(text, "sluice_engine_anti_entropy_checked_total" + sink), 0) << text;

  // A key ahead of storage: counted as such, and left alone by the engine...
  RedisClient redis(RedisPort());
  auto live = LiveKeys(redis, prefix);
  ASSERT_FALSE(live.empty());
  const auto& [ahead_key, ahead_value] = *live.begin();
  const uint64_t version = ahead_value["_version"].get<uint64_t>();
  const std::string future = R"({"_version":)" + std::to_string(version + 10) + R"(,"owner":"from the future"})";
  const double ahead = Sample(text, "sluice_engine_anti_entropy_differences_total{kind=\"ahead\",sink=\"cache\"}");
  ASSERT_TRUE(redis.Run({"SET", ahead_key, future}).has_value());
  ASSERT_TRUE(ScrapeUntil(metrics_port, 60s, [&](const std::string& t) {
    return Sample(t, "sluice_engine_anti_entropy_differences_total{kind=\"ahead\",sink=\"cache\"}") > ahead;
  }, &text)) << text;
  EXPECT_EQ(redis.Get(ahead_key), future);
  // ... until an operator's verify --repair overwrites it from storage, beside the running engine.
  EXPECT_EQ(RepairViews(path, &out, "cache"), 0) << out;
  EXPECT_NE(out.find("1 of 1 differing entities now match"), std::string::npos) << out;
  EXPECT_EQ(Json::parse(redis.Get(ahead_key).value_or("{}"), nullptr, false).value("_version", uint64_t{0}), version);
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
}

// The sum of a sink's differences over every kind.
double Differences(const std::string& text, const std::string& sink) {
  double sum = 0;
  for (const char* kind : {"missing", "extra", "version_mismatch", "content_mismatch", "ahead"}) {
    sum += Sample(text, std::string("sluice_engine_anti_entropy_differences_total{kind=\"") + kind + "\",sink=\"" +
                            sink + "\"}");
  }
  return sum;
}

TEST(AntiEntropy, LeavesADeadLetteredEntityToDeadLettersAndRepairsAMysqlRowDeletedByHand) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("entropy_dead");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  const uint16_t metrics_port = FreePort();
  cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 10ms\n"
                   "  anti_entropy: {rate: 20000, batch: 100}\n"
                   "metrics:\n  listen: 127.0.0.1:" + std::to_string(metrics_port) + "\n"
                   "sinks:\n  - {name: table, type: mysql, entity: account, table: account_view,"
                   " columns: {note: {pointer: /note, type: \"VARCHAR(8)\"}}}\n";
  const std::string path = cfg.Write();
  auto serve = StartSluice("serve", path, cfg.port);
  HttpClient c(cfg.port);
  ASSERT_EQ(c.Post("/v1/entities/account/bad/commands/create", R"({"note":"far too long for eight"})").status, 200);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(c.Post("/v1/entities/account/g" + std::to_string(i) + "/commands/create", R"({"note":"ok"})").status,
              200);
  }
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out;
  std::string text = Scrape(metrics_port);
  const double passes = Sample(text, "sluice_engine_anti_entropy_passes_total{sink=\"table\"}");
  ASSERT_TRUE(ScrapeUntil(metrics_port, 60s, [&](const std::string& t) {
    return Sample(t, "sluice_engine_anti_entropy_passes_total{sink=\"table\"}") >= passes + 3;
  }, &text)) << text;
  // The dead letter is the known difference: the anti-entropy neither counts
  // it again at every pass nor writes it behind the operator's back.
  EXPECT_EQ(Differences(text, "table"), 0) << text;
  EXPECT_GE(Sample(text, "sluice_engine_anti_entropy_checked_total{sink=\"table\"}"), 20 * 3) << text;
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM account_view WHERE id='bad'"), 0);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM sluice_dead_letters WHERE entity_id='bad' AND resolved_at IS NULL"), 1);
  // A row deleted by hand comes back, by the anti-entropy alone.
  ASSERT_TRUE(db.conn().Execute("DELETE FROM account_view WHERE id='g7'").ok());
  ASSERT_TRUE(ScrapeUntil(metrics_port, 60s, [&](const std::string& t) {
    return Sample(t, "sluice_engine_anti_entropy_repaired_total{sink=\"table\"}") >= 1;
  }, &text)) << text;
  EXPECT_EQ(Sample(text, "sluice_engine_anti_entropy_differences_total{kind=\"missing\",sink=\"table\"}"), 1) << text;
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM account_view WHERE id='g7' AND _version=1 AND note='ok'"), 1);
  EXPECT_EQ(VerifyViews(path, &out), 1) << out;  // only the dead letter remains
  EXPECT_NE(out.find("table: 21 entities checked, 1 differences, missing=1"), std::string::npos) << out;
  EXPECT_NE(out.find("missing bad"), std::string::npos) << out;
}

// A serve with one sink and no anti-entropy, loaded and caught up, then
// stopped: verify --repair runs without a process.
struct RepairStack {
  std::unique_ptr<TestDatabase> db;
  SluiceConfig cfg;
  std::string path;
};

RepairStack LoadedStack(const std::string& name, const std::string& sinks_yaml) {
  RepairStack s;
  s.db = std::make_unique<TestDatabase>(name);
  s.cfg.database = s.db->name();
  s.cfg.entities = {{"account", 4}};
  s.cfg.port = FreePort();
  s.cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 10ms\n"
                     "  anti_entropy: {enabled: false}\n"
                     "sinks:\n" + sinks_yaml;
  s.path = s.cfg.Write();
  auto serve = StartSluice("serve", s.path, s.cfg.port);
  EXPECT_EQ(MixedLoad(s.cfg.port, 800, 40, 2, 7), 800);
  std::string out;
  EXPECT_TRUE(WaitCaughtUp(s.path, 60s, &out)) << out;
  EXPECT_EQ(serve->Terminate(), 0) << serve->Log();
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
  return s;
}

// Live entity ids of the view with a version of at least 2, in id order.
std::vector<std::string> EntitiesWithHistory(TestDatabase& db) {
  std::vector<std::string> ids;
  for (const auto& row : db.Query("SELECT id FROM account_view WHERE _deleted=0 AND _version >= 2 ORDER BY id")) {
    ids.push_back(row.at(0).value_or(""));
  }
  return ids;
}

TEST(VerifyRepair, RedisViewIsRepairedWithOneWritePerDamagedKeyAndNothingElse) {
  SLUICE_REQUIRE_MYSQL();
  PrivateRedis server;
  if (!server.ok()) {
    if (InCi()) FAIL() << "cannot start redis-server (CI=true)";
    GTEST_SKIP() << "cannot start redis-server";
  }
  const std::string prefix = UniquePrefix("repair");
  auto s = LoadedStack("repair_redis", "  - name: cache\n    type: redis\n    entity: account\n"
                                       "    url: redis://127.0.0.1:" + std::to_string(server.port()) + "/0\n"
                                       "    key: \"" + prefix + ":{id}\"\n");
  RedisClient redis(server.port());
  auto live = LiveKeys(redis, prefix);
  std::vector<std::string> keys;
  for (const auto& [key, value] : live) {
    if (value.value("_version", uint64_t{0}) >= 2) keys.push_back(key);
  }
  ASSERT_GE(keys.size(), 4u);
  const auto version = [&](const std::string& key) { return live[key]["_version"].get<uint64_t>(); };
  // Damage: a key gone, an older version, other content at the same version,
  // a version ahead of storage, and a key of no entity.
  ASSERT_TRUE(redis.Run({"DEL", keys[0]}).has_value());
  ASSERT_TRUE(
      redis.Run({"SET", keys[1], R"({"_version":)" + std::to_string(version(keys[1]) - 1) + R"(,"owner":"old"})"})
          .has_value());
  Json altered = live[keys[2]];
  altered["owner"] = "tampered";
  ASSERT_TRUE(redis.Run({"SET", keys[2], altered.dump()}).has_value());
  ASSERT_TRUE(
      redis.Run({"SET", keys[3], R"({"_version":)" + std::to_string(version(keys[3]) + 5) + R"(,"owner":"x"})"})
          .has_value());
  ASSERT_TRUE(redis.Run({"SET", prefix + ":ghost", R"({"_version":3,"owner":"nobody"})"}).has_value());
  std::string out;
  ASSERT_EQ(VerifyViews(s.path, &out), 1) << out;

  // A plain verify writes nothing (the script it loads is no write either).
  const int64_t before = server.Changes();
  ASSERT_EQ(VerifyViews(s.path, &out), 1) << out;
  ASSERT_EQ(server.Changes(), before);
  EXPECT_EQ(RepairViews(s.path, &out), 0) << out;
  EXPECT_NE(out.find("cache: 5 of 5 differing entities now match (5 rewritten from main storage), 0 remain"),
            std::string::npos)
      << out;
  EXPECT_EQ(server.Changes() - before, 5) << "one write per damaged key, none for the others";
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
  EXPECT_FALSE(redis.Get(prefix + ":ghost").has_value());
  // Nothing left to do: nothing written.
  const int64_t after = server.Changes();
  EXPECT_EQ(RepairViews(s.path, &out), 0) << out;
  EXPECT_NE(out.find(" checked, 0 differences"), std::string::npos) << out;
  EXPECT_EQ(server.Changes(), after);
}

TEST(VerifyRepair, MysqlViewIsRepairedRowByRowAndNothingElseIsWritten) {
  SLUICE_REQUIRE_MYSQL();
  auto s = LoadedStack("repair_mysql", "  - name: table\n    type: mysql\n    entity: account\n"
                                       "    table: account_view\n    columns: {owner: /owner, balance: /balance}\n");
  auto ids = EntitiesWithHistory(*s.db);
  ASSERT_GE(ids.size(), 4u);
  auto& conn = s.db->conn();
  const auto exec = [&](const std::string& q) { ASSERT_TRUE(conn.Execute(q).ok()) << q; };
  exec("DELETE FROM account_view WHERE id='" + ids[0] + "'");
  exec("UPDATE account_view SET _version=_version-1, owner='old' WHERE id='" + ids[1] + "'");
  exec("UPDATE account_view SET owner='tampered' WHERE id='" + ids[2] + "'");
  exec("UPDATE account_view SET _version=_version+5 WHERE id='" + ids[3] + "'");
  exec("INSERT INTO account_view (id, _version, _deleted, owner) VALUES ('ghost', 3, 0, 'nobody')");
  // Every row the repair writes, by the server's own account.
  exec("CREATE TABLE write_log (id VARBINARY(64) NOT NULL, op CHAR(1) NOT NULL)");
  exec("CREATE TRIGGER log_insert AFTER INSERT ON account_view FOR EACH ROW INSERT INTO write_log VALUES (NEW.id, 'I')");
  exec("CREATE TRIGGER log_update AFTER UPDATE ON account_view FOR EACH ROW INSERT INTO write_log VALUES (NEW.id, 'U')");
  exec("CREATE TRIGGER log_delete AFTER DELETE ON account_view FOR EACH ROW INSERT INTO write_log VALUES (OLD.id, 'D')");
  std::string out;
  ASSERT_EQ(VerifyViews(s.path, &out), 1) << out;
  EXPECT_EQ(RepairViews(s.path, &out), 0) << out;
  EXPECT_NE(out.find("table: 5 of 5 differing entities now match (5 rewritten from main storage), 0 remain"),
            std::string::npos)
      << out;
  std::set<std::pair<std::string, std::string>> writes;
  for (const auto& row : s.db->Query("SELECT id, op FROM write_log")) {
    writes.emplace(row.at(0).value_or(""), row.at(1).value_or(""));
  }
  EXPECT_EQ(writes, (std::set<std::pair<std::string, std::string>>{
                        {ids[0], "I"}, {ids[1], "U"}, {ids[2], "U"}, {ids[3], "U"}, {"ghost", "D"}}));
  EXPECT_EQ(s.db->Scalar("SELECT COUNT(*) FROM write_log"), 5);
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;
  EXPECT_EQ(RepairViews(s.path, &out), 0) << out;
  EXPECT_EQ(s.db->Scalar("SELECT COUNT(*) FROM write_log"), 5) << "a view that matches gets no write";
}

// A raw HTTP request to OpenSearch (PUT/DELETE need it).
HttpReply Es(const std::string& method, const std::string& path, const std::string& body = "") {
  HttpClient c(OpenSearchPort(), 30s);
  return c.Send(method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

// Documents the index took (index operations on its primaries).
int64_t IndexedTotal(const std::string& index) {
  const HttpReply r = Es("GET", "/" + index + "/_stats/indexing");
  const Json j = Json::parse(r.body, nullptr, false);
  EXPECT_EQ(r.status, 200) << r.body;
  if (j.is_discarded()) return -1;
  return j["_all"]["primaries"]["indexing"]["index_total"].get<int64_t>();
}

TEST(VerifyRepair, OpenSearchViewRestoredFromAnOldCopyIsRepairedAndAViewAheadGetsAdvice) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_OPENSEARCH();
  const std::string index = UniquePrefix("repair") + "_account";
  IndexDeleter deleter;
  deleter.Set(index);
  auto s = LoadedStack("repair_es", "  - name: search\n    type: elasticsearch\n    entity: account\n"
                                    "    url: http://127.0.0.1:" + std::to_string(OpenSearchPort()) + "\n"
                                    "    index: \"" + index + "\"\n");
  // The index as it is, then restored from an "old copy": a document gone,
  // one at an older version, one with other content at its version. (A
  // document deleted by hand could not be put back at once: the index
  // remembers the delete's version for index.gc_deletes; a new index does not.)
  ASSERT_EQ(Es("POST", "/" + index + "/_refresh").status, 200);
  const HttpReply all = Es("POST", "/" + index + "/_search?size=1000&version=true", R"({"query":{"match_all":{}}})");
  ASSERT_EQ(all.status, 200) << all.body;
  std::map<std::string, std::pair<uint64_t, Json>> docs;
  const Json found = Json::parse(all.body);
  for (const Json& hit : found["hits"]["hits"]) {
    docs[hit["_id"].get<std::string>()] = {hit["_version"].get<uint64_t>(), hit["_source"]};
  }
  std::vector<std::string> ids;
  for (const auto& [id, doc] : docs) {
    if (doc.first >= 2 && !doc.second.contains("_sluice_deleted")) ids.push_back(id);
  }
  ASSERT_GE(ids.size(), 4u) << all.body.substr(0, 2000);
  ASSERT_EQ(Es("DELETE", "/" + index).status, 200);
  ASSERT_EQ(Es("PUT", "/" + index, R"({"mappings":{"properties":{"_sluice_deleted":{"type":"boolean"}}}})").status, 200);
  for (auto& [id, doc] : docs) {
    if (id == ids[0]) continue;
    uint64_t version = doc.first;
    if (id == ids[1]) {
      version -= 1;
      doc.second["owner"] = "old";
    }
    if (id == ids[2]) doc.second["owner"] = "tampered";
    const HttpReply put = Es("PUT", "/" + index + "/_doc/" + id + "?version=" + std::to_string(version) +
                                        "&version_type=external", doc.second.dump());
    ASSERT_EQ(put.status / 100, 2) << put.body;
  }
  std::string out;
  ASSERT_EQ(VerifyViews(s.path, &out), 1) << out;
  const int64_t before = IndexedTotal(index);
  EXPECT_EQ(RepairViews(s.path, &out), 0) << out;
  EXPECT_NE(out.find("search: 3 of 3 differing entities now match (3 rewritten from main storage), 0 remain"),
            std::string::npos)
      << out;
  EXPECT_EQ(IndexedTotal(index) - before, 3) << "one write per damaged document, none for the others";
  EXPECT_EQ(VerifyViews(s.path, &out), 0) << out;

  // A document ahead of storage: an external version cannot go back, so the
  // repair leaves it and says what to do.
  const HttpReply ahead = Es("PUT", "/" + index + "/_doc/" + ids[3] + "?version=" + std::to_string(docs[ids[3]].first + 5) +
                                        "&version_type=external", R"({"owner":"from the future"})");
  ASSERT_EQ(ahead.status / 100, 2) << ahead.body;
  const int64_t before_ahead = IndexedTotal(index);
  EXPECT_EQ(RepairViews(s.path, &out), 1) << out;
  EXPECT_NE(out.find("search: 0 of 1 differing entities now match (0 rewritten from main storage), 1 remain"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("`sluice rebuild --sink search`"), std::string::npos) << out;
  EXPECT_EQ(IndexedTotal(index), before_ahead);
}

TEST(VerifyRepair, ASinkWithoutEntityChecksIsOnlyVerifiedAndNeverWalked) {
  SLUICE_REQUIRE_MYSQL();
  const std::string file =
      (std::filesystem::temp_directory_path() / (UniquePrefix("repair_jsonl") + ".jsonl")).string();
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{file};
  TestDatabase db("repair_jsonl");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  const uint16_t metrics_port = FreePort();
  cfg.extra_yaml = std::string("engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 10ms\n") +
                   "  anti_entropy: {rate: 20000, batch: 100}\n"
                   "metrics:\n  listen: 127.0.0.1:" + std::to_string(metrics_port) + "\n"
                   "plugins:\n  - " + JSONL_PLUGIN + "\n"
                   "sinks:\n  - {name: log, type: jsonl, entity: account, path: " + file + ", fsync: false}\n";
  const std::string path = cfg.Write();
  auto serve = StartSluice("serve", path, cfg.port);
  EXPECT_EQ(MixedLoad(cfg.port, 200, 20, 2, 3), 200);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out;
  std::this_thread::sleep_for(300ms);  // many passes' worth at this rate, were the sink walked
  EXPECT_EQ(Sample(Scrape(metrics_port), "sluice_engine_anti_entropy_checked_total{sink=\"log\"}"), 0);
  EXPECT_EQ(RepairViews(path, &out), 0) << out;
  EXPECT_NE(out.find("log: 20 entities checked, 0 differences"), std::string::npos) << out;
  EXPECT_NE(out.find("log: not repaired: a jsonl sink cannot rewrite single entities"), std::string::npos) << out;
}

}  // namespace
}  // namespace sluice::testing
