// The plugin host against real shared libraries: the example JSON-lines
// plugin and small plugins broken on purpose (testdata/), one per error.
#include "connectors/plugin/plugin_host.h"

#include <gtest/gtest.h>
#include <sluice/plugin.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "connectors/builtin_sink_types.h"
#include "connectors/sink.h"

namespace sluice::connectors::plugin {
namespace {

namespace fs = std::filesystem;

// A fresh directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sluice_plugin_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A config with the example plugin and one jsonl sink whose options are `options`.
Result<config::Config> JsonlConfig(const TempDir& dir, const std::string& options,
                                   const std::string& type = "jsonl") {
  const std::string yaml = std::string("storage:\n  mysql: {database: x}\n") +
                           "entities:\n  account: {partitions: 2}\n" +
                           "sinks:\n  - {name: file, type: " + type + ", entity: account" + options + "}\n" +
                           "plugins: [" + JSONL_PLUGIN + "]\n";
  return config::LoadConfigFromString(yaml, dir.path() + "/sluice.yaml", connectors::BuiltinSinkTypes());
}

ChangeEvent Event(std::string id, uint64_t version, std::string state, bool deleted = false) {
  ChangeEvent e;
  e.entity_type = "account";
  e.entity_id = std::move(id);
  e.version = version;
  e.event_id = version;
  e.deleted = deleted;
  e.state = deleted ? "" : std::move(state);
  return e;
}

TEST(PluginHost, LoadsTheExamplePluginAndReportsWhatItDeclares) {
  auto info = LoadPluginLibrary(JSONL_PLUGIN);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->name, "jsonl_sink");
  EXPECT_EQ(info->abi_major, SLUICE_PLUGIN_ABI_MAJOR);
  EXPECT_EQ(info->sink_types, std::vector<std::string>{"jsonl"});
  EXPECT_TRUE(IsPluginSinkType("jsonl"));
  EXPECT_FALSE(IsPluginSinkType("redis"));
  // Loading again is the same library, not a second registration of its type.
  EXPECT_TRUE(LoadPluginLibrary(JSONL_PLUGIN).ok());
}

TEST(PluginHostErrors, FileNotFound) {
  auto info = LoadPluginLibrary("/nonexistent/libnothing.so", "c.yaml:9:5");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().message(),
            "c.yaml:9:5: plugin library /nonexistent/libnothing.so: file not found (No such file or directory)");
}

TEST(PluginHostErrors, NotASharedLibrary) {
  TempDir dir;
  const std::string path = dir.path() + "/libtext.so";
  std::ofstream(path) << "not an ELF file\n";
  auto info = LoadPluginLibrary(path);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("plugin library " + path + ": cannot load: "), std::string::npos)
      << info.status().message();
}

TEST(PluginHostErrors, EntrySymbolMissing) {
  auto info = LoadPluginLibrary(NO_ENTRY_PLUGIN);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().message(), std::string("plugin library ") + NO_ENTRY_PLUGIN +
                                         ": not a sluice plugin: it does not export the entry symbol "
                                         "sluice_plugin_entry (define it with SLUICE_PLUGIN(...) from "
                                         "<sluice/plugin_sdk.h>)");
}

TEST(PluginHostErrors, OtherMajorVersion) {
  auto info = LoadPluginLibrary(WRONG_MAJOR_PLUGIN);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().message(),
            std::string("plugin library ") + WRONG_MAJOR_PLUGIN + ": built for plugin ABI " +
                std::to_string(SLUICE_PLUGIN_ABI_MAJOR + 1) + ".0, but this sluice speaks ABI " +
                std::to_string(SLUICE_PLUGIN_ABI_MAJOR) +
                ".x; rebuild the plugin against this sluice's include/sluice/plugin.h");
}

TEST(PluginHostErrors, InitFailedWithItsMessage) {
  auto info = LoadPluginLibrary(INIT_FAILS_PLUGIN, "c.yaml:3:4");
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().message(), std::string("c.yaml:3:4: plugin library ") + INIT_FAILS_PLUGIN +
                                         ": plugin init failed: licence file /etc/example/licence is missing");
}

TEST(PluginHostErrors, SinkTypeClashingWithABuiltInOne) {
  auto info = LoadPluginLibrary(BAD_TYPE_PLUGIN);
  ASSERT_FALSE(info.ok());
  EXPECT_NE(info.status().message().find("sink type 'redis' clashes with the built-in sink type of that name"),
            std::string::npos)
      << info.status().message();
  EXPECT_FALSE(IsPluginSinkType("redis"));
}

TEST(PluginHostErrors, CheckPluginsReportsEveryBadSinkWithItsOrigin) {
  TempDir dir;
  const std::string yaml = std::string("storage:\n  mysql: {database: x}\n") +
                           "entities:\n  account: {partitions: 2}\n" +
                           "sinks:\n"
                           "  - {name: a, type: jsnl, entity: account}\n"
                           "  - {name: b, type: jsonl, entity: account, pth: x.jsonl}\n"
                           "  - {name: c, type: jsonl, entity: account, path: 7}\n"
                           "plugins: [" + std::string(JSONL_PLUGIN) + "]\n";
  auto cfg = config::LoadConfigFromString(yaml, dir.path() + "/s.yaml", connectors::BuiltinSinkTypes());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const Status s = CheckPlugins(*cfg);
  EXPECT_EQ(s.message(),
            dir.path() + "/s.yaml:6:5: sink 'a': sink type 'jsnl' is not built in and no listed plugin provides "
                         "it (plugin types: jsonl)\n" +
                dir.path() + "/s.yaml:7:5: sink 'b' (plugin jsonl_sink): unknown option 'pth' (expected: path, fsync)\n" +
                dir.path() + "/s.yaml:8:5: sink 'c' (plugin jsonl_sink): path must be a file path, got 7");
}

TEST(PluginHostErrors, PushOnAPluginTypeThatCannotPush) {
  TempDir dir;
  const std::string yaml = std::string("storage:\n  mysql: {database: x}\n") +
                           "entities:\n  account: {partitions: 2}\n" +
                           "sinks:\n"
                           "  - {name: p, type: pull_only, entity: account, push: true}\n"
                           "  - {name: q, type: pull_only, entity: account}\n"
                           "plugins: [" + std::string(NO_PUSH_PLUGIN) + "]\n";
  auto cfg = config::LoadConfigFromString(yaml, dir.path() + "/s.yaml", connectors::BuiltinSinkTypes());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(CheckPlugins(*cfg).message(),
            dir.path() + "/s.yaml:6:5: sink 'p': push: true, but the plugin sink type 'pull_only' cannot be pushed "
                         "to (it does not declare SLUICE_CAP_CAN_PUSH)");
}

TEST(PluginSink, AppliesWithTheVersionCheckAndVerifies) {
  TempDir dir;
  auto cfg = JsonlConfig(dir, ", path: view.jsonl");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  ASSERT_TRUE(CheckPlugins(*cfg).ok());
  auto sink = MakeSink(cfg->sinks[0], *cfg);
  ASSERT_TRUE(sink.ok()) << sink.status().message();
  EXPECT_TRUE((*sink)->capabilities().can_push);
  ASSERT_TRUE((*sink)->Open().ok());

  const std::vector<ChangeEvent> batch = {Event("a", 1, R"({"n":1})"), Event("a", 2, R"({"n":2})"),
                                          Event("b", 1, R"({"n":10})"), Event("a", 1, R"({"n":1})"),
                                          Event("c", 1, "{not json")};
  auto r = (*sink)->Apply(batch);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.results.size(), 5u);
  EXPECT_EQ(r.results[0].outcome, Outcome::kApplied);
  EXPECT_EQ(r.results[1].outcome, Outcome::kApplied);
  EXPECT_EQ(r.results[2].outcome, Outcome::kApplied);
  EXPECT_EQ(r.results[3].outcome, Outcome::kStale);
  EXPECT_EQ(r.results[4].outcome, Outcome::kRejected);
  EXPECT_NE(r.results[4].reason.find("the state is not valid JSON"), std::string::npos);

  // The file is the log of applied versions; the view is its fold.
  const std::string text = ReadFile(dir.path() + "/view.jsonl");
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);

  std::vector<EntitySnapshot> truth = {{"a", 2, false, R"({"n": 2})"}, {"b", 1, false, R"({"n":10})"}};
  std::vector<Difference> diffs;
  ASSERT_TRUE((*sink)->Verify(truth, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs.front().detail;

  truth = {{"a", 3, false, R"({"n":3})"}, {"b", 1, false, R"({"n":11})"}, {"d", 1, false, "{}"}};
  ASSERT_TRUE((*sink)->Verify(truth, diffs).ok());
  ASSERT_EQ(diffs.size(), 3u);
  EXPECT_EQ(diffs[0].kind, Difference::Kind::kVersionMismatch);
  EXPECT_EQ(diffs[1].kind, Difference::Kind::kContentMismatch);
  EXPECT_EQ(diffs[2].kind, Difference::Kind::kMissing);

  // What the plugin counted, as families for /metrics.
  std::map<std::string, double> series;
  for (const auto& family : PluginMetricFamilies()) {
    EXPECT_EQ(family.type, prometheus::MetricType::Counter) << family.name;
    for (const auto& m : family.metric) {
      ASSERT_EQ(m.label.size(), 2u);
      series[family.name + "{" + m.label[0].name + "=" + m.label[0].value + "," + m.label[1].name + "=" +
             m.label[1].value + "}"] = m.counter.value;
    }
  }
  EXPECT_EQ(series["sluice_plugin_jsonl_bytes_written_total{plugin=jsonl_sink,sink=file}"],
            static_cast<double>(text.size()));
  EXPECT_EQ(series["sluice_plugin_jsonl_lines_written_total{plugin=jsonl_sink,sink=file}"], 3);
  (*sink)->Close();
}

TEST(PluginSink, AnotherInstanceRebuildsTheIndexFromTheFile) {
  TempDir dir;
  auto cfg = JsonlConfig(dir, ", path: view.jsonl, fsync: false");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  {
    auto sink = MakeSink(cfg->sinks[0], *cfg);
    ASSERT_TRUE(sink.ok() && (*sink)->Open().ok());
    const std::vector<ChangeEvent> batch = {Event("a", 3, R"({"n":3})"), Event("b", 2, "", true)};
    ASSERT_TRUE((*sink)->Apply(batch).status.ok());
  }
  // A torn last line (a crash mid-write) is cut off, not misread.
  std::ofstream(dir.path() + "/view.jsonl", std::ios::app) << R"({"id":"z","vers)";
  auto sink = MakeSink(cfg->sinks[0], *cfg);
  ASSERT_TRUE(sink.ok() && (*sink)->Open().ok());
  const std::vector<ChangeEvent> again = {Event("a", 2, R"({"n":2})"), Event("b", 1, R"({"n":1})"),
                                          Event("a", 4, R"({"n":4})")};
  auto r = (*sink)->Apply(again);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.results[0].outcome, Outcome::kStale);
  EXPECT_EQ(r.results[1].outcome, Outcome::kStale);  // the tombstone at version 2 keeps it out
  EXPECT_EQ(r.results[2].outcome, Outcome::kApplied);
  auto rows = ScanPluginSink(**sink);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].entity_id, "a");
  EXPECT_EQ((*rows)[0].version, 4u);
  EXPECT_TRUE((*rows)[1].deleted);
}

TEST(PluginSink, RebuildWritesAFreshFileAndRenamesItOverTheLiveOne) {
  TempDir dir;
  auto cfg = JsonlConfig(dir, ", path: view.jsonl");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto live = MakeSink(cfg->sinks[0], *cfg);
  ASSERT_TRUE(live.ok() && (*live)->Open().ok());
  const std::vector<ChangeEvent> history = {Event("a", 1, R"({"n":1})"), Event("b", 1, R"({"n":1})"),
                                            Event("b", 2, "", true)};
  ASSERT_TRUE((*live)->Apply(history).status.ok());
  // Damage a replay cannot repair: a line of no entity.
  std::ofstream(dir.path() + "/view.jsonl", std::ios::app)
      << R"({"id":"ghost","version":1,"deleted":false,"event_id":0,"state":{}})" << "\n";
  // An abandoned rebuild left a file; the next one starts afresh anyway.
  std::ofstream(dir.path() + "/view.jsonl.rebuild") << R"({"id":"x","version":9,"deleted":false,"event_id":0,"state":{}})"
                                                    << "\n";

  auto shadow = (*live)->MakeRebuildShadow();
  ASSERT_TRUE(shadow.ok()) << shadow.status().message();
  ASSERT_TRUE((*shadow)->Open().ok());
  ASSERT_TRUE((*shadow)->Apply(history).status.ok());
  EXPECT_EQ((*live)->PromoteRebuildShadow().code(), StatusCode::kFailedPrecondition);  // not a shadow
  ASSERT_TRUE((*shadow)->PromoteRebuildShadow().ok());
  EXPECT_FALSE(fs::exists(dir.path() + "/view.jsonl.rebuild"));

  // The live instance carries on with the new file.
  ASSERT_TRUE((*live)->Apply(std::vector{Event("a", 2, R"({"n":2})")}).status.ok());
  const std::vector<EntitySnapshot> truth = {{"a", 2, false, R"({"n":2})"}, {"b", 2, true, ""}};
  std::vector<Difference> diffs;
  ASSERT_TRUE((*live)->Verify(truth, diffs).ok());
  EXPECT_TRUE(diffs.empty()) << diffs.front().entity_id << ": " << diffs.front().detail;
}

TEST(PluginSink, TypesWithoutRebuildHooksAreRefusedForRebuild) {
  TempDir dir;
  const std::string yaml = std::string("storage:\n  mysql: {database: x}\n") +
                           "entities:\n  account: {partitions: 2}\n" +
                           "sinks:\n"
                           "  - {name: q, type: pull_only, entity: account}\n"
                           "  - {name: a, type: old_a, entity: account}\n"
                           "  - {name: b, type: old_b, entity: account}\n"
                           "plugins: [" + std::string(NO_PUSH_PLUGIN) + ", " + ABI_1_0_PLUGIN + "]\n";
  auto cfg = config::LoadConfigFromString(yaml, dir.path() + "/s.yaml", connectors::BuiltinSinkTypes());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  ASSERT_TRUE(CheckPlugins(*cfg).ok()) << CheckPlugins(*cfg).message();
  auto info = LoadPluginLibrary(ABI_1_0_PLUGIN);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->abi_minor, 0);
  EXPECT_EQ(info->sink_types, (std::vector<std::string>{"old_a", "old_b"}));

  auto q = MakeSink(cfg->sinks[0], *cfg);
  ASSERT_TRUE(q.ok());
  auto refused = (*q)->MakeRebuildShadow();
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("does not implement the optional rebuild hooks"), std::string::npos)
      << refused.status().message();
  // A plugin built for ABI 1.0 still loads and runs both of its types (the
  // host steps through its smaller structs), and says why it cannot rebuild.
  for (size_t i : {1, 2}) {
    auto old = MakeSink(cfg->sinks[i], *cfg);
    ASSERT_TRUE(old.ok()) << old.status().message();
    ASSERT_TRUE((*old)->Open().ok());
    auto r = (*old)->Apply(std::vector{Event("a", 1, "{}")});
    ASSERT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_EQ(r.results.at(0).outcome, Outcome::kApplied);
    refused = (*old)->MakeRebuildShadow();
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.status().message().find("built for plugin ABI 1.0, which has no rebuild hooks"),
              std::string::npos)
        << refused.status().message();
  }
}

// ---- apply()'s arrays across header versions (testdata/probe_plugin.cc) ----

// What the probe answers for a rejected event: every field it received
// (from ABI 1.3 on, the whole event: request, response, before).
std::string ProbeText(const ChangeEvent& e, uint16_t abi_minor) {
  std::string out = "type=" + e.entity_type + "|p=" + std::to_string(e.partition) +
                    "|id=" + std::to_string(e.event_id) + "|entity=" + e.entity_id +
                    "|v=" + std::to_string(e.version) + "|del=" + (e.deleted ? "1" : "0") + "|state=" + e.state +
                    "|cmd=" + e.command_name + "|cmd_id=" + e.command_id + "|at=" + std::to_string(e.committed_at_us);
  if (abi_minor >= 3) out += "|req=" + e.request + "|resp=" + e.response + "|before=" + e.before;
  return out;
}

ChangeEvent Full(std::string id, uint32_t partition, uint64_t event_id, uint64_t version, bool deleted,
                 std::string state, std::string command, std::string command_id, int64_t at) {
  ChangeEvent e;
  e.entity_type = "account";
  e.partition = partition;
  e.event_id = event_id;
  e.entity_id = std::move(id);
  e.version = version;
  e.deleted = deleted;
  e.state = std::move(state);
  e.command_name = std::move(command);
  e.command_id = std::move(command_id);
  e.committed_at_us = at;
  e.request = R"({"req":")" + e.entity_id + R"("})";
  e.response = R"({"ok":)" + std::to_string(version % 7) + "}";
  if (version > 1 && !deleted) e.before = R"({"was":)" + std::to_string(version - 1) + "}";
  return e;
}

struct ProbeBuild {
  const char* library;
  const char* type;
  uint16_t abi_minor;
};

void PrintTo(const ProbeBuild& b, std::ostream* os) { *os << b.type; }

class PluginAbiArrays : public ::testing::TestWithParam<ProbeBuild> {};

TEST_P(PluginAbiArrays, EveryFieldArrivesAndEveryResultIsReadAtThePluginsStride) {
  const ProbeBuild& build = GetParam();
  auto info = LoadPluginLibrary(build.library);
  ASSERT_TRUE(info.ok()) << info.status().message();
  EXPECT_EQ(info->abi_minor, build.abi_minor);
  TempDir dir;
  const std::string yaml = std::string("storage:\n  mysql: {database: x}\n") +
                           "entities:\n  account: {partitions: 8}\n" + "sinks:\n  - {name: probe, type: " +
                           build.type + ", entity: account}\n" + "plugins: [" + build.library + "]\n";
  auto cfg = config::LoadConfigFromString(yaml, dir.path() + "/s.yaml", connectors::BuiltinSinkTypes());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto sink = MakeSink(cfg->sinks[0], *cfg);
  ASSERT_TRUE(sink.ok()) << sink.status().message();
  ASSERT_TRUE((*sink)->Open().ok());

  // Rejected events come back with every field the plugin read: strings of
  // all lengths (empty ones too), extreme numbers, a delete.
  const std::vector<ChangeEvent> all_fields = {
      Full("r1", 7, (uint64_t{1} << 40) + 1, 1, false, R"({"n":1})", "put", "c-1", 1'700'000'000'000'001),
      Full("r22", 0, 2, uint64_t{1} << 62, true, "", "delete", "", -5),
      Full("r" + std::string(63, 'x'), 3, 3, 3, false, "{\"s\":\"" + std::string(5000, 'y') + "\"}", "", "c",
           INT64_MAX),
      Full("r4", 4294967295u, UINT64_MAX, UINT64_MAX, false, "{}", std::string(300, 'z'), std::string(64, 'k'),
           INT64_MIN),
      Full("r5", 1, 5, 2, false, R"({"n":[1,2,3]})", "patch", "c-5", 0)};
  auto r = (*sink)->Apply(all_fields);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.results.size(), all_fields.size());
  for (size_t i = 0; i < all_fields.size(); ++i) {
    EXPECT_EQ(r.results[i].outcome, Outcome::kRejected) << i;
    EXPECT_EQ(r.results[i].reason, ProbeText(all_fields[i], build.abi_minor)) << i;
  }

  // Outcomes of every kind, each read from its own result.
  std::vector<ChangeEvent> mixed;
  for (const char* id : {"a1", "s1", "r9", "a2", "s2", "r10", "a3", "a4", "s3"}) {
    mixed.push_back(Full(id, 2, mixed.size() + 10, mixed.size() + 1, false,
                         R"({"n":)" + std::to_string(mixed.size()) + "}", "put", id, 42));
  }
  r = (*sink)->Apply(mixed);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.results.size(), mixed.size());
  std::string outcomes;
  for (const auto& er : r.results) {
    outcomes += er.outcome == Outcome::kApplied ? 'A' : er.outcome == Outcome::kStale ? 'S' : 'R';
  }
  EXPECT_EQ(outcomes, "ASRASRAAS");
  EXPECT_EQ(r.results[2].reason, ProbeText(mixed[2], build.abi_minor));
  EXPECT_EQ(r.results[5].reason, ProbeText(mixed[5], build.abi_minor));
  // A sink type that asks for the whole event makes the engine read it.
  EXPECT_EQ((*sink)->capabilities().full_events, build.abi_minor >= 3);

  // Rows come back through scan whatever sizeof(sluice_row) the plugin has.
  auto rows = ScanPluginSink(**sink);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 4u);
  EXPECT_EQ((*rows)[0].entity_id, "a1");
  EXPECT_EQ((*rows)[0].version, 1u);
  EXPECT_EQ((*rows)[3].entity_id, "a4");
  EXPECT_EQ((*rows)[3].state, R"({"n":7})");
  (*sink)->Close();
}

INSTANTIATE_TEST_SUITE_P(HeaderVersions, PluginAbiArrays,
                         ::testing::Values(ProbeBuild{PROBE_PLUGIN, "probe", SLUICE_PLUGIN_ABI_MINOR},
                                           ProbeBuild{PROBE_OLD_PLUGIN, "probe_old", 1},
                                           ProbeBuild{PROBE_NEXT_PLUGIN, "probe_next", 4}),
                         [](const auto& info) { return std::string(info.param.type); });

// ---- shutdown() ----

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(line.substr(line.find(' ') + 1));  // drop the pid
  return out;
}

TEST(PluginShutdown, CalledOnceAfterTheLastSinkIsDestroyed) {
  TempDir dir;
  const std::string calls = dir.path() + "/calls";
  // In a child process: ShutdownPlugins() ends plugins for the whole process.
  EXPECT_EXIT(
      {
        const std::string yaml = std::string("storage:\n  mysql: {database: x}\n") +
                                 "entities:\n  account: {partitions: 2}\n" +
                                 "sinks:\n"
                                 "  - {name: a, type: buffered_file, entity: account, path: a.view, calls: calls}\n"
                                 "  - {name: b, type: buffered_file, entity: account, path: b.view}\n"
                                 "plugins: [" + std::string(BUFFERED_PLUGIN) + "]\n";
        auto cfg = config::LoadConfigFromString(yaml, dir.path() + "/s.yaml", connectors::BuiltinSinkTypes());
        if (!cfg.ok() || !CheckPlugins(*cfg).ok()) std::exit(2);
        auto a = MakeSink(cfg->sinks[0], *cfg);
        auto b = MakeSink(cfg->sinks[1], *cfg);
        if (!a.ok() || !b.ok() || !(*a)->Open().ok()) std::exit(3);
        a->reset();
        ShutdownPlugins();  // b is still alive: its library's shutdown waits
        std::ofstream(calls, std::ios::app) << "0 b still alive\n";
        b->reset();         // the last sink: shutdown now
        ShutdownPlugins();  // once only
        // Nothing is made or loaded afterwards (a library never loaded before: a copy).
        const std::string copy = dir.path() + "/libcopy.so";
        fs::copy_file(NO_PUSH_PLUGIN, copy);
        const auto made = MakeSink(cfg->sinks[0], *cfg);
        const auto loaded = LoadPluginLibrary(copy);
        const bool refused = !made.ok() && made.status().message().find("shut its plugins down") != std::string::npos &&
                             !loaded.ok() &&
                             loaded.status().message().find("shut its plugins down") != std::string::npos;
        std::exit(refused ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(Lines(calls), (std::vector<std::string>{"init", "create a", "destroy a", "create b", "destroy b",
                                                    "create a", "create b", "open a", "close a", "destroy a",
                                                    "b still alive", "destroy b", "shutdown"}));
}

}  // namespace
}  // namespace sluice::connectors::plugin
