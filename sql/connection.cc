#include "sql/connection.h"

#include <mutex>

#include <cppconn/driver.h>
#include <cppconn/exception.h>
#include <cppconn/resultset.h>
#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>
#include <mysql_connection.h>

namespace sluice::sql {
namespace {

// MySQL client/server error codes that mean "the session is gone or the
// server cannot be reached": retry on a new connection.
bool IsConnectionError(int code) {
  switch (code) {
    case 0:     // Connector/C++ reports some transport failures without a code
    case 1040:  // ER_CON_COUNT_ERROR
    case 1053:  // ER_SERVER_SHUTDOWN
    case 1152:  // ER_ABORTING_CONNECTION
    case 1927:  // ER_CONNECTION_KILLED
    case 2002:  // CR_CONNECTION_ERROR
    case 2003:  // CR_CONN_HOST_ERROR
    case 2005:  // CR_UNKNOWN_HOST
    case 2006:  // CR_SERVER_GONE_ERROR
    case 2013:  // CR_SERVER_LOST
    case 2026:  // CR_SSL_CONNECTION_ERROR
    case 2055:  // CR_SERVER_LOST_EXTENDED
      return true;
    default:
      return false;
  }
}

::sql::Driver* Driver() {
  // get_driver_instance() is not safe to race on its first call.
  static std::once_flag once;
  static ::sql::Driver* driver = nullptr;
  std::call_once(once, [] { driver = get_driver_instance(); });
  return driver;
}

}  // namespace

Connection::Connection(std::unique_ptr<::sql::Connection> conn) : conn_(std::move(conn)) {}

Connection::~Connection() {
  if (conn_) {
    try {
      conn_->close();
    } catch (...) {
      // Closing a broken session can throw; there is nothing left to do.
    }
  }
}

Result<std::unique_ptr<Connection>> Connection::Open(const ConnectParams& p) {
  ::sql::ConnectOptionsMap opts;
  if (!p.socket.empty()) {
    opts["hostName"] = ::sql::SQLString("unix://" + p.socket);
  } else {
    opts["hostName"] = ::sql::SQLString("tcp://" + p.host + ":" + std::to_string(p.port));
  }
  opts["userName"] = ::sql::SQLString(p.user);
  opts["password"] = ::sql::SQLString(p.password);
  if (!p.database.empty()) opts["schema"] = ::sql::SQLString(p.database);
  const int connect_s = static_cast<int>(std::max<int64_t>(1, (p.connect_timeout.count() + 999) / 1000));
  const int io_s = static_cast<int>(std::max<int64_t>(1, (p.io_timeout.count() + 999) / 1000));
  opts["OPT_CONNECT_TIMEOUT"] = connect_s;
  opts["OPT_READ_TIMEOUT"] = io_s;
  opts["OPT_WRITE_TIMEOUT"] = io_s;
  opts["OPT_RECONNECT"] = false;
  opts["OPT_CHARSET_NAME"] = ::sql::SQLString("utf8mb4");
  if (p.ssl_mode != SslMode::kDisabled) {
    // Encrypted or refused: no silent fall-back to plain TCP.
    opts["sslEnforce"] = true;
    if (!p.ssl_ca.empty()) opts["sslCA"] = ::sql::SQLString(p.ssl_ca);
    if (!p.ssl_cert.empty()) opts["sslCert"] = ::sql::SQLString(p.ssl_cert);
    if (!p.ssl_key.empty()) opts["sslKey"] = ::sql::SQLString(p.ssl_key);
    // The client library checks the chain whenever it has a CA, and the host
    // name only with sslVerify (MYSQL_OPT_SSL_VERIFY_SERVER_CERT).
    opts["sslVerify"] = p.ssl_mode == SslMode::kVerifyIdentity;
  }
  const std::string where = p.socket.empty() ? p.host + ":" + std::to_string(p.port) : p.socket;
  std::unique_ptr<::sql::Connection> raw;
  try {
    raw.reset(Driver()->connect(opts));
  } catch (const ::sql::SQLException& e) {
    const int code = e.getErrorCode();
    std::string m = "cannot connect to MySQL at " + where + " as " + p.user + ": " + e.what() +
                    " (error " + std::to_string(code) + ")";
    // The client library says no more than that for a host name mismatch.
    if (code == 2026 && p.ssl_mode == SslMode::kVerifyIdentity &&
        std::string_view(e.what()).find("Validation of SSL server certificate failed") != std::string_view::npos) {
      m += "; with ssl_mode verify_identity the server's certificate must be signed by ssl_ca and name the host "
           "connected to (" + p.host + ")";
    }
    if (code == 1045 || code == 1044 || code == 1049) return FailedPrecondition(std::move(m));
    return Unavailable(std::move(m));
  } catch (const std::exception& e) {
    return Unavailable("cannot connect to MySQL at " + where + ": " + e.what());
  }
  std::unique_ptr<Connection> c(new Connection(std::move(raw)));
  for (const char* setting :
       {"SET SESSION sql_mode='STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,ERROR_FOR_DIVISION_BY_ZERO',"
        " autocommit=1, time_zone='+00:00'",
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"}) {
    auto st = c->Execute(setting);
    if (!st.ok()) return st.status().WithContext("configuring MySQL session");
  }
  // On a Galera node, reads wait until the node has applied what the cluster
  // committed before them (wsrep_sync_wait=1): a refusal or a version read
  // never rests on a write another node made and this one has not applied.
  // A server without wsrep (MySQL) has no such variable: nothing to do.
  if (auto wsrep = c->Query("SELECT @@wsrep_on"); wsrep.ok() && !wsrep->empty() && wsrep->at(0).at(0) == "1") {
    c->galera_ = true;
    auto st = c->Execute("SET SESSION wsrep_sync_wait=1");
    if (!st.ok()) return st.status().WithContext("configuring the Galera session");
  }
  return c;
}

Status Connection::Classify(int code, const std::string& sql_state, const std::string& what) {
  std::string m = what + " (MySQL error " + std::to_string(code) +
                  (sql_state.empty() ? "" : ", SQLSTATE " + sql_state) + ")";
  if (IsConnectionError(code) || sql_state.rfind("08", 0) == 0) {
    healthy_ = false;
    return Unavailable(std::move(m));
  }
  if (code == 1062 || code == 1213 || code == 1205) return Aborted(std::move(m));
  if (code == 1146 || code == 1049) return FailedPrecondition(std::move(m));
  return Internal(std::move(m));
}

Result<uint64_t> Connection::Execute(std::string_view statement) {
  if (!healthy_) return Unavailable("MySQL connection is broken");
  try {
    std::unique_ptr<::sql::Statement> st(conn_->createStatement());
    st->execute(::sql::SQLString(statement.data(), statement.size()));
    return static_cast<uint64_t>(st->getUpdateCount());
  } catch (const ::sql::SQLException& e) {
    return Classify(e.getErrorCode(), e.getSQLState(), e.what());
  } catch (const std::exception& e) {
    healthy_ = false;
    return Unavailable(std::string("MySQL: ") + e.what());
  }
}

Result<std::vector<Row>> Connection::Query(std::string_view statement) {
  if (!healthy_) return Unavailable("MySQL connection is broken");
  try {
    std::unique_ptr<::sql::Statement> st(conn_->createStatement());
    std::unique_ptr<::sql::ResultSet> rs(st->executeQuery(::sql::SQLString(statement.data(), statement.size())));
    const unsigned columns = rs->getMetaData()->getColumnCount();
    std::vector<Row> rows;
    rows.reserve(rs->rowsCount());
    while (rs->next()) {
      Row row;
      row.reserve(columns);
      for (unsigned i = 1; i <= columns; ++i) {
        ::sql::SQLString text = rs->getString(i);
        // operator-> is SQLString's only non-const access to its std::string:
        // take that buffer instead of copying it (the engine's reader turns
        // every event row into strings here).
        std::string v = std::move(*text.operator->());
        if (rs->wasNull()) {
          row.emplace_back(std::nullopt);
        } else {
          row.emplace_back(std::move(v));
        }
      }
      rows.push_back(std::move(row));
    }
    return rows;
  } catch (const ::sql::SQLException& e) {
    return Classify(e.getErrorCode(), e.getSQLState(), e.what());
  } catch (const std::exception& e) {
    healthy_ = false;
    return Unavailable(std::string("MySQL: ") + e.what());
  }
}

void Connection::AppendQuoted(std::string& out, std::string_view s) {
  auto* mysql = dynamic_cast<::sql::mysql::MySQL_Connection*>(conn_.get());
  out += '\'';
  if (mysql != nullptr) {
    out += mysql->escapeString(::sql::SQLString(s.data(), s.size())).asStdString();
  } else {
    // Not reached with the MySQL driver; escape as mysql_real_escape_string does.
    for (char c : s) {
      switch (c) {
        case '\0': out += "\\0"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\\': out += "\\\\"; break;
        case '\'': out += "\\'"; break;
        case '"': out += "\\\""; break;
        case '\x1a': out += "\\Z"; break;
        default: out += c;
      }
    }
  }
  out += '\'';
}

std::string DuplicateKeyName(const Status& status) {
  if (status.code() != StatusCode::kAborted) return "";
  const std::string& m = status.message();
  if (m.find("MySQL error 1062") == std::string::npos) return "";
  const std::string marker = "for key '";
  const size_t p = m.rfind(marker);
  if (p == std::string::npos) return "";
  const size_t start = p + marker.size();
  const size_t end = m.find('\'', start);
  if (end == std::string::npos) return "";
  std::string key = m.substr(start, end - start);
  // MySQL 8 writes "table.key"; MariaDB writes "key".
  if (const size_t dot = key.rfind('.'); dot != std::string::npos) key = key.substr(dot + 1);
  return key;
}

std::string QuoteIdent(std::string_view name) {
  std::string out = "`";
  for (char c : name) {
    if (c == '`') out += '`';
    out += c;
  }
  out += '`';
  return out;
}

}  // namespace sluice::sql
