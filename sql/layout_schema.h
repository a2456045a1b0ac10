// The storage layout's schema (sql/layout.h): what `sluice init` does on
// every storage server, and what `sluice writer` and `sluice sync` check at
// start. Each server's database records its own name (sluice_server); main
// records the placement (sluice_placement).
//
// The functions open their own sessions, run on the calling thread, and
// are safe to run from several processes at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "sql/connection.h"
#include "sql/layout.h"
#include "sql/schema.h"

namespace sluice::sql {

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
