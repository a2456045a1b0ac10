// Internal to the MariaDB implementation of the access layer
// (mariadb_tables.cc, mariadb_archive.cc): a lazily opened session and the
// small helpers every table's statements use.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "sql/connection.h"

namespace sluice::sql {

// A lazily opened session, reopened after it broke.
class Session {
 public:
  explicit Session(ConnectParams params) : params_(std::move(params)) {}
  // Over a connection the caller owns (never reopened here).
  explicit Session(Connection& borrowed) : borrowed_(&borrowed) {}
  bool healthy() const { return borrowed_ != nullptr ? borrowed_->healthy() : conn_ && conn_->healthy(); }
  Result<Connection*> Get() {
    if (borrowed_ != nullptr) return borrowed_;
    if (!healthy()) {
      conn_.reset();
      ASSIGN_OR_RETURN(conn_, Connection::Open(params_));
    }
    return conn_.get();
  }

 private:
  const ConnectParams params_;
  std::unique_ptr<Connection> conn_;
  Connection* borrowed_ = nullptr;
};

inline uint64_t U64(const std::optional<std::string>& v) { return std::stoull(v.value_or("0")); }
inline int64_t I64(const std::optional<std::string>& v) { return std::stoll(v.value_or("0")); }

// Runs `body` in a transaction on c: committed when it returns ok, rolled
// back otherwise (a failed rollback leaves the session to be reopened).
template <typename F>
Status InTransaction(Connection& c, F&& body) {
  RETURN_IF_ERROR(c.Execute("BEGIN").status());
  Status st = body();
  if (st.ok()) st = c.Execute("COMMIT").status();
  if (!st.ok()) (void)c.Execute("ROLLBACK");
  return st;
}

}  // namespace sluice::sql
