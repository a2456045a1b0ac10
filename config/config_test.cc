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

// kValid with its line `from` replaced by `to` (both without indentation).
std::string ValidWith(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
  return s;
}

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sluice_config_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path Write(const std::string& name, const std::string& contents) const {
    const auto p = path_ / name;
    std::ofstream(p) << contents;
    return p;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

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
  ASSERT_EQ(c.sinks.size(), 2u);
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
            "t.yaml:9:28: entities.account.replicas: unknown key (expected one of: partitions, handlers)");
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
            "storage.mysql.password, admin.token, sinks[*].url, sinks[*].password, sinks[*].api_key, "
            "sinks[*].properties.*, secret-named plugin options");
  EXPECT_EQ(Errors(std::string(kValid) + "writer: {batch_max: \"${file:/etc/n}\"}\n"),
            "t.yaml:10:21: writer.batch_max: secrets are only accepted in fields marked secret: "
            "storage.mysql.password, admin.token, sinks[*].url, sinks[*].password, sinks[*].api_key, "
            "sinks[*].properties.*, secret-named plugin options");
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

  TempDir dir;
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
  TempDir dir;
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
  TempDir dir;
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
            "    version_cache: 262144\n");

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
            "on_error, batch_max, push, push_mode, push_timeout, anti_entropy, url, key, format, fields, ttl, tombstone_ttl)");
  EXPECT_EQ(Errors(SinksWith("    table: account_view", "    tabel: account_view")),
            "t.yaml:27:5: sinks[2].table: required key is missing\n"
            "t.yaml:31:5: sinks[2].tabel: unknown key (did you mean \"table\"?)");
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
  const std::string errors = Errors(WithSinks("  - {name: c, type: pigeon, entity: account, coop: x, table: t}\n"));
  EXPECT_EQ(errors.substr(0, errors.find('\n')),
            "t.yaml:11:21: sinks[0].type: unknown sink type \"pigeon\" (expected one of: redis, "
            "mysql, elasticsearch, kafka; or a type of a library listed under plugins:)");
  EXPECT_EQ(errors.substr(errors.find('\n') + 1, 58),
            "t.yaml:11:46: sinks[0].coop: unknown key (expected one of:");
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

TEST(Push, ReadsPushSettingsAndPrintsThem) {
  Result<Config> r = LoadConfigFromString(
      SinksWith("    key: \"account:{id}\"", "    key: \"account:{id}\"\n    push: true\n    push_mode: sync\n    push_timeout: 20ms"),
      kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SinkConfig& s = r->sinks.at(0);
  EXPECT_TRUE(s.push.enabled);
  EXPECT_EQ(s.push.mode, PushConfig::Mode::kSync);
  EXPECT_EQ(s.push.timeout, std::chrono::milliseconds(20));
  EXPECT_FALSE(r->sinks.at(1).push.enabled);
  EXPECT_NE(r->Redacted().find("push_mode: sync"), std::string::npos) << r->Redacted();
  // Defaults: async with a 50 ms deadline.
  Result<Config> d = LoadConfigFromString(SinksWith("    auto_create: false", "    auto_create: false\n    push: true"), kFile);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->sinks.at(2).push.enabled);
  EXPECT_EQ(d->sinks.at(2).push.mode, PushConfig::Mode::kAsync);
  EXPECT_EQ(d->sinks.at(2).push.timeout, std::chrono::milliseconds(50));
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
}

// ---- plugins ----

// kValid with `sinks` and then `plugins` sections.
std::string WithPlugins(const std::string& sinks, const std::string& plugins) {
  return std::string(kValid) + "sinks:\n" + sinks + "plugins:\n" + plugins;
}

TEST(PluginErrors, PluginLibraryNotFound) {
  EXPECT_EQ(Errors(std::string(kValid) + "plugins: [./lib/libmissing.so]\n"),
            "t.yaml:10:11: plugins[0]: plugin library lib/libmissing.so not found");
}

TEST(PluginErrors, PluginPathsAreRelativeToTheConfigFile) {
  TempDir dir;
  dir.Write("libreal.so", "stands in for a library: config only checks that the file exists\n");
  const auto cfg = dir.Write("c.yaml", std::string(kValid) + "plugins: [libreal.so, libgone.so]\n");
  Result<Config> r = LoadConfig(cfg.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), cfg.string() + ":10:23: plugins[1]: plugin library " +
                                      (dir.path() / "libgone.so").string() + " not found");
}

TEST(PluginErrors, PluginPathIsADirectory) {
  TempDir dir;
  EXPECT_EQ(Errors(std::string(kValid) + "plugins: [" + dir.path().string() + "]\n"),
            "t.yaml:10:11: plugins[0]: plugin library " + dir.path().string() + " is not a regular file");
}

TEST(PluginErrors, PluginsMustBeASequenceOfPaths) {
  EXPECT_EQ(Errors(std::string(kValid) + "plugins: libjsonl_sink.so\n"),
            "t.yaml:10:10: plugins: must be a sequence of plugin library paths (.so files), got "
            "\"libjsonl_sink.so\"");
  EXPECT_EQ(Errors(std::string(kValid) + "plugins: [{path: x.so}, \"\"]\n"),
            "t.yaml:10:11: plugins[0]: must be the path of a plugin library (.so file), got a mapping\n"
            "t.yaml:10:25: plugins[1]: must be the path of a plugin library (.so file), got \"\"");
}

TEST(PluginErrors, DuplicatePluginLibrary) {
  TempDir dir;
  const std::string lib = dir.Write("liba.so", "x").string();
  EXPECT_EQ(Errors(std::string(kValid) + "plugins:\n  - " + lib + "\n  - " + lib + "\n"),
            "t.yaml:12:5: plugins[1]: plugin library " + lib + " is already listed on line 11");
}

TEST(PluginErrors, PluginPathIsNotASecretField) {
  ScopedEnv env("SLUICE_TEST_PLUGIN_PATH", "/tmp/libx.so");
  const std::string expected = "t.yaml:10:11: plugins[0]: secrets are only accepted in fields marked secret: ";
  EXPECT_EQ(Errors(std::string(kValid) + "plugins: [\"${env:SLUICE_TEST_PLUGIN_PATH}\"]\n").substr(0, expected.size()),
            expected);
}

TEST(PluginErrors, UnknownSinkTypeWithoutPluginsSaysWhereTypesComeFrom) {
  const std::string errors = Errors(WithSinks("  - {name: c, type: jsonl, entity: account, directory: x}\n"));
  EXPECT_EQ(errors.substr(0, errors.find('\n')),
            "t.yaml:11:21: sinks[0].type: unknown sink type \"jsonl\" (expected one of: redis, mysql, "
            "elasticsearch, kafka; or a type of a library listed under plugins:)");
  // Its other keys cannot be anyone's options: they are unknown keys.
  EXPECT_NE(errors.find("\nt.yaml:11:45: sinks[0].directory: unknown key"), std::string::npos) << errors;
}

TEST(PluginErrors, CommonSinkKeysOfAPluginSinkAreStillChecked) {
  TempDir dir;
  const std::string lib = dir.Write("liba.so", "x").string();
  EXPECT_EQ(Errors(WithPlugins("  - {type: jsonl, entity: acount, on_error: maybe, path: x}\n", "  - " + lib + "\n")),
            "t.yaml:11:5: sinks[0].name: required key is missing\n"
            "t.yaml:11:27: sinks[0].entity: unknown entity type \"acount\" (did you mean \"account\"?)\n"
            "t.yaml:11:45: sinks[0].on_error: must be dead_letter or stop, got \"maybe\"");
}

TEST(PluginErrors, SecretsOnlyInThePluginSinksUrlAndSecretNamedOptions) {
  TempDir dir;
  const std::string lib = dir.Write("liba.so", "x").string();
  ScopedEnv env("SLUICE_TEST_PLUGIN_TOKEN", "tok-123");
  Result<Config> ok = LoadConfigFromString(
      WithPlugins("  - {name: hook, type: webhook, entity: account, token: \"${env:SLUICE_TEST_PLUGIN_TOKEN}\"}\n",
                  "  - " + lib + "\n"),
      kFile);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->sinks[0].plugin.options_json, R"({"token":"tok-123"})");
  EXPECT_NE(ok->Redacted().find("token: \"${env:SLUICE_TEST_PLUGIN_TOKEN}\""), std::string::npos) << ok->Redacted();
  const std::string errors =
      Errors(WithPlugins("  - {name: hook, type: webhook, entity: account, label: \"${env:SLUICE_TEST_PLUGIN_TOKEN}\"}\n",
                         "  - " + lib + "\n"));
  const std::string expected = "t.yaml:11:57: sinks[0].label: secrets are only accepted in fields marked secret: ";
  EXPECT_EQ(errors.substr(0, expected.size()), expected);
  EXPECT_EQ(errors.find("tok-123"), std::string::npos);
}

// Found by fuzz/fuzz_config_loader (fuzz/regressions/fuzz_config_loader/
// plugin-option-invalid-utf8): JSON cannot hold these bytes, and building the
// options' JSON threw instead of reporting the option.
TEST(PluginErrors, PluginOptionsMustBeUtf8) {
  TempDir dir;
  const std::string lib = dir.Write("liba.so", "x").string();
  // Raw bytes: YAML's own escapes (\xc3) always make valid UTF-8.
  EXPECT_EQ(Errors(WithPlugins("  - {name: hook, type: webhook, entity: account, \xff: 1, ok: [\"a\xc3\"], "
                               "url: \"http://h/\xed\xa0\x80\"}\n",
                               "  - " + lib + "\n")),
            "t.yaml:11:53: sinks[0].\xff: must be valid UTF-8 (a plugin gets its options as JSON)\n"
            "t.yaml:11:60: sinks[0].ok: must be valid UTF-8 (a plugin gets its options as JSON)\n"
            "t.yaml:11:73: sinks[0].url: must be valid UTF-8 (a plugin gets its options as JSON)");
}

// A plugin sink's options become JSON; YAML aliases must not make that
// endless (a self-referring alias overflowed the stack) or huge (a few
// hundred bytes expanded to gigabytes).
TEST(PluginErrors, PluginOptionsAreBoundedWhateverTheAliases) {
  TempDir dir;
  const std::string lib = dir.Write("liba.so", "x").string();
  EXPECT_EQ(Errors(WithPlugins("  - {name: hook, type: webhook, entity: account, opt: &c [*c]}\n", "  - " + lib + "\n")),
            "t.yaml:11:55: sinks[0].opt: must be nested at most 100 levels deep, counting each use of a YAML alias");
  std::string laughs = "  - name: hook\n    type: webhook\n    entity: account\n    a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  std::string prev = "a";
  for (const char* name : {"b", "c", "d", "e", "f", "g", "h"}) {
    laughs += std::string("    ") + name + ": &" + name + " [";
    for (int i = 0; i < 10; ++i) laughs += (i ? ", *" : "*") + prev;
    laughs += "]\n";
    prev = name;
  }
  const std::string errors = Errors(WithPlugins(laughs, "  - " + lib + "\n"));
  EXPECT_NE(errors.find("t.yaml:18:8: sinks[0].e: must have at most 10000 values, counting each use of a YAML alias"),
            std::string::npos)
      << errors;
  // Within the bounds, aliases are fine.
  EXPECT_EQ(Errors(WithPlugins("  - {name: hook, type: webhook, entity: account, a: &a [1, 2], b: [*a, *a]}\n",
                               "  - " + lib + "\n")),
            "");
}

// A long plain scalar in a plugin option overflowed the stack (std::regex
// recursed once per character).
TEST(PluginSinks, LongNumbersInOptionsStayText) {
  TempDir dir;
  const std::string lib = dir.Write("liba.so", "x").string();
  const std::string digits(100000, '7');
  Result<Config> r = LoadConfigFromString(
      WithPlugins("  - {name: hook, type: webhook, entity: account, n: " + digits + ", m: -1.5e3, o: 1e400, p: 012}\n",
                  "  - " + lib + "\n"),
      kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->sinks.at(0).plugin.options_json,
            R"({"m":-1500.0,"n":")" + digits + R"(","o":"1e400","p":"012"})");
}

TEST(PluginSinks, OwnKeysReachThePluginAsJsonAndPrintBack) {
  TempDir dir;
  const std::string lib = dir.Write("libjsonl_sink.so", "x").string();
  ScopedEnv env("SLUICE_TEST_PLUGIN_URL", "https://user:secret-pw@hooks.example/abc");
  Result<Config> r = LoadConfigFromString(
      WithPlugins("  - name: audit\n"
                  "    type: jsonl\n"
                  "    entity: account\n"
                  "    batch_max: 50\n"
                  "    path: views/audit.jsonl\n"
                  "    fsync: false\n"
                  "    keep: 3\n"
                  "    ratio: 0.5\n"
                  "    label: \"true\"\n"
                  "    table: audit\n"
                  "    tags: [a, 2, {deep: ~}]\n"
                  "    url: \"${env:SLUICE_TEST_PLUGIN_URL}\"\n"
                  "    api_token: s3cret-tok\n",
                  "  - " + lib + "\n"),
      kFile);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SinkConfig& s = r->sinks.at(0);
  EXPECT_EQ(s.type, "jsonl");
  EXPECT_EQ(s.batch_max, 50u);
  // Plain scalars are typed as YAML 1.2 reads them; quoted ones stay strings.
  // `table` belongs to mysql sinks but is this plugin's own option here.
  EXPECT_EQ(s.plugin.options_json,
            R"({"api_token":"s3cret-tok","fsync":false,"keep":3,"label":"true","path":"views/audit.jsonl","ratio":0.5,)"
            R"("table":"audit","tags":["a",2,{"deep":null}],"url":"https://user:secret-pw@hooks.example/abc"})");
  EXPECT_EQ(r->secret_references.at("sinks[0].url"), "${env:SLUICE_TEST_PLUGIN_URL}");
  ASSERT_EQ(r->plugins.size(), 1u);
  EXPECT_EQ(r->plugins[0].path, lib);
  EXPECT_EQ(r->plugins[0].origin, "t.yaml:25:5");

  const std::string printed = r->Redacted();
  EXPECT_EQ(printed.find("secret-pw"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("s3cret-tok"), std::string::npos) << printed;
  EXPECT_NE(printed.find("url: \"${env:SLUICE_TEST_PLUGIN_URL}\""), std::string::npos) << printed;
  EXPECT_NE(printed.find("api_token: \"***\""), std::string::npos) << printed;
  EXPECT_NE(printed.find("path: \"views/audit.jsonl\""), std::string::npos) << printed;
  EXPECT_NE(printed.find("plugins:\n  - " + lib), std::string::npos) << printed;
  // What it prints loads back (the reference resolved again, the inline secret as ***).
  Result<Config> again = LoadConfigFromString(printed, kFile);
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << printed;
  EXPECT_EQ(again->sinks.at(0).plugin.options_json,
            R"({"api_token":"***","fsync":false,"keep":3,"label":"true","path":"views/audit.jsonl","ratio":0.5,)"
            R"("table":"audit","tags":["a",2,{"deep":null}],"url":"https://user:secret-pw@hooks.example/abc"})");
}

}  // namespace
}  // namespace sluice::config
