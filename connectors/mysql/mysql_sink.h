// The built-in mysql sink (see connectors/sink.h for the contract).
//
// It keeps one table in MySQL/MariaDB (by default in the main storage
// database, on the main storage server) with one row per entity:
//
//   id          VARBINARY(64) primary key, the entity id
//   _version    the entity version the row reflects (also of a tombstone)
//   _deleted    1 for a tombstone: the entity was deleted at _version and
//               every mapped column is NULL
//   _updated_at when the row last changed (server time, UTC)
//   <columns>   one per `mysql.columns` entry, filled from the state with
//               FieldText(state, pointer); NULL when absent
//
// Apply() runs one transaction per batch: it locks the batch's rows, decides
// applied/stale per event against the stored versions, and writes the last
// applied event of each entity with one multi-row upsert whose every
// assignment is still guarded by `VALUES(_version) > _version`, so that a
// concurrent writer (the push path) can never be overwritten by an older
// version. When MySQL refuses a value (too long, out of range, CHECK), the
// batch is rolled back and replayed one event per transaction so that only
// the offending events are rejected.
//
// Ownership and threads: the sink owns one sql::Connection, used only by the
// thread that calls it (one at a time, as the Sink contract says). After a
// lost connection the next call reconnects once; it never sleeps or retries.
#pragma once

#include <memory>

#include "connectors/sink.h"

namespace sluice::connectors::mysql {

// Builds a mysql sink for a validated config (not yet opened). The server is
// global.mysql; the database is sink.mysql.database or, when empty,
// global.mysql.database. InvalidArgument when the columns clash with the
// sink's own columns or with each other.
Result<std::unique_ptr<Sink>> MakeMysqlSink(const config::SinkConfig& sink, const config::Config& global);

}  // namespace sluice::connectors::mysql
