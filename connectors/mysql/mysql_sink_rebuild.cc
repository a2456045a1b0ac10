#include "connectors/mysql/mysql_sink_impl.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  // LIKE keeps whatever the operator added to the live table (indexes,
  // column types); without a live table, CheckOrCreateTable creates one.
  auto like = conn_->Execute("CREATE TABLE " + shadow + " LIKE " + sql::QuoteIdent(shadow_of_));
  if (!like.ok() && like.status().code() == StatusCode::kUnavailable) return like.status().WithContext(Context());
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
