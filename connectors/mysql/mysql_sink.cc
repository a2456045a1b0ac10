#include "connectors/mysql/mysql_sink.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "connectors/mysql/mysql_options.h"
#include "core/json.h"
#include "sql/connection.h"

namespace sluice::connectors::mysql {
namespace {

// The sink's own columns; mapped columns may not reuse these names.
constexpr std::string_view kOwnColumns[] = {"id", "_version", "_deleted", "_updated_at"};
// Rows per query when Verify reads the view, to bound memory.
constexpr size_t kVerifyChunkRows = 5000;
// Bytes of ids and values per transaction. A batch beyond it is applied in
// several transactions, so that no statement exceeds max_allowed_packet
// (which the server answers by closing the connection, a retry loop).
constexpr size_t kMaxChunkBytes = size_t{4} << 20;
// What a row costs in a statement besides its values (quotes, commas, numbers).
constexpr size_t kValueOverheadBytes = 8;
// Longest value quoted in a Verify difference.
constexpr size_t kDetailValueBytes = 60;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

void AppendUint(std::string& out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

std::optional<uint64_t> ParseUint(const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  uint64_t v = 0;
  const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc() || r.ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

// MySQL's error number in a message of sql::Connection ("... (MySQL error
// 1406, SQLSTATE 22001)"); 0 when there is none.
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

// True when MySQL refused a value of the statement rather than the statement
// itself: replaying the events one by one finds the offending ones.
bool IsDataError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return true;  // only this file makes it: a row beyond max_allowed_packet
    case StatusCode::kAborted:
      // The upsert is on the primary key, so a duplicate can only come from
      // another unique key the operator added: that value is refused.
      return !sql::DuplicateKeyName(status).empty();
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

// What the caller should do about a batch-level failure that is not about
// one event's data: retry (unavailable) or fix the table (failed precondition).
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

// Equal texts, or two spellings of one number (a DECIMAL or INT column gives
// back its own form of the JSON number it stored).
bool SameValue(const std::optional<std::string>& view, const std::optional<std::string>& want) {
  if (view.has_value() != want.has_value()) return false;
  if (!view || *view == *want) return true;
  double a = 0;
  double b = 0;
  const auto ra = std::from_chars(view->data(), view->data() + view->size(), a);
  const auto rb = std::from_chars(want->data(), want->data() + want->size(), b);
  return ra.ec == std::errc() && rb.ec == std::errc() && ra.ptr == view->data() + view->size() &&
         rb.ptr == want->data() + want->size() && std::isfinite(a) && a == b;
}

std::string Shown(const std::optional<std::string>& v) {
  if (!v) return "NULL";
  if (v->size() <= kDetailValueBytes) return "'" + *v + "'";
  return "'" + v->substr(0, kDetailValueBytes) + "...' (" + std::to_string(v->size()) + " bytes)";
}

// The row versions one lane of the sink last saw committed: id -> the
// version its row held. Only a hint, never trusted to call an event stale:
// an event newer than its hint skips the locking read, and the write's
// affected-row count confirms that the row existed and took it (see
// ApplyInTransaction). Bounded: when full it forgets everything.
class VersionHints {
 public:
  explicit VersionHints(size_t capacity) : capacity_(capacity) {}

  std::optional<uint64_t> Find(std::string_view id) const {
    if (map_.empty()) return std::nullopt;
    const auto it = map_.find(id);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void Remember(std::string_view id, uint64_t version) {
    if (capacity_ == 0) return;
    const auto it = map_.find(id);
    if (it != map_.end()) {
      it->second = version;
      return;
    }
    if (map_.size() >= capacity_) map_.clear();
    map_.emplace(std::string(id), version);
  }
  void Forget(std::string_view id) {
    if (const auto it = map_.find(id); it != map_.end()) map_.erase(it);
  }
  void Clear() { map_.clear(); }
  bool enabled() const { return capacity_ > 0; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  size_t capacity_;
  std::unordered_map<std::string, uint64_t, Hash, std::equal_to<>> map_;
};

// One event of a batch. Its state is parsed only when the event is to be
// written (stale and superseded events never need their columns), at most once.
struct PreparedEvent {
  const ChangeEvent* event = nullptr;
  std::vector<std::optional<std::string>> values;  // per mapped column; all NULL for a delete
  size_t bytes = 0;                                // a bound of what it adds to the statements
  bool extracted = false;                          // `values` are filled
  bool rejected = false;                           // its state cannot be read: rejected without SQL
};

// The row of `p` in an INSERT's VALUES list: (id, version, deleted, columns...).
void AppendRow(sql::Connection& conn, const PreparedEvent& p, std::string& sql) {
  sql += '(';
  conn.AppendQuoted(sql, p.event->entity_id);
  sql += ',';
  AppendUint(sql, p.event->version);
  sql += p.event->deleted ? ",1" : ",0";
  for (const auto& v : p.values) {
    sql += ',';
    if (v) {
      conn.AppendQuoted(sql, *v);
    } else {
      sql += "NULL";
    }
  }
  sql += ')';
}

class MysqlSink final : public Sink {
 public:
  MysqlSink(config::SinkConfig cfg, sql::ConnectParams params);

  const std::string& name() const override { return cfg_.name; }
  Capabilities capabilities() const override {
    return Capabilities{
        .can_push = true, .entity_checks = true, .overwrite = true};
  }
  Status Open() override;
  ApplyResult Apply(std::span<const ChangeEvent> events) override;
  Status Health() override;
  void Close() override;
  Status Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) override;
  Status VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) override;
  ApplyResult Repair(std::span<const ChangeEvent> events, RepairGuard guard) override;
  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override;
  Status PromoteRebuildShadow() override;
  HintStats hint_stats() const { return {reads_skipped_.load(), wrong_guesses_.load()}; }

 private:
  // A shadow's first Open(): an empty copy of the live table's definition.
  Status PrepareShadowTable();
  // Opens when not open or after a lost connection (once, without waiting).
  Status EnsureOpen();
  Status CheckOrCreateTable();
  // Fills p.values from the state; false (and a rejection in `result`) when it cannot.
  bool Extract(PreparedEvent& p, EventResult& result) const;
  // The connection of lane k: conn_ for lane 0, else lanes_[k - 1].
  std::unique_ptr<sql::Connection>& Lane(size_t k) { return k == 0 ? conn_ : lanes_[k - 1]; }
  // Applies lane k's events on its connection, in transactions of at most
  // chunk_bytes_; a batch-level failure as Fail() gives it.
  Status ApplyOnLane(size_t lane, std::span<PreparedEvent> events, std::span<EventResult> results);
  // One transaction; on a data error, one transaction per event.
  Status ApplyChunk(size_t lane, std::span<PreparedEvent> chunk, std::span<EventResult> results);
  // Decides and writes `chunk` in one transaction; rolls back on failure.
  // With `use_hints`, ids whose lane hint is older than their one event are
  // not read; a wrong guess rolls back and decides again with every id read.
  Status ApplyInTransaction(size_t lane, std::span<PreparedEvent> chunk, std::span<EventResult> results,
                            bool use_hints = true);
  // Ends the open transaction; drops the connection when that fails.
  static void Rollback(std::unique_ptr<sql::Connection>& conn);
  // Compares one row of verify_select_ with `snap` (null, or deleted at
  // version 0: an entity storage has no events for).
  void CompareRow(const EntitySnapshot* snap, const sql::Row& row, std::vector<Difference>& differences) const;
  // Repair(): one transaction on lane 0 that locks the rows, decides under
  // `guard`, upserts (or, for a removal, deletes) and commits.
  Status RepairInTransaction(std::span<PreparedEvent> chunk, std::span<EventResult> results, RepairGuard guard);
  // "sink 'x' (db.t): doing: message" with the code the caller acts on.
  Status Fail(const Status& status, std::string_view doing) const;
  std::string Context() const { return "sink '" + cfg_.name + "' (" + where_ + ")"; }
  const MysqlSinkOptions& options() const { return cfg_.Options<MysqlSinkOptions>(); }

  const config::SinkConfig cfg_;
  const sql::ConnectParams params_;
  const std::string where_;  // database.table, for messages
  std::string create_sql_;
  std::string select_prefix_;   // ... WHERE id IN (
  std::string insert_prefix_;   // INSERT ... VALUES
  std::string upsert_suffix_;   // ON DUPLICATE KEY UPDATE ...
  std::string repair_suffix_not_older_;  // the same, guarded by >= (Repair kNotOlder)
  std::string repair_suffix_any_;        // the same, unguarded (Repair kAny)
  std::string verify_select_;   // SELECT id, _version, _deleted, columns FROM t
  // Lane 0: also the connection of Open, Health, Verify and the rebuild.
  std::unique_ptr<sql::Connection> conn_;
  // Lanes 1..connections-1; null after a failed rollback, reopened by EnsureOpen.
  std::vector<std::unique_ptr<sql::Connection>> lanes_;
  // Per lane (0..connections-1), used only by that lane's thread.
  std::vector<VersionHints> hints_;
  std::atomic<uint64_t> reads_skipped_{0};
  std::atomic<uint64_t> wrong_guesses_{0};
  bool open_ = false;
  // Set on a rebuild shadow: the live table it will replace, and whether its
  // fresh table has been made yet.
  std::string shadow_of_;
  bool shadow_prepared_ = false;
  size_t max_statement_bytes_ = size_t{16} << 20;
  size_t chunk_bytes_ = kMaxChunkBytes;
};

MysqlSink::MysqlSink(config::SinkConfig cfg, sql::ConnectParams params)
    : cfg_(std::move(cfg)), params_(std::move(params)), where_(params_.database + "." + options().table) {
  const size_t lanes = std::max<size_t>(1, options().connections);
  hints_.assign(lanes, VersionHints((options().version_cache + lanes - 1) / lanes));
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
  // evaluates the assignments left to right on the updated row.
  static constexpr std::string_view kNewer = "IF(VALUES(`_version`) > `_version`, VALUES(";
  upsert_suffix_ = " ON DUPLICATE KEY UPDATE ";
  for (const auto& c : cols) {
    upsert_suffix_.append(c).append("=").append(kNewer).append(c).append("), ").append(c).append("), ");
  }
  upsert_suffix_.append("`_deleted`=").append(kNewer).append("`_deleted`), `_deleted`), ");
  upsert_suffix_.append("`_version`=").append(kNewer).append("`_version`), `_version`)");
  static constexpr std::string_view kNotOlder = "IF(VALUES(`_version`) >= `_version`, VALUES(";
  repair_suffix_not_older_ = " ON DUPLICATE KEY UPDATE ";
  repair_suffix_any_ = " ON DUPLICATE KEY UPDATE ";
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

// The rebuild suffixes keep a table name within MySQL's 64 characters.
constexpr std::string_view kShadowSuffix = "__rebuild";
constexpr std::string_view kRetiredSuffix = "__old";

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
  std::vector<std::string_view> required = {"id", "_version", "_deleted"};
  for (const auto& c : options().columns) required.push_back(c.name);
  std::string missing;
  for (const std::string_view name : required) {
    if (have.contains(Lower(name))) continue;
    if (!missing.empty()) missing += ", ";
    missing += name;
  }
  if (!missing.empty()) {
    return FailedPrecondition(Context() + ": table " + where_ + " lacks the column(s) " + missing +
                              "; add them, or drop the table and let auto_create make it");
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

bool MysqlSink::Extract(PreparedEvent& p, EventResult& result) const {
  if (p.extracted) return true;
  const auto& columns = options().columns;
  p.values.resize(columns.size());
  if (p.event->deleted) {
    p.extracted = true;  // a tombstone: every column NULL
    return true;
  }
  auto state = ParseJson(p.event->state);
  if (!state.ok()) {
    p.rejected = true;
    result = {Outcome::kRejected, "the state is not valid JSON: " + state.status().message()};
    return false;
  }
  try {
    for (size_t c = 0; c < columns.size(); ++c) p.values[c] = FieldText(*state, columns[c].pointer);
  } catch (const std::exception& ex) {
    p.rejected = true;
    result = {Outcome::kRejected, std::string("cannot read the mapped fields of the state: ") + ex.what()};
    return false;
  }
  p.extracted = true;
  return true;
}

ApplyResult MysqlSink::Apply(std::span<const ChangeEvent> events) {
  ApplyResult out;
  if (events.empty()) return out;
  out.status = EnsureOpen();
  if (!out.status.ok()) return out;
  out.results.resize(events.size());

  // Each lane gets the events of its own ids, in batch order: lanes never
  // lock each other's rows, and each id's events stay in order on one lane.
  struct LaneWork {
    std::vector<size_t> index;  // into events
    std::vector<PreparedEvent> prepared;
    std::vector<EventResult> results;
    Status status;
  };
  const size_t lanes = 1 + lanes_.size();
  std::vector<LaneWork> work(lanes);
  for (size_t i = 0; i < events.size(); ++i) {
    const size_t lane = LaneOf(events[i].entity_id, lanes);
    PreparedEvent p;
    p.event = &events[i];
    // The id goes into the SELECT and the INSERT; the values are at most about the state's size.
    p.bytes = 2 * events[i].entity_id.size() + events[i].state.size() +
              kValueOverheadBytes * (options().columns.size() + 4);
    work[lane].index.push_back(i);
    work[lane].prepared.push_back(std::move(p));
  }
  const auto run = [this, &work](size_t lane) {
    LaneWork& w = work[lane];
    w.results.resize(w.prepared.size());
    w.status = ApplyOnLane(lane, w.prepared, w.results);
  };
  {
    // The caller's thread takes the first lane with events, one thread each the others.
    std::vector<std::jthread> threads;
    size_t mine = lanes;
    for (size_t lane = 0; lane < lanes; ++lane) {
      if (work[lane].prepared.empty()) continue;
      if (mine == lanes) {
        mine = lane;
      } else {
        threads.emplace_back(run, lane);
      }
    }
    if (mine < lanes) run(mine);
  }  // joins
  for (LaneWork& w : work) {
    // A misconfiguration outranks a retry: retrying would not help.
    if (!w.status.ok() && (out.status.ok() || w.status.code() == StatusCode::kFailedPrecondition)) {
      out.status = w.status;
    }
  }
  if (!out.status.ok()) {
    // The server may have cut the idle connections too, unnoticed: the retry
    // starts on fresh ones rather than failing once more on each of those.
    if (out.status.code() == StatusCode::kUnavailable) Close();
    out.results.clear();
    return out;
  }
  for (LaneWork& w : work) {
    for (size_t k = 0; k < w.index.size(); ++k) out.results[w.index[k]] = std::move(w.results[k]);
  }
  return out;
}

Status MysqlSink::ApplyOnLane(size_t lane, std::span<PreparedEvent> events, std::span<EventResult> results) {
  size_t begin = 0;
  while (begin < events.size()) {
    size_t end = begin + 1;
    size_t bytes = events[begin].bytes;
    while (end < events.size() && bytes + events[end].bytes <= chunk_bytes_) bytes += events[end++].bytes;
    RETURN_IF_ERROR(ApplyChunk(lane, events.subspan(begin, end - begin), results.subspan(begin, end - begin)));
    begin = end;
  }
  return Status::Ok();
}

Status MysqlSink::ApplyChunk(size_t lane, std::span<PreparedEvent> chunk, std::span<EventResult> results) {
  const Status batch = ApplyInTransaction(lane, chunk, results);
  if (batch.ok()) return batch;
  if (!IsDataError(batch)) return Fail(batch, "applying a batch");
  for (size_t i = 0; i < chunk.size(); ++i) {
    const Status one = ApplyInTransaction(lane, chunk.subspan(i, 1), results.subspan(i, 1));
    if (one.ok()) continue;
    if (!IsDataError(one)) return Fail(one, "applying event " + std::to_string(chunk[i].event->event_id));
    results[i] = {Outcome::kRejected, one.message()};
  }
  return Status::Ok();
}

void MysqlSink::Rollback(std::unique_ptr<sql::Connection>& conn) {
  if (!conn || !conn->healthy()) return;
  if (!conn->Execute("ROLLBACK").ok()) {
    // A session that may still hold the transaction must not be reused:
    // the next BEGIN would commit it.
    conn.reset();
  }
}

Status MysqlSink::ApplyInTransaction(size_t lane, std::span<PreparedEvent> chunk, std::span<EventResult> results,
                                     bool use_hints) {
  std::unique_ptr<sql::Connection>& conn = Lane(lane);
  VersionHints& hints = hints_[lane];
  use_hints = use_hints && hints.enabled();
  if (!conn || !conn->healthy()) return Unavailable(Context() + ": the MySQL connection was lost");
  // Per distinct id: the version the view holds, then as decided so far,
  // and the index of the last applied event, the one written.
  struct IdState {
    std::optional<uint64_t> stored;
    std::optional<uint64_t> version;
    size_t winner = SIZE_MAX;
    size_t events = 0;
    uint64_t first_version = 0;
    bool hinted = false;  // not read: `stored` is the lane's hint
  };
  std::unordered_map<std::string_view, IdState> ids;
  ids.reserve(chunk.size());
  for (const PreparedEvent& p : chunk) {
    if (p.rejected) continue;
    IdState& id = ids[p.event->entity_id];
    if (id.events++ == 0) id.first_version = p.event->version;
  }
  if (ids.empty()) return Status::Ok();

  // An id with one event newer than its hint is not read: if its row still
  // holds an older version, the guarded upsert changes it (2 affected rows);
  // if not (someone wrote a newer one, or the row is gone) it counts 0 or 1,
  // and the hinted rows' own upsert below tells. Several events of one id
  // are always read: a count could not tell which of them were stale.
  std::string sql;
  sql.reserve(select_prefix_.size() + 16 + chunk.size() * 8);
  sql += select_prefix_;
  size_t to_read = 0;
  for (auto& [key, id] : ids) {
    if (use_hints && id.events == 1) {
      if (const auto hint = hints.Find(key); hint && *hint < id.first_version) {
        id.hinted = true;
        id.stored = *hint;
        reads_skipped_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
    }
    if (to_read++ > 0) sql += ',';
    conn->AppendQuoted(sql, key);
  }
  sql += ") FOR UPDATE";

  if (auto begun = conn->Execute("BEGIN"); !begun.ok()) return begun.status();
  if (to_read > 0) {
    auto rows = conn->Query(sql);
    if (!rows.ok()) {
      Rollback(conn);
      return rows.status();
    }
    for (const sql::Row& row : *rows) {
      if (row.size() < 2 || !row[0]) continue;
      // id is VARBINARY: only the exact bytes asked for come back.
      if (auto it = ids.find(*row[0]); it != ids.end() && !it->second.hinted) it->second.stored = ParseUint(row[1]);
    }
  }

  // Decide in event order; when an event to be written turns out to have an
  // unreadable state it is rejected and the decisions are made again without it.
  std::vector<size_t> winners;
  winners.reserve(ids.size());
  for (bool decided = false; !decided;) {
    for (auto& [id, state] : ids) {
      state.version = state.stored;
      state.winner = SIZE_MAX;
    }
    winners.clear();
    for (size_t i = 0; i < chunk.size(); ++i) {
      const PreparedEvent& p = chunk[i];
      if (p.rejected) continue;
      IdState& id = ids.find(p.event->entity_id)->second;
      if (id.version && p.event->version <= *id.version) {
        results[i] = {Outcome::kStale, {}};
        continue;
      }
      results[i] = {Outcome::kApplied, {}};
      if (id.winner == SIZE_MAX) winners.push_back(i);
      id.version = p.event->version;
      id.winner = i;
    }
    decided = true;
    for (size_t& w : winners) {
      w = ids.find(chunk[w].event->entity_id)->second.winner;
      if (!Extract(chunk[w], results[w])) decided = false;
    }
  }
  // Every id of the chunk, as committed: remembered once the commit is in.
  const auto remember = [&] {
    for (const auto& [key, id] : ids) {
      if (id.version) hints.Remember(key, *id.version);
    }
  };
  if (winners.empty()) {
    Rollback(conn);
    remember();
    return Status::Ok();
  }
  // In primary key order, like the locks.
  std::sort(winners.begin(), winners.end(),
            [&](size_t a, size_t b) { return chunk[a].event->entity_id < chunk[b].event->entity_id; });

  // Two statements at most: the rows that were read, then the hinted ones.
  // The hinted rows are kept apart because only their affected-row count
  // proves anything: a read row the SELECT did not find is not locked (READ
  // COMMITTED takes no gap locks), so a concurrent insert may change its
  // count either way.
  const auto partition = std::stable_partition(
      winners.begin(), winners.end(), [&](size_t w) { return !ids.find(chunk[w].event->entity_id)->second.hinted; });
  const std::span<const size_t> read_rows(winners.begin(), partition);
  const std::span<const size_t> hinted_rows(partition, winners.end());
  const auto upsert = [&](std::span<const size_t> rows) -> Result<uint64_t> {
    size_t bytes = insert_prefix_.size() + upsert_suffix_.size();
    for (const size_t w : rows) {
      bytes += 2 * chunk[w].event->entity_id.size() + kValueOverheadBytes * (chunk[w].values.size() + 4);
      for (const auto& v : chunk[w].values) bytes += v ? 2 * v->size() : 0;
    }
    sql.clear();
    sql.reserve(bytes);
    sql += insert_prefix_;
    for (size_t k = 0; k < rows.size(); ++k) {
      const PreparedEvent& p = chunk[rows[k]];
      if (k > 0) sql += ',';
      AppendRow(*conn, p, sql);
    }
    sql += upsert_suffix_;
    if (sql.size() > max_statement_bytes_) {
      return InvalidArgument("the row needs a statement of " + std::to_string(sql.size()) +
                             " bytes, more than the server's max_allowed_packet allows");
    }
    return conn->Execute(sql);
  };
  for (const bool hinted : {false, true}) {
    const std::span<const size_t> rows = hinted ? hinted_rows : read_rows;
    if (rows.empty()) continue;
    auto written = upsert(rows);
    if (!written.ok()) {
      Rollback(conn);
      return written.status();
    }
    if (!hinted) continue;
    // A hinted row exists (the sink saw it committed), and the row lock of
    // the upsert makes its count exact: 2 when it still held an older
    // version and took the event; 0 (1 with CLIENT_FOUND_ROWS) when someone
    // wrote a newer version; 1 when the row was deleted. So the sum is 2 per
    // row only when every guess was right.
    if (*written != 2 * rows.size()) {
      wrong_guesses_.fetch_add(1, std::memory_order_relaxed);
      Rollback(conn);
      if (!conn) return Unavailable(Context() + ": the MySQL connection was lost");
      for (const auto& [key, id] : ids) {
        if (id.hinted) hints.Forget(key);
      }
      return ApplyInTransaction(lane, chunk, results, false);
    }
  }
  if (auto committed = conn->Execute("COMMIT"); !committed.ok()) {
    Rollback(conn);
    for (const auto& [key, id] : ids) hints.Forget(key);
    return committed.status();
  }
  remember();
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

void MysqlSink::CompareRow(const EntitySnapshot* snap, const sql::Row& row,
                           std::vector<Difference>& differences) const {
  const auto& columns = options().columns;
  if (row.size() < 3 + columns.size() || !row[0]) return;
  const std::string& id = *row[0];
  const uint64_t version = ParseUint(row[1]).value_or(0);
  const bool deleted = row[2].value_or("0") != "0";
  const auto add = [&](Difference::Kind kind, std::string detail) {
    differences.push_back(Difference{kind, id, std::move(detail), version});
  };
  const bool unknown = snap == nullptr || (snap->deleted && snap->version == 0);
  if (unknown || snap->deleted) {
    if (deleted) return;  // a tombstone: invisible, and fine
    add(Difference::Kind::kExtra, "view has a live row at version " + std::to_string(version) +
                                      (unknown ? ", storage has no such entity"
                                               : ", storage deleted it at version " + std::to_string(snap->version)));
    return;
  }
  if (deleted) {
    add(Difference::Kind::kMissing, "view has a tombstone at version " + std::to_string(version) +
                                        ", storage has version " + std::to_string(snap->version));
    return;
  }
  if (version != snap->version) {
    add(Difference::Kind::kVersionMismatch,
        "view has version " + std::to_string(version) + ", storage has " + std::to_string(snap->version));
    return;
  }
  auto state = ParseJson(snap->state);
  if (!state.ok()) {
    add(Difference::Kind::kContentMismatch, "storage state is not valid JSON: " + state.status().message());
    return;
  }
  std::string detail;
  for (size_t c = 0; c < columns.size(); ++c) {
    std::optional<std::string> expected;
    try {
      expected = FieldText(*state, columns[c].pointer);
    } catch (const std::exception&) {
      expected = std::nullopt;
    }
    if (SameValue(row[3 + c], expected)) continue;
    if (!detail.empty()) detail += "; ";
    detail += "column " + columns[c].name + ": view has " + Shown(row[3 + c]) + ", storage has " + Shown(expected);
  }
  if (!detail.empty()) add(Difference::Kind::kContentMismatch, std::move(detail));
}

Status MysqlSink::Verify(const std::vector<EntitySnapshot>& truth, std::vector<Difference>& differences) {
  RETURN_IF_ERROR(EnsureOpen());
  struct Expected {
    const EntitySnapshot* snapshot = nullptr;
    bool seen = false;
  };
  std::unordered_map<std::string_view, Expected> want;
  want.reserve(truth.size());
  for (const EntitySnapshot& s : truth) want[s.entity_id] = Expected{&s, false};

  std::string last;
  bool first = true;
  for (;;) {
    std::string q = verify_select_;
    if (!first) {
      q += " WHERE `id` > ";
      conn_->AppendQuoted(q, last);
    }
    q += " ORDER BY `id` LIMIT " + std::to_string(kVerifyChunkRows);
    auto rows = conn_->Query(q);
    if (!rows.ok()) return Fail(rows.status(), "reading the view");
    for (const sql::Row& row : *rows) {
      if (row.empty() || !row[0]) continue;
      const auto it = want.find(*row[0]);
      if (it != want.end()) it->second.seen = true;
      CompareRow(it == want.end() ? nullptr : it->second.snapshot, row, differences);
    }
    if (rows->size() < kVerifyChunkRows) break;
    last = *rows->back()[0];
    first = false;
  }
  for (const EntitySnapshot& s : truth) {
    if (s.deleted) continue;
    const Expected& e = want[s.entity_id];
    if (e.snapshot == &s && !e.seen) {
      differences.push_back(Difference{Difference::Kind::kMissing, s.entity_id,
                                       "no row in the view, storage has version " + std::to_string(s.version)});
    }
  }
  return Status::Ok();
}

Status MysqlSink::VerifyEntities(std::span<const EntitySnapshot> truth, std::vector<Difference>& differences) {
  RETURN_IF_ERROR(EnsureOpen());
  for (size_t begin = 0; begin < truth.size(); begin += kVerifyChunkRows) {
    const size_t end = std::min(truth.size(), begin + kVerifyChunkRows);
    std::unordered_map<std::string_view, const EntitySnapshot*> want;
    std::string q = verify_select_ + " FORCE INDEX (PRIMARY) WHERE `id` IN (";
    for (size_t i = begin; i < end; ++i) {
      if (i > begin) q += ',';
      conn_->AppendQuoted(q, truth[i].entity_id);
      want[truth[i].entity_id] = &truth[i];
    }
    q += ')';
    auto rows = conn_->Query(q);
    if (!rows.ok()) return Fail(rows.status(), "reading the view");
    std::unordered_set<std::string> seen;
    for (const sql::Row& row : *rows) {
      if (row.empty() || !row[0]) continue;
      const auto it = want.find(*row[0]);
      if (it == want.end()) continue;
      seen.insert(*row[0]);
      CompareRow(it->second, row, differences);
    }
    for (size_t i = begin; i < end; ++i) {
      const EntitySnapshot& s = truth[i];
      if (s.deleted || seen.contains(s.entity_id)) continue;
      differences.push_back(Difference{Difference::Kind::kMissing, s.entity_id,
                                       "no row in the view, storage has version " + std::to_string(s.version)});
    }
  }
  return Status::Ok();
}

ApplyResult MysqlSink::Repair(std::span<const ChangeEvent> events, RepairGuard guard) {
  ApplyResult out;
  if (events.empty()) return out;
  out.status = EnsureOpen();
  if (!out.status.ok()) return out;
  out.results.resize(events.size());
  std::vector<PreparedEvent> prepared(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    prepared[i].event = &events[i];
    prepared[i].bytes = 2 * events[i].entity_id.size() + events[i].state.size() +
                        kValueOverheadBytes * (options().columns.size() + 4);
  }
  const std::span<PreparedEvent> all(prepared);
  const std::span<EventResult> results(out.results);
  // In transactions of at most chunk_bytes_, like Apply; a data error
  // replays its transaction one event at a time to reject only the culprits.
  Status st;
  for (size_t begin = 0; begin < prepared.size() && st.ok();) {
    size_t end = begin + 1;
    size_t bytes = prepared[begin].bytes;
    while (end < prepared.size() && bytes + prepared[end].bytes <= chunk_bytes_) bytes += prepared[end++].bytes;
    const auto chunk = all.subspan(begin, end - begin);
    const auto chunk_results = results.subspan(begin, end - begin);
    st = RepairInTransaction(chunk, chunk_results, guard);
    if (!st.ok() && IsDataError(st)) {
      st = Status::Ok();
      for (size_t i = 0; i < chunk.size() && st.ok(); ++i) {
        const Status one = RepairInTransaction(chunk.subspan(i, 1), chunk_results.subspan(i, 1), guard);
        if (one.ok()) continue;
        if (IsDataError(one)) {
          chunk_results[i] = {Outcome::kRejected, one.message()};
        } else {
          st = one;
        }
      }
    }
    begin = end;
  }
  // A repair may have moved a row's version either way: forget the hints.
  for (const ChangeEvent& e : events) hints_[LaneOf(e.entity_id, hints_.size())].Forget(e.entity_id);
  if (!st.ok()) {
    out.status = Fail(st, "repairing rows");
    if (out.status.code() == StatusCode::kUnavailable) Close();
    out.results.clear();
  }
  return out;
}

Status MysqlSink::RepairInTransaction(std::span<PreparedEvent> chunk, std::span<EventResult> results,
                                      RepairGuard guard) {
  std::unique_ptr<sql::Connection>& conn = conn_;
  if (!conn || !conn->healthy()) return Unavailable(Context() + ": the MySQL connection was lost");
  const auto removal = [guard](const ChangeEvent& e) {
    return guard == RepairGuard::kAny && e.deleted && e.version == 0;
  };
  // Per id: the version the row holds as decided so far (nullopt: no row),
  // and the last event written.
  struct IdState {
    std::optional<uint64_t> version;
    size_t winner = SIZE_MAX;
  };
  std::unordered_map<std::string_view, IdState> ids;
  std::string sql = select_prefix_;
  for (size_t i = 0; i < chunk.size(); ++i) {
    chunk[i].rejected = false;
    if (!removal(*chunk[i].event) && !Extract(chunk[i], results[i])) continue;
    if (ids.try_emplace(chunk[i].event->entity_id).second) {
      if (ids.size() > 1) sql += ',';
      conn->AppendQuoted(sql, chunk[i].event->entity_id);
    }
  }
  if (ids.empty()) return Status::Ok();
  sql += ") FOR UPDATE";
  if (auto begun = conn->Execute("BEGIN"); !begun.ok()) return begun.status();
  auto rows = conn->Query(sql);
  if (!rows.ok()) {
    Rollback(conn);
    return rows.status();
  }
  for (const sql::Row& row : *rows) {
    if (row.size() < 2 || !row[0]) continue;
    if (auto it = ids.find(*row[0]); it != ids.end()) it->second.version = ParseUint(row[1]);
  }
  for (size_t i = 0; i < chunk.size(); ++i) {
    if (chunk[i].rejected) continue;
    const ChangeEvent& e = *chunk[i].event;
    IdState& id = ids.find(e.entity_id)->second;
    if (guard == RepairGuard::kNotOlder && id.version && e.version < *id.version) {
      results[i] = {Outcome::kStale, {}};
      continue;
    }
    results[i] = {Outcome::kApplied, {}};
    id.version = removal(e) ? std::nullopt : std::optional<uint64_t>(e.version);
    id.winner = i;
  }
  std::string upsert, removed;
  for (const auto& [key, id] : ids) {
    if (id.winner == SIZE_MAX) continue;
    const PreparedEvent& p = chunk[id.winner];
    if (removal(*p.event)) {
      removed += removed.empty() ? "DELETE FROM " + sql::QuoteIdent(options().table) + " WHERE `id` IN (" : ",";
      conn->AppendQuoted(removed, p.event->entity_id);
      continue;
    }
    upsert += upsert.empty() ? insert_prefix_ : ",";
    AppendRow(*conn, p, upsert);
  }
  for (std::string* statement : {&upsert, &removed}) {
    if (statement->empty()) continue;
    if (statement == &upsert) {
      upsert += guard == RepairGuard::kAny ? repair_suffix_any_ : repair_suffix_not_older_;
    } else {
      removed += ')';
    }
    if (statement->size() > max_statement_bytes_) {
      Rollback(conn);
      return InvalidArgument("the repair needs a statement of " + std::to_string(statement->size()) +
                             " bytes, more than the server's max_allowed_packet allows");
    }
    auto done = conn->Execute(*statement);
    if (!done.ok()) {
      Rollback(conn);
      return done.status();
    }
  }
  if (auto committed = conn->Execute("COMMIT"); !committed.ok()) {
    Rollback(conn);
    return committed.status();
  }
  return Status::Ok();
}

}  // namespace

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
  sql::ConnectParams p;
  p.host = global.mysql.host;
  p.port = global.mysql.port;
  p.socket = global.mysql.socket;
  p.user = global.mysql.user;
  p.password = global.mysql.password;
  p.database = o.database.empty() ? global.mysql.database : o.database;
  p.connect_timeout = global.mysql.connect_timeout;
  p.io_timeout = global.mysql.io_timeout;
  if (p.database.empty()) return InvalidArgument(context + ": no database for the view table");
  std::unique_ptr<Sink> made = std::make_unique<MysqlSink>(sink, std::move(p));
  return made;
}

}  // namespace sluice::connectors::mysql
