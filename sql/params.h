// The connection parameters of a configured MySQL server.
#pragma once

#include "config/config.h"
#include "sql/connection.h"

namespace sluice::sql {

ConnectParams ParamsFrom(const config::MysqlConfig& mysql);

}  // namespace sluice::sql
