// A MySQL/MariaDB connection over MySQL Connector/C++ (the JDBC-style 1.1 API
// that Debian ships), wrapped so that nothing throws past this module.
//
// Errors are classified by what the caller should do:
//   kUnavailable  the server is unreachable or the connection broke (the
//                 connection is then marked broken; open a new one)
//   kAborted      duplicate key (1062), deadlock (1213) or lock wait timeout
//                 (1205): the statement lost an optimistic race; the message
//                 of a duplicate carries the key name (see DuplicateKeyName)
//   kInvalidArgument / kInternal  everything else, with MySQL's code and text
//
// Thread-compatibility: one Connection is used by one thread at a time. Open()
// may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace sql {
class Connection;
}  // namespace sql

namespace sluice::sql {

// TLS to the server, as MySQL's clients' ssl_mode (config::MysqlSslMode, in
// the same order).
enum class SslMode : uint8_t { kDisabled, kRequired, kVerifyCa, kVerifyIdentity };

struct ConnectParams {
  std::string host = "127.0.0.1";
  uint16_t port = 3306;
  std::string socket;  // when set, used instead of host:port
  std::string user;
  std::string password;
  std::string database;  // empty: connect without selecting a database
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds io_timeout{10000};
  SslMode ssl_mode = SslMode::kDisabled;
  std::string ssl_ca;    // PEM files
  std::string ssl_cert;
  std::string ssl_key;
};

// One row of a result: NULL is nullopt, everything else its text form.
using Row = std::vector<std::optional<std::string>>;

class Connection {
 public:
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects, sets utf8mb4, strict SQL mode, READ COMMITTED and autocommit on.
  static Result<std::unique_ptr<Connection>> Open(const ConnectParams& params);

  // Runs a statement that returns no rows; the number of affected rows.
  Result<uint64_t> Execute(std::string_view statement);
  // Runs a query and returns all its rows.
  Result<std::vector<Row>> Query(std::string_view statement);

  // Appends s as a quoted SQL string literal, escaped for this connection.
  void AppendQuoted(std::string& out, std::string_view s);

  // False once a call has failed with kUnavailable: the session is gone.
  bool healthy() const { return healthy_; }
  // True on a node of a Galera cluster (wsrep_on): its reads wait for the
  // cluster's earlier commits (wsrep_sync_wait=1), and a collision with a
  // write of another node is a deadlock (1213) with no key name.
  bool galera() const { return galera_; }

 private:
  explicit Connection(std::unique_ptr<::sql::Connection> conn);
  Status Classify(int code, const std::string& sql_state, const std::string& what);

  std::unique_ptr<::sql::Connection> conn_;
  bool healthy_ = true;
  bool galera_ = false;
};

// The key name in a duplicate-key (kAborted) message, e.g. "PRIMARY" or
// "uk_entity_version"; empty when the status is not a duplicate-key error.
std::string DuplicateKeyName(const Status& status);

// Quotes an identifier with backticks (names are validated before they get here).
std::string QuoteIdent(std::string_view name);

}  // namespace sluice::sql
