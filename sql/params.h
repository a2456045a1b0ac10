// The connection parameters of a configured MySQL server, and the storage
// layout of a configuration.
//
// sql/ does not know the configuration's types: the caller instantiates this
// with its own config struct (config::MysqlConfig: host, port, socket, user,
// password, database, connect_timeout, io_timeout), so the conversion is
// written once and sql/ depends on core/ alone.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sql/connection.h"
#include "sql/layout.h"
#include "sql/schema.h"

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
  p.ssl_mode = static_cast<SslMode>(static_cast<uint8_t>(m.ssl_mode));
  p.ssl_ca = m.ssl_ca;
  p.ssl_cert = m.ssl_cert;
  p.ssl_key = m.ssl_key;
  return p;
}

// The storage layout of a configuration (config::Config: mysql, servers,
// entities with their placement), main first, then storage.servers in order.
template <typename Config>
StorageLayout LayoutFrom(const Config& c) {
  StorageLayout l = StorageLayout::Single(ParamsFrom(c.mysql));
  for (const auto& s : c.servers) l.servers.push_back({s.name, ParamsFrom(s.mysql)});
  for (const auto& [name, e] : c.entities) {
    if (e.placement.empty()) continue;
    std::vector<size_t> servers(e.partitions, 0);
    for (const auto& r : e.placement) {
      size_t index = 0;
      for (size_t i = 0; i < l.servers.size(); ++i) {
        if (l.servers[i].name == r.server) index = i;
      }
      for (uint32_t p = r.first; p <= r.last && p < e.partitions; ++p) servers[p] = index;
    }
    l.placement[name] = std::move(servers);
  }
  return l;
}

// The schema specs of a configuration's entity types (every partition).
template <typename Config>
std::vector<EntityTypeSpec> SpecsFrom(const Config& c) {
  std::vector<EntityTypeSpec> specs;
  for (const auto& [name, e] : c.entities) specs.push_back({name, e.partitions, {}});
  return specs;
}

}  // namespace sluice::sql
