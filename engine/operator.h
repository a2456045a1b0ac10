// Operator commands that read main storage and the views directly, without a
// running engine: status, verify, dead letters. Each writes a human-readable
// report to `out`. Call from one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "config/config.h"
#include "core/status.h"

namespace sluice::engine {

// Every command here first checks that main storage is set up: a database
// that does not exist yet, or one without sluice's tables, is a
// FailedPrecondition that says to run `sluice init`.

// Per sink and partition: offset, head, lag in events and seconds, state,
// counters and last error. `json`: one JSON document instead of a table.
Status PrintStatus(const config::Config& config, bool json, std::ostream& out);

// Compares every view (or only `sink`) with main storage; returns the number
// of differences found (each is printed).
Result<uint64_t> Verify(const config::Config& config, const std::optional<std::string>& sink, std::ostream& out);

// `sluice verify --repair`: compares like Verify, then rewrites in each view
// (or only `sink`) the entities that differ from their latest event in main
// storage and compares them again (engine/view_repair.h). Sinks without
// entity checks (kafka, plugins) are only verified. Returns the number of
// differences that remain.
Result<uint64_t> VerifyAndRepair(const config::Config& config, const std::optional<std::string>& sink,
                                 std::ostream& out);

// The dead letters a retry or discard acts on: the one with `id`, else the
// unresolved ones of `sink`, else (neither) every unresolved one.
struct DeadLetterFilter {
  std::optional<uint64_t> id;
  std::optional<std::string> sink;
};

// Lists dead letters (unresolved only unless `all`), optionally of one sink:
// a table, or with `json` one document {"dead_letters": [...], "count": N}.
Status ListDeadLetters(const config::Config& config, const std::optional<std::string>& sink, bool all, bool json,
                       std::ostream& out);

// Re-applies the selected unresolved dead letters to their sinks: those now
// applied or stale are marked resolved; those rejected again keep their row
// with the new error. Returns how many of them are still unresolved. A
// selected id that does not exist is NotFound; one already resolved is
// reported and left as it is.
Result<uint64_t> RetryDeadLetters(const config::Config& config, const DeadLetterFilter& filter, std::ostream& out);

// Gives up on the selected unresolved dead letters without applying them:
// each is marked resolved with resolution "discarded" (the row stays, for
// `list --all`). Needs `filter.id` or `filter.sink` (InvalidArgument
// otherwise: never every sink's at once). `filter.sink` may name a sink the
// config no longer declares, as long as it has dead letters. Returns how
// many were discarded.
Result<uint64_t> DiscardDeadLetters(const config::Config& config, const DeadLetterFilter& filter, std::ostream& out);

}  // namespace sluice::engine
