#include "sql/params.h"

namespace sluice::sql {

ConnectParams ParamsFrom(const config::MysqlConfig& m) {
  ConnectParams p;
  p.host = m.host;
  p.port = m.port;
  p.socket = m.socket;
  p.user = m.user;
  p.password = m.password;
  p.database = m.database;
  p.connect_timeout = m.connect_timeout;
  p.io_timeout = m.io_timeout;
  return p;
}

}  // namespace sluice::sql
