// The archive (issue 23, items 3, 4 and 7) through real MariaDB, `sluice
// serve` and `sluice archive`: old events leave the hot tables as stubs
// and segments in a store, and every reader of history still sees all of
// it, in order, whole: GET .../events, a retried command, a sink that starts
// from the first event, verify and rebuild. And archiving killed at any
// point, 20 times, loses nothing and writes nothing twice.
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "archive/archive_reader.h"
#include "archive/segment.h"
#include "core/json.h"
#include "core/json_delta.h"
#include "objectstore/object_store.h"
#include "sql/mariadb_tables.h"
#include "tests/support/s3_settings.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

std::string ArchiveYaml(const std::string& dir) {
  return "archive:\n  store: \"file://" + dir + "\"\n  idempotency_window: 0s\n  interval: 0s\n  segment_events: 50\n";
}

TEST(Archive, ServeArchivesAndEveryReaderStillSeesWholeHistory) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("archive");
  const std::string dir = MakeScratchDir("archive");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"doc", 2}};
  cfg.entity_yaml["doc"] = "deltas: {snapshot_every: 4, snapshot_percent: 100}, archive: {keep_versions: 2}";
  cfg.port = FreePort();
  const std::string sinks =
      "engine:\n  idle_poll_max: 20ms\nsinks:\n"
      "  - {name: table, type: mysql, entity: doc, table: doc_view, columns: {n: /n}}\n";
  cfg.extra_yaml = ArchiveYaml(dir) + sinks;
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  auto serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", path}, cfg.port);
  std::string why;
  ASSERT_TRUE(serve->Start(&why)) << why;
  HttpClient http(cfg.port);

  // 8 documents of ~2 KB, 12 versions each; d3 is deleted and made again.
  const std::string body(2000, 'b');
  int n = 0;
  auto post = [&](const std::string& id, const std::string& command, const Json& payload, const std::string& key) {
    auto r = http.Post("/v1/entities/doc/" + id + "/commands/" + command, payload.dump(), {{"Idempotency-Key", key}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r;
  };
  std::map<std::string, std::string> first_replies;
  for (int v = 1; v <= 12; ++v) {
    for (int d = 0; d < 8; ++d) {
      const std::string id = "d" + std::to_string(d);
      const std::string key = id + "-" + std::to_string(v);
      HttpReply r;
      if (v == 1 || (d == 3 && v == 7)) {
        r = post(id, "create", {{"n", ++n}, {"body", body}}, key);
      } else if (d == 3 && v == 6) {
        r = post(id, "delete", Json::object(), key);
      } else {
        r = post(id, "patch", {{"n", ++n}, {"v", v}}, key);
      }
      first_replies[key] = r.body;
    }
  }
  ASSERT_TRUE(WaitCaughtUp(path, 60s, &out)) << out;
  std::map<std::string, std::string> histories;
  for (int d = 0; d < 8; ++d) {
    const std::string id = "d" + std::to_string(d);
    auto r = http.Get("/v1/entities/doc/" + id + "/events");
    ASSERT_EQ(r.status, 200) << r.body;
    histories[id] = r.body;
  }
  const int64_t bytes_before = db.Scalar(
      "SELECT SUM(LENGTH(state)) + SUM(COALESCE(LENGTH(delta), 0)) + SUM(LENGTH(request)) FROM ev_doc_p000") +
                               db.Scalar("SELECT SUM(LENGTH(state)) + SUM(COALESCE(LENGTH(delta), 0)) + "
                                         "SUM(LENGTH(request)) FROM ev_doc_p001");

  ASSERT_EQ(RunSluice({"archive", "run", "--config", path}, &out), 0) << out;
  EXPECT_NE(out.find("archived doc/p0 events 1.."), std::string::npos) << out;
  // Every event is in a segment; each document keeps its last 2 versions
  // (and the snapshot they are rebuilt from) whole; the rest are stubs.
  const int64_t events = db.Scalar("SELECT COUNT(*) FROM ev_doc_p000") + db.Scalar("SELECT COUNT(*) FROM ev_doc_p001");
  EXPECT_EQ(events, 96);
  EXPECT_EQ(db.Scalar("SELECT SUM(events) FROM sluice_archive_segments"), 96);
  const int64_t stubs = db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE archived=1") +
                        db.Scalar("SELECT COUNT(*) FROM ev_doc_p001 WHERE archived=1");
  EXPECT_GE(stubs, 8 * 6);
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE archived=1 AND (state IS NOT NULL OR request<>'')"), 0);
  const int64_t bytes_after = db.Scalar(
      "SELECT COALESCE(SUM(LENGTH(state)), 0) + SUM(COALESCE(LENGTH(delta), 0)) + SUM(LENGTH(request)) FROM ev_doc_p000") +
                              db.Scalar("SELECT COALESCE(SUM(LENGTH(state)), 0) + SUM(COALESCE(LENGTH(delta), 0)) + "
                                        "SUM(LENGTH(request)) FROM ev_doc_p001");
  EXPECT_LT(bytes_after * 2, bytes_before) << bytes_after << " of " << bytes_before;
  ASSERT_EQ(RunSluice({"archive", "status", "--config", path, "--json"}, &out), 0) << out;
  const Json status = Json::parse(out);
  ASSERT_EQ(status["partitions"].size(), 2u);
  for (const auto& p : status["partitions"]) {
    EXPECT_GT(p["segments"].get<int>(), 0) << p;
    EXPECT_EQ(p["slowest_sink"], "table");
    EXPECT_EQ(p["watermark"], p["slowest_sink_offset"]) << p;
    EXPECT_GT(p["stubs"].get<int>(), 0) << p;
  }

  // GET .../events is byte for byte what it was; the latest state too.
  for (const auto& [id, history] : histories) {
    auto r = http.Get("/v1/entities/doc/" + id + "/events");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, history) << id;
  }
  // A retry of an archived command gets its first reply, and changes nothing.
  for (const std::string key : {"d0-1", "d5-2", "d3-6"}) {
    const std::string id = key.substr(0, 2);
    const int v = std::stoi(key.substr(3));
    auto again = http.Post("/v1/entities/doc/" + id + "/commands/" + (v == 1 ? "create" : v == 6 ? "delete" : "patch"),
                           v == 1 ? Json{{"n", 1}, {"body", body}}.dump()
                                  : v == 6 ? "{}" : Json{{"n", 8 + 6}, {"v", 2}}.dump(),
                           {{"Idempotency-Key", key}});
    EXPECT_EQ(again.status, 200) << key << ": " << again.body;
    EXPECT_EQ(again.body, first_replies[key]) << key;
  }
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000") + db.Scalar("SELECT COUNT(*) FROM ev_doc_p001"), 96);
  // New commands go on after archiving.
  post("d0", "patch", {{"n", 1000}}, "after-archive");
  EXPECT_EQ(serve->Terminate(), 0);

  // A second view, added now, starts from the first event: it reads the
  // archive, then the hot tables, and verifies equal.
  cfg.extra_yaml = ArchiveYaml(dir) + "admin:\n  listen: 127.0.0.1:" + std::to_string(FreePort()) +
                   "\n  token: archive-test-token\n" + sinks +
                   "  - {name: late, type: mysql, entity: doc, table: doc_late, columns: {n: /n}}\n";
  const std::string path2 = cfg.Write();
  serve = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", path2}, cfg.port);
  ASSERT_TRUE(serve->Start(&why)) << why;
  ASSERT_TRUE(WaitCaughtUp(path2, 60s, &out)) << out;
  ASSERT_EQ(RunSluice({"verify", "--config", path2}, &out), 0) << out;
  EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM doc_late"), 8);
  EXPECT_EQ(RunSluice({"rebuild", "--config", path2, "--sink", "late"}, &out), 0) << out;
  ASSERT_EQ(RunSluice({"verify", "--config", path2}, &out), 0) << out;
  EXPECT_EQ(serve->Terminate(), 0);
  RemoveScratchDir(dir);
}

// ---- killed at any point ----

// Appends `count` events over 6 entities, whole states every 3rd version
// and deltas between (what the writer would store).
void AppendEvents(sql::EventLog& log, uint64_t* head, std::map<std::string, std::pair<uint64_t, Json>>* entities,
                  int count, std::mt19937& rng) {
  auto append = log.NewAppend("doc", 0);
  std::vector<std::string> texts;
  texts.reserve(count * 4);
  for (int i = 0; i < count; ++i) {
    const std::string id = "e" + std::to_string(rng() % 6);
    auto& [version, state] = (*entities)[id];
    Json next = state.is_object() ? state : Json::object();
    next["n"] = *head + 1;
    next["pad"] = std::string(100 + rng() % 400, 'p');
    sql::NewEvent e;
    e.event_id = ++*head;
    texts.push_back(id);
    e.entity_id = texts.back();
    e.version = ++version;
    texts.push_back("cmd" + std::to_string(*head));
    e.command_id = texts.back();
    e.command_name = "patch";
    texts.push_back(R"({"i":)" + std::to_string(*head) + "}");
    e.request = texts.back();
    e.response = e.request;
    if (version % 3 == 1 || !state.is_object()) {
      texts.push_back(CanonicalJson(next));
      e.state = texts.back();
    } else {
      texts.push_back(CanonicalJson(*JsonDelta(state, next)));
      e.delta = texts.back();
    }
    state = next;
    ASSERT_TRUE(append->TryAdd(e, 64 << 20));
  }
  ASSERT_TRUE(log.Append(*append).ok());
}

TEST(Archive, KilledAtAnyPointLosesNothingAndDuplicatesNothing) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("archivekill");
  const std::string dir = MakeScratchDir("archivekill");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"doc", 1}};
  cfg.entity_yaml["doc"] = "archive: {keep_versions: 1}";
  cfg.port = FreePort();
  cfg.extra_yaml = "archive:\n  store: \"file://" + dir + "\"\n  idempotency_window: 0s\n  interval: 0s\n"
                   "  segment_events: 40\n";
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;

  sql::ConnectParams params = MysqlParams();
  params.database = db.name();
  auto hot = std::make_shared<sql::MariaDbStorage>(params);
  auto log = hot->OpenEventLog();
  objectstore::ObjectStoreOptions so;
  so.url = "file://" + dir;
  auto opened = objectstore::OpenObjectStore(so);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<objectstore::ObjectStore> store = std::move(*opened);
  std::mt19937 rng(20261129);
  uint64_t head = 0;
  std::map<std::string, std::pair<uint64_t, Json>> entities;
  std::vector<sql::EventRow> truth;  // every event as first read, whole

  const std::vector<std::string> points = {"archive.before_put", "archive.after_put", "archive.commit.after_segment",
                                           "archive.commit.before_commit", "archive.after_commit"};
  int kills = 0;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const uint64_t from = head;
    AppendEvents(*log, &head, &entities, 60, rng);
    auto fresh = log->ReadAfter("doc", {{0, from}}, 1000, sql::EventLog::Columns::kFull);
    ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
    for (auto& r : (*fresh)[0]) truth.push_back(std::move(r));
    // Odd rounds crash at a failpoint (SIGKILL from inside, at that exact
    // point); even rounds are killed from outside after a random moment.
    std::string command;
    if (round % 2 == 1) {
      command = "SLUICE_FAILPOINTS='" + points[(round / 2) % points.size()] + "=crash' " + SluiceBinary() +
                " archive run --config " + path;
    } else {
      command = "timeout -s KILL " + std::to_string(0.05 + (rng() % 400) / 1000.0) + " " + SluiceBinary() +
                " archive run --config " + path;
    }
    const int rc = RunCommand("(" + command + ") 2>&1", &out);
    if (rc != 0) ++kills;
    // Whatever was cut: the manifest's segments follow each other, every
    // stub is in one, and the hot rows that are not stubs are exactly the
    // events above the watermark and the chains the writer needs.
    auto segments = db.Query("SELECT first_event_id, last_event_id FROM sluice_archive_segments ORDER BY first_event_id");
    uint64_t expect_first = 1;
    for (const auto& s : segments) {
      EXPECT_EQ(std::stoull(*s[0]), expect_first);
      expect_first = std::stoull(*s[1]) + 1;
    }
    const uint64_t watermark = expect_first - 1;
    EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE archived=1 AND event_id > " + std::to_string(watermark)),
              0);
    EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000"), static_cast<int64_t>(head));
  }
  EXPECT_GE(kills, 10) << "most runs should have been cut";
  // A run to the end; then no object is left that the manifest does not name.
  ASSERT_EQ(RunSluice({"archive", "run", "--config", path}, &out), 0) << out;
  auto objects = store->List("segments/");
  ASSERT_TRUE(objects.ok());
  EXPECT_EQ(static_cast<int64_t>(objects->size()), db.Scalar("SELECT COUNT(*) FROM sluice_archive_segments"));
  EXPECT_EQ(db.Scalar("SELECT MAX(last_event_id) FROM sluice_archive_segments"), static_cast<int64_t>(head));
  EXPECT_GT(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE archived=1"), static_cast<int64_t>(head / 2));

  // Every event once, in order, whole, as first read: through the archive.
  archive::ArchivedStorage reader(hot, std::make_shared<archive::SegmentSource>(store, 64 << 20), {"doc"});
  auto rlog = reader.OpenEventLog();
  std::vector<sql::EventRow> all;
  uint64_t after = 0;
  while (true) {
    auto got = rlog->ReadAfter("doc", {{0, after}}, 37, sql::EventLog::Columns::kFull);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if ((*got)[0].empty()) break;
    for (auto& r : (*got)[0]) all.push_back(std::move(r));
    after = all.back().event_id;
  }
  ASSERT_EQ(all.size(), truth.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].event_id, truth[i].event_id);
    EXPECT_EQ(all[i].entity_id, truth[i].entity_id);
    EXPECT_EQ(all[i].version, truth[i].version);
    EXPECT_EQ(all[i].state, truth[i].state) << all[i].event_id;
    EXPECT_EQ(all[i].request, truth[i].request);
  }
  // The latest state of each entity still reads from hot rows alone.
  auto latest = log->LatestAfter("doc", 0, "", 0);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  for (const auto& l : *latest) EXPECT_EQ(Json::parse(l.state), entities[l.entity_id].second) << l.entity_id;
  RemoveScratchDir(dir);
}


// The same through an S3-compatible store (SeaweedFS from `scripts/services
// up s3`), its keys given as secret references: archived, read back whole,
// an orphan removed, and a wrong secret refused without showing either key.
TEST(Archive, AnS3StoreThroughSluiceAndItsKeysNeverShow) {
  SLUICE_REQUIRE_MYSQL();
  const std::string prefix = UniquePrefix("archive");
  const objectstore::ObjectStoreOptions so = S3TestOptions(prefix);
  auto opened = objectstore::OpenObjectStore(so);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<objectstore::ObjectStore> store = std::move(*opened);
  if (Status st = objectstore::CheckObjectStore(*store); !st.ok()) {
    if (InCi()) FAIL() << "the S3 test server is not usable (CI=true): " << st.ToString();
    GTEST_SKIP() << "the S3 test server is not usable (" << st.ToString() << "); run scripts/services up s3";
  }
  ::setenv("SLUICE_TEST_ARCHIVE_KEY", so.access_key.c_str(), 1);
  ::setenv("SLUICE_TEST_ARCHIVE_SECRET", so.secret_key.c_str(), 1);
  TestDatabase db("archives3");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"doc", 1}};
  cfg.entity_yaml["doc"] = "archive: {keep_versions: 1}";
  cfg.port = FreePort();
  const auto yaml = [&](const std::string& secret) {
    return "archive:\n  store: \"" + so.url + "\"\n  s3: {endpoint: \"" + so.endpoint + "\", region: " + so.region +
           ", access_key: \"${env:SLUICE_TEST_ARCHIVE_KEY}\", secret_key: \"" + secret +
           "\"}\n  idempotency_window: 0s\n  interval: 0s\n  segment_events: 30\n";
  };
  cfg.extra_yaml = yaml("${env:SLUICE_TEST_ARCHIVE_SECRET}");
  const std::string path = cfg.Write();
  std::string out;
  ASSERT_EQ(RunSluice({"init", "--config", path}, &out), 0) << out;
  sql::ConnectParams params = MysqlParams();
  params.database = db.name();
  auto hot = std::make_shared<sql::MariaDbStorage>(params);
  auto log = hot->OpenEventLog();
  std::mt19937 rng(7);
  uint64_t head = 0;
  std::map<std::string, std::pair<uint64_t, Json>> entities;
  AppendEvents(*log, &head, &entities, 100, rng);
  auto truth = log->ReadAfter("doc", {{0, 0}}, 1000, sql::EventLog::Columns::kFull);
  ASSERT_TRUE(truth.ok());

  // An object a killed run left beyond the watermark goes at the next run.
  ASSERT_TRUE(store->Put(archive::SegmentKey("doc", 0, 1, 5), "left by a killed run").ok());
  ASSERT_EQ(RunSluice({"archive", "run", "--config", path}, &out), 0) << out;
  EXPECT_NE(out.find("leftover object(s) of an interrupted run removed"), std::string::npos) << out;
  EXPECT_NE(out.find("archive run: 4 segment(s), 100 event(s)"), std::string::npos) << out;
  std::string status;
  ASSERT_EQ(RunSluice({"archive", "status", "--config", path}, &status), 0) << status;
  for (const std::string& text : {out, status}) {
    EXPECT_EQ(text.find(so.secret_key), std::string::npos);
    EXPECT_EQ(text.find(so.access_key), std::string::npos);
  }
  auto objects = store->List("segments/");
  ASSERT_TRUE(objects.ok()) << objects.status().ToString();
  EXPECT_EQ(objects->size(), 4u);
  EXPECT_GT(db.Scalar("SELECT COUNT(*) FROM ev_doc_p000 WHERE archived=1"), 50);

  archive::ArchivedStorage reader(hot, std::make_shared<archive::SegmentSource>(store, 64 << 20), {"doc"});
  auto got = reader.OpenEventLog()->ReadAfter("doc", {{0, 0}}, 1000, sql::EventLog::Columns::kFull);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ((*got)[0].size(), (*truth)[0].size());
  for (size_t i = 0; i < (*got)[0].size(); ++i) {
    EXPECT_EQ((*got)[0][i].event_id, (*truth)[0][i].event_id);
    EXPECT_EQ((*got)[0][i].state, (*truth)[0][i].state);
    EXPECT_EQ((*got)[0][i].response, (*truth)[0][i].response);
  }

  // A wrong secret: refused, saying why, and neither key shows.
  AppendEvents(*log, &head, &entities, 40, rng);
  cfg.extra_yaml = yaml("not-the-secret-9f8e7d");
  const std::string wrong = cfg.Write();
  EXPECT_EQ(RunSluice({"archive", "run", "--config", wrong}, &out), 1) << out;
  EXPECT_NE(out.find("SignatureDoesNotMatch"), std::string::npos) << out;
  EXPECT_EQ(out.find("not-the-secret-9f8e7d"), std::string::npos) << out;
  EXPECT_EQ(out.find(so.access_key), std::string::npos) << out;
  EXPECT_EQ(db.Scalar("SELECT MAX(last_event_id) FROM sluice_archive_segments"), 100);
  auto mine = store->List("");
  ASSERT_TRUE(mine.ok());
  for (const auto& o : *mine) ASSERT_TRUE(store->Delete(o.key).ok());
}

}  // namespace
}  // namespace sluice::testing
