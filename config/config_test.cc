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
using testing::ValidWith;
using testing::WithSinks;


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
  EXPECT_EQ(r->writer.batch_threads, 0u);  // auto
  EXPECT_EQ(r->writer.group_commit_max, 32u);
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
  batch_threads: 1024
  group_commit_max: 1
  entity_cache_entries: 10000000
  conflict_retries: 1000
  overlap_commits: true
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
  EXPECT_EQ(r->writer.batch_threads, 1024u);
  EXPECT_EQ(r->writer.group_commit_max, 1u);
  EXPECT_EQ(r->writer.entity_cache_entries, 10000000u);
  EXPECT_EQ(r->writer.conflict_retries, 1000u);
  EXPECT_TRUE(r->writer.overlap_commits);
  EXPECT_TRUE(r->writer.allow_weak_durability);
  EXPECT_FALSE(r->writer.routing);
  EXPECT_EQ(r->writer.id, "writer-2.east");
  EXPECT_EQ(r->writer.advertise, "http://w2.internal:8080");
  EXPECT_EQ(r->writer.lease_ttl, std::chrono::seconds(3));
  EXPECT_NE(r->Redacted().find("  routing: false\n  id: writer-2.east\n  advertise: http://w2.internal:8080\n  lease_ttl: 3s\n"),
            std::string::npos)
      << r->Redacted();
}

// The listeners' tls: cert and key required, PEM files, printed back.
TEST(LoadConfig, ListenerTls) {
  const std::string dir = ::testing::TempDir();  // ends with /
  for (const char* f : {"l.pem", "l.key", "ca.pem"}) {
    std::ofstream(dir + f) << "-----BEGIN X-----\nMIIB\n-----END X-----\n";
  }
  const std::string tls = "{cert: " + dir + "l.pem, key: " + dir + "l.key, client_ca: " + dir + "ca.pem, ca: " + dir + "ca.pem}";
  Result<Config> r = LoadConfigFromString(std::string(kValid) + "writer:\n  tls: " + tls + "\nadmin:\n  token: t\n  tls: " +
                                              tls + "\nmetrics:\n  tls: {cert: " + dir + "l.pem, key: " + dir + "l.key}\n",
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->writer.tls.cert, dir + "l.pem");
  EXPECT_EQ(r->admin.tls.client_ca, dir + "ca.pem");
  EXPECT_TRUE(r->metrics.tls.enabled());
  EXPECT_TRUE(r->metrics.tls.client_ca.empty());
  EXPECT_NE(r->Redacted().find("  tls:\n    cert: " + dir + "l.pem\n    key: " + dir + "l.key\n    client_ca: "),
            std::string::npos)
      << r->Redacted();
  EXPECT_EQ(Errors(std::string(kValid) + "writer:\n  tls: {cert: " + dir + "l.pem}\n"),
            "t.yaml:11:8: writer.tls.key: required key is missing");
  EXPECT_NE(Errors(std::string(kValid) + "admin:\n  tls: {cert: " + dir + "none.pem, key: " + dir + "l.key}\n")
                .find("admin.tls.cert: cannot read certificate file "),
            std::string::npos);
  EXPECT_NE(Errors(std::string(kValid) + "metrics:\n  tls: {cert: " + dir + "l.pem, key: " + dir + "l.key, crt: x}\n")
                .find("metrics.tls.crt: unknown key"),
            std::string::npos);
}

TEST(LoadConfig, WriterRoutingKeysAreChecked) {
  Result<Config> d = LoadConfigFromString(std::string(kValid), kFile);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->writer.routing);  // on unless told otherwise
  EXPECT_EQ(d->writer.lease_ttl, std::chrono::seconds(10));
  for (const std::string bad : {"ftp://w:1", "https://w", "http://w", "http://w:0", "http://w:70000", "http://w:80/path",
                                "w:80", "http://bad host:80"}) {
    Result<Config> r = LoadConfigFromString(std::string(kValid) + "writer:\n  advertise: \"" + bad + "\"\n", kFile);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("writer.advertise: must be an http://host:port or https://host:port URL"),
              std::string::npos)
        << r.status().message();
  }
  EXPECT_TRUE(LoadConfigFromString(std::string(kValid) + "writer:\n  advertise: https://w1.internal:8443\n", kFile).ok());
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
            "engine, metrics, sinks, admin, plugins, archive)");
  EXPECT_EQ(Errors(ValidWith("{partitions: 4}", "{partitions: 4, replicas: 2}")),
            "t.yaml:9:28: entities.account.replicas: unknown key (expected one of: partitions, handlers, deltas, "
            "archive, server, servers)");
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

// An entity type's deltas: defaults, both keys, and their bounds.
TEST(LoadConfig, DeltasPerEntityType) {
  Result<Config> d = LoadConfigFromString(std::string(kValid), kFile);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->entities.at("account").deltas.snapshot_every, 50u);
  EXPECT_EQ(d->entities.at("account").deltas.snapshot_percent, 50u);
  Result<Config> r = LoadConfigFromString(
      ValidWith("{partitions: 4}", "{partitions: 4, deltas: {snapshot_every: 1000, snapshot_percent: 200}}"), kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->entities.at("account").deltas.snapshot_every, 1000u);
  EXPECT_EQ(r->entities.at("account").deltas.snapshot_percent, 200u);
  EXPECT_EQ(Errors(ValidWith("{partitions: 4}", "{partitions: 4, deltas: {snapshot_every: 0}}")),
            "t.yaml:9:53: entities.account.deltas.snapshot_every: must be an integer between 1 and 1000000, got \"0\"");
  EXPECT_EQ(Errors(ValidWith("{partitions: 4}", "{partitions: 4, deltas: {every: 5}}")),
            "t.yaml:9:37: entities.account.deltas.every: unknown key (expected one of: snapshot_every, "
            "snapshot_percent)");
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
  EXPECT_EQ(Errors(ValidWith("user: sluice", "io_timeout: 2w")),
            "t.yaml:5:17: storage.mysql.io_timeout: must be a duration such as 500ms, 2s, 1m or "
            "24h, got \"2w\"");
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

TEST(BatchThreadsFor, AutoIsTwiceTheCoresBetween4And32) {
  EXPECT_EQ(BatchThreadsFor(0, 1), 4u);
  EXPECT_EQ(BatchThreadsFor(0, 2), 4u);
  EXPECT_EQ(BatchThreadsFor(0, 3), 6u);
  EXPECT_EQ(BatchThreadsFor(0, 16), 32u);
  EXPECT_EQ(BatchThreadsFor(0, 64), 32u);
  EXPECT_EQ(BatchThreadsFor(0, 0), 4u);  // hardware_concurrency() unknown
  EXPECT_EQ(BatchThreadsFor(100, 2), 100u);
  Result<Config> r = LoadConfigFromString(std::string(kValid) + "writer: {batch_threads: auto}\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->writer.batch_threads, 0u);
}

TEST(LoadConfigErrors, GroupCommitMaxOutOfRange) {
  for (const std::string bad : {"0", "1025", "-1", "all"}) {
    const std::string e = Errors(std::string(kValid) + "writer: {group_commit_max: " + bad + "}\n");
    EXPECT_EQ(e.rfind("t.yaml:10:28: writer.group_commit_max: must be an integer between 1 and 1024, got \"" + bad + "\"",
                      0),
              0u)
        << bad << ": " << e;
  }
}

TEST(LoadConfigErrors, BatchThreadsOutOfRange) {
  for (const std::string bad : {"0", "1025", "-1", "many"}) {
    EXPECT_EQ(Errors(std::string(kValid) + "writer: {batch_threads: " + bad + "}\n").rfind(
                  "t.yaml:10:25: writer.batch_threads: must be auto or an integer between 1 and 1024, got \"" + bad +
                      "\"",
                  0),
              0u)
        << bad << ": " << Errors(std::string(kValid) + "writer: {batch_threads: " + bad + "}\n");
  }
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
            "sinks[*].password, sinks[*].api_key, sinks[*].properties.*, secret-named plugin options, "
            "archive.s3.access_key, archive.s3.secret_key");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {batch_max: \"${file:/etc/n}\"}\n"),
            "t.yaml:10:21: writer.batch_max: secrets are only accepted in fields marked secret: "
            "storage.mysql.password, storage.servers.*.password, admin.token, sinks[*].url, "
            "sinks[*].password, sinks[*].api_key, sinks[*].properties.*, secret-named plugin options, "
            "archive.s3.access_key, archive.s3.secret_key");
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
            "    deltas: {snapshot_every: 50, snapshot_percent: 50}\n"
            "  order:\n"
            "    partitions: 2\n"
            "    deltas: {snapshot_every: 50, snapshot_percent: 50}\n"
            "writer:\n"
            "  listen: 127.0.0.1:8080\n"
            "  batch_max: 1000\n"
            "  max_body_bytes: 1048576\n"
            "  max_json_depth: 100\n"
            "  io_threads: 2\n"
            "  read_threads: 4\n"
            "  batch_threads: auto\n"
            "  group_commit_max: 32\n"
            "  entity_cache_entries: 100000\n"
            "  conflict_retries: 16\n"
            "  overlap_commits: false\n"
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
            "  idle_poll_max: 5s\n"
            "  retry_backoff_max: 5s\n"
            "  inflight_batches: 4\n"
            "  durability_barrier: auto\n"
            "  lease_ttl: 10s\n"
            "  anti_entropy:\n"
            "    enabled: true\n"
            "    rate: 100\n"
            "    batch: 100\n"
            "  notices:\n"
            "    enabled: true\n"
            "    listen: 127.0.0.1:0\n"
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

}  // namespace
}  // namespace sluice::config
