#include "tests/support/galera.h"

#include <cstdlib>

namespace sluice::testing {

std::vector<uint16_t> GaleraPorts() {
  const char* env = std::getenv("SLUICE_TEST_GALERA_PORTS");
  std::string text = env && *env ? env : "14306,14307,14308";
  std::vector<uint16_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    out.push_back(static_cast<uint16_t>(std::stoi(text.substr(at, comma - at))));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

sql::ConnectParams NodeParams(uint16_t port) {
  sql::ConnectParams p = MysqlParams();
  const char* host = std::getenv("SLUICE_TEST_GALERA_HOST");
  p.host = host && *host ? host : "127.0.0.1";
  p.port = port;
  return p;
}

bool GaleraReady(std::string* why) {
  for (const uint16_t port : GaleraPorts()) {
    auto c = sql::Connection::Open(NodeParams(port));
    if (!c.ok()) {
      *why = c.status().ToString();
      return false;
    }
    auto size = (*c)->Query("SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'");
    if (!size.ok() || size->empty() || size->at(0).at(1) != "3") {
      *why = "node on port " + std::to_string(port) + " is not in a 3-node cluster";
      return false;
    }
  }
  return true;
}

}  // namespace sluice::testing
