// The storage section's servers and each entity type's placement
// (storage.servers, entities.<type>.server/servers), and TLS to MySQL
// (storage.mysql.ssl_*): what they read, the mistakes reported with their
// lines, and how Redacted() prints them.
#include "config/config.h"
#include "tests/support/config_support.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice::config {
namespace {

using testing::Errors;
using testing::kFile;
using testing::kValid;
using testing::LoadConfigFromString;
using testing::ScopedEnv;
using testing::ScratchDir;
using testing::ValidWith;

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
                          "    deltas: {snapshot_every: 50, snapshot_percent: 50}\n"
                          "    servers:\n"
                          "      main: [0-3, 5]\n"
                          "      orders_b: [4, 6-7]\n"
                          "  invoice:\n"
                          "    partitions: 2\n"
                          "    deltas: {snapshot_every: 50, snapshot_percent: 50}\n"
                          "    server: archive\n"
                          "  line:\n"
                          "    partitions: 1\n"
                          "    deltas: {snapshot_every: 50, snapshot_percent: 50}\n"
                          "  order:\n"
                          "    partitions: 8\n"
                          "    deltas: {snapshot_every: 50, snapshot_percent: 50}\n"
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
