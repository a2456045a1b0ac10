// Views defined by code against real MariaDB, Redis and OpenSearch
// (issue 20, items 2 and 6b, 6e):
//   (a) a filtered Redis view and a transformed OpenSearch view, fed by a
//       mixed load (patches that move balances across the filter's line,
//       deletes, re-creations), equal their definitions applied to main
//       storage's latest states; entities that stopped matching are gone;
//       `sluice verify` agrees
//   (b) view code that throws, runs away or returns the wrong shape
//       dead-letters exactly the events it fails on, and the partition
//       carries on with the rest
//   (c) a push sink with view code gets the state before from the writer
//   (d) routing: a kafka topic per region (key and headers from the code) and
//       an OpenSearch index per region, while the engine is killed: every
//       event is in its region's topic once, every live entity in exactly its
//       region's index
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/config_support.h"
#include "tests/support/kafka_support.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// Only accounts with an even balance are in the Redis view.
constexpr const char* kFilter = R"JS(
function filter(event) {
  return event.state.balance % 2 === 0;
}
)JS";

// The search document flattens and renames. It reads only the state (and
// the id), so `sluice verify`, which shapes the latest states, checks it.
constexpr const char* kTransform = R"JS(
function transform(event) {
  var s = event.state;
  return {
    account: event.id,
    owner_name: s.owner,
    cents: s.balance * 100,
    note_upper: String(s.note).toUpperCase()
  };
}
)JS";

struct Stack {
  std::unique_ptr<TestDatabase> db;
  ScratchDir dir;
  SluiceConfig cfg;
  std::string path;
  std::string prefix;
  std::string index;
  IndexDeleter deleter;
};

std::unique_ptr<Stack> MakeStack(const std::string& name, const std::string& extra_sinks = "") {
  auto s = std::make_unique<Stack>();
  s->db = std::make_unique<TestDatabase>(name);
  s->prefix = UniquePrefix(name);
  s->index = s->prefix + "_account";
  s->deleter.Set(s->index);
  const std::string filter = s->dir.Write("filter.js", kFilter).string();
  const std::string transform = s->dir.Write("transform.js", kTransform).string();
  s->cfg.database = s->db->name();
  s->cfg.entities = {{"account", 4}};
  s->cfg.port = FreePort();
  s->cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n  retry_backoff_max: 500ms\n"
                      "sinks:\n"
                      "  - name: rich\n    type: redis\n    entity: account\n"
                      "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
                      "    key: \"" + s->prefix + ":{id}\"\n"
                      "    code: " + filter + "\n"
                      "  - name: search\n    type: elasticsearch\n    entity: account\n"
                      "    url: http://127.0.0.1:" + std::to_string(OpenSearchPort()) + "\n"
                      "    index: \"" + s->prefix + "_{type}\"\n"
                      "    code: " + transform + "\n" + extra_sinks;
  s->path = s->cfg.Write();
  return s;
}

// The latest event of every entity of account (4 partitions): id -> (deleted, state).
std::map<std::string, std::pair<bool, Json>> Latest(TestDatabase& db) {
  std::map<std::string, std::pair<bool, Json>> out;
  for (int p = 0; p < 4; ++p) {
    const std::string t = "ev_account_p00" + std::to_string(p);
    auto rows = db.Query("SELECT e.entity_id, e.deleted, e.state FROM " + t +
                         " e JOIN (SELECT entity_id, MAX(version) v FROM " + t +
                         " GROUP BY entity_id) m ON e.entity_id=m.entity_id AND e.version=m.v");
    for (auto& r : rows) {
      const bool deleted = r[1].value_or("0") != "0";
      out[*r[0]] = {deleted, deleted ? Json() : Json::parse(r[2].value_or("null"))};
    }
  }
  return out;
}

// Every document of the index: id -> _source.
std::map<std::string, Json> SearchDocs(const std::string& index) {
  HttpClient c(OpenSearchPort());
  EXPECT_EQ(c.Post("/" + index + "/_refresh", "").status, 200);
  std::map<std::string, Json> out;
  auto r = c.Post("/" + index + "/_search?size=10000", R"({"query":{"match_all":{}}})");
  EXPECT_EQ(r.status, 200) << r.body;
  const Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded()) return out;
  for (const Json& hit : j["hits"]["hits"]) out[hit["_id"].get<std::string>()] = hit["_source"];
  return out;
}

TEST(Views, FilteredRedisAndTransformedOpenSearchEqualTheirDefinitionsOnMainStorage) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  SLUICE_REQUIRE_OPENSEARCH();
  auto s = MakeStack("viewcode");
  auto serve = StartSluice("serve", s->path, s->cfg.port);
  // Balances are the command's index: with 20,000 commands over 500
  // accounts, an account goes in and out of the filter many times.
  EXPECT_EQ(MixedLoad(s->cfg.port, 20000, 500, 16, 3), 20000);
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &out)) << out;
  const auto latest = Latest(*s->db);
  ASSERT_GT(latest.size(), 400u);

  // Redis: exactly the live accounts with balance >= 5000, each its state.
  RedisClient redis(RedisPort());
  std::map<std::string, Json> in_redis;
  for (const auto& [key, value] : redis.Dump(s->prefix + ":*")) {
    Json j = Json::parse(value, nullptr, false);
    if (j.is_object() && !j.contains("_deleted")) {
      j.erase("_version");
      in_redis[key.substr(s->prefix.size() + 1)] = j;
    }
  }
  std::map<std::string, Json> want_redis;
  int left_filter = 0;
  for (const auto& [id, latest_event] : latest) {
    const auto& [deleted, state] = latest_event;
    if (!deleted && state["balance"].get<int64_t>() % 2 == 0) {
      want_redis[id] = state;
    } else if (!deleted) {
      ++left_filter;
    }
  }
  EXPECT_GT(left_filter, 0) << "some live accounts should be outside the filter";
  EXPECT_GT(want_redis.size(), 0u);
  EXPECT_EQ(in_redis, want_redis);

  // OpenSearch: every live account, transformed; no document of a deleted one.
  std::map<std::string, Json> in_search;
  for (auto& [id, doc] : SearchDocs(s->index)) {
    if (!doc.contains("_sluice_deleted")) {
      doc.erase("_sluice_version");
      in_search[id] = doc;
    }
  }
  size_t live = 0;
  for (const auto& [id, latest_event] : latest) {
    const auto& [deleted, state] = latest_event;
    if (deleted) {
      EXPECT_EQ(in_search.count(id), 0u) << id << " is deleted";
      continue;
    }
    ++live;
    auto it = in_search.find(id);
    ASSERT_NE(it, in_search.end()) << id;
    const Json& doc = it->second;
    EXPECT_EQ(doc["account"], id);
    EXPECT_EQ(doc["owner_name"], state["owner"]);
    EXPECT_EQ(doc["cents"], state["balance"].get<int64_t>() * 100);
    std::string upper = state["note"].get<std::string>();
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(doc["note_upper"], upper);
  }
  EXPECT_EQ(in_search.size(), live);
  for (const auto& [id, doc] : in_search) EXPECT_TRUE(latest.count(id) && !latest.at(id).first) << id << " " << doc.dump();
  // sluice verify shapes the truth with the same code: no differences.
  EXPECT_EQ(VerifyViews(s->path, &out), 0) << out;
  const Json st = StatusJson(s->path);
  EXPECT_EQ(SinkTotal(st, "rich", "dead_lettered"), 0u);
  EXPECT_EQ(SinkTotal(st, "search", "dead_lettered"), 0u);
}

TEST(Views, BadViewCodeDeadLettersTheEventsItFailsOnAndThePartitionCarriesOn) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  SLUICE_REQUIRE_OPENSEARCH();
  ScratchDir code_dir;
  // e1 throws, e2 runs away, e3 returns a string; every other account is fine.
  const std::string bad = code_dir.Write("bad.js", R"JS(
function transform(event) {
  if (event.id === 'e1') throw new Error('e1 has no owner');
  if (event.id === 'e2') { for (;;) {} }
  if (event.id === 'e3') return 'not an object';
  return {id: event.id, balance: event.state.balance};
}
)JS").string();
  auto s = MakeStack("viewbad", "  - name: shaky\n    type: redis\n    entity: account\n"
                                "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
                                "    key: \"{type}:shaky:{id}\"\n    code: " + bad + "\n");
  auto serve = StartSluice("serve", s->path, s->cfg.port);
  HttpClient c(s->cfg.port);
  int sent = 0;
  for (int round = 0; round < 3; ++round) {
    for (int e = 0; e < 10; ++e) {
      const std::string body = R"({"owner":"o","balance":)" + std::to_string(round * 10 + e) + R"(,"note":"n"})";
      auto r = c.Post("/v1/entities/account/e" + std::to_string(e) + "/commands/patch", body,
                      {{"Idempotency-Key", "bad-" + std::to_string(round) + "-" + std::to_string(e)}});
      ASSERT_EQ(r.status, 200) << r.body;
      ++sent;
    }
  }
  std::string out;
  ASSERT_TRUE(WaitCaughtUp(s->path, 120s, &out)) << out;
  const Json st = StatusJson(s->path);
  EXPECT_EQ(SinkTotal(st, "shaky", "dead_lettered"), 9u);  // 3 accounts x 3 events
  EXPECT_EQ(SinkTotal(st, "shaky", "applied"), static_cast<uint64_t>(sent - 9));
  auto letters = s->db->Query("SELECT entity_id, error FROM sluice_dead_letters WHERE sink='shaky' ORDER BY id");
  ASSERT_EQ(letters.size(), 9u);
  std::set<std::string> ids;
  for (auto& r : letters) {
    ids.insert(*r[0]);
    const std::string& error = *r[1];
    const std::string want = *r[0] == "e1"   ? "bad.js:3: Error: e1 has no owner"
                             : *r[0] == "e2" ? "time limit"
                                             : "must return an object";
    EXPECT_NE(error.find(want), std::string::npos) << *r[0] << ": " << error;
  }
  EXPECT_EQ(ids, (std::set<std::string>{"e1", "e2", "e3"}));
  RedisClient redis(RedisPort());
  const auto values = redis.Dump("account:shaky:*");
  EXPECT_EQ(values.count("account:shaky:e9"), 1u);
  EXPECT_EQ(values.count("account:shaky:e1"), 0u);
  // The other sinks are untouched by this one's code.
  EXPECT_EQ(SinkTotal(st, "search", "dead_lettered"), 0u);
  redis.Run({"DEL", "account:shaky:e0", "account:shaky:e4", "account:shaky:e5", "account:shaky:e6",
             "account:shaky:e7", "account:shaky:e8", "account:shaky:e9"});
}

TEST(Views, APushSinkWithViewCodeGetsTheStateBeforeFromTheWriter) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  SLUICE_REQUIRE_OPENSEARCH();
  ScratchDir code_dir;
  const std::string delta = code_dir.Write("delta.js", R"JS(
function transform(event) {
  return {balance: event.state.balance, was: event.before ? event.before.balance : null, cmd: event.command,
          req: event.request.balance};
}
)JS").string();
  // push_timeout: the first push builds the code's runtime on the push
  // thread, which a loaded machine (ctest -j) can stretch past the default 50 ms.
  auto s = MakeStack("viewpush", "  - name: pushed\n    type: redis\n    entity: account\n"
                                 "    url: redis://127.0.0.1:" + std::to_string(RedisPort()) + "/0\n"
                                 "    key: \"" + UniquePrefix("viewpush") + "p:{id}\"\n"
                                 "    push: true\n    push_mode: sync\n    push_timeout: 5s\n    code: " + delta + "\n");
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", s->path}, &out), 0) << out;
  auto writer = StartSluice("writer", s->path, s->cfg.port);  // push only: no engine runs
  HttpClient c(s->cfg.port);
  for (int balance : {10, 25, 40}) {
    auto r = c.Post("/v1/entities/account/acct/commands/patch",
                    R"({"owner":"o","balance":)" + std::to_string(balance) + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.headers["sluice-push"].find("pushed=updated"), std::string::npos) << r.body;
  }
  RedisClient redis(RedisPort());
  const auto values = redis.Dump("*viewpush*p:acct");
  ASSERT_EQ(values.size(), 1u);
  const Json j = Json::parse(values.begin()->second);
  EXPECT_EQ(j["balance"], 40);
  EXPECT_EQ(j["was"], 25);
  EXPECT_EQ(j["cmd"], "patch");
  EXPECT_EQ(j["req"], 40);
  EXPECT_EQ(j["_version"], 3);
  redis.Run({"DEL", values.begin()->first});
}

// The region of an account's state: its balance decides, so the load moves
// accounts between regions all the time. "other" goes to the sink's own
// topic or index (route() returns null for it).
constexpr const char* kRouteByRegion = R"JS(
const REGIONS = ['eu', 'us', 'other'];
function route(event) {
  const s = event.state ?? event.before;  // a delete is routed by the state it ends
  const region = REGIONS[s.balance % 3];
  const to = region === 'other' ? null : `${PREFIX}.${region}`;
  return {to, key: `${region}/${event.id}`, headers: {region, command: event.command}};
}
)JS";

std::string RegionOf(const Json& state) {
  static const char* kRegions[] = {"eu", "us", "other"};
  return kRegions[state["balance"].get<int64_t>() % 3];
}

TEST(Views, RoutedToATopicAndAnIndexPerRegionWhileTheEngineIsKilled) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_OPENSEARCH();
  SLUICE_REQUIRE_KAFKA();
  TestDatabase db("viewroute");
  ScratchDir dir;
  const std::string prefix = UniquePrefix("route");
  IndexDeleter indexes;
  indexes.Set(prefix + "-other");
  IndexDeleter eu_index, us_index;
  eu_index.Set(prefix + ".eu");
  us_index.Set(prefix + ".us");
  std::string kafka_code = kRouteByRegion;
  kafka_code.replace(kafka_code.find("${PREFIX}"), 9, prefix);
  // OpenSearch: no key or headers (a point view), the same regions.
  const std::string search_code = std::string("const PREFIX = '") + prefix + "';\n" + R"JS(
function route(event) {
  const region = ['eu', 'us', 'other'][event.state.balance % 3];
  return region === 'other' ? null : `${PREFIX}.${region}`;
}
function transform(event) { return {balance: event.state.balance, owner: event.state.owner}; }
)JS";
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 4}};
  cfg.port = FreePort();
  cfg.extra_yaml = "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n  retry_backoff_max: 500ms\n"
                   "sinks:\n"
                   "  - name: regions\n    type: kafka\n    entity: account\n"
                   "    brokers: \"" + KafkaBrokers() + "\"\n"
                   "    topic: " + prefix + "-other\n    create_topic: true\n"
                   "    routes: [" + prefix + ".eu, " + prefix + ".us]\n"
                   "    code: " + dir.Write("kafka.js", kafka_code).string() + "\n"
                   "  - name: search\n    type: elasticsearch\n    entity: account\n"
                   "    url: http://127.0.0.1:" + std::to_string(OpenSearchPort()) + "\n"
                   "    index: " + prefix + "-other\n"
                   "    routes: [" + prefix + ".eu, " + prefix + ".us]\n"
                   "    code: " + dir.Write("search.js", search_code).string() + "\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"config", "check", "--config", path}, &out), 0) << out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto writer = StartSluice("writer", path, cfg.port);
  auto engine = StartSluice("sync", path, cfg.port);
  std::atomic<bool> done{false};
  std::thread load([&] {
    MixedLoad(cfg.port, 3000, 200, 8, 11);
    done = true;
  });
  for (int kill = 0; kill < 2 && !done; ++kill) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    engine->Kill();  // between a delivery and its offset flush, the topics must not get a record twice
    engine = StartSluice("sync", path, cfg.port);
  }
  load.join();
  ASSERT_TRUE(WaitCaughtUp(path, 180s, &out)) << out;
  const Json st = StatusJson(path);
  EXPECT_EQ(SinkTotal(st, "regions", "dead_lettered"), 0u);
  EXPECT_EQ(SinkTotal(st, "search", "dead_lettered"), 0u);

  // Every event, with the region its route() gives (a delete: the state it ends).
  std::map<std::string, std::set<std::pair<std::string, uint64_t>>> want;  // topic -> (id, version)
  size_t events = 0;
  for (int p = 0; p < 4; ++p) {
    Json before;
    std::string last_id;
    for (auto& r : db.Query("SELECT entity_id, version, deleted, state FROM ev_account_p00" + std::to_string(p) +
                            " ORDER BY entity_id, version")) {
      if (*r[0] != last_id) before = Json();
      last_id = *r[0];
      const bool deleted = r[2].value_or("0") != "0";
      const Json state = deleted ? Json() : Json::parse(r[3].value_or("null"));
      const std::string region = RegionOf(deleted ? before : state);
      want[region == "other" ? prefix + "-other" : prefix + "." + region].insert({*r[0], std::stoull(*r[1])});
      before = state;
      ++events;
    }
  }
  ASSERT_GT(events, 2000u);
  size_t records = 0;
  for (const auto& [topic, expected] : want) {
    std::string error;
    const std::vector<KafkaRecord> got = ReadTopic(topic, &error);
    ASSERT_TRUE(error.empty()) << topic << ": " << error;
    std::set<std::pair<std::string, uint64_t>> seen;
    for (const KafkaRecord& rec : got) {
      const Json v = Json::parse(rec.value);
      const std::string id = v["id"].get<std::string>();
      const uint64_t version = v["version"].get<uint64_t>();
      EXPECT_TRUE(seen.insert({id, version}).second) << topic << ": " << id << " v" << version << " twice";
      const std::string region = topic == prefix + "-other" ? "other" : topic.substr(prefix.size() + 1);
      EXPECT_EQ(rec.key, region + "/" + id);
      EXPECT_EQ(rec.headers.count("region") ? rec.headers.at("region") : "", region);
      EXPECT_EQ(rec.headers.count("command") ? rec.headers.at("command") : "", v["command"].get<std::string>());
    }
    EXPECT_EQ(seen, expected) << topic;
    records += got.size();
  }
  EXPECT_EQ(records, events);  // nothing lost, nothing twice, across kills

  // OpenSearch: each live account in exactly its latest region's index.
  const auto latest = Latest(db);
  std::map<std::string, std::map<std::string, Json>> docs;  // index -> id -> doc
  for (const std::string& index : {prefix + "-other", prefix + ".eu", prefix + ".us"}) {
    for (auto& [id, doc] : SearchDocs(index)) {
      if (!doc.contains("_sluice_deleted")) docs[index][id] = doc;
    }
  }
  size_t live = 0, placed = 0;
  for (const auto& [id, latest_event] : latest) {
    const auto& [deleted, state] = latest_event;
    for (const auto& [index, in_index] : docs) {
      const bool here = in_index.count(id) > 0;
      const std::string region = deleted ? "" : RegionOf(state);
      const bool belongs = !deleted && index == (region == "other" ? prefix + "-other" : prefix + "." + region);
      EXPECT_EQ(here, belongs) << id << " in " << index;
      if (here && belongs) {
        EXPECT_EQ(in_index.at(id)["balance"], state["balance"]);
        ++placed;
      }
    }
    live += deleted ? 0 : 1;
  }
  EXPECT_GT(live, 100u);
  EXPECT_EQ(placed, live);
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
}

}  // namespace
}  // namespace sluice::testing
