// Named failpoints for fault tests (RocksDB's TEST_SYNC_POINT in spirit).
//
// Compiled in only when SLUICE_FAILPOINTS is defined (the default build; turn
// it off with -DSLUICE_FAILPOINTS=OFF for release packages). Armed through the
// environment variable SLUICE_FAILPOINTS, read once at first use:
//
//   SLUICE_FAILPOINTS="writer.before_commit=error;writer.after_commit=crash@0.01"
//
// Actions: `error` (the call site reports a failure), `crash` (the process
// ends at once with SIGKILL, as a power cut would). An optional @p makes the
// failpoint fire with probability p. Thread-safe.
#pragma once

#include <string_view>

namespace sluice {

enum class FailAction { kNone, kError, kCrash };

// What the failpoint `name` should do now. A `crash` never returns.
FailAction CheckFailpoint(std::string_view name);

}  // namespace sluice

#ifdef SLUICE_FAILPOINTS
// True when the named failpoint fires with `error` at this call.
#define SLUICE_FAILPOINT(name) (::sluice::CheckFailpoint(name) == ::sluice::FailAction::kError)
#else
#define SLUICE_FAILPOINT(name) false
#endif
