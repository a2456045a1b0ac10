// Delta events (issue 23, item 1): with `deltas` on, an event stores what a
// command changed instead of the whole state, with a whole state on create,
// after a delete, every snapshot_every versions and when the deltas since
// the last whole state reach snapshot_percent of its size. Through real
// `sluice serve` and MariaDB: handlers, GET, GET .../events, the views
// (Redis, MySQL) and `verify` all see full states; a writer restarted with
// an empty cache continues the chains from storage.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

std::unique_ptr<SluiceProcess> Serve(const SluiceConfig& cfg) {
  auto p = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", cfg.Write()}, cfg.port);
  std::string why;
  EXPECT_TRUE(p->Start(&why)) << why;
  return p;
}

TEST(DeltaStorage, EventsStoreWhatChangedAndEveryReaderSeesWholeStates) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  TestDatabase db("delta");
  const std::string prefix = UniquePrefix("delta");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"doc", 1}};
  cfg.entity_yaml["doc"] = "deltas: {snapshot_every: 5, snapshot_percent: 50}";
  cfg.port = FreePort();
  cfg.extra_yaml = "engine:\n  idle_poll_max: 20ms\nsinks:\n"
                   "  - {name: cache, type: redis, entity: doc, url: \"" + RedisUrl() + "\", key: \"" + prefix +
                   ":{id}\"}\n"
                   "  - {name: table, type: mysql, entity: doc, table: doc_view, columns: {n: /n, title: /title}}\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto serve = Serve(cfg);
  auto http = std::make_unique<HttpClient>(cfg.port);

  // A 10 KB document patched one member at a time; the expected state after
  // each version, as the client computes it.
  Json doc = {{"title", "t"}, {"n", 0}, {"nothing", nullptr}, {"body", std::string(10000, 'x')}};
  std::vector<Json> expected = {Json()};  // version 0: nothing
  auto post = [&](const std::string& command, const Json& body) {
    auto r = http->Post("/v1/entities/doc/big/commands/" + command, body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
  };
  post("create", doc);
  expected.push_back(doc);
  for (int i = 1; i <= 12; ++i) {
    Json patch = {{"n", i}};
    if (i % 4 == 0) patch["title"] = "t" + std::to_string(i);
    post("patch", patch);
    doc.merge_patch(patch);
    expected.push_back(doc);
  }
  post("delete", Json::object());
  expected.push_back(Json());
  doc = {{"title", "again"}, {"n", 100}, {"body", std::string(10000, 'y')}};
  post("create", doc);
  expected.push_back(doc);
  for (int i = 101; i <= 103; ++i) {
    post("patch", {{"n", i}});
    doc["n"] = i;
    expected.push_back(doc);
  }
  // A small entity: its deltas would soon outweigh half of it, so it
  // stores whole states more often.
  ASSERT_EQ(http->Post("/v1/entities/doc/small/commands/create", Json{{"n", 0}}.dump()).status, 200);
  for (int i = 1; i < 6; ++i) {
    ASSERT_EQ(http->Post("/v1/entities/doc/small/commands/patch", Json{{"n", i}}.dump()).status, 200);
  }

  // Storage: which versions are whole states.
  const std::string table = "ev_doc_p000";
  std::map<uint64_t, std::string> kind;  // version -> "state" / "delta" / "deleted"
  uint64_t delta_bytes = 0, state_bytes = 0;
  for (auto& row : db.Query("SELECT version, state IS NOT NULL, delta IS NOT NULL, deleted, LENGTH(state), "
                            "LENGTH(delta) FROM " + table + " WHERE entity_id='big' ORDER BY version")) {
    const uint64_t v = std::stoull(*row[0]);
    kind[v] = *row[3] == "1" ? "deleted" : *row[2] == "1" ? "delta" : "state";
    EXPECT_NE(*row[1] == "1", *row[2] == "1" || *row[3] == "1") << "version " << v << ": a state xor a delta";
    if (kind[v] == "delta") delta_bytes += std::stoull(*row[5]);
    if (kind[v] == "state") state_bytes = std::stoull(*row[4]);
  }
  ASSERT_EQ(kind.size(), expected.size() - 1);
  // create 1: state; 2-5 deltas; 6 state (snapshot_every 5); 7-10 deltas; 11 state;
  // 12, 13 deltas; 14 delete; 15 create: state; 16-18 deltas.
  const std::map<uint64_t, std::string> want = {
      {1, "state"},  {2, "delta"},  {3, "delta"},  {4, "delta"},    {5, "delta"},  {6, "state"},
      {7, "delta"},  {8, "delta"},  {9, "delta"},  {10, "delta"},   {11, "state"}, {12, "delta"},
      {13, "delta"}, {14, "deleted"}, {15, "state"}, {16, "delta"}, {17, "delta"}, {18, "delta"}};
  EXPECT_EQ(kind, want);
  EXPECT_GT(state_bytes, 10000u);
  EXPECT_LT(delta_bytes, 600u) << "the deltas of 13 one-member patches";
  EXPECT_GT(db.Scalar("SELECT COUNT(*) FROM " + table + " WHERE entity_id='small' AND delta IS NULL"), 3);

  // GET and every version through GET .../events.
  auto check_reads = [&] {
    auto now = Json::parse(http->Get("/v1/entities/doc/big").body);
    EXPECT_EQ(now["version"], expected.size() - 1);
    EXPECT_EQ(now["state"], expected.back());
    auto events = Json::parse(http->Get("/v1/entities/doc/big/events?limit=100").body);
    ASSERT_EQ(events["events"].size(), expected.size() - 1) << events.dump().substr(0, 300);
    for (const Json& e : events["events"]) {
      const uint64_t v = e["version"].get<uint64_t>();
      EXPECT_EQ(e["state"], expected[v]) << "version " << v;
    }
  };
  check_reads();
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out << serve->Log();
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  RedisClient redis(RedisPort());
  auto cached = redis.Get(prefix + ":big");
  ASSERT_TRUE(cached.has_value());
  Json view = Json::parse(*cached);
  view.erase("_version");
  EXPECT_EQ(view, expected.back());

  // A restarted writer knows nothing: it loads the latest state (rebuilt
  // from version 15 and its deltas) and the chain's length, and goes on.
  EXPECT_EQ(serve->Terminate(), 0);
  serve = Serve(cfg);
  http = std::make_unique<HttpClient>(cfg.port);  // the old connection went with the old process
  for (int i = 104; i <= 106; ++i) {
    post("patch", {{"n", i}});
    doc["n"] = i;
    expected.push_back(doc);
  }
  // 19 delta (the fourth since 15), 20 state, 21 delta.
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM " + table + " WHERE entity_id='big' AND version=19 AND delta IS NOT NULL"), 1);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM " + table + " WHERE entity_id='big' AND version=20 AND state IS NOT NULL"), 1);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM " + table + " WHERE entity_id='big' AND version=21 AND delta IS NOT NULL"), 1);
  check_reads();
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out << serve->Log();
  EXPECT_EQ(VerifyViews(path, &out), 0) << out;
  EXPECT_EQ(serve->Terminate(), 0);
}

// deltas: {snapshot_every: 1} stores every state whole, as before deltas.
TEST(DeltaStorage, SnapshotEveryOneStoresWholeStates) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("nodelta");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"doc", 1}};
  cfg.entity_yaml["doc"] = "deltas: {snapshot_every: 1}";
  cfg.port = FreePort();
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto serve = Serve(cfg);
  HttpClient http(cfg.port);
  ASSERT_EQ(http.Post("/v1/entities/doc/a/commands/create", Json{{"body", std::string(5000, 'z')}}.dump()).status, 200);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(http.Post("/v1/entities/doc/a/commands/patch", Json{{"n", i}}.dump()).status, 200);
  }
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE delta IS NOT NULL"), 0);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE state IS NOT NULL"), 6);
  EXPECT_EQ(serve->Terminate(), 0);
}

}  // namespace
}  // namespace sluice::testing
