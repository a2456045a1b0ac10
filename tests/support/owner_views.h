// The "balance per owner" load and aggregate view that the aggregate-view
// and several-engine tests share: accounts patched with a random owner (of
// 50) and a balance in cents, deleted and created again, and a view of the
// total balance and number of accounts per owner plus events per minute per
// command, checked to the cent against the same figures computed in SQL
// from the event tables.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "tests/support/test_support.h"

namespace sluice::testing {

// The aggregate view's code (tables owner_balance and events_per_minute).
extern const char* const kPerOwnerJs;

// The sink's `tables:` lines for kPerOwnerJs, indented for a sink entry.
extern const char* const kPerOwnerTables;

// `count` commands over `accounts` accounts a0..a<accounts-1> from 16 clients:
// 85% patches, 8% deletes, 7% creations. Stops early when *stop is set.
void OwnerLoad(uint16_t port, int count, int accounts, uint32_t seed, const std::atomic<bool>* stop = nullptr);

// The union of every partition table of `type` as a derived table of `columns`.
std::string AllEvents(const std::string& type, int partitions, const std::string& columns);

// The latest state of each live entity of `type` (entity_id, state), as a derived table.
std::string LatestLive(const std::string& type, int partitions);

// Expects owner_balance and events_per_minute in `db` to equal what the
// events of account (`partitions` partitions) say, and every event to be
// counted once; `events` is the number of events.
void ExpectPerOwnerExact(TestDatabase& db, int partitions, int64_t events);

}  // namespace sluice::testing
