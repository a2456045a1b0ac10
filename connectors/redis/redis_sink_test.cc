// Integration tests of the redis sink's writes (Apply, Repair) against the
// real Redis; the fixture is in redis_sink_test_fixture.h.
#include "connectors/redis/redis_sink_test_fixture.h"

namespace sluice::connectors::redis::test {
namespace {

TEST_F(RedisSinkTest, ReapplyIsStaleAndLeavesTheValue) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 1, R"({"n":1})")})), (std::vector{kApplied}));
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":1,"n":1})");
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 1, R"({"n":1})")})), (std::vector{kStale}));
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 1, R"({"n":"other"})")})), (std::vector{kStale}));
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":1,"n":1})");
}

TEST_F(RedisSinkTest, OlderVersionAfterNewerIsStale) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 5, R"({"n":5})")})), (std::vector{kApplied}));
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 4, R"({"n":4})"), Put("a", 1, R"({"n":1})")})),
            (std::vector{kStale, kStale}));
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":5,"n":5})");
}

TEST_F(RedisSinkTest, DeleteLeavesATombstoneThatBlocksOlderWrites) {
  auto cfg = Cfg();
  cfg.MutableOptions<RedisSinkOptions>().tombstone_ttl = std::chrono::milliseconds(30000);
  auto sink = Open(cfg);
  ASSERT_TRUE(sink);
  Apply(*sink, {Put("a", 1, R"({"n":1})")});
  EXPECT_EQ(Outcomes(Apply(*sink, {Del("a", 3)})), (std::vector{kApplied}));
  EXPECT_EQ(raw_.Get(Key("a")), std::nullopt);
  EXPECT_EQ(raw_.Get(Tomb("a")), "3");
  long long pttl = raw_.Integer({"PTTL", Tomb("a")});
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 30000);

  // A late write of an older version, the same delete again, an older delete: nothing changes.
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 2, R"({"n":2})"), Del("a", 3), Del("a", 2), Put("a", 3, "{}")})),
            (std::vector{kStale, kStale, kStale, kStale}));
  EXPECT_EQ(raw_.Get(Key("a")), std::nullopt);
  EXPECT_EQ(raw_.Get(Tomb("a")), "3");

  // Re-creation with a newer version applies and drops the tombstone.
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 4, R"({"n":4})")})), (std::vector{kApplied}));
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":4,"n":4})");
  EXPECT_EQ(raw_.Get(Tomb("a")), std::nullopt);
}

TEST_F(RedisSinkTest, DeleteOfAnUnknownEntityStillLeavesATombstone) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  EXPECT_EQ(Outcomes(Apply(*sink, {Del("x", 2), Put("x", 1, R"({"n":1})")})), (std::vector{kApplied, kStale}));
  EXPECT_EQ(raw_.Get(Key("x")), std::nullopt);
  EXPECT_EQ(raw_.Get(Tomb("x")), "2");
}

TEST_F(RedisSinkTest, HashWithMappedFieldsReplacesTheHash) {
  auto cfg = Cfg(Format::kHash);
  cfg.MutableOptions<RedisSinkOptions>().fields = {{"owner", "/owner/name", ""}, {"balance", "/balance", ""}};
  auto sink = Open(cfg);
  ASSERT_TRUE(sink);
  Apply(*sink, {Put("a", 1, R"({"owner":{"name":"ann"},"balance":5,"other":1})")});
  EXPECT_EQ(raw_.HGetAll(Key("a")),
            (std::map<std::string, std::string>{{"_version", "1"}, {"owner", "ann"}, {"balance", "5"}}));
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 2, R"({"owner":null,"balance":6.5})")})), (std::vector{kApplied}));
  EXPECT_EQ(raw_.HGetAll(Key("a")), (std::map<std::string, std::string>{{"_version", "2"}, {"balance", "6.5"}}));
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 2, R"({"balance":7})"), Put("a", 1, "{}")})),
            (std::vector{kStale, kStale}));
  EXPECT_EQ(raw_.HGetAll(Key("a")), (std::map<std::string, std::string>{{"_version", "2"}, {"balance", "6.5"}}));
  EXPECT_EQ(Outcomes(Apply(*sink, {Del("a", 3), Put("a", 2, R"({"balance":1})")})), (std::vector{kApplied, kStale}));
  EXPECT_TRUE(raw_.HGetAll(Key("a")).empty());
  EXPECT_EQ(raw_.Get(Tomb("a")), "3");
}

TEST_F(RedisSinkTest, HashWithEveryMember) {
  auto sink = Open(Cfg(Format::kHash));
  ASSERT_TRUE(sink);
  Apply(*sink, {Put("a", 1, R"({"s":"x","o":{"c":[1,2]},"b":true,"z":null})")});
  EXPECT_EQ(raw_.HGetAll(Key("a")), (std::map<std::string, std::string>{
                                        {"_version", "1"}, {"s", "x"}, {"o", R"({"c":[1,2]})"}, {"b", "true"}}));
  Apply(*sink, {Put("a", 2, R"({"s":"y"})")});
  EXPECT_EQ(raw_.HGetAll(Key("a")), (std::map<std::string, std::string>{{"_version", "2"}, {"s", "y"}}));
  Apply(*sink, {Put("a", 3, "{}")});
  EXPECT_EQ(raw_.HGetAll(Key("a")), (std::map<std::string, std::string>{{"_version", "3"}}));
  // A state with its own _version member cannot be stored: rejected, the view keeps version 3.
  auto r = Apply(*sink, {Put("a", 4, R"({"_version":"mine"})")});
  ASSERT_EQ(Outcomes(r), (std::vector{kRejected}));
  EXPECT_NE(r.results[0].reason.find("_version"), std::string::npos);
  EXPECT_EQ(raw_.HGetAll(Key("a")), (std::map<std::string, std::string>{{"_version", "3"}}));
}

TEST_F(RedisSinkTest, HashWithManyFields) {
  auto sink = Open(Cfg(Format::kHash));
  ASSERT_TRUE(sink);
  Json state = Json::object();
  for (int i = 0; i < 1500; ++i) state["f" + std::to_string(i)] = i;
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 1, state.dump())})), (std::vector{kApplied}));
  auto hash = raw_.HGetAll(Key("a"));
  EXPECT_EQ(hash.size(), 1501u);
  EXPECT_EQ(hash["f1499"], "1499");
}

TEST_F(RedisSinkTest, TtlIsSetOnValuesOfBothFormats) {
  for (Format format : {Format::kJson, Format::kHash}) {
    auto cfg = Cfg(format);
    cfg.name = prefix_ + (format == Format::kJson ? "j" : "h");
    cfg.MutableOptions<RedisSinkOptions>().key = prefix_ + ":{type}:" + cfg.name + ":{id}";
    cfg.MutableOptions<RedisSinkOptions>().ttl = std::chrono::milliseconds(60000);
    auto sink = Open(cfg);
    ASSERT_TRUE(sink);
    Apply(*sink, {Put("a", 1, R"({"n":1})")});
    long long pttl = raw_.Integer({"PTTL", prefix_ + ":acct:" + cfg.name + ":a"});
    EXPECT_GT(pttl, 0);
    EXPECT_LE(pttl, 60000);
  }
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  Apply(*sink, {Put("b", 1, R"({"n":1})")});
  EXPECT_EQ(raw_.Integer({"PTTL", Key("b")}), -1);  // ttl 0: no expiry
}

TEST_F(RedisSinkTest, BatchWithSeveralEventsOfOneEntityInOrder) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  auto r = Apply(*sink, {Put("a", 1, R"({"n":1})"), Put("b", 1, R"({"m":1})"), Put("a", 2, R"({"n":2})"), Del("a", 3),
                         Put("a", 4, R"({"n":4})"), Put("a", 3, R"({"n":3})"), Put("b", 2, R"({"m":2})")});
  EXPECT_EQ(Outcomes(r), (std::vector{kApplied, kApplied, kApplied, kApplied, kApplied, kStale, kApplied}));
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":4,"n":4})");
  EXPECT_EQ(raw_.Get(Key("b")), R"({"_version":2,"m":2})");
  EXPECT_EQ(raw_.Get(Tomb("a")), std::nullopt);
}

// json decides a whole call on one read of the keys: events of one entity in
// the call see each other's outcome, starting from a value, a tombstone or
// nothing, and only the final state of each key is written.
TEST_F(RedisSinkTest, OneCallStartsFromValueTombstoneOrNothing) {
  for (bool ttls : {false, true}) {
    auto cfg = Cfg();
    cfg.name = prefix_ + (ttls ? "t" : "n");
    cfg.MutableOptions<RedisSinkOptions>().key = prefix_ + ":{type}:" + cfg.name + ":{id}";
    cfg.MutableOptions<RedisSinkOptions>().ttl = std::chrono::milliseconds(ttls ? 60000 : 0);
    // The default tombstone_ttl is a day.
    cfg.MutableOptions<RedisSinkOptions>().tombstone_ttl = std::chrono::milliseconds(ttls ? 60000 : 0);
    auto sink = Open(cfg);
    ASSERT_TRUE(sink);
    const std::string k = prefix_ + ":acct:" + cfg.name + ":";
    ASSERT_EQ(Outcomes(Apply(*sink, {Put("v", 2, R"({"n":2})"), Del("t", 5)})), (std::vector{kApplied, kApplied}));
    auto r = Apply(*sink, {Del("v", 3), Put("t", 4, "{}"), Del("n", 1), Put("v", 4, R"({"n":4})"), Put("t", 6, "{}"),
                           Put("n", 2, R"({"n":2})"), Put("v", 3, "{}"), Del("t", 7), Del("n", 2)});
    EXPECT_EQ(Outcomes(r), (std::vector{kApplied, kStale, kApplied, kApplied, kApplied, kApplied, kStale, kApplied,
                                        kStale}))
        << "ttls " << ttls;
    EXPECT_EQ(raw_.Get(k + "v"), R"({"_version":4,"n":4})");
    EXPECT_EQ(raw_.Get(k + "v:_tomb"), std::nullopt);
    EXPECT_EQ(raw_.Get(k + "t"), std::nullopt);
    EXPECT_EQ(raw_.Get(k + "t:_tomb"), "7");
    EXPECT_EQ(raw_.Get(k + "n"), R"({"_version":2,"n":2})");
    EXPECT_EQ(raw_.Get(k + "n:_tomb"), std::nullopt);
    for (const std::string& key : {k + "v", k + "t:_tomb", k + "n"}) {
      const long long pttl = raw_.Integer({"PTTL", key});
      if (ttls) {
        EXPECT_GT(pttl, 0) << key;
      } else {
        EXPECT_EQ(pttl, -1) << key;
      }
    }
  }
}

TEST_F(RedisSinkTest, WrongTypeKeyRejectsOnlyItsEvent) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  ASSERT_EQ(raw_.Integer({"RPUSH", Key("b"), "x"}), 1);
  auto r = Apply(*sink, {Put("a", 1, R"({"n":1})"), Put("b", 1, R"({"n":1})"), Put("c", 1, R"({"n":1})")});
  ASSERT_EQ(Outcomes(r), (std::vector{kApplied, kRejected, kApplied}));
  EXPECT_NE(r.results[1].reason.find("WRONGTYPE"), std::string::npos) << r.results[1].reason;
  EXPECT_EQ(raw_.Integer({"LLEN", Key("b")}), 1);
  EXPECT_EQ(raw_.Get(Key("c")), R"({"_version":1,"n":1})");
}

TEST_F(RedisSinkTest, WrongTypeKeysInEveryPosition) {
  // json: a delete of a key of another type is rejected and leaves the key alone.
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  ASSERT_EQ(raw_.Integer({"SADD", Key("s"), "m"}), 1);
  auto r = Apply(*sink, {Del("s", 1), Put("ok", 1, "{}")});
  ASSERT_EQ(Outcomes(r), (std::vector{kRejected, kApplied}));
  EXPECT_NE(r.results[0].reason.find("WRONGTYPE"), std::string::npos) << r.results[0].reason;
  EXPECT_EQ(raw_.Integer({"SCARD", Key("s")}), 1);
  EXPECT_EQ(raw_.Get(Tomb("s")), std::nullopt);

  // hash: a value key or a tombstone key of another type rejects just its event.
  auto cfg = Cfg(Format::kHash);
  cfg.name = prefix_ + "h";
  cfg.MutableOptions<RedisSinkOptions>().key = prefix_ + ":{type}:h:{id}";
  auto hsink = Open(cfg);
  ASSERT_TRUE(hsink);
  const std::string hkey = prefix_ + ":acct:h:";
  raw_.Cmd({"SET", hkey + "str", "text"});
  raw_.Cmd({"RPUSH", hkey + "tl:_tomb", "x"});
  r = Apply(*hsink, {Put("a", 1, R"({"n":1})"), Put("str", 1, R"({"n":1})"), Put("tl", 1, R"({"n":1})"),
                     Del("tl", 2), Put("b", 1, R"({"n":1})")});
  ASSERT_EQ(Outcomes(r), (std::vector{kApplied, kRejected, kRejected, kRejected, kApplied}));
  for (size_t i = 1; i < 4; ++i) EXPECT_NE(r.results[i].reason.find("WRONGTYPE"), std::string::npos) << i;
  EXPECT_EQ(raw_.Get(hkey + "str"), "text");
  EXPECT_TRUE(raw_.HGetAll(hkey + "tl").empty());
}

// What an entity's events should have left in a view.
struct Model {
  uint64_t version = 0;
  bool deleted = false;
  std::string state;
};

// The next event of `id`: a new version (deleted one time in `delete_one_in`),
// recorded in the model and the history.
ChangeEvent NextEvent(const std::string& id, std::map<std::string, Model>& model, std::vector<ChangeEvent>& history,
                      std::mt19937& rng, int batch, unsigned delete_one_in) {
  Model& m = model[id];
  m.version += 1 + rng() % 3;
  m.deleted = rng() % delete_one_in == 0;
  m.state = m.deleted ? "" : R"({"v":)" + std::to_string(m.version) + R"(,"b":)" + std::to_string(batch) + "}";
  history.push_back(m.deleted ? Del(id, m.version) : Put(id, m.version, m.state));
  return history.back();
}

class RedisSinkModelTest : public RedisSinkTest {
 protected:
  // The view holds the model: values, tombstones, and Verify finds nothing.
  void ExpectViewIs(Sink& sink, const config::SinkConfig& cfg, const std::map<std::string, Model>& model) {
    std::vector<EntitySnapshot> truth;
    for (const auto& [id, m] : model) {
      truth.push_back(m.deleted ? Gone(id, m.version) : Live(id, m.version, m.state));
      std::string key = prefix_ + ":acct:" + cfg.name + ":" + id;
      if (m.deleted) {
        EXPECT_EQ(raw_.Integer({"EXISTS", key}), 0) << id;
        EXPECT_EQ(raw_.Get(key + ":_tomb"), std::to_string(m.version)) << id;
      } else {
        EXPECT_EQ(raw_.Integer({"EXISTS", key + ":_tomb"}), 0) << id;
      }
    }
    std::vector<Difference> diffs;
    ASSERT_TRUE(sink.Verify(truth, diffs).ok());
    EXPECT_TRUE(diffs.empty()) << diffs.size() << " differences, first: " << diffs[0].entity_id << ": "
                               << diffs[0].detail;
  }

  std::unique_ptr<Sink> OpenNamed(Format format, config::SinkConfig& cfg) {
    cfg = Cfg(format);
    cfg.name = prefix_ + (format == Format::kJson ? "j" : "h");
    cfg.MutableOptions<RedisSinkOptions>().key = prefix_ + ":{type}:" + cfg.name + ":{id}";
    return Open(cfg);
  }
};

// Many events of a few entities across several script calls and batches,
// in event order with re-sent (stale) events mixed in, against a model:
// every call has keys that repeat.
TEST_F(RedisSinkModelTest, LongBatchesMatchAModel) {
  for (Format format : {Format::kJson, Format::kHash}) {
    config::SinkConfig cfg;
    auto sink = OpenNamed(format, cfg);
    ASSERT_TRUE(sink);
    std::map<std::string, Model> model;
    std::vector<ChangeEvent> history;
    std::mt19937 rng(42);
    for (int batch = 0; batch < 3; ++batch) {
      std::vector<ChangeEvent> events;
      std::vector<Outcome> expected;
      for (int i = 0; i < 450; ++i) {
        if (!history.empty() && rng() % 5 == 0) {  // a re-sent old event
          events.push_back(history[rng() % history.size()]);
          expected.push_back(kStale);
          continue;
        }
        events.push_back(NextEvent("e" + std::to_string(rng() % 9), model, history, rng, batch, 6));
        expected.push_back(kApplied);
      }
      EXPECT_EQ(Outcomes(Apply(*sink, events)), expected) << "batch " << batch;
    }
    ExpectViewIs(*sink, cfg, model);
  }
}

// The same with calls in which every key comes once (the script keeps each
// key's state by event then): each batch is one call over the same 100
// entities in a new order, each event a new version (a delete one time in
// three, so values, tombstones and re-creations meet) or a re-sent old one.
TEST_F(RedisSinkModelTest, CallsOfDistinctKeysMatchAModel) {
  for (Format format : {Format::kJson, Format::kHash}) {
    config::SinkConfig cfg;
    auto sink = OpenNamed(format, cfg);
    ASSERT_TRUE(sink);
    std::map<std::string, Model> model;
    std::map<std::string, std::vector<ChangeEvent>> history;
    std::mt19937 rng(7);
    std::vector<std::string> ids;
    for (int i = 0; i < 100; ++i) ids.push_back("d" + std::to_string(i));
    for (int batch = 0; batch < 12; ++batch) {
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<ChangeEvent> events;
      std::vector<Outcome> expected;
      size_t applied = 0;
      for (const std::string& id : ids) {
        std::vector<ChangeEvent>& old = history[id];
        if (!old.empty() && rng() % 4 == 0) {
          events.push_back(old[rng() % old.size()]);
          expected.push_back(kStale);
          continue;
        }
        events.push_back(NextEvent(id, model, old, rng, batch, 3));
        expected.push_back(kApplied);
        ++applied;
      }
      EXPECT_EQ(Outcomes(Apply(*sink, events)), expected) << "batch " << batch << " (" << applied << " applied)";
    }
    ExpectViewIs(*sink, cfg, model);
  }
}

TEST_F(RedisSinkTest, UnusableEventsAreRejectedAlone) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  ChangeEvent other_type = Put("d", 1, "{}");
  other_type.entity_type = "order";
  auto r = Apply(*sink, {Put("a", 1, "[1]"), Put("b", 1, ""), Put("c", 1, R"({"_version":9})"), other_type,
                         Put("e", 1, R"({"ok":1})")});
  EXPECT_EQ(Outcomes(r), (std::vector{kRejected, kRejected, kRejected, kRejected, kApplied}));
  for (size_t i = 0; i < 4; ++i) EXPECT_FALSE(r.results[i].reason.empty()) << i;
  EXPECT_EQ(raw_.Get(Key("a")), std::nullopt);
  EXPECT_EQ(raw_.Get(Key("c")), std::nullopt);
}

TEST_F(RedisSinkTest, JsonSplicingOfEmptyAndNestedObjects) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  const std::string nested = R"({"o":{"p":{"q":[{},{"r":null}]}},"e":{}})";
  Apply(*sink, {Put("empty", 1, "{}"), Put("nested", 2, nested)});
  EXPECT_EQ(raw_.Get(Key("empty")), R"({"_version":1})");
  auto stored = raw_.Get(Key("nested"));
  ASSERT_TRUE(stored);
  Json parsed = Json::parse(*stored);
  EXPECT_EQ(parsed["_version"], 2);
  parsed.erase("_version");
  EXPECT_EQ(parsed, Json::parse(nested));
  // The script reads the spliced version back: re-applying is stale.
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("empty", 1, "{}"), Put("nested", 2, nested)})), (std::vector{kStale, kStale}));
}

TEST_F(RedisSinkTest, EmptyBatch) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  ApplyResult r = sink->Apply({});
  EXPECT_TRUE(r.status.ok());
  EXPECT_TRUE(r.results.empty());
}

TEST_F(RedisSinkTest, ReloadsTheScriptAfterAFlush) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  Apply(*sink, {Put("a", 1, "{}")});
  raw_.Cmd({"SCRIPT", "FLUSH"});
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 2, R"({"n":2})"), Put("a", 1, "{}")})), (std::vector{kApplied, kStale}));
  EXPECT_EQ(raw_.Get(Key("a")), R"({"_version":2,"n":2})");
}

TEST_F(RedisSinkTest, ReconnectsAfterTheConnectionIsKilled) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  Apply(*sink, {Put("a", 1, "{}")});
  Reply list = raw_.Cmd({"CLIENT", "LIST"});
  ASSERT_TRUE(list && list->type == REDIS_REPLY_STRING);
  std::string text(list->str, list->len);
  size_t at = text.find("name=sluice:" + prefix_ + " ");
  ASSERT_NE(at, std::string::npos) << text;
  size_t line = text.rfind('\n', at);
  line = line == std::string::npos ? 0 : line + 1;
  std::string id = text.substr(line + 3, text.find(' ', line) - line - 3);  // "id=N ..."
  ASSERT_EQ(raw_.Integer({"CLIENT", "KILL", "ID", id}), 1);

  ApplyResult lost = sink->Apply(std::vector{Put("a", 2, R"({"n":2})")});
  EXPECT_EQ(lost.status.code(), StatusCode::kUnavailable) << lost.status.ToString();
  EXPECT_TRUE(lost.results.empty());
  // The engine's retry of the same batch reconnects and applies it.
  EXPECT_EQ(Outcomes(Apply(*sink, {Put("a", 2, R"({"n":2})")})), (std::vector{kApplied}));
  EXPECT_TRUE(sink->Health().ok());
}

TEST_F(RedisSinkTest, ClosedPortIsUnavailable) {
  auto cfg = Cfg();
  cfg.MutableOptions<RedisSinkOptions>().url = "redis://127.0.0.1:" + std::to_string(ClosedPort()) + "/0";
  auto made = MakeRedisSink(cfg, global_);
  ASSERT_TRUE(made.ok());
  Sink& sink = **made;
  EXPECT_EQ(sink.Open().code(), StatusCode::kUnavailable);
  ApplyResult r = sink.Apply(std::vector{Put("a", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kUnavailable) << r.status.ToString();
  EXPECT_TRUE(r.results.empty());
  EXPECT_EQ(sink.Health().code(), StatusCode::kUnavailable);
  std::vector<Difference> diffs;
  EXPECT_EQ(sink.Verify({Live("a", 1, "{}")}, diffs).code(), StatusCode::kUnavailable);
  sink.Close();
}

TEST_F(RedisSinkTest, SilentServerIsUnavailableAfterTheIoTimeout) {
  // Accepts connections (the kernel completes the handshake) but never answers.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);

  auto cfg = Cfg();
  cfg.MutableOptions<RedisSinkOptions>().url = "redis://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/0";
  RedisConnectionLimits options;
  options.connect_timeout = std::chrono::milliseconds(300);
  options.io_timeout = std::chrono::milliseconds(300);
  auto made = MakeRedisSink(cfg, global_, options);
  ASSERT_TRUE(made.ok());
  auto start = std::chrono::steady_clock::now();
  Status s = (*made)->Open();
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("timeout"), std::string::npos) << s.ToString();
  EXPECT_LT(elapsed, std::chrono::seconds(3));
  close(fd);
}

TEST_F(RedisSinkTest, WrongPasswordIsAMisconfiguration) {
  auto ep = ParseRedisUrl(TestUrl());
  ASSERT_TRUE(ep.ok());
  auto cfg = Cfg();
  cfg.MutableOptions<RedisSinkOptions>().url = "redis://:not-the-password-" + prefix_ + "@" + ep->Describe();
  auto made = MakeRedisSink(cfg, global_);
  ASSERT_TRUE(made.ok());
  Status s = (*made)->Open();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("password"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("not-the-password"), std::string::npos) << "the password leaked: " << s.ToString();
  ApplyResult r = (*made)->Apply(std::vector{Put("a", 1, "{}")});
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
}

TEST_F(RedisSinkTest, HealthAndCapabilities) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  EXPECT_TRUE(sink->Health().ok());
  EXPECT_EQ(sink->name(), prefix_);
  Capabilities c = sink->capabilities();
  EXPECT_TRUE(c.can_push);
  sink->Close();
  EXPECT_TRUE(sink->Health().ok());  // reconnects
}

TEST_F(RedisSinkTest, ThroughputJson200kEventsOver100kKeys) {
  auto sink = Open(Cfg());
  ASSERT_TRUE(sink);
  constexpr size_t kEvents = 200000;
  constexpr size_t kKeys = 100000;
  constexpr size_t kBatch = 1000;
  std::vector<ChangeEvent> events;
  events.reserve(kEvents);
  for (size_t i = 0; i < kEvents; ++i) {
    size_t k = i % kKeys;
    uint64_t version = i / kKeys + 1;
    events.push_back(Put("acct-" + std::to_string(k), version,
                         R"({"owner":{"name":"owner-)" + std::to_string(k) + R"(","tier":"gold"},"balance":)" +
                             std::to_string(k * 7 + version) + R"(,"tags":["a","b"],"active":true})"));
  }
  size_t applied = 0;
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
  };
  // Redis's own account of the time spent in EVALSHA, in microseconds.
  auto evalsha_usec = [this] {
    Reply r = raw_.Cmd({"INFO", "commandstats"});
    if (!r || r->type != REDIS_REPLY_STRING) return 0.0;
    std::string text(r->str, r->len);
    size_t at = text.find("cmdstat_evalsha:");
    at = at == std::string::npos ? at : text.find("usec=", at);
    return at == std::string::npos ? 0.0 : std::atof(text.c_str() + at + 5);
  };
  const double redis_start = evalsha_usec();
  const double cpu_start = cpu_seconds();
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < kEvents; i += kBatch) {
    ApplyResult r = sink->Apply(std::span<const ChangeEvent>(events).subspan(i, kBatch));
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    for (const auto& e : r.results) applied += e.outcome == kApplied ? 1 : 0;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu_start;
  const double redis_usec = evalsha_usec() - redis_start;
  EXPECT_EQ(applied, kEvents);
  std::printf(
      "[ figure   ] redis sink Apply: %zu json events over %zu keys in batches of %zu: %.2f s, %.0f events/s "
      "(sink cpu %.2f us/event, redis in EVALSHA %.2f us/event)\n",
      kEvents, kKeys, kBatch, seconds, kEvents / seconds, cpu * 1e6 / kEvents, redis_usec / kEvents);

  std::vector<EntitySnapshot> truth;
  truth.reserve(kKeys);
  for (size_t i = kEvents - kKeys; i < kEvents; ++i) truth.push_back(Live(events[i].entity_id, 2, events[i].state));
  std::vector<Difference> diffs;
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(sink->Verify(truth, diffs).ok());
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(diffs.empty());
  std::printf("[ figure   ] redis sink Verify: %zu keys in %.2f s\n", kKeys, seconds);
}


}  // namespace
}  // namespace sluice::connectors::redis::test
