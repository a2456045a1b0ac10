// The connection parameters of a configured MySQL server.
//
// sql/ does not know the configuration's types: the caller instantiates this
// with its own config struct (config::MysqlConfig: host, port, socket, user,
// password, database, connect_timeout, io_timeout), so the conversion is
// written once and sql/ depends on core/ alone.
#pragma once

#include "sql/connection.h"

namespace sluice::sql {

template <typename MysqlConfig>
ConnectParams ParamsFrom(const MysqlConfig& m) {
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
