// RoutedStorage: the access layer (sql/tables.h) over several storage
// servers, each a Storage of its own (MariaDbStorage in production, the
// in-memory fake in tests). Every call about a (type, partition) goes to the
// server the layout places it on; a call about several partitions is split
// by server and the answers merged:
//
//   EventLog      by partition; ReadAfter one round trip per server touched.
//                 healthy() is false only when every session it opened
//                 broke (a reader serving several servers keeps serving the
//                 ones that answer; a call to a server whose session broke
//                 opens a new one); Open() reopens the broken ones.
//   OffsetTable   by partition; Load and Delete on every server of the type.
//                 SaveFenced locks the leases on the same server as the
//                 offsets it writes, so fencing holds per server.
//   LeaseTable    leases by partition. Acquire fails when any server of
//                 the partitions asked fails (an answer without them would
//                 read as "another owner holds them" while the caller may
//                 still apply them); what the servers that answered granted
//                 is taken again at the next call, under a new token.
//                 Release releases what it can and returns the first failure.
//                 Members (Claim, Heartbeat, Members, Leave) live on main.
//                 List and History merge every server, each partition's
//                 rows from the server that holds it.
//   DeadLetters   on main.
//   ArchiveTable  by partition: a partition's archive records live beside its
//                 event table, so an archive step commits on one server.
//
// Threads: as Storage (tables.h).
#pragma once

#include <memory>
#include <vector>

#include "sql/layout.h"
#include "sql/tables.h"

namespace sluice::sql {

class RoutedStorage : public Storage {
 public:
  // servers[i] serves layout.servers[i].
  RoutedStorage(StorageLayout layout, std::vector<std::shared_ptr<Storage>> servers);

  std::unique_ptr<EventLog> OpenEventLog() override;
  std::unique_ptr<OffsetTable> OpenOffsets() override;
  std::unique_ptr<DeadLetterTable> OpenDeadLetters() override;
  std::unique_ptr<LeaseTable> OpenLeases() override;
  std::unique_ptr<ArchiveTable> OpenArchive() override;

 private:
  const std::shared_ptr<const StorageLayout> layout_;
  const std::vector<std::shared_ptr<Storage>> servers_;
};

// A Storage over the layout's servers: MariaDbStorage when there is one,
// a RoutedStorage over one MariaDbStorage per server otherwise.
std::shared_ptr<Storage> OpenStorage(const StorageLayout& layout);

}  // namespace sluice::sql
