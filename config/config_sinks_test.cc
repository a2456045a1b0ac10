// The sinks section as the loader reads it: the keys every sink has, push,
// and what the loader checks across sink types. A type's own keys are
// tested in its folder (connectors/<type>/<type>_options_test.cc).
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
using testing::SinksWith;
using testing::WithSinks;

// A sink's type options are a value: defaults until set, copied (never
// shared) with the SinkConfig, replaced by another type's.
TEST(Sinks, TypeOptionsAreAValueOfTheirOwnType) {
  struct A {
    std::string text = "default";
  };
  struct B {
    int n = 7;
  };
  SinkConfig sink;
  EXPECT_EQ(sink.Options<A>().text, "default");
  sink.MutableOptions<A>().text = "set";
  EXPECT_EQ(sink.Options<A>().text, "set");
  EXPECT_EQ(sink.Options<B>().n, 7);  // another type: its defaults

  SinkConfig copy = sink;
  copy.MutableOptions<A>().text = "changed in the copy";
  EXPECT_EQ(sink.Options<A>().text, "set");
  EXPECT_EQ(copy.Options<A>().text, "changed in the copy");
  copy = sink;
  EXPECT_EQ(copy.Options<A>().text, "set");

  sink.MutableOptions<B>().n = 8;
  EXPECT_EQ(sink.Options<B>().n, 8);
  EXPECT_EQ(sink.Options<A>().text, "default");  // replaced
  EXPECT_EQ(copy.Options<A>().text, "set");
}

TEST(Sinks, ReadsEveryKeyInFileOrder) {
  Result<Config> r = LoadConfigFromString(std::string(kValid) + kSinks, kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->sinks.size(), 3u);

  const SinkConfig& json = r->sinks[0];
  EXPECT_EQ(json.name, "account_cache");
  EXPECT_EQ(json.type, "redis");
  EXPECT_EQ(json.entity, "account");
  EXPECT_EQ(json.on_error, OnError::kDeadLetter);
  EXPECT_EQ(json.batch_max, 1000u);
  EXPECT_EQ(json.origin, "t.yaml:11:5");
  EXPECT_EQ(json.Options<RedisSinkOptions>().url, "redis://127.0.0.1:16379/0");
  EXPECT_TRUE(r->secret_references.empty());
  EXPECT_EQ(json.Options<RedisSinkOptions>().key, "account:{id}");
  EXPECT_EQ(json.Options<RedisSinkOptions>().format, RedisSinkOptions::Format::kJson);
  EXPECT_TRUE(json.Options<RedisSinkOptions>().fields.empty());
  EXPECT_EQ(json.Options<RedisSinkOptions>().ttl, std::chrono::milliseconds(0));
  EXPECT_EQ(json.Options<RedisSinkOptions>().tombstone_ttl, std::chrono::hours(24));
  EXPECT_TRUE(json.Options<MysqlSinkOptions>().table.empty());
  EXPECT_TRUE(json.Options<MysqlSinkOptions>().columns.empty());

  const SinkConfig& hash = r->sinks[1];
  EXPECT_EQ(hash.name, "account-hash");
  EXPECT_EQ(hash.on_error, OnError::kStop);
  EXPECT_EQ(hash.batch_max, 200u);
  EXPECT_EQ(hash.origin, "t.yaml:16:5");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().url, "redis://:p@ss:w/rd@cache.internal:6380/15");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().key, "{type}/{id}");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().format, RedisSinkOptions::Format::kHash);
  ASSERT_EQ(hash.Options<RedisSinkOptions>().fields.size(), 3u);
  EXPECT_EQ(hash.Options<RedisSinkOptions>().fields[0].name, "owner");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().fields[0].pointer, "/owner/name");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().fields[0].sql_type, "");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().fields[1].name, "balance");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().fields[1].pointer, "/balance");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().fields[2].name, "Total_2");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().fields[2].pointer, "");
  EXPECT_EQ(hash.Options<RedisSinkOptions>().ttl, std::chrono::minutes(10));
  EXPECT_EQ(hash.Options<RedisSinkOptions>().tombstone_ttl, std::chrono::hours(48));

  const SinkConfig& table = r->sinks[2];
  EXPECT_EQ(table.name, "account_table");
  EXPECT_EQ(table.type, "mysql");
  EXPECT_EQ(table.origin, "t.yaml:27:5");
  EXPECT_EQ(table.Options<MysqlSinkOptions>().database, "other_db");
  EXPECT_EQ(table.Options<MysqlSinkOptions>().table, "account_view");
  EXPECT_FALSE(table.Options<MysqlSinkOptions>().auto_create);
  EXPECT_EQ(table.Options<MysqlSinkOptions>().connections, 2u);
  EXPECT_EQ(table.Options<MysqlSinkOptions>().version_cache, 262144u);  // the default
  ASSERT_EQ(table.Options<MysqlSinkOptions>().columns.size(), 5u);
  const std::vector<std::array<std::string, 3>> columns = {
      {"owner", "/owner/name", "TEXT"},
      {"note", "/note", "VARCHAR(8)"},
      {"a_b", "/a~1b/~0c", "TEXT"},
      {"amount", "/amount", "DECIMAL(12,2)"},
      {"seen", "/seen", "DATETIME(3)"}};
  for (size_t i = 0; i < columns.size(); ++i) {
    EXPECT_EQ(table.Options<MysqlSinkOptions>().columns[i].name, columns[i][0]);
    EXPECT_EQ(table.Options<MysqlSinkOptions>().columns[i].pointer, columns[i][1]);
    EXPECT_EQ(table.Options<MysqlSinkOptions>().columns[i].sql_type, columns[i][2]);
  }
  const RedisSinkOptions redis_defaults;
  EXPECT_EQ(table.Options<RedisSinkOptions>().url, redis_defaults.url);
  EXPECT_TRUE(table.Options<RedisSinkOptions>().fields.empty());
}

TEST(Sinks, EngineAndSinksAreOptional) {
  Result<Config> r = LoadConfigFromString(std::string(kValid) + "engine:\nsinks:\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const EngineConfig defaults;
  EXPECT_EQ(r->engine.offset_flush_interval, defaults.offset_flush_interval);
  EXPECT_EQ(r->engine.batch_max, defaults.batch_max);
  EXPECT_EQ(r->engine.idle_poll_max, defaults.idle_poll_max);
  EXPECT_EQ(r->engine.retry_backoff_max, defaults.retry_backoff_max);
  EXPECT_EQ(r->engine.inflight_batches, defaults.inflight_batches);
  EXPECT_EQ(r->engine.durability_barrier, DurabilityBarrier::kAuto);
  EXPECT_TRUE(r->sinks.empty());
  EXPECT_NE(r->Redacted().find("sinks: []\n"), std::string::npos) << r->Redacted();
}

TEST(Sinks, ReadsEngineKeys) {
  Result<Config> r = LoadConfigFromString(std::string(kValid) + R"(engine:
  offset_flush_interval: 10ms
  batch_max: 100000
  idle_poll_max: 10s
  retry_backoff_max: 10m
  inflight_batches: 64
  durability_barrier: commit
)",
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->engine.durability_barrier, DurabilityBarrier::kCommit);
  EXPECT_EQ(r->engine.offset_flush_interval, std::chrono::milliseconds(10));
  EXPECT_EQ(r->engine.batch_max, 100000u);
  EXPECT_EQ(r->engine.idle_poll_max, std::chrono::seconds(10));
  EXPECT_EQ(r->engine.retry_backoff_max, std::chrono::minutes(10));
  EXPECT_EQ(r->engine.inflight_batches, 64u);
}

TEST(Sinks, ReadsTheEnginesNoticeAddresses) {
  Result<Config> r = LoadConfigFromString(
      std::string(kValid) + "engine:\n  notices: {listen: 0.0.0.0:7400, advertise: sync-a.example:7400}\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->engine.notices.enabled);
  EXPECT_EQ(r->engine.notices.listen_host, "0.0.0.0");
  EXPECT_EQ(r->engine.notices.listen_port, 7400);
  EXPECT_EQ(r->engine.notices.advertise_host, "sync-a.example");
  EXPECT_EQ(r->engine.notices.advertise_port, 7400);
  auto again = LoadConfigFromString(r->Redacted(), kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->engine.notices.advertise_host, "sync-a.example");
  r = LoadConfigFromString(std::string(kValid) + "engine:\n  notices: {enabled: false}\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->engine.notices.enabled);
  EXPECT_EQ(Errors(std::string(kValid) + "engine:\n  notices: {listen: nowhere, enabled: maybe, port: 1}\n"),
            "t.yaml:11:21: engine.notices.listen: must be host:port with a port between 0 and 65535, got "
            "\"nowhere\"\n"
            "t.yaml:11:39: engine.notices.enabled: must be true or false, got \"maybe\"\n"
            "t.yaml:11:46: engine.notices.port: unknown key (expected one of: enabled, listen, advertise)");
}

TEST(Sinks, ReadsTheEnginesNameAndLeaseTtl) {
  Result<Config> r = LoadConfigFromString(std::string(kValid) + "engine:\n  id: sync-a.host_1:2\n  lease_ttl: 3s\n", kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->engine.id, "sync-a.host_1:2");
  EXPECT_EQ(r->engine.lease_ttl, std::chrono::seconds(3));
  EXPECT_NE(r->Redacted().find("  id: sync-a.host_1:2\n  lease_ttl: 3s\n"), std::string::npos) << r->Redacted();
  Result<Config> defaults = LoadConfigFromString(std::string(kValid), kFile);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->engine.id, "");  // the host name, chosen at start
  EXPECT_EQ(defaults->engine.lease_ttl, std::chrono::seconds(10));
}

TEST(SinkErrors, AnEngineNameOrLeaseTtlOutOfShape) {
  EXPECT_EQ(Errors(std::string(kValid) + "engine:\n  id: \"two words\"\n  lease_ttl: 500ms\n"),
            "t.yaml:11:7: engine.id: must be a name of 1-128 letters, digits, '.', '_', ':' or '-', got \"two words\"\n"
            "t.yaml:12:14: engine.lease_ttl: must be between 1s and 10m, got \"500ms\"");
}

TEST(Sinks, ReadsAntiEntropyKeys) {
  Result<Config> r = LoadConfigFromString(std::string(kValid) + R"(engine:
  anti_entropy: {enabled: false, rate: 1000000, batch: 5000}
sinks:
  - {name: a, type: mysql, entity: account, table: t, columns: {x: /x}, anti_entropy: false}
  - {name: b, type: mysql, entity: account, table: u, columns: {x: /x}}
)",
                                          kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->engine.anti_entropy.enabled);
  EXPECT_EQ(r->engine.anti_entropy.rate, 1000000u);
  EXPECT_EQ(r->engine.anti_entropy.batch, 5000u);
  EXPECT_FALSE(r->sinks[0].anti_entropy);
  EXPECT_TRUE(r->sinks[1].anti_entropy);
  // Printed, and loaded back the same.
  const std::string printed = r->Redacted();
  EXPECT_NE(printed.find("  anti_entropy:\n    enabled: false\n    rate: 1000000\n    batch: 5000\n"), std::string::npos)
      << printed;
  EXPECT_NE(printed.find("    batch_max: 1000\n    anti_entropy: false\n"), std::string::npos) << printed;
  Result<Config> again = LoadConfigFromString(printed, "printed.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->Redacted(), printed);
  // The defaults: on, 100 entities per second per sink, 100 per step.
  const AntiEntropyConfig defaults;
  EXPECT_TRUE(defaults.enabled);
  EXPECT_EQ(defaults.rate, 100u);
  EXPECT_EQ(defaults.batch, 100u);
}

TEST(SinkErrors, AntiEntropyValuesOutOfRange) {
  EXPECT_EQ(Errors(std::string(kValid) + R"(engine:
  anti_entropy:
    enabled: yes
    rate: 0
    batch: 5001
    rates: 1
)"),
            "t.yaml:12:14: engine.anti_entropy.enabled: must be true or false, got \"yes\"\n"
            "t.yaml:13:11: engine.anti_entropy.rate: must be an integer between 1 and 1000000, got \"0\"\n"
            "t.yaml:14:12: engine.anti_entropy.batch: must be an integer between 1 and 5000, got \"5001\"\n"
            "t.yaml:15:5: engine.anti_entropy.rates: unknown key (did you mean \"rate\"?)");
}

TEST(SinkErrors, UnknownSinkKeySuggestsTheClosestName) {
  EXPECT_EQ(Errors(SinksWith("tombstone_ttl: 48h", "tombstone_tll: 48h")),
            "t.yaml:26:5: sinks[1].tombstone_tll: unknown key (did you mean \"tombstone_ttl\"?)");
  // Keys of the other sink type are never suggested.
  EXPECT_EQ(Errors(WithSinks("  - {name: c, type: redis, entity: account, tabel: x}\n")),
            "t.yaml:11:45: sinks[0].tabel: unknown key (expected one of: name, type, entity, "
            "on_error, batch_max, push, push_mode, push_timeout, push_threads, anti_entropy, code, routes, url, key, format, "
            "fields, "
            "ttl, tombstone_ttl, sentinel_password, wait_replicas, tls_ca, tls_cert, tls_key, tls_verify)");
  EXPECT_EQ(Errors(SinksWith("    table: account_view", "    tabel: account_view")),
            "t.yaml:27:5: sinks[2].table: required key is missing\n"
            "t.yaml:31:5: sinks[2].tabel: unknown key (did you mean \"table\"?)");
}

TEST(SinkErrors, RoutesNeedCodeATypeWithDestinationsAndLegalNames) {
  const std::string kafka = "  - {name: feed, type: kafka, entity: account, brokers: \"127.0.0.1:9092\", topic: t, ";
  const std::string code = "code: " SLUICE_CONFIG_EXAMPLES_DIR "/views/per_owner.js, ";
  Result<Config> ok = LoadConfigFromString(WithSinks(kafka + code + "routes: [orders.eu, Orders_US-2]}\n"), kFile);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->sinks[0].routes, (std::vector<std::string>{"orders.eu", "Orders_US-2"}));
  EXPECT_NE(ok->Redacted().find("routes: [orders.eu, Orders_US-2]"), std::string::npos) << ok->Redacted();
  // The column of the routes value in a one-line sink.
  const auto at = [](const std::string& line) { return "t.yaml:11:" + std::to_string(line.find("[a]") + 1) + ": "; };
  const std::string no_code = kafka + "routes: [a]}\n";
  EXPECT_EQ(Errors(WithSinks(no_code)),
            at(no_code) + "sinks[0].routes: routes need `code:` whose route(event) picks one of them for each event");
  const std::string redis = "  - {name: c, type: redis, entity: account, key: \"k:{id}\", " + code + "routes: [a]}\n";
  EXPECT_EQ(Errors(WithSinks(redis)), at(redis) + "sinks[0].routes: a redis sink has no destinations to route to; "
                                                  "routes apply to elasticsearch, kafka");
  const std::string errors = Errors(WithSinks(kafka + code + "routes: [a, \"b/c\", a, \"..\"]}\n"));
  EXPECT_NE(errors.find("sinks[0].routes[1]: 'b/c' is not a destination name"), std::string::npos) << errors;
  EXPECT_NE(errors.find("sinks[0].routes[2]: 'a' is listed twice"), std::string::npos) << errors;
  EXPECT_NE(errors.find("sinks[0].routes[3]: '..' is not a destination name"), std::string::npos) << errors;
  const std::string search = "  - {name: s, type: elasticsearch, entity: account, url: \"http://127.0.0.1:9200\", " +
                             code + "routes: [Orders, _x, ok.index]}\n";
  const std::string index_errors = Errors(WithSinks(search));
  EXPECT_NE(index_errors.find("'Orders' is not an index name"), std::string::npos) << index_errors;
  EXPECT_NE(index_errors.find("'_x' is not an index name"), std::string::npos) << index_errors;
  EXPECT_EQ(index_errors.find("ok.index"), std::string::npos) << index_errors;
}

TEST(SinkErrors, MissingRequiredKeys) {
  EXPECT_EQ(Errors(WithSinks("  - {type: redis, entity: account}\n")),
            "t.yaml:11:5: sinks[0].name: required key is missing");
  EXPECT_EQ(Errors(WithSinks("  - name: c\n")),
            "t.yaml:11:5: sinks[0].type: required key is missing\n"
            "t.yaml:11:5: sinks[0].entity: required key is missing");
  EXPECT_EQ(Errors(WithSinks("  - {name: t, type: mysql, entity: account, columns: {a: /a}}\n")),
            "t.yaml:11:5: sinks[0].table: required key is missing");
  EXPECT_EQ(Errors(WithSinks("  - {name: t, type: mysql, entity: account, table: t}\n")),
            "t.yaml:11:5: sinks[0].columns: required key is missing");
  EXPECT_EQ(Errors(WithSinks(
                "  - {name: t, type: mysql, entity: account, table: t, columns:}\n")),
            "t.yaml:11:55: sinks[0].columns: must be a mapping from column name to JSON pointer (or "
            "to {pointer: ..., type: ...}) with at least one entry, got an empty value");
}

TEST(SinkErrors, WrongShapes) {
  EXPECT_EQ(Errors(std::string(kValid) + "sinks: {name: c}\n"),
            "t.yaml:10:8: sinks: must be a sequence of sinks, got a mapping");
  EXPECT_EQ(Errors(WithSinks("  - account_cache\n  -\n")),
            "t.yaml:11:5: sinks[0]: must be a mapping, got \"account_cache\"\n"
            // yaml-cpp places an empty item where the next token starts.
            "t.yaml:13:1: sinks[1]: must be a mapping, got an empty value");
  EXPECT_EQ(Errors(std::string(kValid) + "engine: [1s]\n"),
            "t.yaml:10:9: engine: must be a mapping, got a sequence");
}

TEST(SinkErrors, DuplicateSinkNameNamesTheFirstLine) {
  EXPECT_EQ(Errors(SinksWith("name: account_table", "name: account_cache")),
            "t.yaml:27:11: sinks[2].name: duplicate sink name \"account_cache\" (first given on "
            "line 11)");
}

TEST(SinkErrors, BadSinkName) {
  EXPECT_EQ(Errors(SinksWith("name: account_table", "name: Account_Table")),
            "t.yaml:27:11: sinks[2].name: must be a name matching [a-z][a-z0-9_-]{0,63}, got "
            "\"Account_Table\"");
}

TEST(SinkErrors, UnknownTypeListsTheKnownOnes) {
  // The keys of an unknown type cannot be checked; other keys still are.
  // Without a plugins section, a type that is not built in is an error.
  const std::string errors = Errors(WithSinks("  - {name: c, type: pigeon, entity: account, zqxj: x, table: t}\n"));
  EXPECT_EQ(errors.substr(0, errors.find('\n')),
            "t.yaml:11:21: sinks[0].type: unknown sink type \"pigeon\" (expected one of: redis, "
            "mysql, elasticsearch, kafka, aggregate; or a type of a library listed under plugins:)");
  EXPECT_EQ(errors.substr(errors.find('\n') + 1, 58),
            "t.yaml:11:46: sinks[0].zqxj: unknown key (expected one of:");
  EXPECT_EQ(errors.find("sinks[0].table"), std::string::npos) << errors;
}

TEST(SinkErrors, UnknownEntitySuggestsTheClosestName) {
  EXPECT_EQ(Errors(SinksWith("    entity: account\n    on_error",
                             "    entity: acount\n    on_error")),
            "t.yaml:18:13: sinks[1].entity: unknown entity type \"acount\" (did you mean "
            "\"account\"?)");
  EXPECT_EQ(Errors(WithSinks("  - {name: c, type: redis, entity: zebra}\n")),
            "t.yaml:11:36: sinks[0].entity: unknown entity type \"zebra\" (expected one of: "
            "account)");
}

TEST(SinkErrors, BadJsonPointer) {
  EXPECT_EQ(Errors(SinksWith("owner: /owner/name,", "owner: owner/name,")),
            "t.yaml:24:21: sinks[1].fields.owner: must be a JSON pointer (RFC 6901) such as "
            "/owner/name, got \"owner/name\"");
  EXPECT_EQ(Errors(SinksWith("a_b: /a~1b/~0c", "a_b: /a~b")),
            "t.yaml:35:12: sinks[2].columns.a_b: must be a JSON pointer (RFC 6901), in which ~ "
            "is only allowed as ~0 or ~1, got \"/a~b\"");
  EXPECT_EQ(Errors(SinksWith("a_b: /a~1b/~0c", "a_b: /a~")),
            "t.yaml:35:12: sinks[2].columns.a_b: must be a JSON pointer (RFC 6901), in which ~ "
            "is only allowed as ~0 or ~1, got \"/a~\"");
  EXPECT_EQ(Errors(SinksWith("{pointer: /note,", "{pointer: [note],")),
            "t.yaml:34:23: sinks[2].columns.note.pointer: must be a JSON pointer (RFC 6901) such "
            "as /owner/name, got a sequence");
}

TEST(SinkErrors, ReservedColumnAndFieldNames) {
  EXPECT_EQ(Errors(SinksWith("      owner: /owner/name", "      _version: /owner/name")),
            "t.yaml:33:7: sinks[2].columns._version: column names starting with _ are reserved "
            "for sluice (_version, _deleted)");
  EXPECT_EQ(Errors(SinksWith("      owner: /owner/name", "      ID: /owner/name")),
            "t.yaml:33:7: sinks[2].columns.ID: the column name id is reserved for the primary "
            "key (the entity id)");
  EXPECT_EQ(Errors(SinksWith("      owner: /owner/name", "      Note: /owner/name")),
            "t.yaml:34:7: sinks[2].columns.note: duplicate column (MySQL column names ignore "
            "case; first given on line 33)");
  EXPECT_EQ(Errors(SinksWith("      owner: /owner/name", "      owner-name: /owner/name")),
            "t.yaml:33:7: sinks[2].columns.owner-name: column names must match "
            "[A-Za-z_][A-Za-z0-9_]{0,63}");
  EXPECT_EQ(Errors(SinksWith("{owner: /owner/name,", "{_owner: /owner/name,")),
            "t.yaml:24:14: sinks[1].fields._owner: field names starting with _ are reserved for "
            "sluice (_version, _deleted)");
  // "id" is a fine hash field.
  EXPECT_EQ(Errors(SinksWith("{owner: /owner/name,", "{id: /owner/name,")), "");
}

TEST(SinkErrors, KeysOfTheOtherSinkType) {
  EXPECT_EQ(Errors(SinksWith("    auto_create: false", "    key: \"{id}\"")),
            "t.yaml:38:5: sinks[2].key: only for redis sinks (this sink is type mysql)");
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    table: t")),
            "t.yaml:25:5: sinks[1].table: only for mysql sinks (this sink is type redis)");
}

TEST(SinkErrors, BadOnError) {
  EXPECT_EQ(Errors(SinksWith("on_error: stop", "on_error: ignore")),
            "t.yaml:19:15: sinks[1].on_error: must be dead_letter or stop, got \"ignore\"");
}

TEST(SinkErrors, OutOfRange) {
  EXPECT_EQ(Errors(SinksWith("batch_max: 200", "batch_max: 100001")),
            "t.yaml:20:16: sinks[1].batch_max: must be an integer between 1 and 100000, got "
            "\"100001\"");
  EXPECT_EQ(Errors(SinksWith("tombstone_ttl: 48h", "tombstone_ttl: 999ms")),
            "t.yaml:26:20: sinks[1].tombstone_ttl: must be between 1s and 8760h, got \"999ms\"");
  EXPECT_EQ(Errors(SinksWith("ttl: 10m", "ttl: 8761h")),
            "t.yaml:25:10: sinks[1].ttl: must be between 0s and 8760h, got \"8761h\"");
  EXPECT_EQ(Errors(SinksWith("ttl: 10m", "ttl: 0s")), "");
  EXPECT_EQ(Errors(SinksWith("connections: 2", "connections: 0")),
            "t.yaml:39:18: sinks[2].connections: must be an integer between 1 and 64, got \"0\"");
  EXPECT_EQ(Errors(SinksWith("connections: 2", "connections: 65")),
            "t.yaml:39:18: sinks[2].connections: must be an integer between 1 and 64, got \"65\"");
  EXPECT_EQ(Errors(SinksWith("    connections: 2", "    connections: 2\n    version_cache: 10000001")),
            "t.yaml:40:20: sinks[2].version_cache: must be an integer between 0 and 10000000, got \"10000001\"");
  EXPECT_EQ(Errors(SinksWith("    connections: 2", "    connections: 2\n    version_cache: -1")),
            "t.yaml:40:20: sinks[2].version_cache: must be an integer between 0 and 10000000, got \"-1\"");
  {
    Result<Config> off = LoadConfigFromString(SinksWith("    connections: 2", "    connections: 2\n    version_cache: 0"), kFile);
    ASSERT_TRUE(off.ok()) << off.status().ToString();
    EXPECT_EQ(off->sinks[2].Options<MysqlSinkOptions>().version_cache, 0u);
  }
  EXPECT_EQ(Errors(SinksWith("    connections: 2", "    connections: 2\n    ttl: 1m")),
            "t.yaml:40:5: sinks[2].ttl: only for redis sinks (this sink is type mysql)");
  EXPECT_EQ(Errors(SinksWith("ttl: 10m", "connections: 3")),
            "t.yaml:25:5: sinks[1].connections: only for mysql sinks (this sink is type redis)");
}

TEST(SinkErrors, EngineValuesOutOfRange) {
  EXPECT_EQ(Errors(std::string(kValid) + R"(engine:
  offset_flush_interval: 5ms
  batch_max: 0
  idle_poll_max: 11s
  retry_backoff_max: 11m
  inflight_batches: 65
  idle_pol_max: 2s
  durability_barrier: fsync
)"),
            "t.yaml:11:26: engine.offset_flush_interval: must be between 10ms and 1m, got "
            "\"5ms\"\n"
            "t.yaml:12:14: engine.batch_max: must be an integer between 1 and 100000, got \"0\"\n"
            "t.yaml:13:18: engine.idle_poll_max: must be between 1ms and 10s, got \"11s\"\n"
            "t.yaml:14:22: engine.retry_backoff_max: must be between 10ms and 10m, got \"11m\"\n"
            "t.yaml:15:21: engine.inflight_batches: must be an integer between 1 and 64, got "
            "\"65\"\n"
            "t.yaml:16:3: engine.idle_pol_max: unknown key (did you mean \"idle_poll_max\"?)\n"
            "t.yaml:17:23: engine.durability_barrier: must be auto, lsn, commit or off, got \"fsync\"");
}

TEST(SinkErrors, EveryProblemIsReportedTogetherInFileOrder) {
  EXPECT_EQ(Errors(R"(sinks:
  - name: c
    type: redis
    entity: acount
    key: "{type}"
    table: t
  - name: c
    type: mysql
    entity: account
    table: sluice_x
    columns: {id: /id, v: v}
entities:
  account: {partitions: 1}
storage: {mysql: {}}
)"),
            "t.yaml:4:13: sinks[0].entity: unknown entity type \"acount\" (did you mean "
            "\"account\"?)\n"
            "t.yaml:5:10: sinks[0].key: must contain {id}, got \"{type}\"\n"
            "t.yaml:6:5: sinks[0].table: only for mysql sinks (this sink is type redis)\n"
            "t.yaml:7:11: sinks[1].name: duplicate sink name \"c\" (first given on line 2)\n"
            "t.yaml:10:12: sinks[1].table: table names starting with ev_ or sluice_ are reserved "
            "for sluice's own tables, got \"sluice_x\"\n"
            "t.yaml:11:15: sinks[1].columns.id: the column name id is reserved for the primary "
            "key (the entity id)\n"
            "t.yaml:11:27: sinks[1].columns.v: must be a JSON pointer (RFC 6901) such as "
            "/owner/name, got \"v\"");
}

TEST(SinkErrors, NoEntityErrorsWhenTheEntitiesSectionIsMissing) {
  EXPECT_EQ(Errors("storage: {mysql: {}}\nsinks:\n  - {name: c, type: redis, entity: x}\n"),
            "t.yaml:1:1: entities: required key is missing");
}

TEST(Redacted, SinksLoadBack) {
  // Everything loads back, the URL's password as ***.
  Result<Config> ok = LoadConfigFromString(
      SinksWith("url: \"redis://:p@ss:w/rd@cache.internal:6380/15\"",
                "url: \"redis://[::1]:6380/15\"") +
          "engine: {idle_poll_max: 1500ms, retry_backoff_max: 1m}\n",
      kFile);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const std::string redacted = ok->Redacted();
  EXPECT_NE(redacted.find("    key: \"{type}/{id}\"\n"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("      Total_2: \"\"\n"), std::string::npos) << redacted;
  EXPECT_NE(redacted.find("      note: {pointer: /note, type: VARCHAR(8)}\n"), std::string::npos)
      << redacted;
  Result<Config> again = LoadConfigFromString(redacted, "redacted.yaml");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << redacted;
  EXPECT_EQ(again->Redacted(), redacted);
  ASSERT_EQ(again->sinks.size(), 3u);
  EXPECT_EQ(again->sinks[1].Options<RedisSinkOptions>().url, "redis://[::1]:6380/15");
  EXPECT_EQ(again->sinks[1].Options<RedisSinkOptions>().fields[2].pointer, "");
  EXPECT_EQ(again->sinks[2].Options<MysqlSinkOptions>().columns[2].pointer, "/a~1b/~0c");
  EXPECT_EQ(again->sinks[2].Options<MysqlSinkOptions>().database, "other_db");
  EXPECT_EQ(again->engine.idle_poll_max, std::chrono::milliseconds(1500));
}

// ---- admin ----

TEST(Push, ReadsPushSettingsAndPrintsThem) {
  Result<Config> r = LoadConfigFromString(
      SinksWith("    key: \"account:{id}\"",
                "    key: \"account:{id}\"\n    push: true\n    push_mode: sync\n    push_timeout: 20ms\n    push_threads: 5"),
      kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SinkConfig& s = r->sinks.at(0);
  EXPECT_TRUE(s.push.enabled);
  EXPECT_EQ(s.push.mode, PushConfig::Mode::kSync);
  EXPECT_EQ(s.push.timeout, std::chrono::milliseconds(20));
  EXPECT_EQ(s.push.threads, 5u);
  EXPECT_FALSE(r->sinks.at(1).push.enabled);
  EXPECT_NE(r->Redacted().find("push_mode: sync"), std::string::npos) << r->Redacted();
  EXPECT_NE(r->Redacted().find("push_threads: 5"), std::string::npos) << r->Redacted();
  // Defaults: async with a 50 ms deadline.
  Result<Config> d = LoadConfigFromString(SinksWith("    auto_create: false", "    auto_create: false\n    push: true"), kFile);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->sinks.at(2).push.enabled);
  EXPECT_EQ(d->sinks.at(2).push.mode, PushConfig::Mode::kAsync);
  EXPECT_EQ(d->sinks.at(2).push.timeout, std::chrono::milliseconds(50));
  EXPECT_EQ(d->sinks.at(2).push.threads, 2u);
  const SinkTypes& types = connectors::BuiltinSinkTypes();
  EXPECT_TRUE(types.Find("redis")->can_push);
  EXPECT_TRUE(types.Find("mysql")->can_push);
  EXPECT_FALSE(types.Find("kafka")->can_push);
  EXPECT_FALSE(types.Find("elasticsearch")->can_push);
}

TEST(PushErrors, PushOnASinkThatCannotPush) {
  EXPECT_EQ(Errors(WithSinks("  - {name: feed, type: kafka, entity: account, brokers: \"127.0.0.1:9092\", "
                             "topic: t, push: true}\n")),
            "t.yaml:11:91: sinks[0].push: a kafka sink cannot be pushed to: push is for point views (sink types "
            "redis and mysql), which the writer can update right after a commit; remove push or use a redis or "
            "mysql sink");
}

TEST(PushErrors, PushOptionsNeedPushAndValidValues) {
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    push_mode: sync")),
            "t.yaml:25:5: sinks[1].push_mode: only with push: true");
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    push: true\n    push_mode: later")),
            "t.yaml:26:16: sinks[1].push_mode: must be sync or async, got \"later\"");
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    push: yes")),
            "t.yaml:25:11: sinks[1].push: must be true or false, got \"yes\"");
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    push: true\n    push_timeout: 0ms")).substr(0, 36),
            "t.yaml:26:19: sinks[1].push_timeout:");
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    push_threads: 4")), "t.yaml:25:5: sinks[1].push_threads: only with push: true");
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    push: true\n    push_threads: 0")).substr(0, 36),
            "t.yaml:26:19: sinks[1].push_threads:");
  EXPECT_EQ(Errors(SinksWith("    ttl: 10m", "    push: true\n    push_threads: 65")).substr(0, 36),
            "t.yaml:26:19: sinks[1].push_threads:");
}

// ---- plugins ----

}  // namespace
}  // namespace sluice::config
