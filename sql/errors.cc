#include "sql/errors.h"

#include <charconv>
#include <string>

#include "sql/connection.h"

namespace sluice::sql {

int MysqlErrorCode(const Status& status) {
  static constexpr std::string_view kMarker = "(MySQL error ";
  const std::string& m = status.message();
  const size_t p = m.rfind(kMarker);
  if (p == std::string::npos) return 0;
  int code = 0;
  std::from_chars(m.data() + p + kMarker.size(), m.data() + m.size(), code);
  return code;
}

std::string_view SqlState(const Status& status) {
  static constexpr std::string_view kMarker = ", SQLSTATE ";
  const std::string& m = status.message();
  const size_t p = m.rfind(kMarker);
  if (p == std::string::npos) return {};
  return std::string_view(m).substr(p + kMarker.size(), 5);
}

bool IsDataError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return true;  // only this file makes it: a row beyond max_allowed_packet
    case StatusCode::kAborted:
      // The upsert is on the primary key, so a duplicate can only come from
      // another unique key the operator added: that value is refused.
      return !DuplicateKeyName(status).empty();
    case StatusCode::kInternal:
      break;
    default:
      return false;
  }
  switch (MysqlErrorCode(status)) {
    case 1048:  // column cannot be null
    case 1264:  // out of range
    case 1265:  // data truncated
    case 1292:  // incorrect date/time value
    case 1366:  // incorrect value for the column
    case 1367:  // illegal value
    case 1406:  // data too long
    case 1411:  // incorrect value for a function
    case 1452:  // foreign key
    case 1690:  // value out of range
    case 3140:  // invalid JSON (MySQL)
    case 4025:  // CHECK constraint (MariaDB JSON columns too)
      return true;
    default:
      break;
  }
  const std::string_view state = SqlState(status);
  return state.starts_with("22") || state.starts_with("23");
}

Status BatchFailure(const Status& status) {
  switch (status.code()) {
    case StatusCode::kUnavailable:
    case StatusCode::kFailedPrecondition:  // 1146 table dropped, 1049 database dropped
      return status;
    case StatusCode::kAborted:  // deadlock or lock wait timeout: nothing was applied
      return Unavailable(status.message());
    default:
      break;
  }
  switch (MysqlErrorCode(status)) {
    case 1044:  // access denied to the database
    case 1045:  // access denied
    case 1054:  // unknown column: the table was altered
    case 1064:  // syntax error
    case 1109:  // unknown table
    case 1142:  // command denied on the table
    case 1143:  // command denied on a column
    case 1227:  // privilege missing
      return FailedPrecondition(status.message());
    default:
      // Table full, disk full, read-only after a failover, out of memory...:
      // the operator may need to act, but a later retry can succeed.
      return Unavailable(status.message());
  }
}

}  // namespace sluice::sql
