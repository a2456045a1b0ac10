// Internal to the MariaDB implementation of the access layer
// (mariadb_tables.cc, mariadb_leases.cc, mariadb_archive.cc): a lazily opened session and the
// small helpers every table's statements use.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

inline std::string PartitionList(const std::vector<uint32_t>& partitions) {
  std::string in;
  for (const uint32_t p : partitions) in += (in.empty() ? "" : ",") + std::to_string(p);
  return in;
}

// "scope=... AND entity_type=..." of sluice_leases or sluice_lease_log
// (columns prefixed by `alias`, e.g. "l.").
inline std::string LeaseKey(Connection& c, const std::string& scope, const std::string& type, const std::string& alias = "") {
  std::string w = alias + "scope=";
  c.AppendQuoted(w, scope);
  w += " AND " + alias + "entity_type=";
  c.AppendQuoted(w, type);
  return w;
}

// "(partition_id=P AND token=T) OR ..." of each lease held.
inline std::string PartitionTokens(const std::map<uint32_t, uint64_t>& held) {
  std::string w;
  for (const auto& [p, token] : held) {
    w += (w.empty() ? "(partition_id=" : " OR (partition_id=") + std::to_string(p) + " AND token=" +
         std::to_string(token) + ")";
  }
  return w;
}

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
