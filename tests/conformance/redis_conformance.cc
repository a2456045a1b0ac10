// The built-in redis sink in the conformance kit, through a TcpProxy in
// front of the test Redis so that the kit can cut it.
#include <memory>
#include <nlohmann/json.hpp>

#include "tests/conformance/conformance.h"
#include "tests/support/test_support.h"

namespace sluice::conformance {
namespace {

class RedisUnderTest : public ProxiedConnector {
 public:
  ~RedisUnderTest() override {
    if (!client_ || !client_->ok()) return;
    for (const auto& [key, value] : client_->Dump(prefix_ + ":*")) client_->Run({"DEL", key});
  }

  Status SetUp() override {
    client_ = std::make_unique<testing::RedisClient>(testing::RedisPort());
    if (!client_->ok() || !client_->Run({"PING"})) {
      return Unavailable("Redis is not reachable on port " + std::to_string(testing::RedisPort()));
    }
    StartProxy("127.0.0.1", testing::RedisPort());
    prefix_ = UniqueName("conf");
    return Status::Ok();
  }

  std::string SinkYaml() override {
    return "type: redis, url: \"redis://127.0.0.1:" + std::to_string(proxy_port()) + "/0\", key: \"" +
           prefix_ + ":{id}\"";
  }

  // The value key holds {"_version": N, ...state}; a delete leaves <key>:_tomb = N.
  Result<std::optional<ViewRow>> ReadBack(const std::string& entity_id) override {
    const std::string key = prefix_ + ":" + entity_id;
    if (auto value = client_->Get(key)) {
      const auto j = nlohmann::json::parse(*value, nullptr, false);
      if (j.is_discarded()) return Internal("key " + key + " is not JSON: " + *value);
      ViewRow row{j.at("_version").get<uint64_t>(), false, std::nullopt};
      if (j.contains("n")) row.n = j.at("n").get<int64_t>();
      return std::optional<ViewRow>(row);
    }
    if (auto tomb = client_->Get(key + ":_tomb")) {
      return std::optional<ViewRow>(ViewRow{std::stoull(*tomb), true, std::nullopt});
    }
    return std::optional<ViewRow>();
  }

 private:
  std::unique_ptr<testing::RedisClient> client_;
  std::string prefix_;
};

}  // namespace

SLUICE_CONFORMANCE_CONNECTOR(Redis, RedisUnderTest);

}  // namespace sluice::conformance
