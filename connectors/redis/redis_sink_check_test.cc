// Integration tests of the redis sink's checks (Verify, entity checks, the
// scan of view ids) and rebuild against the real Redis; the fixture is in
// redis_sink_test_fixture.h.
#include "connectors/redis/redis_sink_test_fixture.h"

namespace sluice::connectors::redis::test {
namespace {

std::map<std::string, Difference::Kind> ByEntity(const std::vector<Difference>& diffs) {
  std::map<std::string, Difference::Kind> out;
  for (const auto& d : diffs) {
    EXPECT_FALSE(out.contains(d.entity_id)) << "reported twice: " << d.entity_id;
    EXPECT_FALSE(d.detail.empty());
    out[d.entity_id] = d.kind;
  }
  return out;
}

TEST_F(RedisSinkTest, VerifyJsonView) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  const std::string s1 = R"({"a":1,"o":{"x":[1,2]}})";
  Apply(*sink, {Put("e1", 1, s1), Put("e2", 1, s1), Put("e3", 1, s1), Put("e4", 2, "{}"), Put("e5", 1, s1),
                Del("e5", 2), Put("e6", 1, s1)});
  // The view holds e6, but storage has version 2 (the engine has not caught up): a version mismatch.
  std::vector<EntitySnapshot> truth = {Live("e1", 1, s1), Live("e2", 1, s1), Live("e3", 1, s1),
                                       Live("e4", 2, "{}"), Gone("e5", 2), Live("e6", 1, s1)};
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs.size() << " differences, first: " << diffs[0].detail;

  // Same content in another member order and spacing is still equal.
  truth[0].state = R"({ "o":{"x":[1,2]}, "a":1 })";
  raw_.Cmd({"DEL", Key("e2")});                                                  // missing
  raw_.Cmd({"SET", Key("e3"), R"({"_version":1,"a":2,"o":{"x":[1,2]}})"});      // content
  raw_.Cmd({"SET", Key("e4"), R"({"_version":7})"});                             // version
  raw_.Cmd({"SET", Key("e5"), R"({"_version":3})"});                             // deleted but present
  raw_.Cmd({"SET", Key("ghost"), R"({"_version":1})"});                          // unknown to storage
  raw_.Cmd({"SET", Key("ghost") + ":_tomb", "5"});                               // tombstones are ignored
  truth[5].version = 2;
  diffs.clear();
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  EXPECT_EQ(ByEntity(diffs), (std::map<std::string, Difference::Kind>{
                                 {"e2", Difference::Kind::kMissing},
                                 {"e3", Difference::Kind::kContentMismatch},
                                 {"e4", Difference::Kind::kVersionMismatch},
                                 {"e5", Difference::Kind::kExtra},
                                 {"e6", Difference::Kind::kVersionMismatch},
                                 {"ghost", Difference::Kind::kExtra},
                             }));
  for (const auto& d : diffs) {
    if (d.entity_id == "e3") {
      EXPECT_NE(d.detail.find("/a"), std::string::npos) << d.detail;
    }
    if (d.entity_id == "e4") {
      EXPECT_NE(d.detail.find("version 7"), std::string::npos) << d.detail;
    }
  }
}

TEST_F(RedisSinkTest, VerifyHashView) {
  auto cfg = Cfg(Format::kHash);
  cfg.MutableOptions<RedisSinkOptions>().fields = {{"owner", "/owner/name", ""}, {"balance", "/balance", ""}};
  auto sink = Open(cfg);
  ASSERT_TRUE(sink);
  const std::string s = R"({"owner":{"name":"ann"},"balance":5,"ignored":true})";
  std::vector<ChangeEvent> events;
  std::vector<EntitySnapshot> truth;
  for (const char* id : {"h1", "h2", "h3", "h4", "h5"}) {
    events.push_back(Put(id, 3, s));
    truth.push_back(Live(id, 3, s));
  }
  Apply(*sink, events);
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs[0].detail;

  raw_.Cmd({"HSET", Key("h1"), "balance", "6"});
  raw_.Cmd({"HDEL", Key("h2"), "owner"});
  raw_.Cmd({"HSET", Key("h3"), "extra", "1"});
  raw_.Cmd({"HSET", Key("h4"), "_version", "2"});
  raw_.Cmd({"SET", Key("h5"), "not a hash"});
  raw_.Cmd({"HSET", Key("h6"), "_version", "1"});
  diffs.clear();
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  EXPECT_EQ(ByEntity(diffs), (std::map<std::string, Difference::Kind>{
                                 {"h1", Difference::Kind::kContentMismatch},
                                 {"h2", Difference::Kind::kContentMismatch},
                                 {"h3", Difference::Kind::kContentMismatch},
                                 {"h4", Difference::Kind::kVersionMismatch},
                                 {"h5", Difference::Kind::kContentMismatch},
                                 {"h6", Difference::Kind::kExtra},
                             }));
}

// The hash format's entity checks and repairs (the conformance kit covers
// the json format): VerifyEntities says which version the view holds, kNotOlder
// rewrites the same version but never an older one, kAny goes back to an
// older version and removes keys and tombstones.
TEST_F(RedisSinkTest, HashViewEntityChecksAndRepairs) {
  auto cfg = Cfg(Format::kHash);
  cfg.MutableOptions<RedisSinkOptions>().fields = {{"owner", "/owner", ""}, {"balance", "/balance", ""}};
  auto sink = Open(cfg);
  ASSERT_TRUE(sink);
  const std::string s = R"({"owner":"ann","balance":5})";
  Apply(*sink, {Put("h1", 3, s), Put("h2", 3, s), Put("h3", 2, s), Del("h4", 2), Put("h5", 1, s)});
  raw_.Cmd({"HSET", Key("h1"), "balance", "6"});  // other content at its version
  raw_.Cmd({"HSET", Key("h2"), "_version", "2"});  // an older version
  raw_.Cmd({"HSET", Key("h3"), "_version", "9"});  // ahead of storage
  raw_.Cmd({"DEL", Key("h5")});                    // gone
  raw_.Cmd({"HSET", Key("h6"), "_version", "4", "owner", "nobody"});  // of no entity
  const std::vector<EntitySnapshot> truth = {Live("h1", 3, s), Live("h2", 3, s), Live("h3", 2, s), Gone("h4", 2),
                                             Live("h5", 1, s), EntitySnapshot{"h6", 0, true, ""}};
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->VerifyEntities(truth, diffs).ok());
  std::map<std::string, std::pair<Difference::Kind, std::optional<uint64_t>>> got;
  for (const auto& d : diffs) got[d.entity_id] = {d.kind, d.view_version};
  EXPECT_EQ(got, (std::map<std::string, std::pair<Difference::Kind, std::optional<uint64_t>>>{
                     {"h1", {Difference::Kind::kContentMismatch, 3}},
                     {"h2", {Difference::Kind::kVersionMismatch, 2}},
                     {"h3", {Difference::Kind::kVersionMismatch, 9}},
                     {"h5", {Difference::Kind::kMissing, std::nullopt}},
                     {"h6", {Difference::Kind::kExtra, 4}},
                 }));

  ApplyResult r = sink->Repair(std::vector<ChangeEvent>{Put("h1", 3, s), Put("h2", 3, s), Put("h3", 2, s),
                                                        Put("h5", 1, s)},
                               connectors::RepairGuard::kNotOlder);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(Outcomes(r), (std::vector<Outcome>{kApplied, kApplied, kStale, kApplied}));
  EXPECT_EQ(raw_.HGetAll(Key("h3")).at("_version"), "9");
  ChangeEvent forget_h4 = Del("h4", 0), forget_h6 = Del("h6", 0);
  r = sink->Repair(std::vector<ChangeEvent>{Put("h3", 2, s), forget_h4, forget_h6}, connectors::RepairGuard::kAny);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(Outcomes(r), (std::vector<Outcome>{kApplied, kApplied, kApplied}));
  EXPECT_EQ(raw_.HGetAll(Key("h3")),
            (std::map<std::string, std::string>{{"_version", "2"}, {"owner", "ann"}, {"balance", "5"}}));
  EXPECT_FALSE(raw_.Get(Tomb("h4")).has_value());
  EXPECT_TRUE(raw_.HGetAll(Key("h6")).empty());
  diffs.clear();
  ASSERT_TRUE(sink->VerifyEntities(truth, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs[0].entity_id << ": " << diffs[0].detail;
  // Apply's own rule is unchanged by a repair before it.
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("h3", 2, s), Put("h3", 3, s)})), (std::vector<Outcome>{kStale, kApplied}));
}

TEST_F(RedisSinkTest, EntityChecksDoNotCallExpiredKeysMissing) {
  auto cfg = Cfg();
  cfg.MutableOptions<RedisSinkOptions>().ttl = std::chrono::minutes(1);
  auto sink = Open(cfg);
  ASSERT_TRUE(sink);
  Apply(*sink, {Put("t1", 1, "{}"), Put("t2", 1, "{}")});
  raw_.Cmd({"DEL", Key("t1")});  // as if it had expired
  raw_.Cmd({"SET", Key("t2"), R"({"_version":1,"x":1})"});
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->VerifyEntities(std::vector<EntitySnapshot>{Live("t1", 1, "{}"), Live("t2", 1, "{}")}, diffs).ok());
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].entity_id, "t2");
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kContentMismatch);
}

TEST_F(RedisSinkTest, VerifyManyEntitiesAcrossChunks) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  std::vector<ChangeEvent> events;
  std::vector<EntitySnapshot> truth;
  for (int i = 0; i < 2500; ++i) {
    std::string id = "m" + std::to_string(i);
    std::string state = R"({"i":)" + std::to_string(i) + "}";
    events.push_back(Put(id, 1, state));
    truth.push_back(Live(id, 1, state));
  }
  Apply(*sink, events);
  raw_.Cmd({"DEL", Key("m2222")});
  raw_.Cmd({"SET", Key("zz"), "{}"});
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  EXPECT_EQ(ByEntity(diffs), (std::map<std::string, Difference::Kind>{{"m2222", Difference::Kind::kMissing},
                                                                      {"zz", Difference::Kind::kExtra}}));
}

// verify's second pass lists the view's live keys a page at a time: every
// value key's id once at least, no tombstone, no page over the limit.
TEST_F(RedisSinkTest, ScanViewIdsGivesTheIdOfEveryValueKeyInBoundedPages) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  std::vector<ChangeEvent> events;
  for (int i = 0; i < 2500; ++i) events.push_back(Put("m" + std::to_string(i), 1, "{}"));
  events.push_back(Del("m7", 2));
  Apply(*sink, events);
  raw_.Cmd({"SET", Key("stray"), "{}"});
  std::set<std::string> seen;
  size_t largest = 0;
  const Status st = sink->ScanViewIds(300, [&](std::span<const std::string> ids) {
    largest = std::max(largest, ids.size());
    seen.insert(ids.begin(), ids.end());
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(largest, 300u);
  EXPECT_EQ(seen.size(), 2500u);  // 2,499 live entities and the stray key
  EXPECT_TRUE(seen.contains("stray"));
  EXPECT_FALSE(seen.contains("m7"));  // deleted: only its tombstone is left
  // A failing page stops the scan with its error.
  const Status stopped = sink->ScanViewIds(100, [](std::span<const std::string>) { return Internal("stop"); });
  EXPECT_EQ(stopped.message(), "stop");
  // A key of another Redis type under the template, of an entity storage
  // has no events for, is extra (not a content mismatch).
  raw_.Cmd({"HSET", Key("hashed"), "f", "1"});
  std::vector<Difference> diffs;
  ASSERT_TRUE(sink->VerifyEntities(std::vector<EntitySnapshot>{Gone("hashed", 0)}, diffs).ok());
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kExtra) << diffs[0].detail;
}

// Prints the drain rate; no threshold (DESIGN 9: benchmarks, not timed tests).
TEST_F(RedisSinkTest, RebuildShadowIsRenamedOntoTheLiveKeysWithTheirTtls) {
  auto cfg = Cfg();
  cfg.MutableOptions<RedisSinkOptions>().ttl = std::chrono::milliseconds(600000);
  cfg.MutableOptions<RedisSinkOptions>().tombstone_ttl = std::chrono::milliseconds(600000);
  auto live = Open(cfg);
  ASSERT_TRUE(live);
  Apply(*live, {Put("a", 1, R"({"n":1})"), Put("b", 1, R"({"n":1})"), Put("c", 1, R"({"n":1})"), Del("c", 2)});
  // Damage, a key outside the view, and what an abandoned rebuild left.
  raw_.Cmd({"SET", Key("ghost"), R"({"_version":1})"});
  raw_.Cmd({"SET", prefix_ + ":other:1", "not the view's"});
  raw_.Cmd({"SET", "__rebuild:" + Key("x"), R"({"_version":9})"});

  auto made = live->MakeRebuildShadow();
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::unique_ptr<Sink> shadow = std::move(*made);
  ASSERT_TRUE(shadow->Open().ok());
  EXPECT_EQ(raw_.Integer({"EXISTS", "__rebuild:" + Key("x")}), 0);
  Apply(*shadow, {Put("a", 1, R"({"n":1})"), Put("a", 2, R"({"n":2})"), Put("b", 1, R"({"n":1})"),
                  Put("c", 1, R"({"n":1})"), Del("c", 2)});
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":1,"n":1})");  // the live view is untouched so far

  EXPECT_EQ(live->PromoteRebuildShadow().code(), StatusCode::kFailedPrecondition);  // not a shadow
  ASSERT_TRUE(shadow->PromoteRebuildShadow().ok());
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":2,"n":2})");
  EXPECT_EQ(raw_.Integer({"EXISTS", Key("ghost")}), 0);
  EXPECT_EQ(raw_.Get(Tomb("c")), "2");
  for (const std::string& key : {Key("a"), Key("b"), Tomb("c")}) {
    const long long pttl = raw_.Integer({"PTTL", key});
    EXPECT_GT(pttl, 0) << key;
    EXPECT_LE(pttl, 600000) << key;
  }
  EXPECT_EQ(raw_.Get(prefix_ + ":other:1"), "not the view's");
  Reply left = raw_.Cmd({"KEYS", "__rebuild:" + prefix_ + "*"});
  ASSERT_TRUE(left);
  EXPECT_EQ(left->elements, 0u);

  // The live sink carries on with the rebuilt keys; the tombstone keeps older writes out.
  EXPECT_EQ(Outcomes(Apply(*live, {Put("c", 1, R"({"n":1})"), Put("a", 3, R"({"n":3})")})),
            (std::vector{kStale, kApplied}));
  std::vector<Difference> diffs;
  ASSERT_TRUE(live->Verify({Live("a", 3, R"({"n":3})"), Live("b", 1, R"({"n":1})"), Gone("c", 2)}, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs.front().entity_id << ": " << diffs.front().detail;
}

TEST_F(RedisSinkTest, TemplateStartingWithTheIdCannotBeRebuilt) {
  auto cfg = Cfg();
  cfg.MutableOptions<RedisSinkOptions>().key = "{id}:" + prefix_;
  auto sink = MakeRedisSink(cfg, global_);
  ASSERT_TRUE(sink.ok());
  auto shadow = (*sink)->MakeRebuildShadow();
  EXPECT_EQ(shadow.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(shadow.status().message().find("starts with {id}"), std::string::npos) << shadow.status().message();
}


}  // namespace
}  // namespace sluice::connectors::redis::test
