#include "connectors/mysql/mysql_sink_impl.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/log.h"

namespace sluice::connectors::mysql {
namespace {

// The rebuild suffixes keep a table name within MySQL's 64 characters.
constexpr std::string_view kShadowSuffix = "__rebuild";
constexpr std::string_view kRetiredSuffix = "__old";

}  // namespace

Result<std::unique_ptr<Sink>> MysqlSink::MakeRebuildShadow() const {
  if (options().table.size() + kShadowSuffix.size() > 64) {
    return FailedPrecondition(Context() + ": cannot be rebuilt: the table name is longer than " +
                              std::to_string(64 - kShadowSuffix.size()) + " characters, so " +
                              std::string(kShadowSuffix) + " does not fit after it");
  }
  config::SinkConfig shadow_cfg = cfg_;
  shadow_cfg.MutableOptions<MysqlSinkOptions>().table += kShadowSuffix;
  auto shadow = std::make_unique<MysqlSink>(std::move(shadow_cfg), params_);
  shadow->shadow_of_ = options().table;
  std::unique_ptr<Sink> made = std::move(shadow);
  return made;
}

Status MysqlSink::PrepareShadowTable() {
  const std::string shadow = sql::QuoteIdent(options().table);
  auto dropped = conn_->Execute("DROP TABLE IF EXISTS " + shadow);
  if (!dropped.ok()) return Fail(dropped.status(), "dropping the table an earlier rebuild left");
  // From the definition, not LIKE the live table: a rebuild is how a view
  // takes a new column or type (the live table may lack it).
  auto created = conn_->Execute(create_sql_);
  if (!created.ok()) {
    if (created.status().code() == StatusCode::kUnavailable) return created.status().WithContext(Context());
    return FailedPrecondition(Context() + ": creating table " + where_ + ": " + created.status().message());
  }
  // The indexes an operator added to the live table, when the shadow still
  // has their columns.
  std::string q =
      "SELECT `INDEX_NAME`, `NON_UNIQUE`, `COLUMN_NAME`, `SUB_PART`, `INDEX_TYPE` FROM information_schema.STATISTICS "
      "WHERE `TABLE_SCHEMA` = DATABASE() AND `INDEX_NAME` <> 'PRIMARY' AND `TABLE_NAME` = ";
  conn_->AppendQuoted(q, shadow_of_);
  q += " ORDER BY `INDEX_NAME`, `SEQ_IN_INDEX`";
  auto rows = conn_->Query(q);
  if (!rows.ok()) return Fail(rows.status(), "reading the live table's indexes");
  std::vector<std::string> have = {"id", "_version", "_deleted", "_updated_at"};
  for (const auto& c : options().columns) have.push_back(Lower(c.name));
  std::vector<std::pair<std::string, std::string>> indexes;  // name -> "[UNIQUE ]INDEX `name` (cols)"
  std::vector<std::string> skipped;
  bool usable = true;
  for (size_t i = 0; i < rows->size(); ++i) {
    const auto& r = (*rows)[i];
    const std::string name = r[0].value_or("");
    const std::string column = r[2].value_or("");
    if (indexes.empty() || indexes.back().first != name) {
      if (!indexes.empty() && !usable) {
        skipped.push_back(indexes.back().first);
        indexes.pop_back();
      }
      usable = true;
      const std::string type = r[4].value_or("BTREE");
      const std::string kind = type == "FULLTEXT"  ? "FULLTEXT "
                               : type == "SPATIAL" ? "SPATIAL "
                               : r[1].value_or("1") == "0" ? "UNIQUE "
                                                           : "";
      indexes.push_back({name, kind + "INDEX " + sql::QuoteIdent(name) + " ("});
    } else {
      indexes.back().second += ",";
    }
    usable = usable && std::find(have.begin(), have.end(), Lower(column)) != have.end();
    indexes.back().second += sql::QuoteIdent(column) + (r[3] ? "(" + *r[3] + ")" : "");
  }
  if (!indexes.empty() && !usable) {
    skipped.push_back(indexes.back().first);
    indexes.pop_back();
  }
  for (auto& [name, spec] : indexes) {
    auto added = conn_->Execute("ALTER TABLE " + shadow + " ADD " + spec + ")");
    if (!added.ok()) {
      if (added.status().code() == StatusCode::kUnavailable) return added.status().WithContext(Context());
      skipped.push_back(name + " (" + added.status().message() + ")");
    }
  }
  if (!skipped.empty()) {
    std::string list;
    for (const auto& s : skipped) list += (list.empty() ? "" : ", ") + s;
    Log(LogLevel::kWarn, Context() + ": the rebuilt table does not get these indexes of the live table: " + list);
  }
  return Status::Ok();
}

Status MysqlSink::PromoteRebuildShadow() {
  if (shadow_of_.empty()) return Sink::PromoteRebuildShadow();
  RETURN_IF_ERROR(EnsureOpen());
  const std::string live = sql::QuoteIdent(shadow_of_);
  const std::string retired = sql::QuoteIdent(shadow_of_ + std::string(kRetiredSuffix));
  const std::string shadow = sql::QuoteIdent(options().table);
  auto cleared = conn_->Execute("DROP TABLE IF EXISTS " + retired);
  if (!cleared.ok()) return Fail(cleared.status(), "dropping the table an earlier switch-over left");
  std::string exists = "SELECT COUNT(*) FROM information_schema.TABLES WHERE `TABLE_SCHEMA` = DATABASE() AND `TABLE_NAME` = ";
  conn_->AppendQuoted(exists, shadow_of_);
  auto rows = conn_->Query(exists);
  if (!rows.ok()) return Fail(rows.status(), "looking for the live table");
  const bool have_live = !rows->empty() && !rows->front().empty() && rows->front()[0].value_or("0") != "0";
  // One RENAME TABLE statement swaps both names atomically: readers see the
  // old view or the new one, never neither.
  auto renamed = conn_->Execute(have_live ? "RENAME TABLE " + live + " TO " + retired + ", " + shadow + " TO " + live
                                          : "RENAME TABLE " + shadow + " TO " + live);
  if (!renamed.ok()) return Fail(renamed.status(), "swapping the rebuilt table in");
  if (have_live) {
    auto dropped = conn_->Execute("DROP TABLE " + retired);
    if (!dropped.ok()) return Fail(dropped.status(), "dropping the replaced table");
  }
  return Status::Ok();
}

}  // namespace sluice::connectors::mysql
