#include "connectors/mysql/mysql_sink.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unordered_set>

#include "connectors/mysql/mysql_sink_impl.h"
#include "core/json.h"
#include "core/log.h"
#include "sql/params.h"

namespace sluice::connectors::mysql {
namespace {

// The sink's own columns; mapped columns may not reuse these names.
constexpr std::string_view kOwnColumns[] = {"id", "_version", "_deleted", "_updated_at"};

}  // namespace

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::optional<uint64_t> ParseUint(const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  uint64_t v = 0;
  const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc() || r.ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

MysqlSink::MysqlSink(config::SinkConfig cfg, sql::ConnectParams params)
    : cfg_(std::move(cfg)), params_(std::move(params)), where_(params_.database + "." + options().table) {
  const size_t lanes = std::max<size_t>(1, options().connections);
  hints_.assign(lanes, VersionHints((options().version_cache + lanes - 1) / lanes));
  absent_.assign(lanes, AbsentGuesses());
  const std::string table = sql::QuoteIdent(options().table);
  std::vector<std::string> cols;
  for (const auto& c : options().columns) cols.push_back(sql::QuoteIdent(c.name));

  create_sql_ = "CREATE TABLE IF NOT EXISTS " + table +
                " (`id` VARBINARY(64) NOT NULL,"
                " `_version` BIGINT UNSIGNED NOT NULL,"
                " `_deleted` TINYINT(1) NOT NULL DEFAULT 0,"
                " `_updated_at` TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)";
  for (size_t i = 0; i < cols.size(); ++i) {
    const std::string& type = options().columns[i].sql_type;
    create_sql_ += ", " + cols[i] + " " + (type.empty() ? std::string("TEXT") : type) + " NULL";
  }
  create_sql_ += ", PRIMARY KEY (`id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

  // By the key even on a small table: a scan would wait for the locks of
  // rows another connection of the sink (or the push path) is writing.
  select_prefix_ = "SELECT `id`, `_version` FROM " + table + " FORCE INDEX (PRIMARY) WHERE `id` IN (";

  insert_prefix_ = "INSERT INTO " + table + " (`id`,`_version`,`_deleted`";
  for (const auto& c : cols) insert_prefix_ += "," + c;
  insert_prefix_ += ") VALUES ";

  // Every assignment is guarded, and `_version` comes last because MySQL
  // evaluates the assignments left to right on the updated row. The first
  // one refuses the row (1048, a data error: the event is rejected) when
  // the row it clashed with is another entity's, on a unique key the
  // operator added: MySQL would otherwise update that entity's row.
  const std::string same_id = "`id`=IF(`id` = VALUES(`id`), `id`, NULL), ";
  static constexpr std::string_view kNewer = "IF(VALUES(`_version`) > `_version`, VALUES(";
  upsert_suffix_ = " ON DUPLICATE KEY UPDATE " + same_id;
  for (const auto& c : cols) {
    upsert_suffix_.append(c).append("=").append(kNewer).append(c).append("), ").append(c).append("), ");
  }
  upsert_suffix_.append("`_deleted`=").append(kNewer).append("`_deleted`), `_deleted`), ");
  upsert_suffix_.append("`_version`=").append(kNewer).append("`_version`), `_version`)");
  static constexpr std::string_view kNotOlder = "IF(VALUES(`_version`) >= `_version`, VALUES(";
  repair_suffix_not_older_ = " ON DUPLICATE KEY UPDATE " + same_id;
  repair_suffix_any_ = " ON DUPLICATE KEY UPDATE " + same_id;
  for (const auto& c : cols) {
    repair_suffix_not_older_.append(c).append("=").append(kNotOlder).append(c).append("), ").append(c).append("), ");
    repair_suffix_any_.append(c).append("=VALUES(").append(c).append("), ");
  }
  repair_suffix_not_older_.append("`_deleted`=").append(kNotOlder).append("`_deleted`), `_deleted`), ");
  repair_suffix_not_older_.append("`_version`=").append(kNotOlder).append("`_version`), `_version`)");
  repair_suffix_any_.append("`_deleted`=VALUES(`_deleted`), `_version`=VALUES(`_version`)");

  verify_select_ = "SELECT `id`, `_version`, `_deleted`";
  for (const auto& c : cols) verify_select_ += ", " + c;
  verify_select_ += " FROM " + table;
  ids_select_ = "SELECT `id`, `_deleted` FROM " + table;
}

Status MysqlSink::Fail(const Status& status, std::string_view doing) const {
  return BatchFailure(status).WithContext(Context() + ": " + std::string(doing));
}

Status MysqlSink::Open() {
  open_ = false;
  conn_.reset();
  lanes_.clear();
  auto conn = sql::Connection::Open(params_);
  if (!conn.ok()) return conn.status().WithContext(Context());
  conn_ = std::move(conn).value();

  auto packet = conn_->Query("SELECT @@max_allowed_packet");
  if (!packet.ok()) return Fail(packet.status(), "reading max_allowed_packet");
  if (!packet->empty() && !packet->front().empty()) {
    if (const auto bytes = ParseUint(packet->front()[0]); bytes && *bytes > 4096) {
      max_statement_bytes_ = static_cast<size_t>(*bytes) - 1024;
      // Quoting at most doubles the values, so a chunk always fits.
      chunk_bytes_ = std::min<size_t>(kMaxChunkBytes, static_cast<size_t>(*bytes) / 4);
    }
  }
  if (!shadow_of_.empty() && !shadow_prepared_) {
    RETURN_IF_ERROR(PrepareShadowTable());
    shadow_prepared_ = true;
  }
  RETURN_IF_ERROR(CheckOrCreateTable());
  lanes_.resize(options().connections - 1);
  // A new session may find another server or a re-created table.
  for (VersionHints& h : hints_) h.Clear();
  open_ = true;
  return EnsureOpen();
}

Status MysqlSink::CheckOrCreateTable() {
  std::string q =
      "SELECT `COLUMN_NAME` FROM information_schema.COLUMNS WHERE `TABLE_SCHEMA` = DATABASE() AND `TABLE_NAME` = ";
  conn_->AppendQuoted(q, options().table);
  auto columns = conn_->Query(q);
  if (!columns.ok()) return Fail(columns.status(), "reading the table's columns");

  if (columns->empty()) {
    if (!options().auto_create) {
      return FailedPrecondition(Context() + ": table " + where_ +
                                " does not exist; create it or set auto_create: true");
    }
    auto created = conn_->Execute(create_sql_);
    if (!created.ok()) {
      if (created.status().code() == StatusCode::kUnavailable) return created.status().WithContext(Context());
      // A bad sql_type or missing privilege: only the operator can fix it.
      return FailedPrecondition(Context() + ": creating table " + where_ + ": " + created.status().message());
    }
    return Status::Ok();
  }

  std::unordered_set<std::string> have;
  for (const auto& row : *columns) {
    if (!row.empty() && row[0]) have.insert(Lower(*row[0]));
  }
  std::string missing;
  for (const std::string_view name : {"id", "_version", "_deleted"}) {
    if (have.contains(Lower(name))) continue;
    if (!missing.empty()) missing += ", ";
    missing += name;
  }
  if (!missing.empty()) {
    return FailedPrecondition(Context() + ": table " + where_ + " lacks the column(s) " + missing +
                              " of the sink itself; drop the table and let auto_create make it");
  }
  // A mapped column the table lacks: the definition gained it. With
  // auto_create it is added (NULL in the rows written before; `sluice
  // rebuild` fills them from the events).
  for (const auto& c : options().columns) {
    if (have.contains(Lower(c.name))) continue;
    if (!options().auto_create) {
      missing += (missing.empty() ? "" : ", ") + c.name;
      continue;
    }
    const std::string add = "ALTER TABLE " + sql::QuoteIdent(options().table) + " ADD COLUMN " +
                            sql::QuoteIdent(c.name) + " " + (c.sql_type.empty() ? std::string("TEXT") : c.sql_type) +
                            " NULL";
    auto added = conn_->Execute(add);
    if (!added.ok() && sql::MysqlErrorCode(added.status()) == 1060) continue;  // another process added it just now
    if (!added.ok()) {
      if (added.status().code() == StatusCode::kUnavailable) return added.status().WithContext(Context());
      return FailedPrecondition(Context() + ": adding column " + c.name + " to " + where_ + ": " +
                                added.status().message());
    }
    Log(LogLevel::kInfo, Context() + ": added column " + c.name + " to " + where_ +
                             "; rows written before hold NULL there until `sluice rebuild --sink " + cfg_.name + "`");
  }
  if (!missing.empty()) {
    return FailedPrecondition(Context() + ": table " + where_ + " lacks the column(s) " + missing +
                              "; add them, or set auto_create: true to have them added");
  }

  // The upsert relies on the primary key being exactly (id).
  std::string pk =
      "SELECT `COLUMN_NAME` FROM information_schema.STATISTICS WHERE `TABLE_SCHEMA` = DATABASE()"
      " AND `INDEX_NAME` = 'PRIMARY' AND `TABLE_NAME` = ";
  conn_->AppendQuoted(pk, options().table);
  auto key = conn_->Query(pk);
  if (!key.ok()) return Fail(key.status(), "reading the table's primary key");
  if (key->size() != 1 || key->front().empty() || !key->front()[0] || Lower(*key->front()[0]) != "id") {
    return FailedPrecondition(Context() + ": the primary key of table " + where_ + " must be (id) alone");
  }
  return Status::Ok();
}

Status MysqlSink::EnsureOpen() {
  if (!open_ || !conn_ || !conn_->healthy()) return Open();
  for (size_t k = 0; k < lanes_.size(); ++k) {
    auto& lane = lanes_[k];
    if (lane && lane->healthy()) continue;
    lane.reset();
    hints_[k + 1].Clear();
    auto conn = sql::Connection::Open(params_);
    if (!conn.ok()) return conn.status().WithContext(Context());
    lane = std::move(conn).value();
  }
  return Status::Ok();
}

Status MysqlSink::Health() {
  if (!open_ || !conn_ || !conn_->healthy()) return Open();
  auto one = conn_->Query("SELECT 1");
  if (!one.ok()) return Fail(one.status(), "health check");
  return Status::Ok();
}

void MysqlSink::Close() {
  conn_.reset();
  lanes_.clear();
  open_ = false;
}

size_t LaneOf(std::string_view id, size_t connections) {
  return connections <= 1 ? 0 : std::hash<std::string_view>{}(id) % connections;
}

std::optional<HintStats> HintStatsOf(const Sink& sink) {
  const auto* mysql = dynamic_cast<const MysqlSink*>(&sink);
  if (mysql == nullptr) return std::nullopt;
  return mysql->hint_stats();
}

Result<std::unique_ptr<Sink>> MakeMysqlSink(const config::SinkConfig& sink, const config::Config& global) {
  const std::string context = "sink '" + sink.name + "'";
  const MysqlSinkOptions& o = sink.Options<MysqlSinkOptions>();
  if (o.table.empty()) return InvalidArgument(context + ": mysql.table is empty");
  if (o.columns.empty()) return InvalidArgument(context + ": mysql.columns needs at least one column");
  std::unordered_set<std::string> names;
  for (const std::string_view own : kOwnColumns) names.insert(std::string(own));
  for (const auto& c : o.columns) {
    if (c.name.empty()) return InvalidArgument(context + ": a column has no name");
    const std::string lower = Lower(c.name);
    if (std::find(std::begin(kOwnColumns), std::end(kOwnColumns), lower) != std::end(kOwnColumns)) {
      return InvalidArgument(context + ": column '" + c.name + "' clashes with a column of the sink itself");
    }
    if (!names.insert(lower).second) {
      return InvalidArgument(context + ": column '" + c.name + "' appears twice");
    }
  }
  sql::ConnectParams p = sql::ParamsFrom(global.mysql);  // main's server, TLS included
  if (!o.database.empty()) p.database = o.database;
  if (p.database.empty()) return InvalidArgument(context + ": no database for the view table");
  std::unique_ptr<Sink> made = std::make_unique<MysqlSink>(sink, std::move(p));
  return made;
}

}  // namespace sluice::connectors::mysql
