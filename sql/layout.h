// Where main storage lives: one MySQL server, or several, each holding the
// event tables of some (entity type, partition)s with their offsets and
// leases (docs/deployment.md#storage-servers).
//
//   StorageLayout   the servers (the first is "main": storage.mysql) and
//                   which server holds each partition of each entity type
//   OpenStorage     a Storage over a layout: MariaDbStorage for one server,
//                   RoutedStorage (sql/routed_tables.h) for several
//
// Main holds what is not per partition: members, dead letters, and the
// placement as `sluice init` recorded it (sql/schema.h). A layout is a
// value; share it by const reference from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sql/connection.h"
#include "sql/schema.h"
#include "sql/tables.h"

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

// A Storage over the layout's servers.
std::shared_ptr<Storage> OpenStorage(const StorageLayout& layout);

// What `sluice init` did on each server.
struct LayoutInitReport {
  struct Server {
    std::string name;
    std::string database;
    InitReport report;
  };
  std::vector<Server> servers;
  // Partitions whose recorded server changed (InitLayout with accept_moves).
  std::vector<std::string> moved;  // "partition 4 of order: main -> orders_b"
};

// `sluice init` on every server of the layout: each gets the metadata tables,
// its own name (sluice_server) and the event tables of the partitions it
// holds; main records the placement (sluice_placement). A placement that
// differs from the recorded one is refused (FailedPrecondition naming the
// migration) unless accept_moves: then each moved partition's table must
// already be on its new server, holding at least as many events as on its
// old one (docs/deployment.md#moving-partitions-between-servers), no
// engine or writer may have a heartbeat younger than `live_within` in
// sluice_members, and the new placement is recorded. Partition counts and
// placements are checked on every server before anything is created.
Result<LayoutInitReport> InitLayout(const StorageLayout& layout, const std::vector<EntityTypeSpec>& types,
                                    bool accept_moves,
                                    std::chrono::milliseconds live_within = std::chrono::seconds(10));

// What `sluice writer` and `sluice sync` check at start, changing nothing:
// CheckSchema on every server for the partitions it holds, each server's
// recorded name, and the placement main recorded against the layout. A
// database made before placements were recorded counts as every partition
// on main.
Status CheckLayout(const StorageLayout& layout, const std::vector<EntityTypeSpec>& types);

// Opens a session to server `server` of the layout, with its database
// selected; errors name the server.
Result<std::unique_ptr<Connection>> ConnectServer(const StorageLayout& layout, size_t server);

}  // namespace sluice::sql
