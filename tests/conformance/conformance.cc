#include "tests/conformance/conformance.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "connectors/builtin_sink_types.h"
#include "connectors/plugin/plugin_host.h"
#include "tests/support/test_support.h"

namespace sluice::conformance {

std::string ConnectorUnderTest::StorageYaml() {
  const sql::ConnectParams p = testing::MysqlParams();
  return "{host: " + nlohmann::json(p.host).dump() + ", port: " + std::to_string(p.port) +
         ", user: " + nlohmann::json(p.user).dump() + ", password: " + nlohmann::json(p.password).dump() +
         ", database: " + UniqueName("conf") + "}";
}

ProxiedConnector::ProxiedConnector() = default;
ProxiedConnector::~ProxiedConnector() = default;

void ProxiedConnector::StartProxy(const std::string& host, uint16_t port) {
  proxy_ = std::make_unique<testing::TcpProxy>(host, port);
}

uint16_t ProxiedConnector::proxy_port() const { return proxy_ ? proxy_->port() : 0; }

void ProxiedConnector::SetServerDown(bool down) {
  if (proxy_) proxy_->SetEnabled(!down);
}

connectors::ChangeEvent ConnectorUnderTest::PoisonEvent(connectors::ChangeEvent base) {
  base.state = "{\"n\": 1, \"name\": ";  // cut short: not JSON
  return base;
}

std::string UniqueName(const std::string& prefix) {
  static std::atomic<uint64_t> counter{0};
  const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(now % 1000000000) + "_" +
         std::to_string(counter++);
}

connectors::ChangeEvent Put(const std::string& id, uint64_t version, int64_t n) {
  static std::atomic<uint64_t> next_event_id{1};
  connectors::ChangeEvent e;
  e.entity_type = "account";
  e.partition = 0;
  e.event_id = next_event_id++;
  e.entity_id = id;
  e.version = version;
  e.state = nlohmann::json{{"n", n}, {"name", id + " v" + std::to_string(version)}}.dump();
  e.command_name = "put";
  e.command_id = id + "-" + std::to_string(version);
  e.committed_at_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return e;
}

connectors::ChangeEvent Del(const std::string& id, uint64_t version) {
  connectors::ChangeEvent e = Put(id, version, 0);
  e.deleted = true;
  e.state.clear();
  e.command_name = "delete";
  return e;
}

void SinkConformance::SetUp() {
  connector_ = GetParam().make();
  const Status s = connector_->SetUp();
  if (s.code() == StatusCode::kUnavailable && !testing::InCi()) {
    GTEST_SKIP() << GetParam().name << ": its server is not reachable (" << s.message()
                 << "); run scripts/services up";
  }
  ASSERT_TRUE(s.ok()) << GetParam().name << ": " << s.message();

  config_dir_ = (std::filesystem::temp_directory_path() / UniqueName("sluice_conf")).string();
  std::filesystem::create_directories(config_dir_);
  const std::string yaml = "storage:\n  mysql: " + connector_->StorageYaml() +
                           "\nentities:\n  account: {partitions: 2}\n"
                           "sinks:\n  - {name: under_test, entity: account, " +
                           connector_->SinkYaml() + "}\n" + connector_->ExtraYaml();
  const std::string path = config_dir_ + "/sluice.yaml";
  std::ofstream(path) << yaml;
  auto cfg = config::LoadConfig(path, connectors::BuiltinSinkTypes());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << yaml;
  const Status plugins = connectors::plugin::CheckPlugins(*cfg);
  ASSERT_TRUE(plugins.ok()) << plugins.message();
  config_ = std::move(*cfg);
}

void SinkConformance::TearDown() {
  if (connector_) connector_->SetServerDown(false);
  connector_.reset();
  if (!config_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(config_dir_, ec);
  }
}

std::unique_ptr<connectors::Sink> SinkConformance::OpenSink() {
  auto made = connectors::MakeSink(config_->sinks.at(0), *config_);
  EXPECT_TRUE(made.ok()) << made.status().message();
  if (!made.ok()) return nullptr;
  const Status s = (*made)->Open();
  EXPECT_TRUE(s.ok()) << s.message();
  return std::move(*made);
}

std::string SinkConformance::Apply(connectors::Sink& sink, const std::vector<connectors::ChangeEvent>& events) {
  const connectors::ApplyResult r = sink.Apply(events);
  if (!r.status.ok()) return r.status.ToString();
  if (r.results.size() != events.size()) {
    return "wrong number of results: " + std::to_string(r.results.size()) + " for " +
           std::to_string(events.size()) + " events";
  }
  // As the engine does before it saves offsets: what was acknowledged is durable from here.
  if (const Status flushed = sink.Flush(); !flushed.ok()) return "flush: " + flushed.ToString();
  std::string out;
  for (const auto& e : r.results) {
    out += e.outcome == connectors::Outcome::kApplied ? 'A' : e.outcome == connectors::Outcome::kStale ? 'S' : 'R';
  }
  return out;
}

std::optional<ViewRow> SinkConformance::Row(const std::string& id) {
  auto row = connector_->ReadBack(id);
  EXPECT_TRUE(row.ok()) << "reading back " << id << ": " << row.status().message();
  if (!row.ok()) return std::nullopt;
  return *row;
}

}  // namespace sluice::conformance
