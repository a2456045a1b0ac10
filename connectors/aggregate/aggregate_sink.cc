#include "connectors/aggregate/aggregate_sink.h"

#include <map>
#include <set>
#include <utility>

#include "connectors/aggregate/aggregate_ops.h"
#include "connectors/aggregate/aggregate_options.h"
#include "connectors/view_code.h"
#include "sql/connection.h"
#include "sql/errors.h"

namespace sluice::connectors::aggregate {
namespace {

constexpr const char* kOffsetsDdl =
    "CREATE TABLE IF NOT EXISTS sluice_view_offsets ("
    "sink VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "partition_id INT UNSIGNED NOT NULL,"
    "event_id BIGINT UNSIGNED NOT NULL,"
    "updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),"
    "PRIMARY KEY (sink, entity_type, partition_id)"
    ") ENGINE=InnoDB";
constexpr const char* kRejectedDdl =
    "CREATE TABLE IF NOT EXISTS sluice_view_rejected ("
    "sink VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
    "partition_id INT UNSIGNED NOT NULL,"
    "event_id BIGINT UNSIGNED NOT NULL,"
    "reason TEXT NOT NULL,"
    "PRIMARY KEY (sink, entity_type, partition_id, event_id)"
    ") ENGINE=InnoDB";

class AggregateSink : public Sink {
 public:
  AggregateSink(config::SinkConfig cfg, sql::ConnectParams params, std::unique_ptr<ViewCode> code)
      : cfg_(std::move(cfg)), params_(std::move(params)), code_(std::move(code)) {}

  const std::string& name() const override { return cfg_.name; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.full_events = true;
    return c;
  }

  Status Open() override {
    Close();
    auto conn = sql::Connection::Open(params_);
    if (!conn.ok()) return conn.status().WithContext(Context());
    conn_ = std::move(conn).value();
    for (const AggregateTable& t : options().tables) {
      std::string ddl = "CREATE TABLE IF NOT EXISTS " + sql::QuoteIdent(t.name) + " (";
      std::string key;
      for (const auto& c : t.key) {
        ddl += sql::QuoteIdent(c.name) + " " + c.sql_type + " NOT NULL, ";
        key += (key.empty() ? "" : ",") + sql::QuoteIdent(c.name);
      }
      for (const auto& c : t.columns) ddl += sql::QuoteIdent(c.name) + " " + c.sql_type + " NULL, ";
      ddl += "PRIMARY KEY (" + key + ")) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";
      if (auto r = conn_->Execute(ddl); !r.ok()) return Fail(r.status(), "creating table " + t.name);
    }
    for (const char* ddl : {kOffsetsDdl, kRejectedDdl}) {
      if (auto r = conn_->Execute(ddl); !r.ok()) return Fail(r.status(), "creating its offsets tables");
    }
    std::string q = "SELECT partition_id, event_id FROM sluice_view_offsets WHERE sink=";
    conn_->AppendQuoted(q, cfg_.name);
    q += " AND entity_type=";
    conn_->AppendQuoted(q, cfg_.entity);
    auto rows = conn_->Query(q);
    if (!rows.ok()) return Fail(rows.status(), "reading its offsets");
    offsets_.clear();
    for (const auto& r : *rows) offsets_[static_cast<uint32_t>(std::stoul(r[0].value_or("0")))] = std::stoull(r[1].value_or("0"));
    return Status::Ok();
  }

  ApplyResult Apply(std::span<const ChangeEvent> events) override {
    ApplyResult out;
    if (!conn_) {
      out.status = Unavailable(Context() + ": not open");
      return out;
    }
    out.results.assign(events.size(), EventResult{Outcome::kApplied, {}});
    // Events the view's transactions already took: stale, unless it rejected
    // them (then they run again: a dead letter again, or applied once fixed).
    std::vector<size_t> todo;
    std::vector<size_t> seen;
    for (size_t i = 0; i < events.size(); ++i) {
      (events[i].event_id <= Offset(events[i].partition) ? seen : todo).push_back(i);
    }
    std::set<std::pair<uint32_t, uint64_t>> rejected_before;
    if (!seen.empty()) {
      auto r = RejectedAmong(events, seen);
      if (!r.ok()) {
        out.status = r.status();
        return out;
      }
      rejected_before = std::move(r).value();
      for (size_t i : seen) {
        if (rejected_before.count({events[i].partition, events[i].event_id})) {
          todo.push_back(i);
        } else {
          out.results[i].outcome = Outcome::kStale;
        }
      }
      std::sort(todo.begin(), todo.end());
    }
    // The operations of each event, or why the code failed on it.
    std::vector<std::vector<Op>> ops(events.size());
    for (size_t i : todo) {
      handlers::JsValueOutcome r = code_->Aggregate(events[i]);
      if (r.kind != handlers::JsOutcome::Kind::kApplied) {
        out.results[i] = {Outcome::kRejected, "view code: " + r.message};
        continue;
      }
      auto parsed = ParseOps(r.json, options());
      if (!parsed.ok()) {
        out.results[i] = {Outcome::kRejected, "view code: " + code_->file() + ": " + parsed.status().message()};
        continue;
      }
      ops[i] = std::move(parsed).value();
    }
    Status st = Commit(events, todo, ops, out.results, rejected_before);
    if (st.ok()) return out;
    if (!sql::IsDataError(st)) {
      out.status = Fail(st, "applying a batch");
      return out;
    }
    // A value a column refused: one transaction per event finds which.
    for (size_t i : todo) {
      Status one = Commit(events, {i}, ops, out.results, rejected_before);
      if (one.ok()) continue;
      if (!sql::IsDataError(one)) {
        out.status = Fail(one, "applying event " + std::to_string(events[i].event_id));
        return out;
      }
      out.results[i] = {Outcome::kRejected, "the view refused the operations of aggregate(): " + one.message()};
      ops[i].clear();
      if (Status rec = Commit(events, {i}, ops, out.results, rejected_before); !rec.ok()) {
        out.status = Fail(rec, "recording the rejection of event " + std::to_string(events[i].event_id));
        return out;
      }
    }
    return out;
  }

  Status Health() override {
    if (!conn_) return Unavailable(Context() + ": not open");
    auto r = conn_->Query("SELECT 1");
    return r.ok() ? Status::Ok() : Fail(r.status(), "health check");
  }

  void Close() override { conn_.reset(); }

  Status Verify(const std::vector<EntitySnapshot>&, std::vector<Difference>&) override {
    return FailedPrecondition(Context() + ": an aggregate view has no row per entity to compare; "
                              "rebuild it to recompute it from the events");
  }

 private:
  const AggregateSinkOptions& options() const { return cfg_.Options<AggregateSinkOptions>(); }
  std::string Context() const { return "aggregate sink " + cfg_.name + " (" + params_.database + ")"; }
  Status Fail(const Status& st, const std::string& doing) const {
    return sql::BatchFailure(st).WithContext(Context() + ": " + doing);
  }
  uint64_t Offset(uint32_t partition) const {
    const auto it = offsets_.find(partition);
    return it == offsets_.end() ? 0 : it->second;
  }

  Result<std::set<std::pair<uint32_t, uint64_t>>> RejectedAmong(std::span<const ChangeEvent> events,
                                                                const std::vector<size_t>& which) {
    std::string q = "SELECT partition_id, event_id FROM sluice_view_rejected WHERE sink=";
    conn_->AppendQuoted(q, cfg_.name);
    q += " AND entity_type=";
    conn_->AppendQuoted(q, cfg_.entity);
    q += " AND (partition_id, event_id) IN (";
    for (size_t n = 0; n < which.size(); ++n) {
      q += (n ? ",(" : "(") + std::to_string(events[which[n]].partition) + "," +
           std::to_string(events[which[n]].event_id) + ")";
    }
    q += ")";
    auto rows = conn_->Query(q);
    if (!rows.ok()) return Fail(rows.status(), "reading its rejected events");
    std::set<std::pair<uint32_t, uint64_t>> out;
    for (const auto& r : *rows) {
      out.emplace(static_cast<uint32_t>(std::stoul(r[0].value_or("0"))), std::stoull(r[1].value_or("0")));
    }
    return out;
  }

  // One transaction: the operations of the events `which` (rejected ones
  // recorded instead), the rejected table's changes, and the offsets past
  // every event of `which`. The in-memory offsets move only once committed.
  Status Commit(std::span<const ChangeEvent> events, const std::vector<size_t>& which,
                const std::vector<std::vector<Op>>& ops, const std::vector<EventResult>& results,
                const std::set<std::pair<uint32_t, uint64_t>>& rejected_before) {
    if (which.empty()) return Status::Ok();
    OpFold fold(options());
    std::map<uint32_t, uint64_t> next;  // partition -> highest event_id of `which`
    std::vector<std::string> statements;
    std::string add_rejected, drop_rejected;
    const auto quote = [this](std::string& out, std::string_view s) { conn_->AppendQuoted(out, s); };
    for (size_t i : which) {
      const ChangeEvent& e = events[i];
      uint64_t& hi = next[e.partition];
      hi = std::max(hi, e.event_id);
      const bool was_rejected = rejected_before.count({e.partition, e.event_id}) > 0;
      if (results[i].outcome == Outcome::kRejected) {
        if (was_rejected) continue;
        add_rejected += add_rejected.empty() ? "(" : ",(";
        quote(add_rejected, cfg_.name);
        add_rejected += ',';
        quote(add_rejected, cfg_.entity);
        add_rejected += "," + std::to_string(e.partition) + "," + std::to_string(e.event_id) + ",";
        quote(add_rejected, results[i].reason);
        add_rejected += ')';
        continue;
      }
      fold.Add(ops[i]);
      if (was_rejected) {
        drop_rejected += (drop_rejected.empty() ? "(" : ",(") + std::to_string(e.partition) + "," +
                         std::to_string(e.event_id) + ")";
      }
    }
    statements = fold.Statements(quote);
    if (!add_rejected.empty()) {
      statements.push_back("INSERT IGNORE INTO sluice_view_rejected (sink, entity_type, partition_id, event_id, reason) VALUES " +
                           add_rejected);
    }
    if (!drop_rejected.empty()) {
      std::string s = "DELETE FROM sluice_view_rejected WHERE sink=";
      quote(s, cfg_.name);
      s += " AND entity_type=";
      quote(s, cfg_.entity);
      statements.push_back(s + " AND (partition_id, event_id) IN (" + drop_rejected + ")");
    }
    std::string offsets = "INSERT INTO sluice_view_offsets (sink, entity_type, partition_id, event_id) VALUES ";
    bool first = true;
    for (const auto& [p, id] : next) {
      offsets += first ? "(" : ",(";
      first = false;
      quote(offsets, cfg_.name);
      offsets += ',';
      quote(offsets, cfg_.entity);
      offsets += "," + std::to_string(p) + "," + std::to_string(id) + ")";
    }
    statements.push_back(offsets + " ON DUPLICATE KEY UPDATE event_id=GREATEST(event_id, VALUES(event_id))");

    if (auto begun = conn_->Execute("BEGIN"); !begun.ok()) return begun.status();
    for (const std::string& s : statements) {
      if (auto r = conn_->Execute(s); !r.ok()) {
        (void)conn_->Execute("ROLLBACK");
        return r.status();
      }
    }
    if (auto committed = conn_->Execute("COMMIT"); !committed.ok()) {
      // Unknown whether it committed: the connection is dropped and the
      // next Open() reads the offsets that hold.
      conn_.reset();
      return Unavailable(committed.status().message());
    }
    for (const auto& [p, id] : next) offsets_[p] = std::max(offsets_[p], id);
    return Status::Ok();
  }

  const config::SinkConfig cfg_;
  const sql::ConnectParams params_;
  std::unique_ptr<ViewCode> code_;
  std::unique_ptr<sql::Connection> conn_;
  std::map<uint32_t, uint64_t> offsets_;  // committed: partition -> last event_id
};

}  // namespace

Result<std::unique_ptr<Sink>> MakeAggregateSink(const config::SinkConfig& sink, const config::Config& global) {
  const std::string context = "sink " + sink.name;
  const AggregateSinkOptions& o = sink.Options<AggregateSinkOptions>();
  if (o.tables.empty()) return InvalidArgument(context + ": an aggregate sink needs tables");
  if (sink.code.empty()) return InvalidArgument(context + ": an aggregate sink needs code");
  auto code = ViewCode::Load(sink.code, {}, ViewCode::Purpose::kAggregate);
  if (!code.ok()) {
    return InvalidArgument(context + ": " + code.status().message() +
                           (sink.code_origin.empty() ? "" : " (code at " + sink.code_origin + ")"));
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
  if (p.database.empty()) return InvalidArgument(context + ": no database for the view's tables");
  return std::unique_ptr<Sink>(new AggregateSink(sink, std::move(p), std::move(code).value()));
}

}  // namespace sluice::connectors::aggregate
