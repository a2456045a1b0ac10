// The writer's HTTP API against a real MariaDB: every bad-input case gets its
// status and error code and writes nothing; reads; many keep-alive connections.
#include <sys/resource.h>

#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using Json = nlohmann::json;

int64_t TotalEvents(TestDatabase& db) {
  int64_t total = 0;
  auto tables = db.Query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema=DATABASE() AND table_name LIKE 'ev\\_%'");
  for (const auto& t : tables) total += db.Scalar("SELECT COUNT(*) FROM `" + *t[0] + "`");
  return total;
}

class WriterApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SLUICE_REQUIRE_MYSQL();
    db_ = std::make_unique<TestDatabase>("api");
    SluiceConfig cfg;
    cfg.database = db_->name();
    cfg.entities = {{"account", 4}};
    cfg.port = FreePort();
    cfg.extra_writer_yaml = "  max_body_bytes: 4096\n";
    writer_ = std::make_unique<SluiceProcess>(std::vector<std::string>{"serve", "--config", cfg.Write()}, cfg.port);
    std::string why;
    ASSERT_TRUE(writer_->Start(&why)) << why;
    client_ = std::make_unique<HttpClient>(cfg.port);
  }

  // Sends a request that must be refused with status/code and must write nothing.
  void ExpectRefused(const HttpReply& r, int status, const std::string& code, int64_t events_before) {
    EXPECT_EQ(r.status, status) << r.body;
    auto body = Json::parse(r.body, nullptr, false);
    ASSERT_FALSE(body.is_discarded()) << "error body is not JSON: " << r.body;
    EXPECT_EQ(body["error"]["code"], code) << r.body;
    EXPECT_TRUE(body["error"]["message"].is_string()) << r.body;
    EXPECT_EQ(TotalEvents(*db_), events_before) << "a refused request wrote an event";
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<SluiceProcess> writer_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(WriterApiTest, BadInputGetsItsStatusAndWritesNothing) {
  auto ok = client_->Post("/v1/entities/account/acct-1/commands/create", R"({"owner":"ann","balance":10})",
                          {{"Idempotency-Key", "create-1"}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  const int64_t n = TotalEvents(*db_);
  ASSERT_EQ(n, 1);

  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/patch", R"({"balance":)"), 400, "malformed_json", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/patch", "{\"a\":\"\xff\"}"), 400, "malformed_json", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/patch", "[1,2]"), 400, "invalid_request", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/patch",
                              R"({"pad":")" + std::string(5000, 'x') + R"("})"),
                413, "payload_too_large", n);
  ExpectRefused(client_->Post("/v1/entities/nosuchtype/acct-1/commands/patch", "{}"), 404, "unknown_entity_type", n);
  ExpectRefused(client_->Post("/v1/entities/account/" + std::string(65, 'x') + "/commands/patch", "{}"), 400,
                "invalid_entity_id", n);
  ExpectRefused(client_->Post("/v1/entities/account/has%20space/commands/patch", "{}"), 400, "invalid_entity_id", n);
  ExpectRefused(client_->Post("/v1/entities/account/caf%C3%A9/commands/patch", "{}"), 400, "invalid_entity_id", n);
  ExpectRefused(client_->Post("/v1/entities/account/bad%zz/commands/patch", "{}"), 400, "invalid_request", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/explode", "{}"), 404, "unknown_command", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/patch", R"({"balance":1})", {{"If-Match", "7"}}),
                409, "version_mismatch", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/patch", "{}", {{"If-Match", "seven"}}), 400,
                "invalid_if_match", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/create", R"({"owner":"bob"})"), 409,
                "already_exists", n);
  ExpectRefused(client_->Post("/v1/entities/account/nobody/commands/delete", "{}"), 404, "not_found", n);
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/patch", "{}",
                              {{"Idempotency-Key", std::string(129, 'k')}}),
                400, "invalid_idempotency_key", n);
  // The same key with another request is refused; with the same request it replays.
  ExpectRefused(client_->Post("/v1/entities/account/acct-1/commands/create", R"({"owner":"eve","balance":10})",
                              {{"Idempotency-Key", "create-1"}}),
                409, "idempotency_key_reused", n);
  ExpectRefused(client_->Get("/v2/nothing"), 404, "not_found", n);
  // A path the API has, with another method: 405 and the method it takes (issue 18, item 11).
  const std::vector<std::tuple<std::string, std::string, std::string>> wrong_methods = {
      {"DELETE", "/v1/entities/account/acct-1", "GET"},
      {"POST", "/v1/entities/account/acct-1/events", "GET"},
      {"GET", "/v1/entities/account/acct-1/commands/patch", "POST"},
      {"PUT", "/v1/entities/account/acct-1/commands/patch", "POST"},
      {"POST", "/healthz", "GET"},
      {"DELETE", "/readyz", "GET"}};
  for (const auto& [method, path, allow] : wrong_methods) {
    const HttpReply r =
        client_->Send(method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
    ExpectRefused(r, 405, "method_not_allowed", n);
    EXPECT_EQ(r.headers.count("allow") ? r.headers.at("allow") : "", allow) << method << " " << path;
  }
  ExpectRefused(client_->Get("/v1/entities/account/acct-1/events?limit=0"), 400, "invalid_request", n);
  ExpectRefused(client_->Send("BROKEN\r\n\r\n"), 400, "malformed_http", n);

  // After all that, the entity is untouched and the API still works.
  auto state = client_->Get("/v1/entities/account/acct-1");
  ASSERT_EQ(state.status, 200);
  EXPECT_EQ(Json::parse(state.body)["version"], 1);
  EXPECT_EQ(Json::parse(state.body)["state"], Json::parse(R"({"owner":"ann","balance":10})"));
}

TEST_F(WriterApiTest, CommandsReadsAndHistory) {
  auto post = [&](const std::string& cmd, const std::string& body, const std::string& key) {
    return client_->Post("/v1/entities/account/a%2F1/commands/" + cmd, body, {{"Idempotency-Key", key}});
  };
  auto r = post("create", R"({"owner":"ann","tags":["x"]})", "k1");
  ASSERT_EQ(r.status, 200) << r.body;
  auto reply = Json::parse(r.body);
  EXPECT_EQ(reply["type"], "account");
  EXPECT_EQ(reply["id"], "a/1");
  EXPECT_EQ(reply["version"], 1);
  EXPECT_GE(reply["event_id"].get<int>(), 1);
  EXPECT_TRUE(reply["partition"].is_number());
  EXPECT_EQ(r.headers.count("idempotent-replayed"), 0u);

  ASSERT_EQ(post("patch", R"({"tags":null,"balance":5})", "k2").status, 200);
  ASSERT_EQ(post("put", R"({"owner":"bob"})", "k3").status, 200);
  auto s = client_->Get("/v1/entities/account/a%2F1");
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(Json::parse(s.body)["state"], Json::parse(R"({"owner":"bob"})"));
  EXPECT_EQ(s.headers["etag"], "\"3\"");

  ASSERT_EQ(post("delete", "", "k4").status, 200);
  s = client_->Get("/v1/entities/account/a%2F1");
  EXPECT_EQ(s.status, 404);
  // Re-creation continues the version counter: views never see a version reused.
  auto again = post("create", R"({"owner":"cy"})", "k5");
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(Json::parse(again.body)["version"], 5);

  auto history = client_->Get("/v1/entities/account/a%2F1/events?after_version=1&limit=3");
  ASSERT_EQ(history.status, 200);
  auto h = Json::parse(history.body);
  ASSERT_EQ(h["events"].size(), 3u);
  EXPECT_EQ(h["events"][0]["version"], 2);
  EXPECT_EQ(h["events"][0]["command"], "patch");
  EXPECT_EQ(h["events"][0]["state"], Json::parse(R"({"owner":"ann","balance":5})"));
  EXPECT_EQ(h["events"][2]["deleted"], true);
  EXPECT_EQ(client_->Get("/v1/entities/account/nobody/events").status, 404);
  EXPECT_EQ(client_->Get("/v1/entities/account/nobody").status, 404);

  ExpectDenseEventIds(*db_);
  ExpectDenseVersions(*db_);
}

// Requests without Idempotency-Key still work; each is a new command.
TEST_F(WriterApiTest, MissingIdempotencyKeyMeansANewCommandEachTime) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(client_->Post("/v1/entities/account/counter/commands/patch", R"({"n":1})").status, 200);
  }
  EXPECT_EQ(TotalEvents(*db_), 3);
}

TEST_F(WriterApiTest, HoldsTwoThousandKeepAliveConnections) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  ASSERT_GE(rl.rlim_cur, 2100u) << "the test needs more file descriptors";
  constexpr int kConnections = 2000;
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (int i = 0; i < kConnections; ++i) {
    clients.push_back(std::make_unique<HttpClient>(writer_->port()));
    ASSERT_TRUE(clients.back()->Connect()) << "connection " << i;
  }
  // Every connection is open at once; each sends a command, then a read, on the same socket.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kConnections; ++i) {
      auto r = round == 0 ? clients[i]->Post("/v1/entities/account/conn-" + std::to_string(i % 50) + "/commands/patch",
                                             R"({"c)" + std::to_string(i) + R"(":1})",
                                             {{"Idempotency-Key", "conn-" + std::to_string(i)}})
                          : clients[i]->Get("/healthz");
      ASSERT_EQ(r.status, 200) << "connection " << i << " round " << round << ": " << r.error << r.body;
      ASSERT_EQ(r.headers.count("connection"), 0u) << "the server asked to close connection " << i;
    }
  }
  EXPECT_EQ(TotalEvents(*db_), kConnections);
}

// Bodies that once aborted or crashed the whole process: a number a double
// cannot hold (out_of_range.406 escaped the parser) and deep nesting (the
// recursive walks over the parsed value overflowed the stack). Each must be a
// 400 with a JSON error, write nothing, and leave the process serving.
TEST(WriterHostileBodies, Get400AndTheProcessStaysUp) {
  SLUICE_REQUIRE_MYSQL();
  TestDatabase db("hostile");
  SluiceConfig cfg;
  cfg.database = db.name();
  cfg.entities = {{"account", 2}};
  cfg.port = FreePort();
  cfg.extra_writer_yaml = "  max_body_bytes: 1MiB\n  max_json_depth: 20\n";
  SluiceProcess writer({"serve", "--config", cfg.Write()}, cfg.port);
  std::string why;
  ASSERT_TRUE(writer.Start(&why)) << why;
  HttpClient client(cfg.port);

  const auto nested = [](int depth) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += R"({"a":)";
    s += "1";
    s += std::string(static_cast<size_t>(depth), '}');
    return s;
  };
  struct Case {
    std::string name;
    std::string body;
  };
  const std::vector<Case> hostile = {
      {"number overflow", R"({"x":1e400})"},
      {"negative overflow", R"({"x":[-1E+99999]})"},
      {"60,000 unclosed brackets", std::string(60000, '[')},
      {"120 KB of closed brackets", std::string(60000, '[') + std::string(60000, ']')},
      {"objects one level deeper than max_json_depth", nested(21)},
  };
  const std::string path = "/v1/entities/account/victim/commands/patch";
  for (const Case& c : hostile) {
    for (const std::string command : {"patch", "create", "put"}) {
      const HttpReply r = client.Post("/v1/entities/account/victim/commands/" + command, c.body);
      EXPECT_EQ(r.status, 400) << c.name << " (" << command << "): " << r.body << r.error;
      const Json body = Json::parse(r.body, nullptr, false);
      ASSERT_TRUE(body.is_object()) << c.name << ": the reply is not JSON: " << r.body;
      EXPECT_EQ(body["error"]["code"], "malformed_json") << c.name;
      ASSERT_TRUE(writer.running()) << c.name;
      ASSERT_EQ(client.Get("/healthz").status, 200) << c.name << ": the process stopped serving\n" << writer.Log();
    }
  }
  EXPECT_EQ(TotalEvents(db), 0) << "a refused body wrote an event";
  // At the limit the body is a document like any other.
  const HttpReply ok = client.Post(path, nested(20));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(TotalEvents(db), 1);
}

}  // namespace
}  // namespace sluice::testing
