// plugins: and the sinks whose type a plugin provides, as the loader reads them.
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

// kValid with `sinks` and then `plugins` sections.
std::string WithPlugins(const std::string& sinks, const std::string& plugins) {
  return std::string(kValid) + "sinks:\n" + sinks + "plugins:\n" + plugins;
}

TEST(PluginErrors, PluginLibraryNotFound) {
  EXPECT_EQ(Errors(std::string(kValid) + "plugins: [./lib/libmissing.so]\n"),
            "t.yaml:10:11: plugins[0]: plugin library lib/libmissing.so not found");
}

TEST(PluginErrors, PluginPathsAreRelativeToTheConfigFile) {
  ScratchDir dir;
  dir.Write("libreal.so", "stands in for a library: config only checks that the file exists\n");
  const auto cfg = dir.Write("c.yaml", std::string(kValid) + "plugins: [libreal.so, libgone.so]\n");
  Result<Config> r = LoadConfig(cfg.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), cfg.string() + ":10:23: plugins[1]: plugin library " +
                                      (dir.path() / "libgone.so").string() + " not found");
}

TEST(PluginErrors, PluginPathIsADirectory) {
  ScratchDir dir;
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
  ScratchDir dir;
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
            "elasticsearch, kafka, aggregate; or a type of a library listed under plugins:)");
  // Its other keys cannot be anyone's options: they are unknown keys.
  EXPECT_NE(errors.find("\nt.yaml:11:45: sinks[0].directory: unknown key"), std::string::npos) << errors;
}

TEST(PluginErrors, CommonSinkKeysOfAPluginSinkAreStillChecked) {
  ScratchDir dir;
  const std::string lib = dir.Write("liba.so", "x").string();
  EXPECT_EQ(Errors(WithPlugins("  - {type: jsonl, entity: acount, on_error: maybe, path: x}\n", "  - " + lib + "\n")),
            "t.yaml:11:5: sinks[0].name: required key is missing\n"
            "t.yaml:11:27: sinks[0].entity: unknown entity type \"acount\" (did you mean \"account\"?)\n"
            "t.yaml:11:45: sinks[0].on_error: must be dead_letter or stop, got \"maybe\"");
}

TEST(PluginErrors, SecretsOnlyInThePluginSinksUrlAndSecretNamedOptions) {
  ScratchDir dir;
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
  ScratchDir dir;
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
  ScratchDir dir;
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
  ScratchDir dir;
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
  ScratchDir dir;
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
