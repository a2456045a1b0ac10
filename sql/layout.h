// Where main storage lives: one MySQL server, or several, each holding the
// event tables of some (entity type, partition)s with their offsets and
// leases (docs/deployment.md#storage-servers).
//
//   StorageLayout   the servers (the first is "main": storage.mysql) and
//                   which server holds each partition of each entity type
//
// Main holds what is not per partition: members, dead letters, and the
// placement as `sluice init` recorded it (sql/layout_schema.h). The
// Storage over a layout is sql/routed_tables.h's OpenStorage. A layout is
// a value; share it by const reference from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sql/connection.h"

namespace sluice::sql {

struct StorageServer {
  std::string name;  // "main" for the first
  ConnectParams params;
};

// Partitions first..last (inclusive) of a type, on servers[server].
struct PlacedRange {
  uint32_t first = 0;
  uint32_t last = 0;
  size_t server = 0;
  bool operator==(const PlacedRange&) const = default;
};

struct StorageLayout {
  std::vector<StorageServer> servers;  // never empty; [0] is main
  // type -> the server index of each of its partitions; a type not listed
  // (or a partition past its vector) lives on main.
  std::map<std::string, std::vector<size_t>> placement;

  // A layout of one server.
  static StorageLayout Single(ConnectParams params);

  bool single() const { return servers.size() == 1; }
  const ConnectParams& main() const { return servers.front().params; }
  size_t ServerOf(const std::string& type, uint32_t partition) const;
  // The servers holding any of the type's `partitions` partitions, ascending.
  std::vector<size_t> ServersOf(const std::string& type, uint32_t partitions) const;
  // The type's partitions as maximal ranges on one server, by first partition.
  std::vector<PlacedRange> Ranges(const std::string& type, uint32_t partitions) const;
  // "0-3 on main, 4-7 on orders_b" (or "on main").
  std::string Describe(const std::string& type, uint32_t partitions) const;
};

}  // namespace sluice::sql
