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
// version. Ids with one event newer than the version the sink remembers
// for them (mysql.version_cache) are not read; the upsert's affected-row
// count confirms those guesses, and a wrong one rolls the transaction back
// and decides the batch again with every id read (README.md, "Version
// hints"). When MySQL refuses a value (too long, out of range, CHECK), the
// batch is rolled back and replayed one event per transaction so that only
// the offending events are rejected.
//
// With `mysql.connections` N > 1, Apply() splits the batch by entity id over
// N connections (LaneOf) and applies the parts in parallel, each exactly as
// above: the parts have disjoint ids, so they never wait for each other's
// locks, and every outcome is what one connection would have decided. When
// one part fails (lost connection, deadlock...), the others may have
// committed; the batch is kUnavailable and its retry finds those events stale.
//
// Ownership and threads: the sink owns its N sql::Connections. The thread
// that calls it (one at a time, as the Sink contract says) applies the first
// part itself and starts one thread per other part for the duration of the
// call; a connection is used by one thread at a time. After a lost
// connection the next call reconnects it once; it never sleeps or retries.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>

#include "connectors/sink.h"

namespace sluice::connectors::mysql {

// Builds a mysql sink for a validated config (not yet opened). The server is
// global.mysql; the database is the sink's MysqlSinkOptions::database or, when empty,
// global.mysql.database. InvalidArgument when the columns clash with the
// sink's own columns or with each other.
Result<std::unique_ptr<Sink>> MakeMysqlSink(const config::SinkConfig& sink, const config::Config& global);

// What the sink's version hints saved (see mysql.version_cache in
// docs/configuration.md), since the sink was made.
struct HintStats {
  uint64_t reads_skipped = 0;  // ids written without the locking read
  uint64_t wrong_guesses = 0;  // transactions rolled back and decided again
  uint64_t inserted_unread = 0;  // new entities (version 1) inserted without the read
  uint64_t wrong_inserts = 0;    // transactions rolled back because such a row existed
};
// The hint statistics of a sink made by MakeMysqlSink; nullopt for any other sink.
std::optional<HintStats> HintStatsOf(const Sink& sink);

// The connection (0..connections-1) that applies the events of entity `id`:
// every event of one id goes over the same connection, in batch order.
size_t LaneOf(std::string_view id, size_t connections);

}  // namespace sluice::connectors::mysql
