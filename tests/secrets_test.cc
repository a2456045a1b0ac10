// Secrets never leak (issue 18, item 8), against real MariaDB, Redis,
// OpenSearch and Kafka.
//
// Every secret-bearing field holds its own marker (all start with
// "s3cr3t-"), once written inline and once by ${env:...} / ${file:...}:
// the MySQL password (of a user made for the test) of main and of a second
// storage server (another database, another user), the admin token, a Redis
// sink's URL password, an Elasticsearch sink's password and api_key, a Kafka
// sink's sasl.password and ssl.key.password, and, in configs that fail, an
// Elasticsearch URL's user info and query token, a Kafka property given by
// reference, and a plugin sink's url and api_token; and a MySQL password
// the server refuses. Every output channel is
// collected and searched for "s3cr3t": stdout and stderr of `config check`
// (with and without --print), `init`, `status` (table and --json), `verify`,
// `deadletters list` (table and --json), `pause`/`resume`, the log of
// `serve` from start to stop, /metrics, /readyz and /healthz, writer replies
// (success and errors) and admin replies (success and errors). 0 hits.
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/kafka_support.h"
#include "tests/support/test_support.h"

namespace sluice::testing {
namespace {

using namespace std::chrono_literals;

constexpr char kMarkerPrefix[] = "s3cr3t";

// One secret per field and form.
struct Markers {
  std::string mysql, admin, redis, es_password, es_api_key, sasl_password, ssl_key_password, mysql_b;
};

const Markers kInline = {"s3cr3t-mysql-in-7f3a",  "s3cr3t-admin-in-41d0",  "s3cr3t-redis-in-5a6b",
                         "s3cr3t-espw-in-0f1e",   "s3cr3t-eskey-in-77aa",  "s3cr3t-sasl-in-1357",
                         "s3cr3t-sslkey-in-2468", "s3cr3t-mysqlb-in-3c3c"};
const Markers kByReference = {"s3cr3t-mysql-ref-2b9c", "s3cr3t-admin-ref-8e21", "s3cr3t-redis-ref-c3d4",
                              "s3cr3t-espw-ref-9a8b",  "s3cr3t-eskey-ref-66bb", "s3cr3t-sasl-ref-9753",
                              "s3cr3t-sslkey-ref-8642", "s3cr3t-mysqlb-ref-4d4d"};

// Everything a run printed or answered, by where it came from.
class Channels {
 public:
  void Add(const std::string& where, const std::string& text) { texts_.emplace_back(where, text); }

  // Each channel that holds a marker, with the text around it.
  std::string Leaks() const {
    std::string out;
    for (const auto& [where, text] : texts_) {
      for (size_t at = text.find(kMarkerPrefix); at != std::string::npos; at = text.find(kMarkerPrefix, at + 1)) {
        const size_t from = at < 80 ? 0 : at - 80;
        out += "[" + where + "] ..." + text.substr(from, 160) + "...\n";
      }
    }
    return out;
  }
  size_t size() const { return texts_.size(); }
  // The text of the first channel whose name starts with `where`.
  std::string Of(const std::string& where) const {
    for (const auto& [w, text] : texts_) {
      if (w.rfind(where, 0) == 0) return text;
    }
    return "";
  }


 private:
  std::vector<std::pair<std::string, std::string>> texts_;
};

std::string Show(Channels& ch, const std::vector<std::string>& args) {
  std::string out;
  const int rc = RunSluice(args, &out);
  std::string what = "sluice";
  for (const auto& a : args) what += " " + a;
  ch.Add(what + " (exit " + std::to_string(rc) + ")", out);
  return out;
}

void Record(Channels& ch, const std::string& where, const HttpReply& r) {
  std::string text = std::to_string(r.status) + " " + r.error + "\n";
  for (const auto& [k, v] : r.headers) text += k + ": " + v + "\n";
  ch.Add(where, text + r.body);
}

// A MySQL user whose password is a marker, dropped when the object dies.
class MysqlUser {
 public:
  MysqlUser(const std::string& name, const std::string& password, const std::string& database) : name_(name) {
    auto c = Connect();
    EXPECT_TRUE(c->Execute("CREATE USER '" + name_ + "'@'127.0.0.1' IDENTIFIED BY '" + password + "'").ok());
    EXPECT_TRUE(c->Execute("GRANT ALL ON `" + database + "`.* TO '" + name_ + "'@'127.0.0.1'").ok());
  }
  ~MysqlUser() {
    if (auto c = Connect()) (void)c->Execute("DROP USER IF EXISTS '" + name_ + "'@'127.0.0.1'");
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

std::string WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text << "\n";
  return path.string();
}

struct Ports {
  uint16_t writer = FreePort(), metrics = FreePort(), admin = FreePort();
};

// A config that plants `m` in every secret-bearing field that a running
// process uses: inline, or (by_reference) through ${env:...}/${file:...}.
// Partition 1 of account is on storage server b: `database_b`, as `user_b`.
std::string ConfigYaml(const Markers& m, bool by_reference, const std::string& user, const std::string& database,
                       const std::string& user_b, const std::string& database_b, const std::string& prefix,
                       const Ports& ports) {
  const auto mysql = MysqlParams();
  const std::string redis_url =
      "redis://:" + m.redis + "@127.0.0.1:" + std::to_string(RedisPort()) + "/0";
  // Inline secrets are quoted (YAML would read some markers as other types).
  auto secret = [&](const std::string& value, const std::string& reference) {
    return by_reference ? "\"" + reference + "\"" : "\"" + value + "\"";
  };
  std::string y;
  y += "storage:\n  mysql:\n    host: " + mysql.host + "\n    port: " + std::to_string(mysql.port) +
       "\n    user: " + user + "\n    password: " + secret(m.mysql, "${file:mysql_password}") +
       "\n    database: " + database + "\n";
  y += "  servers:\n    b:\n      user: " + user_b + "\n      password: " +
       secret(m.mysql_b, "${env:SLUICE_TEST_SECRET_MYSQL_B}") + "\n      database: " + database_b + "\n";
  y += "entities:\n  account: {partitions: 2, servers: {main: 0, b: 1}}\n";
  y += "writer:\n  listen: 127.0.0.1:" + std::to_string(ports.writer) + "\n";
  y += "metrics:\n  listen: 127.0.0.1:" + std::to_string(ports.metrics) + "\n";
  y += "admin:\n  listen: 127.0.0.1:" + std::to_string(ports.admin) +
       "\n  token: " + secret(m.admin, "${env:SLUICE_TEST_SECRET_ADMIN}") + "\n";
  y += "engine:\n  offset_flush_interval: 200ms\n  idle_poll_max: 20ms\n  retry_backoff_max: 200ms\n";
  y += "sinks:\n";
  // An owner longer than 8 characters is dead-lettered.
  y += "  - name: table\n    type: mysql\n    entity: account\n    table: account_view\n"
       "    columns: {owner: {pointer: /owner, type: \"VARCHAR(8)\"}}\n";
  y += "  - name: cache\n    type: redis\n    entity: account\n    url: " +
       secret(redis_url, "${env:SLUICE_TEST_SECRET_REDIS_URL}") + "\n    key: \"" + prefix + ":{id}\"\n";
  y += "  - name: search\n    type: elasticsearch\n    entity: account\n    url: http://127.0.0.1:" +
       std::to_string(OpenSearchPort()) + "\n    index: " + prefix + "_pw\n    username: sluice\n"
       "    password: " + secret(m.es_password, "${file:es_password}") + "\n";
  y += "  - name: search_key\n    type: elasticsearch\n    entity: account\n    url: http://127.0.0.1:" +
       std::to_string(OpenSearchPort()) + "\n    index: " + prefix + "_key\n"
       "    api_key: " + secret(m.es_api_key, "${env:SLUICE_TEST_SECRET_ES_KEY}") + "\n";
  y += "  - name: feed\n    type: kafka\n    entity: account\n    brokers: \"" + KafkaBrokers() +
       "\"\n    topic: " + prefix + "_feed\n    create_topic: true\n    properties:\n"
       "      sasl.username: sluice\n"
       "      sasl.password: " + secret(m.sasl_password, "${env:SLUICE_TEST_SECRET_SASL}") + "\n"
       "      ssl.key.password: " + secret(m.ssl_key_password, "${file:ssl_key_password}") + "\n";
  return y;
}

// Runs every command and endpoint of a process on `path`, collecting what it shows.
void Exercise(Channels& ch, const std::string& path, const Ports& ports, const std::string& admin_token) {
  Show(ch, {"config", "check", path});
  Show(ch, {"config", "check", "--print", path});
  Show(ch, {"init", "--config", path});

  SluiceProcess serve({"serve", "--config", path}, ports.writer);
  std::string why;
  ASSERT_TRUE(serve.Start(&why)) << why;
  HttpClient writer(ports.writer);
  for (int i = 0; i < 5; ++i) {
    Record(ch, "writer create",
           writer.Post("/v1/entities/account/e" + std::to_string(i) + "/commands/create",
                       R"({"owner":"o)" + std::to_string(i) + R"("})", {{"Idempotency-Key", "k" + std::to_string(i)}}));
  }
  Record(ch, "writer create (dead-lettered by table)",
         writer.Post("/v1/entities/account/long/commands/create", R"({"owner":"far too long for eight"})"));
  Record(ch, "writer get", writer.Get("/v1/entities/account/e1"));
  Record(ch, "writer unknown type", writer.Post("/v1/entities/nope/e1/commands/create", "{}"));
  Record(ch, "writer malformed json", writer.Post("/v1/entities/account/e9/commands/create", "{"));
  Record(ch, "writer bad if-match",
         writer.Post("/v1/entities/account/e1/commands/patch", "{}", {{"If-Match", "soon"}}));
  Record(ch, "writer wrong method",
         writer.Send("DELETE /v1/entities/account/e1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
  Record(ch, "writer no route", writer.Get("/v2/nothing"));
  Record(ch, "writer readyz", writer.Get("/readyz"));

  // Let every sink try (the Redis password is refused, OpenSearch and Kafka take theirs).
  std::this_thread::sleep_for(3s);
  // The metrics listener closes each connection: one client per request.
  Record(ch, "metrics", HttpClient(ports.metrics).Get("/metrics"));
  Record(ch, "metrics readyz", HttpClient(ports.metrics).Get("/readyz"));
  Record(ch, "metrics healthz", HttpClient(ports.metrics).Get("/healthz"));

  HttpClient admin(ports.admin);
  const std::vector<std::pair<std::string, std::string>> auth = {{"Authorization", "Bearer " + admin_token}};
  Record(ch, "admin status", admin.Get("/v1/status", auth));
  Record(ch, "admin status without the token", admin.Get("/v1/status"));
  Record(ch, "admin no token", admin.Post("/v1/sinks/table/pause", "{}"));
  Record(ch, "admin wrong token",
         admin.Post("/v1/sinks/table/pause", "{}", {{"Authorization", "Bearer not-the-token"}}));
  Record(ch, "admin unknown sink", admin.Post("/v1/sinks/nope/pause", "{}", auth));
  Record(ch, "admin bad rewind", admin.Post("/v1/sinks/table/rewind", "{\"to\": -1}", auth));
  Record(ch, "admin wrong method", admin.Get("/v1/sinks/table/pause"));
  Record(ch, "admin no route", admin.Get("/v1/nothing"));
  Record(ch, "admin rebuild of kafka", admin.Post("/v1/sinks/feed/rebuild", "{}", auth));
  Show(ch, {"pause", "--config", path, "--sink", "table"});
  Show(ch, {"resume", "--config", path, "--sink", "table"});
  Show(ch, {"status", "--config", path});
  Show(ch, {"status", "--config", path, "--json"});
  Show(ch, {"verify", "--config", path});
  Show(ch, {"deadletters", "list", "--config", path});
  Show(ch, {"deadletters", "list", "--config", path, "--json"});
  Show(ch, {"deadletters", "retry", "--config", path});
  Record(ch, "admin status (later)", admin.Get("/v1/status", auth));
  Record(ch, "writer readyz (later)", writer.Get("/readyz"));
  Record(ch, "metrics readyz (later)", HttpClient(ports.metrics).Get("/readyz"));
  Record(ch, "metrics (later)", HttpClient(ports.metrics).Get("/metrics"));
  serve.Terminate();
  ch.Add("serve log", serve.Log());
  // What was collected covers the error paths: the refused Redis password,
  // the dead letter, the stop.
  EXPECT_NE(ch.Of("sluice status --config " + path + " (").find("redis refused AUTH"), std::string::npos);
  EXPECT_NE(ch.Of("writer readyz (later)").find("redis refused AUTH"), std::string::npos);
  EXPECT_NE(ch.Of("sluice deadletters list --config " + path + " (").find("1 dead letter(s)"), std::string::npos);
  EXPECT_NE(ch.Of("metrics (later)").find("sluice_engine_events_applied_total"), std::string::npos);
  EXPECT_NE(ch.Of("serve log").find("received SIGTERM, stopping"), std::string::npos);
}

TEST(Secrets, NoMarkerReachesAnyOutputOfARunningProcess) {
  SLUICE_REQUIRE_MYSQL();
  SLUICE_REQUIRE_REDIS();
  SLUICE_REQUIRE_OPENSEARCH();
  SLUICE_REQUIRE_KAFKA();
  Channels ch;
  for (const bool by_reference : {false, true}) {
    SCOPED_TRACE(by_reference ? "by reference" : "inline");
    const Markers& m = by_reference ? kByReference : kInline;
    // A database, indices and a topic of its own, so that each run's sinks apply every event.
    TestDatabase db("secrets");
    const std::string prefix = UniquePrefix("secrets");
    IndexDeleter pw_index, key_index;
    pw_index.Set(prefix + "_pw");
    key_index.Set(prefix + "_key");
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / (prefix + "_cfg");
    std::filesystem::create_directories(dir);
    MysqlUser user(UniquePrefix(by_reference ? "ref" : "in").substr(0, 30), m.mysql, db.name());
    TestDatabase db_b("secrets_b");
    MysqlUser user_b(UniquePrefix(by_reference ? "refb" : "inb").substr(0, 30), m.mysql_b, db_b.name());
    ::setenv("SLUICE_TEST_SECRET_MYSQL_B", m.mysql_b.c_str(), 1);
    WriteFile(dir / "mysql_password", m.mysql);
    WriteFile(dir / "es_password", m.es_password);
    WriteFile(dir / "ssl_key_password", m.ssl_key_password);
    ::setenv("SLUICE_TEST_SECRET_ADMIN", m.admin.c_str(), 1);
    ::setenv("SLUICE_TEST_SECRET_REDIS_URL",
             ("redis://:" + m.redis + "@127.0.0.1:" + std::to_string(RedisPort()) + "/0").c_str(), 1);
    ::setenv("SLUICE_TEST_SECRET_ES_KEY", m.es_api_key.c_str(), 1);
    ::setenv("SLUICE_TEST_SECRET_SASL", m.sasl_password.c_str(), 1);
    const Ports ports;
    const std::string path = WriteFile(dir / (by_reference ? "by_reference.yaml" : "inline.yaml"),
                                       ConfigYaml(m, by_reference, user.name(), db.name(), user_b.name(),
                                                  db_b.name(), prefix, ports));
    Exercise(ch, path, ports, m.admin);
    // The process really ran with these secrets: its views took the commands.
    EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM account_view"), 5);
    EXPECT_EQ(db.Scalar("SELECT COUNT(*) FROM sluice_dead_letters WHERE entity_id='long'"), 1);
    // Partition 0's offsets on main, partition 1's on b.
    const std::string applied = "SELECT COALESCE(SUM(applied), 0) FROM sluice_offsets WHERE sink IN ('search', "
                                "'search_key', 'feed')";
    EXPECT_EQ(db.Scalar(applied) + db_b.Scalar(applied), 18);
    EXPECT_GT(db_b.Scalar(applied), 0);
    std::filesystem::remove_all(dir);
  }
  EXPECT_GT(ch.size(), 60u);
  EXPECT_EQ(ch.Leaks(), "");
}

TEST(Secrets, NoMarkerReachesTheErrorsOfAnInvalidConfig) {
  SLUICE_REQUIRE_MYSQL();  // to refuse a password
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (UniquePrefix("secrets") + "_bad");
  std::filesystem::create_directories(dir);
  ::setenv("SLUICE_TEST_SECRET_ES_URL", "https://user:s3cr3t-esurl-ref-2345@search:9200", 1);
  ::setenv("SLUICE_TEST_SECRET_CODEC", "s3cr3t-codec-ref-cdcd", 1);
  WriteFile(dir / "admin_token", "s3cr3t-admin-file-0a0a");
  // Every secret-bearing field wrong in a way that is reported, inline and by reference.
  const std::string bad =
      "storage:\n  mysql:\n    port: 99999\n    password: [s3cr3t-mysql-seq-1111]\n"
      "    pasword: s3cr3t-mysql-typo-2222\n"
      "entities:\n  account: {partitions: 2}\n"
      "admin:\n  listen: nowhere\n  token: {value: s3cr3t-admin-map-3333}\n"
      "sinks:\n"
      "  - {name: es_userinfo, type: elasticsearch, entity: account,"
      " url: \"http://user:s3cr3t-esurl-in-abcd@127.0.0.1:19200\"}\n"
      "  - {name: es_query, type: elasticsearch, entity: account,"
      " url: \"http://127.0.0.1:19200/p?token=s3cr3t-estoken-in-ef01\"}\n"
      "  - {name: es_ref, type: elasticsearch, entity: account, url: \"${env:SLUICE_TEST_SECRET_ES_URL}\"}\n"
      "  - {name: es_auth, type: elasticsearch, entity: account, url: \"http://127.0.0.1:19200\","
      " password: s3cr3t-espw-alone-4444, api_key: [s3cr3t-eskey-seq-5555]}\n"
      "  - {name: redis_port, type: redis, entity: account, url: \"redis://:s3cr3t-redis-in-6666@cache:99999/0\"}\n"
      "  - {name: redis_tls, type: redis, entity: account, url: \"rediss://:s3cr3t-redis-tls-7777@cache:6379/0\"}\n"
      "  - name: feed\n    type: kafka\n    entity: account\n    brokers: \"127.0.0.1:19092\"\n    topic: t\n"
      "    properties:\n"
      "      compression.type: \"${env:SLUICE_TEST_SECRET_CODEC}\"\n"
      "      sasl.password: \"s3cr3t-sasl-${env:SLUICE_TEST_SECRET_CODEC}\"\n"
      "      ssl.key.password: [s3cr3t-sslkey-seq-8888]\n"
      "      no.such.password: s3cr3t-nosuch-9999\n";
  const std::string bad_path = WriteFile(dir / "bad.yaml", bad);
  // Valid YAML for sluice, refused by the plugin (which gets its options only then).
  const std::string plugin =
      "storage:\n  mysql: {host: 127.0.0.1, password: s3cr3t-mysql-ok-aaaa}\n"
      "entities:\n  account: {partitions: 2}\n"
      "plugins: [" + std::string(JSONL_PLUGIN) + "]\n"
      "sinks:\n"
      "  - {name: hook, type: jsonl, entity: account, path: out.jsonl,"
      " url: \"https://u:s3cr3t-plugin-url-6789@hooks.example/x?token=s3cr3t-plugin-q-bbbb\","
      " api_token: s3cr3t-plugin-tok-abab}\n";
  const std::string plugin_path = WriteFile(dir / "plugin.yaml", plugin);
  // Valid, but MySQL refuses the password: the runtime errors must not show it either.
  const auto mysql = MysqlParams();
  const std::string refused =
      "storage:\n  mysql: {host: " + mysql.host + ", port: " + std::to_string(mysql.port) + ", user: " + mysql.user +
      ", password: s3cr3t-mysql-wrong-cccc, database: nowhere}\n"
      "entities:\n  account: {partitions: 2}\n";
  const std::string refused_path = WriteFile(dir / "refused.yaml", refused);

  Channels ch;
  for (const std::string& path : {refused_path}) {
    const std::string out = Show(ch, {"init", "--config", path});
    EXPECT_NE(out.find("Access denied"), std::string::npos) << out;
    Show(ch, {"serve", "--config", path});
    Show(ch, {"status", "--config", path});
    Show(ch, {"verify", "--config", path});
    Show(ch, {"deadletters", "list", "--config", path});
  }
  for (const std::string& path : {bad_path, plugin_path}) {
    const std::string out = Show(ch, {"config", "check", path});
    EXPECT_NE(out.find(path + ":"), std::string::npos) << out;  // it did report problems
    Show(ch, {"config", "check", "--print", path});
    Show(ch, {"serve", "--config", path});
    Show(ch, {"status", "--config", path, "--json"});
  }
  const std::string errors = Show(ch, {"config", "check", bad_path});
  // The errors still say what is wrong with each URL.
  EXPECT_NE(errors.find("sinks[0].url: must be a URL of the form http(s)://host[:port][/path]: put credentials in "
                        "username/password or api_key, not in the URL, got \"http://***:***@127.0.0.1:19200\""),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("sinks[1].url: must be a URL of the form http(s)://host[:port][/path]: no spaces, query or "
                        "fragment, got \"http://127.0.0.1:19200/p?token=***\""),
            std::string::npos)
      << errors;
  EXPECT_NE(errors.find("sinks[6].properties.compression.type: librdkafka refuses it: Invalid value \"***\""),
            std::string::npos)
      << errors;
  EXPECT_EQ(ch.Leaks(), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::testing
