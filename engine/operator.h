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

// Per sink and partition: offset, head, lag in events and seconds, state,
// counters and last error. `json`: one JSON document instead of a table.
Status PrintStatus(const config::Config& config, bool json, std::ostream& out);

// Compares every view (or only `sink`) with main storage; returns the number
// of differences found (each is printed).
Result<uint64_t> Verify(const config::Config& config, const std::optional<std::string>& sink, std::ostream& out);

// Lists dead letters (unresolved only unless `all`), optionally of one sink.
Status ListDeadLetters(const config::Config& config, const std::optional<std::string>& sink, bool all,
                       std::ostream& out);

// Re-applies unresolved dead letters (of one sink, or all) to their sinks:
// those now applied or stale are marked resolved; those rejected again keep
// their row with the new error. Returns how many are still unresolved.
Result<uint64_t> RetryDeadLetters(const config::Config& config, const std::optional<std::string>& sink,
                                  std::ostream& out);

}  // namespace sluice::engine
