#include "config/config.h"
#include "connectors/builtin_sink_types.h"
#include "connectors/mysql/mysql_options.h"
#include "connectors/redis/redis_options.h"
#include "tests/support/config_support.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace sluice::config {
namespace {

using connectors::mysql::MysqlSinkOptions;
using connectors::redis::RedisSinkOptions;
using testing::Errors;
using testing::kFile;
using testing::kSinks;
using testing::kValid;
using testing::LoadConfig;
using testing::LoadConfigFromString;
using testing::ScopedEnv;
using testing::ScratchDir;
using testing::SinksWith;
using testing::WithSinks;

// kValid with its line `from` replaced by `to` (both without indentation).
std::string ValidWith(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  return s;
}

// ---- valid configurations ----

TEST(LoadConfig, QuickstartExampleLoads) {
  ScopedEnv env("SLUICE_MYSQL_PASSWORD", "demo-password");
  Result<Config> r = LoadConfig(SLUICE_CONFIG_EXAMPLES_DIR "/quickstart.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Config& c = *r;
  EXPECT_EQ(c.path, SLUICE_CONFIG_EXAMPLES_DIR "/quickstart.yaml");
  EXPECT_EQ(c.mysql.host, "127.0.0.1");
  EXPECT_EQ(c.mysql.port, 13306);
  EXPECT_EQ(c.mysql.user, "sluice");
  EXPECT_EQ(c.mysql.password, "demo-password");
  EXPECT_EQ(c.mysql.database, "sluice_demo");
  ASSERT_EQ(c.entities.size(), 2u);
  EXPECT_EQ(c.entities.at("account").name, "account");
  EXPECT_EQ(c.entities.at("account").partitions, 4u);
  EXPECT_EQ(c.entities.at("order").partitions, 2u);
  EXPECT_EQ(c.writer.listen_host, "127.0.0.1");
  EXPECT_EQ(c.writer.listen_port, 8080);
  EXPECT_EQ(c.writer.batch_max, 1000u);
  ASSERT_EQ(c.sinks.size(), 3u);
  EXPECT_EQ(c.sinks[2].name, "balance_per_owner");
  EXPECT_EQ(c.sinks[2].type, "aggregate");
  EXPECT_EQ(c.sinks[2].code, SLUICE_CONFIG_EXAMPLES_DIR "/views/per_owner.js");
  EXPECT_EQ(c.sinks[0].name, "account_cache");
  EXPECT_EQ(c.sinks[0].type, "redis");
  EXPECT_EQ(c.sinks[0].entity, "account");
  EXPECT_EQ(c.sinks[0].Options<RedisSinkOptions>().url, "redis://127.0.0.1:16379/0");
  EXPECT_EQ(c.sinks[0].Options<RedisSinkOptions>().key, "account:{id}");
  EXPECT_EQ(c.sinks[1].name, "account_table");
  EXPECT_EQ(c.sinks[1].type, "mysql");
  EXPECT_EQ(c.sinks[1].Options<MysqlSinkOptions>().table, "account_view");
  ASSERT_EQ(c.sinks[1].Options<MysqlSinkOptions>().columns.size(), 2u);
  EXPECT_EQ(c.sinks[1].Options<MysqlSinkOptions>().columns[0].name, "owner");
  EXPECT_EQ(c.sinks[1].Options<MysqlSinkOptions>().columns[0].pointer, "/owner");
  EXPECT_EQ(c.sinks[1].Options<MysqlSinkOptions>().columns[1].name, "balance");
  EXPECT_EQ(c.sinks[1].Options<MysqlSinkOptions>().columns[1].pointer, "/balance");
}

TEST(LoadConfig, OmittedKeysKeepTheirDefaults) {
  Result<Config> r = LoadConfigFromString(
      "storage: {mysql: }\nentities: {a: {partitions: 1}}\nwriter:\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const MysqlConfig mysql_defaults;
  const WriterConfig writer_defaults;
  EXPECT_EQ(r->mysql.host, mysql_defaults.host);
  EXPECT_EQ(r->mysql.port, mysql_defaults.port);
  EXPECT_EQ(r->mysql.database, mysql_defaults.database);
  EXPECT_EQ(r->mysql.connect_timeout, mysql_defaults.connect_timeout);
  EXPECT_EQ(r->writer.listen_port, writer_defaults.listen_port);
  EXPECT_EQ(r->writer.max_body_bytes, writer_defaults.max_body_bytes);
  EXPECT_EQ(r->writer.read_threads, writer_defaults.read_threads);
  EXPECT_EQ(r->writer.allow_weak_durability, writer_defaults.allow_weak_durability);
  EXPECT_EQ(r->writer.push_thread_slice, std::chrono::microseconds(100));
}

TEST(LoadConfig, ReadsEveryKey) {
  Result<Config> r = LoadConfigFromString(R"(
storage:
  mysql:
    host: db.internal
    port: 3307
    socket: /run/mysqld/mysqld.sock
    user: app
    password: ""
    database: Sluice_2
    connect_timeout: 500ms
    io_timeout: 1m
entities:
  account: {partitions: 1024}
  order_line_2: {partitions: 1}
writer:
  listen: "[::1]:0"
  batch_max: 100000
  max_body_bytes: 512KiB
  io_threads: 64
  read_threads: 256
  entity_cache_entries: 10000000
  conflict_retries: 1000
  allow_weak_durability: true
  routing: false
  id: "writer-2.east"
  advertise: "http://w2.internal:8080"
  lease_ttl: 3s
)",
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->mysql.host, "db.internal");
  EXPECT_EQ(r->mysql.port, 3307);
  EXPECT_EQ(r->mysql.socket, "/run/mysqld/mysqld.sock");
  EXPECT_EQ(r->mysql.user, "app");
  EXPECT_EQ(r->mysql.password, "");
  EXPECT_EQ(r->mysql.database, "Sluice_2");
  EXPECT_EQ(r->mysql.connect_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(r->mysql.io_timeout, std::chrono::milliseconds(60000));
  EXPECT_EQ(r->entities.at("account").partitions, 1024u);
  EXPECT_EQ(r->entities.at("order_line_2").partitions, 1u);
  EXPECT_EQ(r->writer.listen_host, "::1");
  EXPECT_EQ(r->writer.listen_port, 0);
  EXPECT_EQ(r->writer.batch_max, 100000u);
  EXPECT_EQ(r->writer.max_body_bytes, 512u * 1024);
  EXPECT_EQ(r->writer.io_threads, 64u);
  EXPECT_EQ(r->writer.read_threads, 256u);
  EXPECT_EQ(r->writer.entity_cache_entries, 10000000u);
  EXPECT_EQ(r->writer.conflict_retries, 1000u);
  EXPECT_TRUE(r->writer.allow_weak_durability);
  EXPECT_FALSE(r->writer.routing);
  EXPECT_EQ(r->writer.id, "writer-2.east");
  EXPECT_EQ(r->writer.advertise, "http://w2.internal:8080");
  EXPECT_EQ(r->writer.lease_ttl, std::chrono::seconds(3));
  EXPECT_NE(r->Redacted().find("  routing: false\n  id: writer-2.east\n  advertise: http://w2.internal:8080\n  lease_ttl: 3s\n"),
            std::string::npos)
      << r->Redacted();
}

TEST(LoadConfig, WriterRoutingKeysAreChecked) {
  Result<Config> d = LoadConfigFromString(std::string(kValid), kFile);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->writer.routing);  // on unless told otherwise
  EXPECT_EQ(d->writer.lease_ttl, std::chrono::seconds(10));
  for (const std::string bad : {"https://w:1", "http://w", "http://w:0", "http://w:70000", "http://w:80/path",
                                "w:80", "http://bad host:80"}) {
    Result<Config> r = LoadConfigFromString(std::string(kValid) + "writer:\n  advertise: \"" + bad + "\"\n", kFile);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("writer.advertise: must be an http://host:port URL"), std::string::npos)
        << r.status().message();
  }
  Result<Config> ok = LoadConfigFromString(std::string(kValid) + "writer:\n  advertise: http://10.0.0.7:8080\n", kFile);
  EXPECT_TRUE(ok.ok()) << ok.status().message();
  Result<Config> id = LoadConfigFromString(std::string(kValid) + "writer:\n  id: \"a b\"\n  lease_ttl: 11m\n", kFile);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("writer.id: must be a name of 1-128"), std::string::npos) << id.status().message();
  EXPECT_NE(id.status().message().find("writer.lease_ttl: must be between 1s and 10m"), std::string::npos)
      << id.status().message();
}

TEST(LoadConfig, ByteSizesAcceptBinaryUnits) {
  auto body = [](const std::string& v) -> uint64_t {
    Result<Config> r =
        LoadConfigFromString(std::string(kValid) + "writer: {max_body_bytes: " + v + "}\n", kFile);
    EXPECT_TRUE(r.ok()) << v << ": " << r.status().ToString();
    return r.ok() ? r->writer.max_body_bytes : 0;
  };
  EXPECT_EQ(body("1"), 1u);
  EXPECT_EQ(body("1MiB"), 1u << 20);
  EXPECT_EQ(body("64MiB"), 64u << 20);
  EXPECT_EQ(body("2048B"), 2048u);
}

// ---- broken configurations: one exact message each ----

TEST(LoadConfigErrors, UnknownKeySuggestsTheClosestName) {
  EXPECT_EQ(Errors(ValidWith("host: 127.0.0.1", "hots: 127.0.0.1")),
            "t.yaml:3:5: storage.mysql.hots: unknown key (did you mean \"host\"?)");
}

TEST(LoadConfigErrors, UnknownKeyListsTheAcceptedNames) {
  EXPECT_EQ(Errors(std::string(kValid) + "telemetry: {}\n"),
            "t.yaml:10:1: telemetry: unknown key (expected one of: storage, entities, writer, "
            "engine, metrics, sinks, admin, plugins)");
  EXPECT_EQ(Errors(ValidWith("{partitions: 4}", "{partitions: 4, replicas: 2}")),
            "t.yaml:9:28: entities.account.replicas: unknown key (expected one of: partitions, handlers, server, "
            "servers)");
}

TEST(LoadConfigErrors, WrongTypeIsReportedNotThrown) {
  EXPECT_EQ(Errors("storage: [mysql]\nentities: {a: {partitions: 1}}\n"),
            "t.yaml:1:10: storage: must be a mapping, got a sequence");
  EXPECT_EQ(Errors(std::string(kValid) + "writer:\n  batch_max: {n: 5}\n"),
            "t.yaml:11:14: writer.batch_max: must be an integer between 1 and 100000, "
            "got a mapping");
  EXPECT_EQ(Errors(ValidWith("user: sluice", "user: [a, b]")),
            "t.yaml:5:11: storage.mysql.user: must be a string, got a sequence");
  EXPECT_EQ(Errors(ValidWith("account: {partitions: 4}", "account: 4")),
            "t.yaml:9:12: entities.account: must be a mapping, got \"4\"");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {allow_weak_durability: yes}\n"),
            "t.yaml:10:33: writer.allow_weak_durability: must be true or false, got \"yes\"");
  EXPECT_EQ(Errors("- storage\n- entities\n"),
            "t.yaml:1:1: the configuration must be a mapping with storage and entities sections, "
            "got a sequence");
}

TEST(LoadConfigErrors, OutOfRange) {
  EXPECT_EQ(Errors(std::string(kValid) + "writer:\n  batch_max: lots\n"),
            "t.yaml:11:14: writer.batch_max: must be an integer between 1 and 100000, "
            "got \"lots\"");
  EXPECT_EQ(Errors(std::string(kValid) + "writer:\n  batch_max: 0\n"),
            "t.yaml:11:14: writer.batch_max: must be an integer between 1 and 100000, got \"0\"");
  EXPECT_EQ(Errors(ValidWith("port: 13306", "port: 70000")),
            "t.yaml:4:11: storage.mysql.port: must be an integer between 1 and 65535, "
            "got \"70000\"");
  EXPECT_EQ(Errors(ValidWith("{partitions: 4}", "{partitions: 1025}")),
            "t.yaml:9:25: entities.account.partitions: must be an integer between 1 and 1024, "
            "got \"1025\"");
  EXPECT_EQ(Errors(ValidWith("{partitions: 4}", "{partitions: -1}")),
            "t.yaml:9:25: entities.account.partitions: must be an integer between 1 and 1024, "
            "got \"-1\"");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {max_body_bytes: 65MiB}\n"),
            "t.yaml:10:26: writer.max_body_bytes: must be a size between 1 and 67108864 bytes "
            "(a byte count, or a number with KiB, MiB or GiB), got \"65MiB\"");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {max_body_bytes: 1MB}\n"),
            "t.yaml:10:26: writer.max_body_bytes: must be a size between 1 and 67108864 bytes "
            "(a byte count, or a number with KiB, MiB or GiB), got \"1MB\"");
  EXPECT_EQ(Errors(ValidWith("database: sluice_demo", "database: sluice-demo")),
            "t.yaml:7:15: storage.mysql.database: must be a name matching [A-Za-z0-9_]{1,64}, "
            "got \"sluice-demo\"");
}

TEST(LoadConfigErrors, MissingRequiredSection) {
  EXPECT_EQ(Errors("storage:\n  mysql: {host: db}\n"),
            "t.yaml:1:1: entities: required key is missing");
  EXPECT_EQ(Errors("storage:\nentities: {a: {partitions: 1}}\n"),
            "t.yaml:1:1: storage.mysql: required key is missing");
  EXPECT_EQ(Errors("storage: {mysql: {}}\nentities: {}\n"),
            "t.yaml:2:11: entities: at least one entity type is required");
  EXPECT_EQ(Errors("storage: {mysql: {}}\nentities: {a: {}}\n"),
            "t.yaml:2:15: entities.a.partitions: required key is missing");
}

TEST(LoadConfigErrors, BadEntityName) {
  EXPECT_EQ(Errors(ValidWith("account:", "Account:")),
            "t.yaml:9:3: entities.Account: entity type names must match [a-z][a-z0-9_]{0,47}");
  const std::string long_name(49, 'a');
  EXPECT_EQ(Errors(ValidWith("account:", long_name + ":")),
            "t.yaml:9:3: entities." + long_name +
                ": entity type names must match [a-z][a-z0-9_]{0,47}");
  EXPECT_EQ(Errors(ValidWith("account:", std::string(48, 'a') + ":")), "");
}

TEST(LoadConfigErrors, BadDuration) {
  EXPECT_EQ(Errors(ValidWith("user: sluice", "connect_timeout: 2 seconds")),
            "t.yaml:5:22: storage.mysql.connect_timeout: must be a duration such as 500ms, "
            "2s, 1m or 24h, got \"2 seconds\"");
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 10")),
            "t.yaml:5:17: storage.mysql.io_timeout: must be a duration such as 500ms, 2s, 1m or "
            "24h, got \"10\"");
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 2d")),
            "t.yaml:5:17: storage.mysql.io_timeout: must be a duration such as 500ms, 2s, 1m or "
            "24h, got \"2d\"");
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 2h")),
            "t.yaml:5:17: storage.mysql.io_timeout: must be between 1ms and 1h, got \"2h\"");
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 61m")),
            "t.yaml:5:17: storage.mysql.io_timeout: must be between 1ms and 1h, got \"61m\"");
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 0s")),
            "t.yaml:5:17: storage.mysql.io_timeout: must be between 1ms and 1h, got \"0s\"");
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 1h")), "");
  // Microseconds only where the setting is finer than a millisecond.
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 1500us")),
            "t.yaml:5:17: storage.mysql.io_timeout: must be a duration such as 500ms, 2s, 1m or "
            "24h, got \"1500us\"");
}

TEST(LoadConfig, PushThreadSliceTakesMicroseconds) {
  auto slice = [](const std::string& v) {
    Result<Config> r = LoadConfigFromString(std::string(kValid) + "writer: {push_thread_slice: " + v + "}\n", kFile);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->writer.push_thread_slice.count() : -1;
  };
  EXPECT_EQ(slice("250us"), 250);
  EXPECT_EQ(slice("2ms"), 2000);
  EXPECT_EQ(slice("100ms"), 100000);
  EXPECT_EQ(slice("0s"), 0);  // the kernel's default
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {push_thread_slice: 50us}\n"),
            "t.yaml:10:29: writer.push_thread_slice: must be 0s (the kernel's default) or between "
            "100us and 100ms, got \"50us\"");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {push_thread_slice: 101ms}\n"),
            "t.yaml:10:29: writer.push_thread_slice: must be 0s (the kernel's default) or between "
            "100us and 100ms, got \"101ms\"");
  // Far out of range, or past 64 bits: still the setting's own range.
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {push_thread_slice: 2h}\n"),
            "t.yaml:10:29: writer.push_thread_slice: must be 0s (the kernel's default) or between "
            "100us and 100ms, got \"2h\"");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {push_thread_slice: 99999999999999999999us}\n"),
            "t.yaml:10:29: writer.push_thread_slice: must be 0s (the kernel's default) or between "
            "100us and 100ms, got \"99999999999999999999us\"");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {push_thread_slice: 100}\n"),
            "t.yaml:10:29: writer.push_thread_slice: must be a duration such as 100us, 2ms or 1s, "
            "got \"100\"");
}

TEST(LoadConfigErrors, BadListenAddress) {
  const std::string expected_prefix =
      "t.yaml:10:18: writer.listen: must be host:port with a port between 0 and 65535, got ";
  const std::vector<std::string> bad_addresses = {
      "localhost", "127.0.0.1:99999", "127.0.0.1:", ":8080",
      "::1:80",    "[::1]8080",       "127.0.0.1:80x"};
  for (const std::string& bad : bad_addresses) {
    EXPECT_EQ(Errors(std::string(kValid) + "writer: {listen: \"" + bad + "\"}\n"),
              expected_prefix + "\"" + bad + "\"");
  }
}

TEST(LoadConfigErrors, MissingEnvironmentSecret) {
  ScopedEnv env("SLUICE_TEST_UNSET_PASSWORD", nullptr);
  EXPECT_EQ(Errors(ValidWith("password: literal-pw",
                             "password: ${env:SLUICE_TEST_UNSET_PASSWORD}")),
            "t.yaml:6:15: storage.mysql.password: environment variable SLUICE_TEST_UNSET_PASSWORD "
            "is not set");
}

TEST(LoadConfigErrors, SecretInFieldNotMarkedSecret) {
  ScopedEnv env("SLUICE_TEST_HOST", "db.internal");
  EXPECT_EQ(Errors(ValidWith("host: 127.0.0.1", "host: ${env:SLUICE_TEST_HOST}")),
            "t.yaml:3:11: storage.mysql.host: secrets are only accepted in fields marked secret: "
            "storage.mysql.password, storage.servers.*.password, admin.token, sinks[*].url, "
            "sinks[*].password, sinks[*].api_key, sinks[*].properties.*, secret-named plugin options");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {batch_max: \"${file:/etc/n}\"}\n"),
            "t.yaml:10:21: writer.batch_max: secrets are only accepted in fields marked secret: "
            "storage.mysql.password, storage.servers.*.password, admin.token, sinks[*].url, "
            "sinks[*].password, sinks[*].api_key, sinks[*].properties.*, secret-named plugin options");
}

TEST(LoadConfigErrors, MalformedSecretReference) {
  EXPECT_EQ(Errors(ValidWith("password: literal-pw", "password: pre${env:X}")),
            "t.yaml:6:15: storage.mysql.password: a secret reference must be the whole value, "
            "as in \"${env:NAME}\" or \"${file:PATH}\"");
  EXPECT_EQ(Errors(ValidWith("password: literal-pw", "password: ${vault:x}")),
            "t.yaml:6:15: storage.mysql.password: a value of the form ${...} must be ${env:NAME} "
            "or ${file:PATH}");
  EXPECT_EQ(Errors(ValidWith("password: literal-pw", "password: ${env:A-B}")),
            "t.yaml:6:15: storage.mysql.password: invalid environment variable name \"A-B\" in "
            "${env:NAME}");
}

TEST(LoadConfigErrors, YamlSyntaxErrorHasLineAndColumn) {
  EXPECT_EQ(Errors("storage:\n  mysql: {host: a, port: [1,\nentities: {}\n"),
            "t.yaml:4:1: invalid YAML: end of sequence flow not found");
  EXPECT_EQ(Errors("storage:\n  mysql:\n    host: a: b\n"),
            "t.yaml:3:12: invalid YAML: illegal map value");
}

TEST(LoadConfigErrors, EveryProblemIsReportedTogetherInFileOrder) {
  ScopedEnv env("SLUICE_TEST_UNSET_PASSWORD", nullptr);
  EXPECT_EQ(Errors(R"(storage:
  mysql:
    hots: db
    port: 0
    password: ${env:SLUICE_TEST_UNSET_PASSWORD}
entities:
  Account: {partitions: 4}
  order: {partitions: many}
writer:
  listen: nowhere
  batch_max: 100001
  batch_max: 5
)"),
            "t.yaml:3:5: storage.mysql.hots: unknown key (did you mean \"host\"?)\n"
            "t.yaml:4:11: storage.mysql.port: must be an integer between 1 and 65535, got \"0\"\n"
            "t.yaml:5:15: storage.mysql.password: environment variable SLUICE_TEST_UNSET_PASSWORD "
            "is not set\n"
            "t.yaml:7:3: entities.Account: entity type names must match [a-z][a-z0-9_]{0,47}\n"
            "t.yaml:8:23: entities.order.partitions: must be an integer between 1 and 1024, got "
            "\"many\"\n"
            "t.yaml:10:11: writer.listen: must be host:port with a port between 0 and 65535, got "
            "\"nowhere\"\n"
            "t.yaml:11:14: writer.batch_max: must be an integer between 1 and 100000, got "
            "\"100001\"\n"
            "t.yaml:12:3: writer.batch_max: duplicate key (first given on line 11)");
}

TEST(LoadConfigErrors, EmptyFile) {
  const std::string expected =
      "t.yaml:1:1: the configuration is empty; it needs at least the storage and entities sections";
  EXPECT_EQ(Errors(""), expected);
  EXPECT_EQ(Errors("# nothing here yet\n"), expected);
  EXPECT_EQ(Errors("---\n"), expected);
}

TEST(LoadConfigErrors, DeepNestingIsASyntaxError) {
  const std::string message = Errors(std::string(5000, '['));
  EXPECT_EQ(message.rfind("t.yaml:1:", 0), 0u) << message;
  EXPECT_NE(message.find("invalid YAML: nested more than"), std::string::npos) << message;
}

// Found by fuzz/fuzz_config_loader (fuzz/regressions/fuzz_config_loader/
// yaml-stray-comma): yaml-cpp 0.7 never reads past a stray ',' and
// YAML::LoadAll then made empty documents until memory ran out.
TEST(LoadConfigErrors, AStrayCommaIsASyntaxError) {
  EXPECT_EQ(Errors(", type: \nfoo: bar\n"), "t.yaml:1:1: invalid YAML: unexpected \",\"");
  EXPECT_EQ(Errors(std::string(kValid) + "---\n, x\n"), "t.yaml:11:1: only one YAML document is allowed per file");
}

TEST(LoadConfigErrors, MoreThanOneDocument) {
  EXPECT_EQ(Errors(std::string(kValid) + "---\nwriter: {}\n"),
            "t.yaml:11:1: only one YAML document is allowed per file");
}

TEST(LoadConfigErrors, MissingFile) {
  Result<Config> r = LoadConfig("/nonexistent/sluice.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "/nonexistent/sluice.yaml: cannot read: No such file or directory");

  ScratchDir dir;
  r = LoadConfig(dir.path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), dir.path().string() + ": cannot read: Is a directory");
}

TEST(LoadConfigErrors, HostileInputNeverThrows) {
  const std::string deep(5000, '[');
  for (const std::string& text :
       {std::string("? [a, b]\n: 1\n"), std::string("storage: &x {mysql: *x}\n"),
        std::string("\t- tab\n"), std::string("storage:\n  mysql: {port: !!binary AAAA}\n"),
        std::string("entities: {~: {partitions: 1}}\n"), std::string("\x01\xff\xfe garbage: ["),
        std::string("storage: {mysql: {\"ho\\nst\": 1}}\n"), std::string("sinks: &s [*s]\n"),
        std::string("sinks: [&m {type: mysql, columns: {c: *m}, fields: *m}]\n"),
        std::string("sinks: [{type: redis, fields: {? [a]: b}, url: {a: 1}, key: \"{\"}]\n"),
        deep}) {
    Result<Config> r = Config{};
    EXPECT_NO_THROW(r = LoadConfigFromString(text, kFile)) << text;
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    // One problem per line, and every line names the file.
    std::string message = r.status().message();
    for (size_t start = 0; start < message.size();) {
      const size_t end = std::min(message.find('\n', start), message.size());
      EXPECT_EQ(message.compare(start, 7, "t.yaml:"), 0) << message;
      start = end + 1;
    }
  }
}

// ---- secrets ----

TEST(Secrets, EnvironmentReferenceIsResolved) {
  ScopedEnv env("SLUICE_TEST_PASSWORD", "from-env");
  Result<Config> r = LoadConfigFromString(
      ValidWith("password: literal-pw", "password: \"${env:SLUICE_TEST_PASSWORD}\""), kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->mysql.password, "from-env");
}

TEST(Secrets, FileReferenceIsResolvedAndLosesOneTrailingNewline) {
  ScratchDir dir;
  const auto secret = dir.Write("pw", "from-file\n\n");
  Result<Config> r = LoadConfigFromString(
      ValidWith("password: literal-pw", "password: ${file:" + secret.string() + "}"), kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->mysql.password, "from-file\n");

  // A relative path starts at the configuration file's folder.
  dir.Write("pw2", "relative\n");
  const auto config = dir.Write(
      "sluice.yaml", ValidWith("password: literal-pw", "password: ${file:pw2}"));
  r = LoadConfig(config.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->mysql.password, "relative");
}

TEST(Secrets, UnreadableSecretFileNamesThePath) {
  EXPECT_EQ(Errors(ValidWith("password: literal-pw", "password: ${file:/nonexistent/pw}")),
            "t.yaml:6:15: storage.mysql.password: cannot read secret file /nonexistent/pw: "
            "No such file or directory");
}

TEST(Secrets, ValuesNeverAppearInErrorsOrRedactedOutput) {
  constexpr char kSecret[] = "s3cr3t-Value-9";
  ScopedEnv env("SLUICE_TEST_PASSWORD", kSecret);
  ScratchDir dir;
  const auto secret_file = dir.Write("pw", std::string(kSecret) + "\n");
  const std::vector<std::string> passwords = {
      "\"${env:SLUICE_TEST_PASSWORD}\"", "${file:" + secret_file.string() + "}", kSecret};
  for (const std::string& password : passwords) {
    const std::string good = ValidWith("password: literal-pw", "password: " + password);
    Result<Config> r = LoadConfigFromString(good, kFile);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->mysql.password, kSecret);
    const std::string redacted = r->Redacted();
    EXPECT_EQ(redacted.find(kSecret), std::string::npos) << redacted;
    // A reference is shown as written (the printout still resolves); an inline secret as ***.
    const std::string shown = password == kSecret ? "\"***\"" : password[0] == '"' ? password : "\"" + password + "\"";
    EXPECT_NE(redacted.find("password: " + shown + "\n"), std::string::npos) << redacted;

    // The same file with other problems: the message must not leak it either.
    const std::string bad = good + "writer: {batch_max: 0, listen: x}\nbogus: 1\n";
    const std::string errors = Errors(bad);
    EXPECT_FALSE(errors.empty());
    EXPECT_EQ(errors.find(kSecret), std::string::npos) << errors;
  }
  // A secret field of the wrong shape is described, never quoted.
  const std::string errors =
      Errors(ValidWith("password: literal-pw", std::string("password: [") + kSecret + "]"));
  EXPECT_EQ(errors, "t.yaml:6:15: storage.mysql.password: must be a string, got a sequence");
}

// ---- storage servers and placement ----

// kValid's storage (lines 1-7), two more servers (lines 8-16), and `entities`
// from line 17 on.
std::string WithServers(const std::string& entities) {
  return R"(storage:
  mysql:
    host: 127.0.0.1
    port: 13306
    user: sluice
    password: literal-pw
    database: sluice_demo
  servers:
    orders_b:
      host: 10.0.0.2
      port: 3307
      io_timeout: 30s
    archive:
      database: sluice_archive
      user: archiver
      password: other-pw
entities:
)" + entities;
}

TEST(StorageServers, ReadWithDefaultsFromMainAndBothPlacementForms) {
  Result<Config> r = LoadConfigFromString(WithServers(R"(  order:
    partitions: 8
    server: orders_b
  account:
    partitions: 8
    servers:
      main: 0-3
      orders_b: [4, 5-6]
      archive: "7"
  invoice: {partitions: 2}
)"),
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Config& c = *r;
  ASSERT_EQ(c.servers.size(), 2u);
  const StorageServerConfig& b = c.servers[0];
  EXPECT_EQ(b.name, "orders_b");
  EXPECT_EQ(b.origin, "t.yaml:9:5");
  EXPECT_EQ(b.mysql.host, "10.0.0.2");
  EXPECT_EQ(b.mysql.port, 3307);
  EXPECT_EQ(b.mysql.io_timeout, std::chrono::seconds(30));
  // Every key not given is storage.mysql's.
  EXPECT_EQ(b.mysql.user, "sluice");
  EXPECT_EQ(b.mysql.password, "literal-pw");
  EXPECT_EQ(b.mysql.database, "sluice_demo");
  EXPECT_EQ(b.mysql.connect_timeout, c.mysql.connect_timeout);
  const StorageServerConfig& archive = c.servers[1];
  EXPECT_EQ(archive.name, "archive");
  EXPECT_EQ(archive.mysql.host, "127.0.0.1");
  EXPECT_EQ(archive.mysql.port, 13306);
  EXPECT_EQ(archive.mysql.user, "archiver");
  EXPECT_EQ(archive.mysql.password, "other-pw");
  EXPECT_EQ(archive.mysql.database, "sluice_archive");
  EXPECT_EQ(archive.mysql.io_timeout, MysqlConfig{}.io_timeout);

  EXPECT_EQ(c.FindServer("main"), &c.mysql);
  EXPECT_EQ(c.FindServer("orders_b"), &b.mysql);
  EXPECT_EQ(c.FindServer("archive"), &archive.mysql);
  EXPECT_EQ(c.FindServer("nowhere"), nullptr);

  const std::vector<PartitionRange>& order = c.entities.at("order").placement;
  ASSERT_EQ(order.size(), 1u);
  EXPECT_EQ(order[0].first, 0u);
  EXPECT_EQ(order[0].last, 7u);
  EXPECT_EQ(order[0].server, "orders_b");
  // Sorted by first, adjacent ranges of one server merged.
  const std::vector<PartitionRange>& account = c.entities.at("account").placement;
  ASSERT_EQ(account.size(), 3u);
  EXPECT_EQ(account[0].first, 0u);
  EXPECT_EQ(account[0].last, 3u);
  EXPECT_EQ(account[0].server, "main");
  EXPECT_EQ(account[1].first, 4u);
  EXPECT_EQ(account[1].last, 6u);
  EXPECT_EQ(account[1].server, "orders_b");
  EXPECT_EQ(account[2].first, 7u);
  EXPECT_EQ(account[2].last, 7u);
  EXPECT_EQ(account[2].server, "archive");
  EXPECT_TRUE(c.entities.at("invoice").placement.empty());

  const std::vector<std::string> account_servers = {"main", "main", "main", "main",
                                                    "orders_b", "orders_b", "orders_b", "archive"};
  for (uint32_t p = 0; p < 8; ++p) {
    EXPECT_EQ(c.ServerOf("account", p), account_servers[p]) << p;
    EXPECT_EQ(c.ServerOf("order", p), "orders_b") << p;
  }
  EXPECT_EQ(c.ServerOf("invoice", 1), "main");
  EXPECT_EQ(c.ServerOf("no_such_type", 0), "main");
  EXPECT_EQ(c.ServerOf("order", 8), "main");  // past the type's partitions
}

TEST(StorageServers, MainOnlyPlacementIsTheDefault) {
  Result<Config> r = LoadConfigFromString(WithServers(R"(  order: {partitions: 4, server: main}
  account:
    partitions: 4
    servers: {main: [0-1, 2-3]}
)"),
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->entities.at("order").placement.empty());
  EXPECT_TRUE(r->entities.at("account").placement.empty());
  EXPECT_EQ(r->ServerOf("account", 3), "main");
}

TEST(StorageServers, ServersMayComeAfterTheEntitiesThatNameThem) {
  Result<Config> r = LoadConfigFromString(R"(entities:
  order: {partitions: 2, server: b}
storage:
  servers:
    b: {host: db2}
  mysql: {host: db1}
)",
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->servers.size(), 1u);
  EXPECT_EQ(r->servers[0].mysql.host, "db2");
  EXPECT_EQ(r->mysql.host, "db1");
  EXPECT_EQ(r->ServerOf("order", 1), "b");
}

TEST(StorageServersErrors, UnknownServerName) {
  EXPECT_EQ(Errors(WithServers("  order: {partitions: 2, server: orders_c}\n")),
            "t.yaml:18:34: entities.order.server: unknown server \"orders_c\" (did you mean \"orders_b\"?)");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 2\n    servers: {main: 0, elsewhere: 1}\n")),
            "t.yaml:20:24: entities.order.servers.elsewhere: unknown server \"elsewhere\" (expected one of: "
            "main, orders_b, archive, or one added under storage.servers)");
  // Without storage.servers only main exists.
  EXPECT_EQ(Errors(ValidWith("{partitions: 4}", "{partitions: 4, server: orders_b}")),
            "t.yaml:9:36: entities.account.server: unknown server \"orders_b\" (expected one of: main, or one "
            "added under storage.servers)");
}

TEST(StorageServersErrors, ServerAndServersTogether) {
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 2\n    server: orders_b\n    servers: {main: 0-1}\n")),
            "t.yaml:21:5: entities.order.servers: give either server (every partition on one server) or "
            "servers (partition ranges per server), not both");
}

TEST(StorageServersErrors, OverlappingRanges) {
  EXPECT_EQ(Errors(WithServers(R"(  order:
    partitions: 8
    servers:
      main: 0-3
      orders_b: [3-5, 6-7]
)")),
            "t.yaml:22:18: entities.order.servers.orders_b[0]: partition 3 also given to main (storage.mysql) "
            "on line 21; each partition must be on exactly one server");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers: {main: [0-7, 2-4]}\n")),
            "t.yaml:20:27: entities.order.servers.main[1]: partitions 2-4 also given to main (storage.mysql) "
            "on line 20; each partition must be on exactly one server");
}

TEST(StorageServersErrors, RangesMustCoverEveryPartition) {
  EXPECT_EQ(Errors(WithServers(R"(  order:
    partitions: 10
    servers:
      main: 0-3
      orders_b: [5, 7-8]
)")),
            "t.yaml:20:5: entities.order.servers: partitions 4, 6, 9 are on no server; each of the type's 10 "
            "partitions must be on exactly one");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 2\n    servers: {orders_b: 1}\n")),
            "t.yaml:20:5: entities.order.servers: partition 0 is on no server; each of the type's 2 "
            "partitions must be on exactly one");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 4\n    servers: {}\n")),
            "t.yaml:20:5: entities.order.servers: partitions 0-3 are on no server; each of the type's 4 "
            "partitions must be on exactly one");
}

TEST(StorageServersErrors, RangePastThePartitionCount) {
  // Only that: the partitions within the count still cover the rest.
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers: {main: 0-3, orders_b: 4-8}\n")),
            "t.yaml:20:36: entities.order.servers.orders_b: partition range 4-8 is past the last partition, "
            "7 (the type has 8 partitions)");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 1\n    servers: {main: [0, 99999999999]}\n")),
            "t.yaml:20:25: entities.order.servers.main[1]: partition range 99999999999 is past the last "
            "partition, 0 (the type has 1 partition)");
}

TEST(StorageServersErrors, MalformedRanges) {
  const std::string expected =
      "must be a partition range \"A-B\" or \"A\", or a sequence of them such as [0-3, 6], got ";
  for (const std::string bad : {"0..3", "-1", "1-", "0 - 3", "a-b", "1-2-3", "0x1"}) {
    EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers: {main: \"" + bad + "\"}\n")),
              "t.yaml:20:21: entities.order.servers.main: " + expected + "\"" + bad + "\"")
        << bad;
  }
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers: {main: 5-2}\n")),
            "t.yaml:20:21: entities.order.servers.main: must be a partition range \"A-B\" with A not greater "
            "than B, got \"5-2\"");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers: {main: [0-7, [1]]}\n")),
            "t.yaml:20:27: entities.order.servers.main[1]: " + expected + "a sequence");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers: {main: {0: 7}}\n")),
            "t.yaml:20:21: entities.order.servers.main: " + expected + "a mapping");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers: [main]\n")),
            "t.yaml:20:14: entities.order.servers: must be a mapping, got a sequence");
  EXPECT_EQ(Errors(WithServers("  order: {partitions: 8, server: [orders_b]}\n")),
            "t.yaml:18:34: entities.order.server: must be a server name, got a sequence");
}

TEST(StorageServersErrors, BadOrReservedServerName) {
  EXPECT_EQ(Errors(ValidWith("entities:", "  servers:\n    main: {host: db2}\nentities:")),
            "t.yaml:9:5: storage.servers.main: the name main is reserved for storage.mysql; give this server "
            "another name");
  EXPECT_EQ(Errors(ValidWith("entities:", "  servers:\n    Orders: {host: db2}\n    " + std::string(33, 'a') +
                                              ": {host: db3}\n    " + std::string(32, 'a') +
                                              ": {host: db4}\nentities:")),
            "t.yaml:9:5: storage.servers.Orders: server names must match [a-z][a-z0-9_]{0,31}\n"
            "t.yaml:10:5: storage.servers." + std::string(33, 'a') +
                ": server names must match [a-z][a-z0-9_]{0,31}");
}

TEST(StorageServersErrors, RepeatedServerName) {
  EXPECT_EQ(Errors(ValidWith("entities:", "  servers:\n    b: {host: db2}\n    b: {host: db3}\nentities:")),
            "t.yaml:10:5: storage.servers.b: duplicate key (first given on line 9)");
  EXPECT_EQ(Errors(WithServers("  order:\n    partitions: 8\n    servers:\n      main: 0-3\n      main: 4-7\n")),
            "t.yaml:22:7: entities.order.servers.main: duplicate key (first given on line 21)");
}

TEST(StorageServersErrors, ServersMustBeAMapping) {
  EXPECT_EQ(Errors(ValidWith("entities:", "  servers: [db2, db3]\nentities:")),
            "t.yaml:8:12: storage.servers: must be a mapping from server name to its settings, got a sequence");
  // Then no entity's server is reported unknown as well.
  EXPECT_EQ(Errors(ValidWith("entities:\n  account: {partitions: 4}",
                             "  servers: db2\nentities:\n  account: {partitions: 4, server: db2}")),
            "t.yaml:8:12: storage.servers: must be a mapping from server name to its settings, got \"db2\"");
  EXPECT_EQ(Errors(ValidWith("entities:", "  servers:\n    b: 10.0.0.2\nentities:")),
            "t.yaml:9:8: storage.servers.b: must be a mapping, got \"10.0.0.2\"");
}

TEST(StorageServersErrors, TwoNamesForTheSameTables) {
  EXPECT_EQ(Errors(ValidWith("entities:",
                             "  servers:\n    same_as_main: {user: other}\n    b: {host: db2}\n"
                             "    c: {host: db2, port: 13306, password: x}\nentities:")),
            "t.yaml:9:5: storage.servers.same_as_main: reaches the same tables as main (storage.mysql) (host "
            "127.0.0.1, port 13306, database sluice_demo); give it another host, port, socket or database\n"
            "t.yaml:11:5: storage.servers.c: reaches the same tables as \"b\" (host db2, port 13306, database "
            "sluice_demo); give it another host, port, socket or database");
  // Another database on the same server is other tables.
  EXPECT_EQ(Errors(ValidWith("entities:", "  servers:\n    b: {database: other}\nentities:")), "");
  // Through a socket, host and port do not tell servers apart.
  EXPECT_EQ(Errors(ValidWith("database: sluice_demo",
                             "database: sluice_demo\n    socket: /run/mysqld.sock\n"
                             "  servers:\n    b: {database: other, socket: /run/mysqld.sock}\n"
                             "    c: {database: other, socket: /run/mysqld.sock}")),
            "t.yaml:11:5: storage.servers.c: reaches the same tables as \"b\" (socket "
            "/run/mysqld.sock, database other); give it another host, port, socket or database");
  // A server given its own host (or port) does not take main's socket: it is reached there.
  EXPECT_EQ(Errors(ValidWith("database: sluice_demo",
                             "database: sluice_demo\n    socket: /run/mysqld.sock\n"
                             "  servers:\n    b: {host: db2}")),
            "");
  auto own_host = LoadConfigFromString(ValidWith("database: sluice_demo",
                                                 "database: sluice_demo\n    socket: /run/mysqld.sock\n"
                                                 "  servers:\n    b: {host: db2}\n    c: {database: x}"),
                                       kFile);
  ASSERT_TRUE(own_host.ok()) << own_host.status().message();
  EXPECT_EQ(own_host->FindServer("b")->socket, "");
  EXPECT_EQ(own_host->FindServer("c")->socket, "/run/mysqld.sock");  // nothing of its own: all of main's
  EXPECT_EQ(Errors(ValidWith("database: sluice_demo",
                             "database: sluice_demo\n    socket: /run/mysqld.sock\n"
                             "  servers:\n    b: {host: db2, socket: \"\"}")),
            "");
}

TEST(StorageServersErrors, EveryProblemAtOnce) {
  EXPECT_EQ(Errors(R"(storage:
  mysql: {host: db1}
  servers:
    Bad: {host: db2}
    b: {host: db1}
entities:
  order:
    partitions: 4
    server: b
    servers: {main: 0-1, b: x}
  account:
    partitions: 4
    servers: {main: [0-1, 1-2], nowhere: 5}
)"),
            "t.yaml:4:5: storage.servers.Bad: server names must match [a-z][a-z0-9_]{0,31}\n"
            "t.yaml:5:5: storage.servers.b: reaches the same tables as main (storage.mysql) (host db1, port "
            "3306, database sluice); give it another host, port, socket or database\n"
            "t.yaml:10:5: entities.order.servers: give either server (every partition on one server) or servers "
            "(partition ranges per server), not both\n"
            "t.yaml:10:29: entities.order.servers.b: must be a partition range \"A-B\" or \"A\", or a sequence "
            "of them such as [0-3, 6], got \"x\"\n"
            "t.yaml:13:5: entities.account.servers: partition 3 is on no server; each of the type's 4 "
            "partitions must be on exactly one\n"
            "t.yaml:13:27: entities.account.servers.main[1]: partition 1 also given to main (storage.mysql) "
            "on line 13; each partition must be on exactly one server\n"
            "t.yaml:13:33: entities.account.servers.nowhere: unknown server \"nowhere\" (expected one of: "
            "main, Bad, b, or one added under storage.servers)\n"
            "t.yaml:13:42: entities.account.servers.nowhere: partition range 5 is past the last partition, 3 "
            "(the type has 4 partitions)");
}

TEST(StorageServers, PasswordIsASecretRecordedAndRedacted) {
  constexpr char kSecret[] = "s3rv3r-Secret-7";
  ScopedEnv env("SLUICE_TEST_SERVER_PASSWORD", kSecret);
  ScopedEnv main_env("SLUICE_TEST_MAIN_PASSWORD", "main-secret");
  Result<Config> r = LoadConfigFromString(R"(storage:
  mysql:
    password: "${env:SLUICE_TEST_MAIN_PASSWORD}"
  servers:
    b:
      host: db2
      password: "${env:SLUICE_TEST_SERVER_PASSWORD}"
    c: {host: db3, password: inline-pw}
    d: {host: db4}
entities:
  account: {partitions: 2}
)",
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->servers.size(), 3u);
  EXPECT_EQ(r->servers[0].mysql.password, kSecret);
  EXPECT_EQ(r->servers[1].mysql.password, "inline-pw");
  EXPECT_EQ(r->servers[2].mysql.password, "main-secret");  // storage.mysql's
  EXPECT_EQ(r->secret_references.at("storage.servers.b.password"), "${env:SLUICE_TEST_SERVER_PASSWORD}");
  EXPECT_EQ(r->secret_references.count("storage.servers.c.password"), 0u);
  // Taken from storage.mysql, it is shown as storage.mysql's is.
  EXPECT_EQ(r->secret_references.at("storage.servers.d.password"), "${env:SLUICE_TEST_MAIN_PASSWORD}");
  const std::string redacted = r->Redacted();
  EXPECT_EQ(redacted.find(kSecret), std::string::npos) << redacted;
  EXPECT_EQ(redacted.find("inline-pw"), std::string::npos) << redacted;
  EXPECT_EQ(redacted.find("main-secret"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("    b:\n      host: db2\n      port: 3306\n      user: sluice\n"
                          "      password: \"${env:SLUICE_TEST_SERVER_PASSWORD}\"\n"),
            std::string::npos)
      << redacted;
  EXPECT_NE(redacted.find("    c:\n      host: db3\n      port: 3306\n      user: sluice\n"
                          "      password: \"***\"\n"),
            std::string::npos)
      << redacted;
  EXPECT_NE(redacted.find("    d:\n      host: db4\n      port: 3306\n      user: sluice\n"
                          "      password: \"${env:SLUICE_TEST_MAIN_PASSWORD}\"\n"),
            std::string::npos)
      << redacted;
  // The value never appears in a message either.
  const std::string errors = Errors(ValidWith("entities:", std::string("  servers:\n    b: {host: db2, password: ") +
                                                               kSecret + ", port: 0}\n    c: {host: db3, password: [" +
                                                               kSecret + "]}\nentities:"));
  EXPECT_EQ(errors,
            "t.yaml:9:53: storage.servers.b.port: must be an integer between 1 and 65535, got \"0\"\n"
            "t.yaml:10:30: storage.servers.c.password: must be a string, got a sequence");
  ScopedEnv unset("SLUICE_TEST_UNSET_PASSWORD", nullptr);
  EXPECT_EQ(Errors(ValidWith("entities:", "  servers:\n    b: {host: db2, password: "
                                          "\"${env:SLUICE_TEST_UNSET_PASSWORD}\"}\nentities:")),
            "t.yaml:9:30: storage.servers.b.password: environment variable SLUICE_TEST_UNSET_PASSWORD is not set");
}

TEST(Redacted, PrintsServersAndPlacementAndLoadsBack) {
  const std::string text = WithServers(R"(  order: {partitions: 8, server: orders_b}
  account:
    partitions: 8
    servers:
      orders_b: [4, 6-7]
      main: [0-3, 5]
  invoice: {partitions: 2, servers: {archive: 0-1}}
  line: {partitions: 1}
)");
  Result<Config> r = LoadConfigFromString(text, kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string redacted = r->Redacted();
  EXPECT_NE(redacted.find("storage:\n"
                          "  mysql:\n"
                          "    host: 127.0.0.1\n"
                          "    port: 13306\n"
                          "    user: sluice\n"
                          "    password: \"***\"\n"
                          "    database: sluice_demo\n"
                          "    connect_timeout: 2s\n"
                          "    io_timeout: 10s\n"
                          "  servers:\n"
                          "    orders_b:\n"
                          "      host: 10.0.0.2\n"
                          "      port: 3307\n"
                          "      user: sluice\n"
                          "      password: \"***\"\n"
                          "      database: sluice_demo\n"
                          "      connect_timeout: 2s\n"
                          "      io_timeout: 30s\n"
                          "    archive:\n"
                          "      host: 127.0.0.1\n"
                          "      port: 13306\n"
                          "      user: archiver\n"
                          "      password: \"***\"\n"
                          "      database: sluice_archive\n"
                          "      connect_timeout: 2s\n"
                          "      io_timeout: 10s\n"
                          "entities:\n"
                          "  account:\n"
                          "    partitions: 8\n"
                          "    servers:\n"
                          "      main: [0-3, 5]\n"
                          "      orders_b: [4, 6-7]\n"
                          "  invoice:\n"
                          "    partitions: 2\n"
                          "    server: archive\n"
                          "  line:\n"
                          "    partitions: 1\n"
                          "  order:\n"
                          "    partitions: 8\n"
                          "    server: orders_b\n"
                          "writer:\n"),
            std::string::npos)
      << redacted;

  Result<Config> again = LoadConfigFromString(redacted, kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << redacted;
  EXPECT_EQ(again->Redacted(), redacted);
  ASSERT_EQ(again->servers.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again->servers[i].name, r->servers[i].name);
    EXPECT_EQ(again->servers[i].mysql.host, r->servers[i].mysql.host);
    EXPECT_EQ(again->servers[i].mysql.port, r->servers[i].mysql.port);
    EXPECT_EQ(again->servers[i].mysql.database, r->servers[i].mysql.database);
    EXPECT_EQ(again->servers[i].mysql.io_timeout, r->servers[i].mysql.io_timeout);
  }
  for (const auto& [name, entity] : r->entities) {
    const std::vector<PartitionRange>& back = again->entities.at(name).placement;
    ASSERT_EQ(back.size(), entity.placement.size()) << name;
    for (size_t i = 0; i < back.size(); ++i) {
      EXPECT_EQ(back[i].first, entity.placement[i].first) << name;
      EXPECT_EQ(back[i].last, entity.placement[i].last) << name;
      EXPECT_EQ(back[i].server, entity.placement[i].server) << name;
    }
  }

  // A server's empty socket is kept when storage.mysql has one.
  Result<Config> socket = LoadConfigFromString(
      ValidWith("database: sluice_demo",
                "database: sluice_demo\n    socket: /run/mysqld.sock\n  servers:\n    b: {host: db2, socket: \"\"}"),
      kFile);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  Result<Config> socket_again = LoadConfigFromString(socket->Redacted(), kFile);
  ASSERT_TRUE(socket_again.ok()) << socket_again.status().ToString() << "\n" << socket->Redacted();
  EXPECT_EQ(socket_again->servers.at(0).mysql.socket, "");
  EXPECT_EQ(socket_again->mysql.socket, "/run/mysqld.sock");
}

// ---- Redacted ----

TEST(Redacted, PrintsEveryFieldAndLoadsBack) {
  ScopedEnv env("SLUICE_MYSQL_PASSWORD", "demo-password");
  Result<Config> r = LoadConfig(SLUICE_CONFIG_EXAMPLES_DIR "/quickstart.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->Redacted(),
            "storage:\n"
            "  mysql:\n"
            "    host: 127.0.0.1\n"
            "    port: 13306\n"
            "    user: sluice\n"
            "    password: \"${env:SLUICE_MYSQL_PASSWORD}\"\n"
            "    database: sluice_demo\n"
            "    connect_timeout: 2s\n"
            "    io_timeout: 10s\n"
            "entities:\n"
            "  account:\n"
            "    partitions: 4\n"
            "    handlers: " SLUICE_CONFIG_EXAMPLES_DIR "/handlers/account.js\n"
            "  order:\n"
            "    partitions: 2\n"
            "writer:\n"
            "  listen: 127.0.0.1:8080\n"
            "  batch_max: 1000\n"
            "  max_body_bytes: 1048576\n"
            "  max_json_depth: 100\n"
            "  io_threads: 2\n"
            "  read_threads: 4\n"
            "  entity_cache_entries: 100000\n"
            "  conflict_retries: 16\n"
            "  allow_weak_durability: false\n"
            "  handler_timeout: 50ms\n"
            "  handler_memory: 16777216\n"
            "  push_thread_slice: 100us\n"
            "  routing: true\n"
            "  lease_ttl: 10s\n"
            "  max_connections: 10000\n"
            "  header_timeout: 10s\n"
            "  body_timeout: 30s\n"
            "  idle_timeout: 5m\n"
            "  write_timeout: 30s\n"
            "engine:\n"
            "  offset_flush_interval: 1s\n"
            "  batch_max: 5000\n"
            "  idle_poll_max: 50ms\n"
            "  retry_backoff_max: 5s\n"
            "  inflight_batches: 4\n"
            "  durability_barrier: auto\n"
            "  lease_ttl: 10s\n"
            "  anti_entropy:\n"
            "    enabled: true\n"
            "    rate: 100\n"
            "    batch: 100\n"
            "sinks:\n"
            "  - name: account_cache\n"
            "    type: redis\n"
            "    entity: account\n"
            "    on_error: dead_letter\n"
            "    batch_max: 1000\n"
            "    url: redis://127.0.0.1:16379/0\n"
            "    key: account:{id}\n"
            "    format: json\n"
            "    ttl: 0s\n"
            "    tombstone_ttl: 24h\n"
            "  - name: account_table\n"
            "    type: mysql\n"
            "    entity: account\n"
            "    on_error: dead_letter\n"
            "    batch_max: 1000\n"
            "    table: account_view\n"
            "    columns:\n"
            "      owner: {pointer: /owner, type: TEXT}\n"
            "      balance: {pointer: /balance, type: TEXT}\n"
            "    auto_create: true\n"
            "    connections: 1\n"
            "    version_cache: 262144\n"
            "  - name: balance_per_owner\n"
            "    type: aggregate\n"
            "    entity: account\n"
            "    on_error: dead_letter\n"
            "    batch_max: 1000\n"
            "    code: " SLUICE_CONFIG_EXAMPLES_DIR "/views/per_owner.js\n"
            "    tables:\n"
            "      balance_per_owner:\n"
            "        key: {owner: VARCHAR(64)}\n"
            "        columns: {total: \"DECIMAL(20,2)\", accounts: BIGINT}\n");

  Result<Config> again = LoadConfigFromString(r->Redacted(), "redacted.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->Redacted(), r->Redacted());
}

TEST(Redacted, BracketsIpv6ListenHostsAndKeepsSubSecondDurations) {
  Result<Config> r = LoadConfigFromString(
      std::string(kValid) + "writer: {listen: \"[::1]:9000\"}\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Config c = *r;
  c.mysql.connect_timeout = std::chrono::milliseconds(1500);
  const std::string redacted = c.Redacted();
  EXPECT_NE(redacted.find("listen: \"[::1]:9000\""), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("connect_timeout: 1500ms"), std::string::npos) << redacted;
  Result<Config> again = LoadConfigFromString(redacted, kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->writer.listen_host, "::1");
  EXPECT_EQ(again->mysql.connect_timeout, std::chrono::milliseconds(1500));
}

// ---- engine and sinks ----

TEST(Admin, OffUnlessPresentAndLoopbackByDefault) {
  Result<Config> none = LoadConfigFromString(kValid, kFile);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->admin.enabled);
  EXPECT_EQ(none->Redacted().find("admin"), std::string::npos);

  ScopedEnv env("SLUICE_TEST_ADMIN_TOKEN", "s3cret-admin");
  Result<Config> r =
      LoadConfigFromString(std::string(kValid) + "admin: {token: \"${env:SLUICE_TEST_ADMIN_TOKEN}\"}\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->admin.enabled);
  EXPECT_EQ(r->admin.listen_host, "127.0.0.1");
  EXPECT_EQ(r->admin.listen_port, 9470);
  EXPECT_EQ(r->admin.token, "s3cret-admin");
  const std::string redacted = r->Redacted();
  EXPECT_NE(redacted.find("admin:\n  listen: 127.0.0.1:9470\n  token: \"${env:SLUICE_TEST_ADMIN_TOKEN}\"\n"),
            std::string::npos)
      << redacted;
  EXPECT_EQ(redacted.find("s3cret-admin"), std::string::npos);
}

TEST(Admin, Errors) {
  EXPECT_EQ(Errors(std::string(kValid) + "admin: {listen: nowhere}\n"),
            "t.yaml:10:17: admin.listen: must be host:port with a port between 0 and 65535, got \"nowhere\"");
  EXPECT_EQ(Errors(std::string(kValid) + "admin: {tokn: x}\n"),
            "t.yaml:10:9: admin.tokn: unknown key (did you mean \"token\"?)");
  ScopedEnv env("SLUICE_TEST_UNSET_TOKEN", nullptr);
  EXPECT_EQ(Errors(std::string(kValid) + "admin: {token: \"${env:SLUICE_TEST_UNSET_TOKEN}\"}\n"),
            "t.yaml:10:16: admin.token: environment variable SLUICE_TEST_UNSET_TOKEN is not set");
}

// ---- metrics ----

TEST(Metrics, OffUnlessPresentAndPrintedWhenOn) {
  Result<Config> none = LoadConfigFromString(kValid, kFile);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->metrics.enabled);
  EXPECT_EQ(none->Redacted().find("metrics"), std::string::npos);

  Result<Config> defaults = LoadConfigFromString(std::string(kValid) + "metrics: {}\n", kFile);
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  EXPECT_TRUE(defaults->metrics.enabled);
  EXPECT_EQ(defaults->metrics.listen_host, "127.0.0.1");
  EXPECT_EQ(defaults->metrics.listen_port, 9464);

  Result<Config> r = LoadConfigFromString(std::string(kValid) + "metrics: {listen: 0.0.0.0:9100}\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->metrics.listen_host, "0.0.0.0");
  EXPECT_EQ(r->metrics.listen_port, 9100);
  const std::string redacted = r->Redacted();
  EXPECT_NE(redacted.find("metrics:\n  listen: 0.0.0.0:9100\n"), std::string::npos) << redacted;
  Result<Config> again = LoadConfigFromString(redacted, kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->metrics.listen_port, 9100);
}

TEST(Metrics, Errors) {
  const std::string bad_listen = Errors(std::string(kValid) + "metrics: {listen: nowhere}\n");
  EXPECT_EQ(bad_listen.substr(0, 30), "t.yaml:10:19: metrics.listen: ") << bad_listen;
  EXPECT_NE(bad_listen.find("\"nowhere\""), std::string::npos) << bad_listen;
  EXPECT_EQ(Errors(std::string(kValid) + "metrics: {lisen: 127.0.0.1:1}\n"),
            "t.yaml:10:11: metrics.lisen: unknown key (did you mean \"listen\"?)");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {listen: 127.0.0.1:8080}\nmetrics: {listen: 127.0.0.1:8080}\n"),
            "t.yaml:11:19: metrics.listen: must differ from writer.listen, which `sluice serve` also opens "
            "(both are 127.0.0.1:8080)");
  // Port 0 picks a free port for each, so two zeros never clash.
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {listen: 127.0.0.1:0}\nmetrics: {listen: 127.0.0.1:0}\n"), "");
  // A wildcard host takes the port on every address.
  EXPECT_EQ(Errors(std::string(kValid) + "metrics: {listen: 0.0.0.0:8080}\n"),
            "t.yaml:10:19: metrics.listen: must differ from writer.listen, which `sluice serve` also opens "
            "(127.0.0.1:8080 and 0.0.0.0:8080 share the port)");
  // Each process's own pairs: writer opens writer.listen and metrics.writer_listen ...
  EXPECT_EQ(Errors(std::string(kValid) + "metrics: {writer_listen: 127.0.0.1:8080}\n"),
            "t.yaml:10:26: metrics.writer_listen: must differ from writer.listen, which `sluice writer` also "
            "opens (both are 127.0.0.1:8080)");
  // ... sync opens admin.listen and metrics.sync_listen; serve opens admin.listen and writer.listen.
  EXPECT_EQ(Errors(std::string(kValid) + "admin: {listen: 127.0.0.1:9000}\nmetrics: {listen: 127.0.0.1:9001, "
                                         "sync_listen: 127.0.0.1:9000}\n"),
            "t.yaml:11:48: metrics.sync_listen: must differ from admin.listen, which `sluice sync` also opens "
            "(both are 127.0.0.1:9000)");
  EXPECT_EQ(Errors(std::string(kValid) + "admin: {listen: 127.0.0.1:8080}\n"),
            "t.yaml:10:17: admin.listen: must differ from writer.listen, which `sluice serve` also opens "
            "(both are 127.0.0.1:8080)");
  // writer and sync may share an address: they may run on two machines.
  EXPECT_EQ(Errors(std::string(kValid) + "metrics: {writer_listen: 127.0.0.1:9100, sync_listen: 127.0.0.1:9100}\n"),
            "");
  EXPECT_EQ(Errors(std::string(kValid) + "metrics: {sync_listen: here}\n").substr(0, 35),
            "t.yaml:10:24: metrics.sync_listen: ");
}

TEST(Metrics, EachProcessHasItsOwnAddressDefaultingToListen) {
  Result<Config> defaults = LoadConfigFromString(std::string(kValid) + "metrics: {listen: 127.0.0.1:9100}\n", kFile);
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  for (Process p : {Process::kServe, Process::kWriter, Process::kSync}) {
    EXPECT_EQ(defaults->metrics.ListenOf(p), (std::pair<std::string, uint16_t>{"127.0.0.1", 9100}));
  }
  Result<Config> r = LoadConfigFromString(
      std::string(kValid) +
          "metrics:\n  writer_listen: \"[::1]:9101\"\n  sync_listen: 0.0.0.0:9102\n  listen: 127.0.0.1:9100\n",
      kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->metrics.ListenOf(Process::kServe), (std::pair<std::string, uint16_t>{"127.0.0.1", 9100}));
  EXPECT_EQ(r->metrics.ListenOf(Process::kWriter), (std::pair<std::string, uint16_t>{"::1", 9101}));
  EXPECT_EQ(r->metrics.ListenOf(Process::kSync), (std::pair<std::string, uint16_t>{"0.0.0.0", 9102}));
  const std::string redacted = r->Redacted();
  EXPECT_NE(redacted.find("  writer_listen: \"[::1]:9101\"\n  sync_listen: 0.0.0.0:9102\n"), std::string::npos)
      << redacted;
  Result<Config> again = LoadConfigFromString(redacted, kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString() << redacted;
  EXPECT_EQ(again->metrics.ListenOf(Process::kWriter), r->metrics.ListenOf(Process::kWriter));
  EXPECT_EQ(again->metrics.ListenOf(Process::kSync), r->metrics.ListenOf(Process::kSync));

  EXPECT_EQ(ParseListenAddress("[::1]:80").value(), (std::pair<std::string, uint16_t>{"::1", 80}));
  EXPECT_FALSE(ParseListenAddress("127.0.0.1").ok());
  EXPECT_FALSE(ParseListenAddress("127.0.0.1:65536").ok());
  EXPECT_EQ(FormatListenAddress("::1", 80), "[::1]:80");
}

// ---- listener limits (writer, admin, metrics) ----

TEST(Listeners, LimitsHaveDefaultsPerListenerAndAreRead) {
  Result<Config> d = LoadConfigFromString(std::string(kValid) + "admin: {}\nmetrics: {}\n", kFile);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  using std::chrono::seconds;
  EXPECT_EQ(d->writer.limits.max_connections, 10000u);
  EXPECT_EQ(d->writer.limits.header_timeout, seconds(10));
  EXPECT_EQ(d->writer.limits.body_timeout, seconds(30));
  EXPECT_EQ(d->writer.limits.idle_timeout, seconds(300));
  EXPECT_EQ(d->writer.limits.write_timeout, seconds(30));
  for (const ListenerLimits* l : {&d->admin.limits, &d->metrics.limits}) {
    EXPECT_EQ(l->max_connections, 64u);
    EXPECT_EQ(l->header_timeout, seconds(10));
    EXPECT_EQ(l->body_timeout, seconds(30));
    EXPECT_EQ(l->idle_timeout, seconds(60));
    EXPECT_EQ(l->write_timeout, seconds(30));
  }
  Result<Config> r = LoadConfigFromString(
      std::string(kValid) +
          "writer: {max_connections: 5, header_timeout: 1s, body_timeout: 2s, idle_timeout: 3s, write_timeout: 4s}\n"
          "admin: {max_connections: 6, header_timeout: 500ms}\n"
          "metrics: {max_connections: 7, idle_timeout: 1m}\n",
      kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->writer.limits.max_connections, 5u);
  EXPECT_EQ(r->writer.limits.header_timeout, seconds(1));
  EXPECT_EQ(r->writer.limits.body_timeout, seconds(2));
  EXPECT_EQ(r->writer.limits.idle_timeout, seconds(3));
  EXPECT_EQ(r->writer.limits.write_timeout, seconds(4));
  EXPECT_EQ(r->admin.limits.max_connections, 6u);
  EXPECT_EQ(r->admin.limits.header_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(r->metrics.limits.max_connections, 7u);
  EXPECT_EQ(r->metrics.limits.idle_timeout, seconds(60));
  Result<Config> again = LoadConfigFromString(r->Redacted(), kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->writer.limits.write_timeout, seconds(4));
  EXPECT_EQ(again->admin.limits.header_timeout, std::chrono::milliseconds(500));
  EXPECT_EQ(again->metrics.limits.max_connections, 7u);

  EXPECT_EQ(Errors(std::string(kValid) + "writer: {max_connections: 0}\n"),
            "t.yaml:10:27: writer.max_connections: must be an integer between 1 and 1000000, got \"0\"");
  EXPECT_EQ(Errors(std::string(kValid) + "metrics: {header_timeout: 10ms}\n"),
            "t.yaml:10:27: metrics.header_timeout: must be between 100ms and 1h, got \"10ms\"");
  EXPECT_EQ(Errors(std::string(kValid) + "admin: {idle_timout: 1s}\n"),
            "t.yaml:10:9: admin.idle_timout: unknown key (did you mean \"idle_timeout\"?)");
}

// ---- TLS to MySQL (storage.mysql.ssl_*) ----

TEST(MysqlTlsKeys, ACaAloneMeansVerifyIdentityAndTheFilesAreResolved) {
  ScratchDir dir;
  const std::string pem = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n";
  const std::string ca = dir.Write("ca.pem", pem).string();
  auto r = LoadConfigFromString(ValidWith("database: sluice_demo", "database: sluice_demo\n    ssl_ca: " + ca), kFile);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->mysql.ssl_mode, MysqlSslMode::kVerifyIdentity);
  EXPECT_EQ(r->mysql.ssl_ca, ca);
  // Every mode by name; a server inherits main's TLS unless it turns it off.
  const std::string cert = dir.Write("c.pem", pem).string();
  const std::string key = dir.Write("c.key", "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n").string();
  auto m = LoadConfigFromString(
      ValidWith("database: sluice_demo",
                "database: sluice_demo\n    ssl_mode: verify_ca\n    ssl_ca: " + ca + "\n    ssl_cert: " + cert +
                    "\n    ssl_key: " + key + "\n  servers:\n    b: {host: db2}\n    c: {host: db3, ssl_mode: disabled}"),
      kFile);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->mysql.ssl_mode, MysqlSslMode::kVerifyCa);
  EXPECT_EQ(m->FindServer("b")->ssl_mode, MysqlSslMode::kVerifyCa);
  EXPECT_EQ(m->FindServer("b")->ssl_cert, cert);
  EXPECT_EQ(m->FindServer("c")->ssl_mode, MysqlSslMode::kDisabled);
  EXPECT_EQ(m->FindServer("c")->ssl_ca, "");
  // Printed and read back alike.
  auto again = LoadConfigFromString(m->Redacted(), kFile);
  ASSERT_TRUE(again.ok()) << again.status().message() << "\n" << m->Redacted();
  EXPECT_EQ(again->mysql.ssl_mode, MysqlSslMode::kVerifyCa);
  EXPECT_EQ(again->mysql.ssl_key, key);
}

TEST(MysqlTlsKeys, MistakesAreReportedWithTheirLines) {
  ScratchDir dir;
  const std::string ca = dir.Write("ca.pem", "-----BEGIN CERTIFICATE-----\nx\n").string();
  const std::string not_pem = dir.Write("ca.der", "\x30\x82").string();
  const auto with = [](const std::string& lines) {
    return ValidWith("database: sluice_demo", "database: sluice_demo\n" + lines);
  };
  EXPECT_EQ(Errors(with("    ssl_mode: verify_identity")),
            "t.yaml:8:15: storage.mysql.ssl_mode: needs ssl_ca: the CA certificates to verify the server with");
  EXPECT_EQ(Errors(with("    ssl_mode: sometimes")),
            "t.yaml:8:15: storage.mysql.ssl_mode: must be disabled, required, verify_ca or verify_identity, got "
            "\"sometimes\"");
  EXPECT_EQ(Errors(with("    ssl_mode: disabled\n    ssl_ca: " + ca)),
            "t.yaml:8:15: storage.mysql.ssl_mode: is disabled but TLS files are given; remove them or choose a mode");
  EXPECT_EQ(Errors(with("    ssl_ca: " + ca + "\n    ssl_cert: " + ca)),
            "t.yaml:9:15: storage.mysql.ssl_cert: needs ssl_key, the certificate's private key");
  EXPECT_NE(Errors(with("    ssl_ca: " + not_pem)).find("is not a PEM file"), std::string::npos);
  EXPECT_NE(Errors(with("    ssl_ca: /nonexistent/ca.pem")).find("cannot read CA file"), std::string::npos);
}

}  // namespace
}  // namespace sluice::config
