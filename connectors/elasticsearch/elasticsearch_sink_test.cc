// Integration tests of the elasticsearch sink against the real OpenSearch
// at SLUICE_TEST_OPENSEARCH_URL (scripts/services up opensearch). Skipped
// when it is unreachable, failed instead when CI=true. Each test uses its
// own index and deletes it.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "connectors/elasticsearch/elasticsearch_options.h"
#include "connectors/elasticsearch/elasticsearch_sink.h"
#include "connectors/elasticsearch/rest_client.h"
#include "core/json.h"

namespace sluice::connectors::elasticsearch {
namespace {

std::string TestUrl() {
  const char* url = std::getenv("SLUICE_TEST_OPENSEARCH_URL");
  return url != nullptr && *url != '\0' ? url : "http://127.0.0.1:19200";
}

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

ChangeEvent Event(const std::string& id, uint64_t version, const std::string& state, bool deleted = false) {
  ChangeEvent e;
  e.entity_type = "account";
  e.entity_id = id;
  e.version = version;
  e.deleted = deleted;
  e.state = deleted ? "" : state;
  return e;
}

std::vector<Outcome> Outcomes(const ApplyResult& r) {
  std::vector<Outcome> out;
  for (const EventResult& e : r.results) out.push_back(e.outcome);
  return out;
}

class ElasticsearchSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RestClientOptions options;
    options.base_url = TestUrl();
    options.request_timeout = std::chrono::seconds(30);
    auto client = RestClient::Make(options);
    ASSERT_TRUE(client.ok()) << client.status().message();
    admin_ = std::move(*client);
    auto r = admin_->Send("GET", "/");
    if (!r.ok() || r->status != 200) {
      const std::string why = r.ok() ? "HTTP " + std::to_string(r->status) : r.status().message();
      if (InCi()) FAIL() << "OpenSearch at " << TestUrl() << " is unreachable (" << why << ") and CI=true";
      GTEST_SKIP() << "OpenSearch at " << TestUrl() << " is unreachable (" << why
                   << "); run scripts/services up opensearch";
    }
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string test = info->name();
    for (char& c : test) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    index_ = "t" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" + test;
    sink_cfg_.name = "es_test";
    sink_cfg_.type = "elasticsearch";
    sink_cfg_.entity = "account";
    sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().url = TestUrl();
    sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().index = index_;
  }

  void TearDown() override {
    if (!admin_ || index_.empty()) return;
    // After a rebuild index_ is an alias, which DELETE refuses: its indices go by pattern.
    (void)admin_->Send("DELETE", "/" + index_);
    (void)admin_->Send("DELETE", "/" + index_ + "__rebuild_*");
  }

  std::unique_ptr<Sink> MakeOpenSink() {
    auto sink = MakeElasticsearchSink(sink_cfg_, global_);
    EXPECT_TRUE(sink.ok()) << sink.status().message();
    if (!sink.ok()) return nullptr;
    Status st = (*sink)->Open();
    EXPECT_TRUE(st.ok()) << st.message();
    return std::move(*sink);
  }

  // The document as GET returns it (realtime): {found, _version, _source}.
  Json Doc(const std::string& id) {
    auto r = admin_->Send("GET", PathTo("/" + index_ + "/_doc/", id));
    EXPECT_TRUE(r.ok());
    return r.ok() ? Json::parse(r->body, nullptr, false) : Json();
  }

  config::Config global_;
  config::SinkConfig sink_cfg_;
  std::unique_ptr<RestClient> admin_;
  std::string index_;
};

TEST_F(ElasticsearchSinkTest, AppliesNewerVersionsAndSkipsOlderOnes) {
  auto sink = MakeOpenSink();
  ASSERT_NE(sink, nullptr);
  const std::vector<ChangeEvent> batch = {Event("a", 1, R"({"owner":"ann","balance":1})"),
                                          Event("a", 2, R"({"owner":"ann","balance":2})"),
                                          Event("b/1 x", 1, R"({"owner":"bob"})")};
  ApplyResult r = sink->Apply(batch);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Outcomes(r), (std::vector{Outcome::kApplied, Outcome::kApplied, Outcome::kApplied}));

  // The whole batch again (a replay after a crash): nothing changes.
  r = sink->Apply(batch);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Outcomes(r), (std::vector{Outcome::kStale, Outcome::kStale, Outcome::kStale}));

  const Json a = Doc("a");
  EXPECT_EQ(a["_version"], 2);
  EXPECT_EQ(a["_source"], Json::parse(R"({"owner":"ann","balance":2})"));
  const Json b = Doc("b/1 x");
  EXPECT_EQ(b["_version"], 1);
  EXPECT_EQ(b["_source"]["owner"], "bob");
}

// connections: 4. Apply() splits a batch by entity id over four _bulk
// requests sent at once; every event's outcome comes back to its own place,
// and each entity's events keep their order (its newest version wins, an
// older one after it is stale). Send() keeps up to four chunks in flight
// (one _bulk per connection, each on its own thread), received in the order
// sent, every outcome in its place; chunks in flight together may be indexed
// in any order: the newest version of each entity wins.
TEST_F(ElasticsearchSinkTest, ConnectionsPipelineChunksEachOutcomeInItsPlaceAndTheNewestVersionWins) {
  sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().connections = 4;
  auto sink = MakeOpenSink();
  ASSERT_NE(sink, nullptr);
  std::vector<ChangeEvent> batch;
  std::vector<Outcome> expected;
  for (uint64_t v = 1; v <= 5; ++v) {
    for (int e = 0; e < 40; ++e) {
      batch.push_back(Event("e" + std::to_string(e), v, R"({"v":)" + std::to_string(v) + "}"));
      expected.push_back(Outcome::kApplied);
    }
  }
  batch.push_back(Event("e3", 2, R"({"v":2})"));  // older than e3's 5, after it
  expected.push_back(Outcome::kStale);
  batch.push_back(Event("e7", 6, "[1]"));  // not an object: refused before sending
  expected.push_back(Outcome::kRejected);
  batch.push_back(Event("e7", 7, R"({"v":7})"));
  expected.push_back(Outcome::kApplied);
  ApplyResult r = sink->Apply(batch);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Outcomes(r), expected);
  for (int e = 0; e < 40; ++e) {
    const Json doc = Doc("e" + std::to_string(e));
    EXPECT_EQ(doc["_version"], e == 7 ? 7 : 5) << e;
  }
  r = sink->Apply(batch);  // a replay: all stale but the refused one
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(r.results[i].outcome, expected[i] == Outcome::kRejected ? Outcome::kRejected : Outcome::kStale) << i;
  }

  // Pipelined: versions 6..13 of the 40 entities, one version per chunk, at
  // most four chunks in flight.
  ASSERT_EQ(sink->capabilities().pipeline, 4u);
  std::vector<std::vector<ChangeEvent>> chunks;
  for (uint64_t v = 6; v <= 13; ++v) {
    auto& chunk = chunks.emplace_back();
    for (int e = 0; e < 40; ++e) {
      chunk.push_back(Event("e" + std::to_string(e), v + 2, R"({"v":)" + std::to_string(v + 2) + "}"));
    }
    if (v == 9) chunk.push_back(Event("e1", 99, "[1]"));  // refused before sending, in its own place
  }
  size_t received = 0;
  uint64_t applied = 0;
  const auto receive = [&] {
    const std::vector<ChangeEvent>& chunk = chunks[received++];
    ApplyResult got = sink->Receive();
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    ASSERT_EQ(got.results.size(), chunk.size());
    for (size_t i = 0; i < chunk.size(); ++i) {
      if (chunk[i].state == "[1]") {
        EXPECT_EQ(got.results[i].outcome, Outcome::kRejected) << i;
        continue;
      }
      EXPECT_NE(got.results[i].outcome, Outcome::kRejected) << got.results[i].reason;
      if (got.results[i].outcome == Outcome::kApplied) ++applied;
    }
  };
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (k >= 4) receive();
    sink->Send(chunks[k]);
  }
  while (received < chunks.size()) receive();
  EXPECT_GE(applied, 40u) << "each entity's newest version was applied";
  for (int e = 0; e < 40; ++e) EXPECT_EQ(Doc("e" + std::to_string(e))["_version"], 15) << e;
}

TEST_F(ElasticsearchSinkTest, DeleteLeavesATombstoneThatNoOlderWriteResurrects) {
  auto sink = MakeOpenSink();
  ASSERT_NE(sink, nullptr);
  ApplyResult r = sink->Apply(std::vector{Event("a", 1, R"({"n":1})"), Event("a", 2, "", /*deleted=*/true)});
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Outcomes(r), (std::vector{Outcome::kApplied, Outcome::kApplied}));
  // A replay of the creation, and a delete seen twice, change nothing.
  r = sink->Apply(std::vector{Event("a", 1, R"({"n":1})"), Event("a", 2, "", true)});
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Outcomes(r), (std::vector{Outcome::kStale, Outcome::kStale}));
  Json a = Doc("a");
  EXPECT_EQ(a["_version"], 2);
  EXPECT_EQ(a["_source"], Json::parse(R"({"_sluice_deleted":true})"));

  // Verify: a deleted entity with a tombstone is in step.
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->Verify({{"a", 2, true, ""}}, diffs).ok());
  EXPECT_TRUE(diffs.empty());

  // Re-created at version 3: live again.
  r = sink->Apply(std::vector{Event("a", 3, R"({"n":3})")});
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Outcomes(r), std::vector{Outcome::kApplied});
  a = Doc("a");
  EXPECT_EQ(a["_version"], 3);
  EXPECT_EQ(a["_source"], Json::parse(R"({"n":3})"));
}

TEST_F(ElasticsearchSinkTest, MappingConflictRejectsThatDocumentOnly) {
  auto sink = MakeOpenSink();
  ASSERT_NE(sink, nullptr);
  ApplyResult r = sink->Apply(std::vector{Event("a", 1, R"({"amount":5})"), Event("b", 1, R"({"amount":"lots"})"),
                                          Event("c", 1, R"({"amount":7})"), Event("d", 1, "[1]")});
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(Outcomes(r), (std::vector{Outcome::kApplied, Outcome::kRejected, Outcome::kApplied, Outcome::kRejected}));
  EXPECT_NE(r.results[1].reason.find("mapper_parsing_exception"), std::string::npos) << r.results[1].reason;
  EXPECT_NE(r.results[3].reason.find("not a JSON object"), std::string::npos) << r.results[3].reason;
  EXPECT_FALSE(Doc("b").value("found", true));
  EXPECT_EQ(Doc("c")["_version"], 1);
}

TEST_F(ElasticsearchSinkTest, CreatesTheIndexFromTheMappingFile) {
  sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().mapping_path = "mapping.json";
  sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().mapping_json =
      R"({"settings":{"number_of_shards":2,"number_of_replicas":0},"mappings":{"dynamic":"strict","properties":{"owner":{"type":"keyword"}}}})";
  auto sink = MakeOpenSink();
  ASSERT_NE(sink, nullptr);
  auto r = admin_->Send("GET", "/" + index_);
  ASSERT_TRUE(r.ok());
  const Json info = Json::parse(r->body)[index_];
  EXPECT_EQ(info["settings"]["index"]["number_of_shards"], "2");
  EXPECT_EQ(info["mappings"]["properties"]["owner"]["type"], "keyword");
  EXPECT_EQ(info["mappings"]["properties"]["_sluice_deleted"]["type"], "boolean");

  // A strict mapping still takes tombstones, and refuses unknown fields.
  ApplyResult a = sink->Apply(std::vector{Event("a", 1, R"({"owner":"ann"})"), Event("a", 2, "", true),
                                          Event("b", 1, R"({"other":1})")});
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  EXPECT_EQ(Outcomes(a), (std::vector{Outcome::kApplied, Outcome::kApplied, Outcome::kRejected}));
  EXPECT_NE(a.results[2].reason.find("strict_dynamic_mapping_exception"), std::string::npos) << a.results[2].reason;

  // Opening again finds the index and leaves it alone.
  auto again = MakeOpenSink();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Doc("a")["_version"], 2);
}

TEST_F(ElasticsearchSinkTest, MissingIndexWithoutAutoCreateIsMisconfiguration) {
  sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().auto_create = false;
  auto sink = MakeElasticsearchSink(sink_cfg_, global_);
  ASSERT_TRUE(sink.ok());
  const Status st = (*sink)->Open();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.message();
  EXPECT_NE(st.message().find("auto_create"), std::string::npos) << st.message();
  auto r = admin_->Send("HEAD", "/" + index_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 404) << "the sink created the index although auto_create is false";
}

TEST_F(ElasticsearchSinkTest, BadMappingFileIsMisconfiguration) {
  sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().mapping_json =
      R"({"mappings":{"properties":{"x":{"type":"no_such_type"}}}})";
  auto sink = MakeElasticsearchSink(sink_cfg_, global_);
  ASSERT_TRUE(sink.ok());
  const Status st = (*sink)->Open();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.message();
  EXPECT_NE(st.message().find("no_such_type"), std::string::npos) << st.message();
}

TEST_F(ElasticsearchSinkTest, UnreachableServerIsUnavailable) {
  sink_cfg_.MutableOptions<ElasticsearchSinkOptions>().url = "http://127.0.0.1:1";  // nothing listens on port 1
  auto sink = MakeElasticsearchSink(sink_cfg_, global_);
  ASSERT_TRUE(sink.ok());
  EXPECT_EQ((*sink)->Open().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*sink)->Health().code(), StatusCode::kUnavailable);
  const ApplyResult r = (*sink)->Apply(std::vector{Event("a", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.message();
}

TEST_F(ElasticsearchSinkTest, VerifyReportsEachKindOfDifference) {
  auto sink = MakeOpenSink();
  ASSERT_NE(sink, nullptr);
  ApplyResult r = sink->Apply(std::vector{Event("same", 1, R"({"n":1})"), Event("old", 1, R"({"n":1})"),
                                          Event("edited", 1, R"({"n":1})"), Event("gone", 1, R"({"n":1})")});
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  // Someone writes to the view behind the sink's back.
  auto put = admin_->Send("PUT", "/" + index_ + "/_doc/edited?version=1&version_type=external_gte", R"({"n":99})");
  ASSERT_TRUE(put.ok());
  ASSERT_EQ(put->status, 200) << put->body;
  put = admin_->Send("PUT", "/" + index_ + "/_doc/stray", R"({"n":5})");
  ASSERT_TRUE(put.ok());
  ASSERT_EQ(put->status, 201) << put->body;

  const std::vector<EntitySnapshot> truth = {{"same", 1, false, R"({"n":1})"},
                                             {"old", 2, false, R"({"n":2})"},
                                             {"edited", 1, false, R"({"n":1})"},
                                             {"gone", 2, true, ""},
                                             {"absent", 1, false, R"({"n":1})"}};
  std::vector<Difference> diffs;
  const Status st = sink->Verify(truth, diffs);
  ASSERT_TRUE(st.ok()) << st.message();
  std::map<std::string, Difference::Kind> kinds;
  for (const Difference& d : diffs) kinds[d.entity_id] = d.kind;
  EXPECT_EQ(kinds, (std::map<std::string, Difference::Kind>{{"old", Difference::Kind::kVersionMismatch},
                                                            {"edited", Difference::Kind::kContentMismatch},
                                                            {"gone", Difference::Kind::kExtra},
                                                            {"absent", Difference::Kind::kMissing},
                                                            {"stray", Difference::Kind::kExtra}}));
}

// verify's second pass lists the live documents a scroll page at a time,
// tombstones left out.
TEST_F(ElasticsearchSinkTest, ScanViewIdsGivesEveryLiveDocumentInBoundedPages) {
  auto sink = MakeOpenSink();
  ASSERT_NE(sink, nullptr);
  std::vector<ChangeEvent> events;
  for (int i = 0; i < 12; ++i) events.push_back(Event("d" + std::to_string(i), 1, R"({"n":1})"));
  events.push_back(Event("d5", 2, "", true));
  ApplyResult r = sink->Apply(events);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  std::multiset<std::string> seen;
  size_t largest = 0;
  const Status st = sink->ScanViewIds(5, [&](std::span<const std::string> ids) {
    largest = std::max(largest, ids.size());
    seen.insert(ids.begin(), ids.end());
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(largest, 5u);
  EXPECT_EQ(seen.size(), 11u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 11u);
  EXPECT_EQ(seen.count("d5"), 0u);
}

// The concrete indices the name resolves to (itself, or an alias's indices).
std::vector<std::string> IndicesOf(RestClient& admin, const std::string& name) {
  auto r = admin.Send("GET", "/" + name + "/_alias");
  EXPECT_TRUE(r.ok());
  std::vector<std::string> out;
  if (!r.ok() || r->status != 200) return out;
  const Json doc = Json::parse(r->body);
  for (const auto& [index, aliases] : doc.items()) out.push_back(index);
  return out;
}

TEST_F(ElasticsearchSinkTest, RebuildShadowBecomesTheIndexBehindTheAliasAndLeftoversAreReplaced) {
  auto live = MakeOpenSink();
  ASSERT_NE(live, nullptr);
  const std::vector<ChangeEvent> history = {Event("a", 1, R"({"n":1})"), Event("b", 1, R"({"n":1})"),
                                            Event("b", 2, "", true), Event("c", 1, R"({"n":3})")};
  ASSERT_TRUE(live->Apply(history).status.ok());
  // Damage a replay cannot repair, and a filtered alias the operator made.
  auto put = admin_->Send("PUT", "/" + index_ + "/_doc/ghost", R"({"n":0})");
  ASSERT_TRUE(put.ok() && put->status == 201);
  auto aliased = admin_->Send("POST", "/_aliases",
                              R"({"actions":[{"add":{"index":")" + index_ + R"(","alias":")" + index_ +
                                  R"(_live","filter":{"bool":{"must_not":{"exists":{"field":"_sluice_deleted"}}}}}}]})");
  ASSERT_TRUE(aliased.ok() && aliased->status == 200);
  const std::vector<EntitySnapshot> truth = {{"a", 1, false, R"({"n":1})"}, {"b", 2, true, ""},
                                             {"c", 1, false, R"({"n":3})"}};
  std::vector<Difference> diffs;
  ASSERT_TRUE(live->Verify(truth, diffs).ok());
  ASSERT_EQ(diffs.size(), 1u);

  // Rebuild 1: the shadow is a fresh index beside the live one.
  auto made = live->MakeRebuildShadow();
  ASSERT_TRUE(made.ok()) << made.status().message();
  std::unique_ptr<Sink> shadow = std::move(*made);
  ASSERT_TRUE(shadow->Open().ok());
  ASSERT_TRUE(shadow->Apply(history).status.ok());
  ASSERT_TRUE(shadow->PromoteRebuildShadow().ok());
  EXPECT_EQ(IndicesOf(*admin_, index_), std::vector<std::string>{index_ + "__rebuild_1"});
  EXPECT_EQ(IndicesOf(*admin_, index_ + "_live"), std::vector<std::string>{index_ + "__rebuild_1"});
  // The live sink writes and verifies through the alias; the ghost is gone.
  ASSERT_TRUE(live->Apply(std::vector{Event("c", 2, R"({"n":4})")}).status.ok());
  const std::vector<EntitySnapshot> truth2 = {{"a", 1, false, R"({"n":1})"}, {"b", 2, true, ""},
                                              {"c", 2, false, R"({"n":4})"}};
  diffs.clear();
  ASSERT_TRUE(live->Verify(truth2, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs.front().entity_id << ": " << diffs.front().detail;
  // The tombstone of b came with the replay: an older write stays out.
  ApplyResult late = live->Apply(std::vector{Event("b", 1, R"({"n":1})")});
  ASSERT_TRUE(late.status.ok());
  EXPECT_EQ(Outcomes(late), std::vector{Outcome::kStale});

  // Rebuild 2 is abandoned half way; rebuild 3 replaces what it left.
  made = live->MakeRebuildShadow();
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->Open().ok());
  ASSERT_TRUE((*made)->Apply(std::vector{Event("a", 1, R"({"n":1})"), Event("x", 9, R"({"n":9})")}).status.ok());
  made->reset();
  made = live->MakeRebuildShadow();
  ASSERT_TRUE(made.ok());
  shadow = std::move(*made);
  ASSERT_TRUE(shadow->Open().ok());
  ASSERT_TRUE(shadow->Apply(std::vector{Event("a", 1, R"({"n":1})"), Event("b", 2, "", true),
                                        Event("c", 2, R"({"n":4})")})
                  .status.ok());
  ASSERT_TRUE(shadow->PromoteRebuildShadow().ok());
  EXPECT_EQ(IndicesOf(*admin_, index_), std::vector<std::string>{index_ + "__rebuild_2"});
  EXPECT_EQ(IndicesOf(*admin_, index_ + "__rebuild_*"), std::vector<std::string>{index_ + "__rebuild_2"});
  diffs.clear();
  ASSERT_TRUE(live->Verify(truth2, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs.front().entity_id << ": " << diffs.front().detail;
}

TEST_F(ElasticsearchSinkTest, OnlyAShadowCanBePromoted) {
  auto live = MakeOpenSink();
  ASSERT_NE(live, nullptr);
  EXPECT_EQ(live->PromoteRebuildShadow().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sluice::connectors::elasticsearch
