// The fixture of the redis sink's integration tests (redis_sink_test.cc,
// redis_sink_check_test.cc): the real Redis at SLUICE_TEST_REDIS_URL
// (default redis://127.0.0.1:16379/0; start it with `scripts/services up
// redis`), skipped when unreachable, failed instead when CI=true. Each test
// uses its own key prefix and deletes it.
#pragma once

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

namespace sluice::connectors::redis::test {


using Format = RedisSinkOptions::Format;

inline std::string TestUrl() {
  const char* url = std::getenv("SLUICE_TEST_REDIS_URL");
  return url != nullptr && *url != '\0' ? url : "redis://127.0.0.1:16379/0";
}

inline bool InCi() {
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

inline ChangeEvent Put(std::string id, uint64_t version, std::string state) {
  ChangeEvent e;
  e.entity_type = "acct";
  e.entity_id = std::move(id);
  e.version = version;
  e.state = std::move(state);
  return e;
}

inline ChangeEvent Del(std::string id, uint64_t version) {
  ChangeEvent e;
  e.entity_type = "acct";
  e.entity_id = std::move(id);
  e.version = version;
  e.deleted = true;
  return e;
}

inline EntitySnapshot Live(std::string id, uint64_t version, std::string state) {
  return EntitySnapshot{std::move(id), version, false, std::move(state)};
}

inline EntitySnapshot Gone(std::string id, uint64_t version) { return EntitySnapshot{std::move(id), version, true, ""}; }

inline std::vector<Outcome> Outcomes(const ApplyResult& r) {
  std::vector<Outcome> out;
  for (const auto& e : r.results) out.push_back(e.outcome);
  return out;
}

constexpr Outcome kApplied = Outcome::kApplied;
constexpr Outcome kStale = Outcome::kStale;
constexpr Outcome kRejected = Outcome::kRejected;

// A port on 127.0.0.1 with nothing listening (bound, then released).
inline uint16_t ClosedPort() {
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


}  // namespace sluice::connectors::redis::test
