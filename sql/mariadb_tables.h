// The MariaDB/MySQL implementation of the access layer (sql/tables.h): every
// statement sluice runs on its event, offset, dead-letter and lease tables.
//
// Threads: MariaDbStorage may be shared by any threads; each object it opens
// owns one Connection, opened lazily and reopened after a failure, and is
// used by one thread at a time.
#pragma once

#include <memory>

#include "sql/connection.h"
#include "sql/tables.h"

namespace sluice::sql {

class MariaDbStorage : public Storage {
 public:
  explicit MariaDbStorage(ConnectParams params) : params_(std::move(params)) {}

  std::unique_ptr<EventLog> OpenEventLog() override;
  std::unique_ptr<OffsetTable> OpenOffsets() override;
  std::unique_ptr<DeadLetterTable> OpenDeadLetters() override;
  std::unique_ptr<LeaseTable> OpenLeases() override;      // mariadb_leases.cc
  std::unique_ptr<ArchiveTable> OpenArchive() override;  // mariadb_archive.cc

 private:
  const ConnectParams params_;
};

// An EventLog over a connection the caller owns and keeps open while the log
// is used (for code that already holds a session).
std::unique_ptr<EventLog> EventLogOn(Connection& conn);

}  // namespace sluice::sql
