// How a failed statement's Status (sql::Connection's messages end with
// "(MySQL error N, SQLSTATE S)") reads for code that writes view tables: the
// MySQL error number and SQLSTATE, whether MySQL refused a value rather than
// the statement, and what a batch-level failure means for the caller. Pure
// functions, safe from any thread.
#pragma once

#include <string_view>

#include "core/status.h"

namespace sluice::sql {

// MySQL's error number in the message; 0 when there is none.
int MysqlErrorCode(const Status& status);
// The SQLSTATE in the message; empty when there is none.
std::string_view SqlState(const Status& status);
// True when MySQL refused a value of the statement rather than the statement
// itself (data too long, out of range, a NULL in a NOT NULL column, a
// duplicate on a unique key other than the one written by, an invalid
// argument a writer made for a value beyond max_allowed_packet): replaying
// the events one by one finds the offending ones.
bool IsDataError(const Status& status);
// What the caller should do about a batch-level failure that is not about
// one event's data: retry (Unavailable: the server, a deadlock, a full disk)
// or fix the table or the grants (FailedPrecondition).
Status BatchFailure(const Status& status);

}  // namespace sluice::sql
