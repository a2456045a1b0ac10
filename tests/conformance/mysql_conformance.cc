// The built-in mysql sink in the conformance kit: its view table lives on
// the test MariaDB, reached through a TcpProxy so that the kit can cut it.
#include <memory>
#include <nlohmann/json.hpp>

#include "tests/conformance/conformance.h"
#include "tests/support/test_support.h"

namespace sluice::conformance {
namespace {

class MysqlUnderTest : public ProxiedConnector {
 public:
  Status SetUp() override {
    if (!testing::Connect()) return Unavailable("MariaDB is not reachable");
    db_ = std::make_unique<testing::TestDatabase>("conf");
    const sql::ConnectParams p = testing::MysqlParams();
    StartProxy(p.host, p.port);
    return Status::Ok();
  }

  std::string StorageYaml() override {
    const sql::ConnectParams p = testing::MysqlParams();
    return "{host: 127.0.0.1, port: " + std::to_string(proxy_port()) + ", user: " + nlohmann::json(p.user).dump() +
           ", password: " + nlohmann::json(p.password).dump() + ", database: " + db_->name() +
           ", connect_timeout: 2s, io_timeout: 5s}";
  }

  std::string SinkYaml() override {
    return "type: mysql, table: account_view, columns: {n: {pointer: /n, type: BIGINT}, name: /name}";
  }

  Result<std::optional<ViewRow>> ReadBack(const std::string& entity_id) override {
    // Kit ids are [a-z]: safe to inline.
    const auto rows = db_->Query("SELECT _version, _deleted, n FROM account_view WHERE id = '" + entity_id + "'");
    if (rows.empty()) return std::optional<ViewRow>();
    const sql::Row& r = rows.front();
    ViewRow row{std::stoull(r.at(0).value_or("0")), r.at(1).value_or("0") == "1", std::nullopt};
    if (r.at(2)) row.n = std::stoll(*r.at(2));
    return std::optional<ViewRow>(row);
  }

 private:
  std::unique_ptr<testing::TestDatabase> db_;
};

}  // namespace

SLUICE_CONFORMANCE_CONNECTOR(Mysql, MysqlUnderTest);

}  // namespace sluice::conformance
