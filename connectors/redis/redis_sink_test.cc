// Integration tests of the redis sink against the real Redis at
// SLUICE_TEST_REDIS_URL (default redis://127.0.0.1:16379/0; start it with
// `scripts/services up redis`). Skipped when Redis is unreachable, failed
// instead when CI=true. Each test uses its own key prefix and deletes it.
#include "connectors/redis/redis_sink.h"

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "connectors/redis/redis_options.h"
#include "connectors/redis/redis_url.h"
#include "core/json.h"

namespace sluice::connectors::redis {
namespace {

using Format = RedisSinkOptions::Format;

std::string TestUrl() {
  const char* url = std::getenv("SLUICE_TEST_REDIS_URL");
  return url != nullptr && *url != '\0' ? url : "redis://127.0.0.1:16379/0";
}

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

// A plain connection through which the tests look at and tamper with the view.
class RawRedis {
 public:
  ~RawRedis() {
    if (ctx_ != nullptr) redisFree(ctx_);
  }

  bool Connect(const std::string& url, std::string& error) {
    auto ep = ParseRedisUrl(url);
    if (!ep.ok()) {
      error = ep.status().ToString();
      return false;
    }
    ctx_ = redisConnectWithTimeout(ep->host.c_str(), ep->port, timeval{2, 0});
    if (ctx_ == nullptr || ctx_->err) {
      error = ctx_ != nullptr ? ctx_->errstr : "cannot allocate";
      return false;
    }
    if (!ep->password.empty()) {
      if (ep->username.empty()) {
        Cmd({"AUTH", ep->password});
      } else {
        Cmd({"AUTH", ep->username, ep->password});
      }
    }
    Cmd({"SELECT", std::to_string(ep->db)});
    Reply pong = Cmd({"PING"});
    if (!pong || pong->type != REDIS_REPLY_STATUS) {
      error = "PING failed";
      return false;
    }
    return true;
  }

  bool connected() const { return ctx_ != nullptr && ctx_->err == 0; }

  Reply Cmd(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    void* reply = redisCommandArgv(ctx_, static_cast<int>(args.size()), argv.data(), lens.data());
    return Reply(static_cast<redisReply*>(reply));
  }

  std::optional<std::string> Get(const std::string& key) {
    Reply r = Cmd({"GET", key});
    if (!r || r->type != REDIS_REPLY_STRING) return std::nullopt;
    return std::string(r->str, r->len);
  }

  std::map<std::string, std::string> HGetAll(const std::string& key) {
    std::map<std::string, std::string> out;
    Reply r = Cmd({"HGETALL", key});
    if (!r || r->type != REDIS_REPLY_ARRAY) return out;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
      out.emplace(std::string(r->element[i]->str, r->element[i]->len),
                  std::string(r->element[i + 1]->str, r->element[i + 1]->len));
    }
    return out;
  }

  long long Integer(const std::vector<std::string>& args) {
    Reply r = Cmd(args);
    return r && r->type == REDIS_REPLY_INTEGER ? r->integer : -999;
  }

  void DeleteMatching(const std::string& pattern) {
    std::string cursor = "0";
    do {
      Reply r = Cmd({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) return;
      cursor.assign(r->element[0]->str, r->element[0]->len);
      std::vector<std::string> del = {"UNLINK"};
      for (size_t i = 0; i < r->element[1]->elements; ++i) {
        del.emplace_back(r->element[1]->element[i]->str, r->element[1]->element[i]->len);
      }
      if (del.size() > 1) Cmd(del);
    } while (cursor != "0");
  }

 private:
  redisContext* ctx_ = nullptr;
};

ChangeEvent Put(std::string id, uint64_t version, std::string state) {
  ChangeEvent e;
  e.entity_type = "acct";
  e.entity_id = std::move(id);
  e.version = version;
  e.state = std::move(state);
  return e;
}

ChangeEvent Del(std::string id, uint64_t version) {
  ChangeEvent e;
  e.entity_type = "acct";
  e.entity_id = std::move(id);
  e.version = version;
  e.deleted = true;
  return e;
}

EntitySnapshot Live(std::string id, uint64_t version, std::string state) {
  return EntitySnapshot{std::move(id), version, false, std::move(state)};
}

EntitySnapshot Gone(std::string id, uint64_t version) { return EntitySnapshot{std::move(id), version, true, ""}; }

std::vector<Outcome> Outcomes(const ApplyResult& r) {
  std::vector<Outcome> out;
  for (const auto& e : r.results) out.push_back(e.outcome);
  return out;
}

constexpr Outcome kApplied = Outcome::kApplied;
constexpr Outcome kStale = Outcome::kStale;
constexpr Outcome kRejected = Outcome::kRejected;

// A port on 127.0.0.1 with nothing listening (bound, then released).
uint16_t ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

class RedisSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    if (!raw_.Connect(TestUrl(), error)) {
      if (InCi()) FAIL() << "redis at " << TestUrl() << " is unreachable (" << error << ") and CI=true";
      GTEST_SKIP() << "redis at " << TestUrl() << " is unreachable (" << error
                   << "); start it with scripts/services up redis";
    }
    std::random_device rd;
    char buf[32];
    std::snprintf(buf, sizeof buf, "t%08x%08x", rd(), rd());
    prefix_ = buf;
  }

  void TearDown() override {
    if (raw_.connected() && !prefix_.empty()) raw_.DeleteMatching(prefix_ + ":*");
  }

  config::SinkConfig Cfg(Format format = Format::kJson) const {
    config::SinkConfig cfg;
    cfg.name = prefix_;
    cfg.type = "redis";
    cfg.entity = "acct";
    cfg.MutableOptions<RedisSinkOptions>().url = TestUrl();
    cfg.MutableOptions<RedisSinkOptions>().key = prefix_ + ":{type}:{id}";
    cfg.MutableOptions<RedisSinkOptions>().format = format;
    return cfg;
  }

  std::unique_ptr<Sink> Open(const config::SinkConfig& cfg, RedisConnectionLimits options = {}) {
    auto sink = MakeRedisSink(cfg, global_, options);
    EXPECT_TRUE(sink.ok()) << sink.status().ToString();
    if (!sink.ok()) return nullptr;
    Status s = (*sink)->Open();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return std::move(sink).value();
  }

  // Applies and expects a batch-level success.
  ApplyResult Apply(Sink& sink, const std::vector<ChangeEvent>& events) {
    ApplyResult r = sink.Apply(events);
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.results.size(), r.status.ok() ? events.size() : 0);
    return r;
  }

  std::string Key(const std::string& id) const { return prefix_ + ":acct:" + id; }
  std::string Tomb(const std::string& id) const { return Key(id) + ":_tomb"; }

  RawRedis raw_;
  std::string prefix_;
  config::Config global_;
};

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

// Many events of a few entities across several script calls and batches,
// in event order with re-sent (stale) events mixed in, against a model.
TEST_F(RedisSinkTest, LongBatchesMatchAModel) {
  for (Format format : {Format::kJson, Format::kHash}) {
    auto cfg = Cfg(format);
    cfg.name = prefix_ + (format == Format::kJson ? "j" : "h");
    cfg.MutableOptions<RedisSinkOptions>().key = prefix_ + ":{type}:" + cfg.name + ":{id}";
    auto sink = Open(cfg);
    ASSERT_TRUE(sink);
    struct Model {
      uint64_t version = 0;
      bool deleted = false;
      std::string state;
    };
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
        std::string id = "e" + std::to_string(rng() % 9);
        Model& m = model[id];
        m.version += 1 + rng() % 3;
        m.deleted = rng() % 6 == 0;
        m.state = m.deleted ? "" : R"({"v":)" + std::to_string(m.version) + R"(,"b":)" + std::to_string(batch) + "}";
        events.push_back(m.deleted ? Del(id, m.version) : Put(id, m.version, m.state));
        expected.push_back(kApplied);
        history.push_back(events.back());
      }
      EXPECT_EQ(Outcomes(Apply(*sink, events)), expected) << "batch " << batch;
    }
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
    ASSERT_TRUE(sink->Verify(truth, diffs).ok());
    EXPECT_TRUE(diffs.empty()) << diffs.size() << " differences, first: " << diffs[0].entity_id << ": "
                               << diffs[0].detail;
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
}  // namespace sluice::connectors::redis
