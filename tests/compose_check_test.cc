// Checks compose/ without a Docker engine (issue 7, item 4): every YAML and
// JSON file parses, promtool accepts the scrape config and the rules and
// passes the rules' unit tests, every sluice_ metric the rules and the
// dashboard use is one the code exports, every exported metric is explained
// in docs/operations.md, the stack's sluice config is valid, and the image's
// runtime stage installs every library the sluice binary links.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "config/config.h"
#include "connectors/builtin_sink_types.h"
#include "metrics/metrics.h"

namespace sluice::metrics {
namespace {

namespace fs = std::filesystem;
const fs::path kRoot = SLUICE_SOURCE_DIR;
const fs::path kCompose = kRoot / "compose";

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << "cannot read " << p;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every sluice_ name in `text` (series names with their suffixes).
std::set<std::string> MetricNames(const std::string& text) {
  static const std::regex kName("sluice_[a-z0-9_]+");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kName); it != std::sregex_iterator(); ++it) {
    out.insert(it->str());
  }
  return out;
}

// Runs a command; its exit code, with stdout+stderr in *out.
int RunCommand(const std::string& command, std::string* out) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  out->clear();
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

TEST(Compose, EveryYamlAndJsonFileParses) {
  int yaml = 0, json = 0;
  for (const auto& entry : fs::recursive_directory_iterator(kCompose)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext == ".yml" || ext == ".yaml") {
      ++yaml;
      try {
        const YAML::Node doc = YAML::LoadFile(entry.path().string());
        EXPECT_TRUE(doc.IsMap()) << entry.path();
      } catch (const YAML::Exception& e) {
        ADD_FAILURE() << entry.path() << ": " << e.what();
      }
    } else if (ext == ".json") {
      ++json;
      EXPECT_FALSE(nlohmann::json::parse(Read(entry.path()), nullptr, false).is_discarded()) << entry.path();
    }
  }
  EXPECT_GE(yaml, 6);
  EXPECT_GE(json, 1);
}

TEST(Compose, StackHasEveryServiceAndTheSluiceConfigIsValid) {
  const YAML::Node compose = YAML::LoadFile((kCompose / "docker-compose.yml").string());
  for (const char* service : {"mysql", "redis", "opensearch", "kafka", "prometheus", "grafana", "sluice"}) {
    EXPECT_TRUE(compose["services"][service].IsMap()) << service;
  }
  EXPECT_EQ(compose["services"]["kafka"]["environment"]["KAFKA_PROCESS_ROLES"].as<std::string>(),
            "broker,controller");  // KRaft, no ZooKeeper
  EXPECT_EQ(compose["services"]["sluice"]["build"]["dockerfile"].as<std::string>(), "compose/Dockerfile");
  EXPECT_TRUE(fs::exists(kCompose / "Dockerfile"));

  ::setenv("SLUICE_MYSQL_PASSWORD", "compose-check", 0);
  auto cfg = config::LoadConfig((kCompose / "sluice" / "sluice.yaml").string(), connectors::BuiltinSinkTypes());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_TRUE(cfg->metrics.enabled);
  // Prometheus scrapes the port sluice's metrics listener uses.
  const std::string prometheus = Read(kCompose / "prometheus" / "prometheus.yml");
  EXPECT_NE(prometheus.find("sluice:" + std::to_string(cfg->metrics.listen_port)), std::string::npos);
}

// The image's runtime stage must install the package of every shared
// library the sluice binary links directly (readelf's NEEDED entries, their
// packages from dpkg): a new dependency cannot be forgotten there.
TEST(Compose, RuntimeImageInstallsThePackageOfEveryLibrarySluiceLinks) {
  std::string elf;
  ASSERT_EQ(RunCommand(std::string("readelf -d '") + SLUICE_BINARY + "'", &elf), 0) << elf;
  const std::string docker = Read(kCompose / "Dockerfile");
  const size_t last_from = docker.rfind("\nFROM ");
  ASSERT_NE(last_from, std::string::npos) << "compose/Dockerfile has no runtime stage";
  // The runtime stage's words: package names are matched whole (they hold
  // '.' and '+', so no pattern is built from them).
  std::set<std::string> runtime_words;
  std::istringstream runtime(docker.substr(last_from));
  for (std::string word; runtime >> word;) runtime_words.insert(word);
  // The C and C++ runtimes are in every Debian image.
  const std::set<std::string> kInBase = {"libc6", "libstdc++6", "libgcc-s1"};
  static const std::regex kNeeded(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  std::vector<std::string> sonames;
  std::string query = "dpkg -S";
  for (auto it = std::sregex_iterator(elf.begin(), elf.end(), kNeeded); it != std::sregex_iterator(); ++it) {
    sonames.push_back((*it)[1]);
    query += " '*/" + sonames.back() + "'";
  }
  ASSERT_GE(sonames.size(), 5u) << elf;
  std::string owners;
  ASSERT_EQ(RunCommand(query, &owners), 0) << owners;
  // Lines "package:arch: /path/to/soname".
  std::map<std::string, std::string> package_of;
  std::istringstream lines(owners);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(": /");
    if (colon == std::string::npos) continue;
    // Other architectures' copies (lib32stdc++6's /usr/lib32/libstdc++.so.6,
    // which clang's sanitizer runtime pulls in) are not what sluice links.
    const std::string path = line.substr(colon + 2);
    if (path.find("lib32/") != std::string::npos || path.find("libx32/") != std::string::npos ||
        path.find("/lib64/") != std::string::npos) {
      continue;
    }
    package_of[fs::path(line.substr(colon + 2)).filename().string()] = line.substr(0, line.find_first_of(":,"));
  }
  for (const std::string& soname : sonames) {
    ASSERT_TRUE(package_of.count(soname) > 0) << "no package owns " << soname << ":\n" << owners;
    const std::string& package = package_of[soname];
    if (kInBase.count(package) > 0) continue;
    EXPECT_TRUE(runtime_words.count(package) > 0)
        << "compose/Dockerfile's runtime stage does not install " << package << " (for " << soname << ")";
  }
}

TEST(Compose, PromtoolAcceptsTheConfigAndTheRulesAndTheirTests) {
  std::string out;
  if (RunCommand("promtool --version", &out) != 0) {
    if (InCi()) FAIL() << "promtool is missing (CI=true); scripts/bootstrap installs it (package prometheus)";
    GTEST_SKIP() << "promtool is missing; run scripts/bootstrap";
  }
  const std::string dir = (kCompose / "prometheus").string();
  EXPECT_EQ(RunCommand("promtool check config " + dir + "/prometheus.yml", &out), 0) << out;
  EXPECT_EQ(RunCommand("promtool check rules " + dir + "/alerts.yml", &out), 0) << out;
  EXPECT_EQ(RunCommand("cd " + dir + " && promtool test rules alerts_test.yml", &out), 0) << out;
}

TEST(Compose, RulesAndDashboardUseOnlyMetricsTheCodeExports) {
  const std::vector<std::string> series = ExportedSeriesNames();
  const std::set<std::string> exported(series.begin(), series.end());
  const std::string rules = Read(kCompose / "prometheus" / "alerts.yml");
  const std::string dashboard = Read(kCompose / "grafana" / "dashboards" / "sluice.json");
  for (const auto& [what, text] : {std::pair{"alerts.yml", rules}, std::pair{"sluice.json", dashboard}}) {
    const std::set<std::string> used = MetricNames(text);
    EXPECT_FALSE(used.empty()) << what;
    for (const std::string& name : used) EXPECT_TRUE(exported.count(name)) << what << " uses unknown metric " << name;
  }
  // The three alerts DESIGN 7 asks for.
  for (const char* alert : {"SluiceSinkLagHigh", "SluiceSinkUnhealthy", "SluiceDeadLettersGrowing"}) {
    EXPECT_NE(rules.find("alert: " + std::string(alert)), std::string::npos) << alert;
  }
  // The dashboard shows lag per sink, throughput, latency and errors.
  for (const char* metric : {"sluice_engine_lag_seconds", "sluice_engine_lag_events", "sluice_writer_commands_total",
                             "sluice_engine_events_applied_total", "sluice_writer_command_duration_seconds_bucket",
                             "sluice_engine_apply_duration_seconds_bucket", "sluice_engine_events_dead_lettered_total",
                             "sluice_engine_retries_total"}) {
    EXPECT_NE(dashboard.find(metric), std::string::npos) << metric;
  }
}

TEST(Compose, OperationsDocExplainsEveryMetricAndAlert) {
  const std::string doc = Read(kRoot / "docs" / "operations.md");
  for (const MetricInfo& m : kMetricList) {
    EXPECT_NE(doc.find("`" + std::string(m.name) + "`"), std::string::npos) << m.name << " is not in docs/operations.md";
  }
  const std::string rules = Read(kCompose / "prometheus" / "alerts.yml");
  static const std::regex kAlert("alert: (\\w+)");
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), kAlert); it != std::sregex_iterator(); ++it) {
    EXPECT_NE(doc.find("### " + (*it)[1].str()), std::string::npos) << (*it)[1] << " has no section in docs/operations.md";
  }
  // Names of sluice's own tables (sluice_offsets ...) may appear too; metrics
  // are the sluice_writer_/_engine_/_storage_ ones.
  static const std::regex kMetric("sluice_(writer|engine|storage)_[a-z0-9_]+");
  std::vector<std::string> known = ExportedSeriesNames();
  for (const MetricInfo& m : kMetricList) known.emplace_back(m.name);  // histograms by their base name
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), kMetric); it != std::sregex_iterator(); ++it) {
    const std::string name = it->str();
    EXPECT_NE(std::find(known.begin(), known.end(), name), known.end())
        << "docs/operations.md names unknown metric " << name;
  }
}

}  // namespace
}  // namespace sluice::metrics
