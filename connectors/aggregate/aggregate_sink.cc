#include "connectors/aggregate/aggregate_sink.h"

#include <functional>
#include <map>
#include <set>
#include <utility>

#include "connectors/aggregate/aggregate_ops.h"
#include "connectors/aggregate/aggregate_options.h"
#include "connectors/view_code.h"
#include "connectors/view_code_pool.h"
#include "sql/connection.h"
#include "sql/errors.h"
#include "sql/params.h"

namespace sluice::connectors::aggregate {
namespace {

// The rebuild suffixes keep a table name within MySQL's 64 characters.
constexpr std::string_view kShadowSuffix = "__rebuild";
constexpr std::string_view kRetiredSuffix = "__old";

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// The sink's own table `kind` ("vo": offsets, "vr": rejected events):
// sluice_<kind>_<sink>, with a hash for a sink name too long for it.
std::string OwnTable(std::string_view kind, const std::string& sink) {
  std::string name = "sluice_" + std::string(kind) + "_" + sink;
  if (name.size() <= 64) return name;
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(Fnv1a(sink)));
  return name.substr(0, 64 - 17) + "_" + hash;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

class AggregateSink : public Sink {
 public:
  // `shadow_of`: the live sink's name when this is its rebuild shadow.
  // `code` runs on Apply's thread; Prepare makes a pool of runtimes of the
  // same text at its first call (CodeAhead).
  // `leases`: the qualified sluice_leases table of the storage server that
  // holds the entity type (the view's tables are on that server).
  AggregateSink(config::SinkConfig cfg, sql::ConnectParams params, std::string leases, std::unique_ptr<ViewCode> code,
                std::string shared_with, std::string shadow_of = "")
      : cfg_(std::move(cfg)),
        params_(std::move(params)),
        leases_(std::move(leases)),
        code_(std::move(code)),
        shared_with_(std::move(shared_with)),
        shadow_of_(std::move(shadow_of)),
        suffix_(shadow_of_.empty() ? "" : std::string(kShadowSuffix)),
        offsets_table_(sql::QuoteIdent(OwnTable("vo", cfg_.name))),
        rejected_table_(sql::QuoteIdent(OwnTable("vr", cfg_.name))) {}

  const std::string& name() const override { return cfg_.name; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.full_events = true;
    c.prepares = true;
    // Each transaction reads its partitions' offsets and checks the leases
    // TakeOver() keeps: nothing to learn by opening again.
    c.stays_open_at_takeover = true;
    return c;
  }

  // Runs the code and reads its operations ahead (the engine's reader
  // thread); Apply folds and writes them.
  void Prepare(std::span<ChangeEvent> events) override {
    ahead_.Prepare(events,
                   [this](ViewCode& code, ViewCode::Events slice) { return CodeAhead::Shared(RunCode(code, slice)); });
  }

  Status Open() override {
    Close();
    auto conn = sql::Connection::Open(params_);
    if (!conn.ok()) return conn.status().WithContext(Context());
    conn_ = std::move(conn).value();
    if (!shadow_of_.empty() && !shadow_prepared_) {
      // A shadow starts empty, whatever an earlier attempt left.
      for (const std::string& t : OwnTables()) {
        if (auto r = conn_->Execute("DROP TABLE IF EXISTS " + t); !r.ok()) return Fail(r.status(), "clearing an earlier rebuild");
      }
      shadow_prepared_ = true;
    }
    RETURN_IF_ERROR(CheckDeclaredTables());
    for (const AggregateTable& t : options().tables) {
      std::string ddl = "CREATE TABLE IF NOT EXISTS " + sql::QuoteIdent(t.name + suffix_) + " (";
      std::string key;
      for (const auto& c : t.key) {
        ddl += sql::QuoteIdent(c.name) + " " + c.sql_type + " NOT NULL, ";
        key += (key.empty() ? "" : ",") + sql::QuoteIdent(c.name);
      }
      for (const auto& c : t.columns) ddl += sql::QuoteIdent(c.name) + " " + c.sql_type + " NULL, ";
      ddl += "PRIMARY KEY (" + key + ")) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin";
      if (auto r = conn_->Execute(ddl); !r.ok()) return Fail(r.status(), "creating table " + t.name + suffix_);
    }
    const std::string own[] = {
        "CREATE TABLE IF NOT EXISTS " + offsets_table_ +
            " (entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
            " partition_id INT UNSIGNED NOT NULL, event_id BIGINT UNSIGNED NOT NULL,"
            " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),"
            " PRIMARY KEY (entity_type, partition_id)) ENGINE=InnoDB",
        "CREATE TABLE IF NOT EXISTS " + rejected_table_ +
            " (entity_type VARCHAR(48) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,"
            " partition_id INT UNSIGNED NOT NULL, event_id BIGINT UNSIGNED NOT NULL, reason TEXT NOT NULL,"
            " PRIMARY KEY (entity_type, partition_id, event_id)) ENGINE=InnoDB",
    };
    for (const std::string& ddl : own) {
      if (auto r = conn_->Execute(ddl); !r.ok()) return Fail(r.status(), "creating its offsets tables");
    }
    return Status::Ok();
  }

  // The engine's leases of these partitions: from now on every transaction
  // of the view checks, under a lock, that they are still current.
  Status TakeOver(const TakenOver& taken) override {
    if (!fence_ || fence_->owner != taken.owner || fence_->scope != taken.scope) {
      fence_ = TakenOver{taken.scope, taken.owner, {}};
    }
    for (const auto& [p, token] : taken.tokens) fence_->tokens[p] = token;
    return Status::Ok();
  }

  ApplyResult Apply(std::span<const ChangeEvent> events) override {
    ApplyResult out;
    if (!conn_) {
      out.status = Unavailable(Context() + ": not open");
      return out;
    }
    out.results.assign(events.size(), EventResult{Outcome::kApplied, {}});
    std::vector<size_t> all(events.size());
    for (size_t i = 0; i < events.size(); ++i) all[i] = i;
    Status st = Transact(events, all, out.results, {});
    if (st.ok()) return out;
    if (!sql::IsDataError(st)) {
      out.status = Fail(st, "applying a batch");
      return out;
    }
    // A value a column refused: one transaction per event finds which.
    for (size_t i : all) {
      Status one = Transact(events, {i}, out.results, {});
      if (one.ok()) continue;
      if (!sql::IsDataError(one)) {
        out.status = Fail(one, "applying event " + std::to_string(events[i].event_id));
        return out;
      }
      out.results[i] = {Outcome::kRejected, "the view refused the operations of aggregate(): " + one.message()};
      if (Status rec = Transact(events, {i}, out.results, {i}); !rec.ok()) {
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
                              "`sluice rebuild --sink " + cfg_.name + "` recomputes it from the events");
  }

  Result<std::unique_ptr<Sink>> MakeRebuildShadow() const override {
    if (!shared_with_.empty()) {
      return FailedPrecondition(Context() + ": cannot be rebuilt alone: its tables are also written by sink " +
                                shared_with_ + " (a view fed by several sinks is rebuilt by neither yet)");
    }
    config::SinkConfig shadow = cfg_;
    shadow.name += kShadowSuffix;
    for (const AggregateTable& t : options().tables) {
      if (t.name.size() + kShadowSuffix.size() > 64) {
        return FailedPrecondition(Context() + ": cannot be rebuilt: table " + t.name + " is longer than " +
                                  std::to_string(64 - kShadowSuffix.size()) + " characters, so " +
                                  std::string(kShadowSuffix) + " does not fit after it");
      }
    }
    ASSIGN_OR_RETURN(auto code, ViewCode::Load(cfg_.code, {}, ViewCode::Purpose::kAggregate));
    return std::unique_ptr<Sink>(new AggregateSink(std::move(shadow), params_, leases_, std::move(code), "", cfg_.name));
  }

  // On the shadow: its tables, offsets and rejected events become the live
  // view's in ONE RENAME TABLE (atomic: readers and the live sink see the old
  // view or the new one), then the old tables are dropped. The live sink's
  // next transaction reads the offsets of the new tables.
  Status PromoteRebuildShadow() override {
    if (shadow_of_.empty()) return Sink::PromoteRebuildShadow();
    if (!conn_) RETURN_IF_ERROR(Open());
    std::vector<std::pair<std::string, std::string>> swaps;  // (shadow, live) unquoted
    for (const AggregateTable& t : options().tables) swaps.push_back({t.name + suffix_, t.name});
    swaps.push_back({OwnTable("vo", cfg_.name), OwnTable("vo", shadow_of_)});
    swaps.push_back({OwnTable("vr", cfg_.name), OwnTable("vr", shadow_of_)});
    std::string rename = "RENAME TABLE ";
    std::vector<std::string> retired;
    for (const auto& [shadow, live] : swaps) {
      std::string exists = "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=DATABASE() AND TABLE_NAME=";
      conn_->AppendQuoted(exists, live);
      auto rows = conn_->Query(exists);
      if (!rows.ok()) return Fail(rows.status(), "looking for the live tables");
      const std::string old = live.size() + kRetiredSuffix.size() <= 64
                                  ? live + std::string(kRetiredSuffix)
                                  : live.substr(0, 64 - kRetiredSuffix.size()) + std::string(kRetiredSuffix);
      if (auto d = conn_->Execute("DROP TABLE IF EXISTS " + sql::QuoteIdent(old)); !d.ok()) {
        return Fail(d.status(), "dropping what an earlier switch-over left");
      }
      if (!rows->empty() && rows->front()[0].value_or("0") != "0") {
        rename += sql::QuoteIdent(live) + " TO " + sql::QuoteIdent(old) + ", ";
        retired.push_back(old);
      }
      rename += sql::QuoteIdent(shadow) + " TO " + sql::QuoteIdent(live) + ", ";
    }
    rename.resize(rename.size() - 2);
    if (auto r = conn_->Execute(rename); !r.ok()) return Fail(r.status(), "swapping the rebuilt view in");
    for (const std::string& old : retired) {
      if (auto r = conn_->Execute("DROP TABLE " + sql::QuoteIdent(old)); !r.ok()) {
        return Fail(r.status(), "dropping the replaced tables");
      }
    }
    return Status::Ok();
  }

 private:
  const AggregateSinkOptions& options() const { return cfg_.Options<AggregateSinkOptions>(); }
  std::string Context() const { return "aggregate sink " + cfg_.name + " (" + params_.database + ")"; }
  Status Fail(const Status& st, const std::string& doing) const {
    return sql::BatchFailure(st).WithContext(Context() + ": " + doing);
  }
  std::vector<std::string> OwnTables() const {
    std::vector<std::string> out;
    for (const AggregateTable& t : options().tables) out.push_back(sql::QuoteIdent(t.name + suffix_));
    out.push_back(offsets_table_);
    out.push_back(rejected_table_);
    return out;
  }

  // A live table whose columns, types or primary key are not the declared
  // ones (the definition changed): the sink waits (backoff) until a rebuild
  // replaces the tables, rather than adding to columns that would hold only
  // part of the events, or that hold another type than the code writes.
  Status CheckDeclaredTables() {
    for (const AggregateTable& t : options().tables) {
      std::string q = "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
                      "WHERE TABLE_SCHEMA=DATABASE() AND TABLE_NAME=";
      conn_->AppendQuoted(q, t.name + suffix_);
      auto rows = conn_->Query(q);
      if (!rows.ok()) return Fail(rows.status(), "reading the columns of " + t.name + suffix_);
      if (rows->empty()) continue;  // created below
      struct Live {
        std::string name, type;
        bool key = false;
      };
      std::map<std::string, Live> live;  // by lower-case name
      for (const auto& r : *rows) {
        live[Lower(r[0].value_or(""))] = {r[0].value_or(""), r[1].value_or(""), r[2].value_or("") == "PRI"};
      }
      std::string problem;
      for (const bool key : {true, false}) {
        for (const AggregateColumn& c : key ? t.key : t.columns) {
          const auto it = live.find(Lower(c.name));
          if (!problem.empty()) continue;
          if (it == live.end()) {
            problem = "has no column " + c.name + " (declared " + c.sql_type + ")";
          } else if (CanonicalColumnType(c.sql_type) != CanonicalColumnType(it->second.type)) {
            problem = "has column " + c.name + " as " + it->second.type + ", declared " + c.sql_type;
          } else if (it->second.key != key) {
            problem = "has column " + c.name + (key ? " outside its primary key, declared a key column"
                                                    : " in its primary key, declared a plain column");
          }
          if (it != live.end()) live.erase(it);
        }
      }
      if (problem.empty() && !live.empty()) {
        problem = "has column " + live.begin()->second.name + " (" + live.begin()->second.type +
                  "), which the config does not declare";
      }
      if (!problem.empty()) {
        return Unavailable(Context() + ": table " + t.name + suffix_ + " " + problem +
                           "; its definition changed: `sluice rebuild --sink " + cfg_.name +
                           "` recomputes the view with it (until then the view waits)");
      }
    }
    return Status::Ok();
  }

  // Applies the events at `which` (in order) in ONE transaction: reads the
  // view's offsets under a lock, calls the events at or below them stale
  // (unless the view rejected them: those run again), runs the code of the
  // rest, writes their operations, records rejections (those in `refused`
  // carry their reason in results already), and moves the offsets past
  // every event of `which`. Fills results; on failure everything is rolled
  // back (results are then filled again by the next call).
  Status Transact(std::span<const ChangeEvent> events, const std::vector<size_t>& which,
                  std::vector<EventResult>& results, const std::set<size_t>& refused) {
    const auto quote = [this](std::string& out, std::string_view s) { conn_->AppendQuoted(out, s); };
    if (auto begun = conn_->Execute("BEGIN"); !begun.ok()) return begun.status();
    Status st = TransactBody(events, which, results, refused, quote);
    if (!st.ok()) {
      (void)conn_->Execute("ROLLBACK");
      return st;
    }
    if (auto committed = conn_->Execute("COMMIT"); !committed.ok()) {
      // Whether it committed is unknown: the next attempt reads the offsets that hold.
      conn_.reset();
      return Unavailable(committed.status().message());
    }
    return Status::Ok();
  }

  // Run by an engine (TakeOver), the view writes a partition only while the
  // engine's lease of it is the one it was given: the lease rows are read
  // with a shared lock, so a takeover (which updates them) waits for this
  // transaction, and this one, started after a takeover, sees the new owner
  // and writes nothing. Unavailable when a lease moved: the engine drops the
  // partition at its next lease round.
  Status CheckLeases(const std::set<uint32_t>& partitions,
                     const std::function<void(std::string&, std::string_view)>& quote) {
    if (!fence_) return Status::Ok();
    std::string q = "SELECT partition_id, owner, token FROM " + leases_ + " WHERE scope=";
    quote(q, fence_->scope);
    q += " AND entity_type=";
    quote(q, cfg_.entity);
    q += " AND partition_id IN (";
    for (const uint32_t p : partitions) q += (q.back() == '(' ? "" : ",") + std::to_string(p);
    ASSIGN_OR_RETURN(auto rows, conn_->Query(q + ") LOCK IN SHARE MODE"));
    std::map<uint32_t, std::pair<std::string, uint64_t>> held;
    for (const auto& r : rows) {
      held[static_cast<uint32_t>(std::stoul(r[0].value_or("0")))] = {r[1].value_or(""),
                                                                      std::stoull(r[2].value_or("0"))};
    }
    for (const uint32_t p : partitions) {
      const auto mine = fence_->tokens.find(p);
      const auto now = held.find(p);
      if (mine != fence_->tokens.end() && now != held.end() && now->second.first == fence_->owner &&
          now->second.second == mine->second) {
        continue;
      }
      return Unavailable(Context() + ": partition " + std::to_string(p) + "'s lease is not this engine's any more (" +
                         (now == held.end() ? std::string("no lease")
                                            : "held by '" + now->second.first + "' under token " +
                                                  std::to_string(now->second.second)) +
                         (mine == fence_->tokens.end() ? std::string(", never given to this engine")
                                                       : ", this engine's token is " + std::to_string(mine->second)) +
                         "): nothing written");
    }
    return Status::Ok();
  }

  Status TransactBody(std::span<const ChangeEvent> events, const std::vector<size_t>& which,
                      std::vector<EventResult>& results, const std::set<size_t>& refused,
                      const std::function<void(std::string&, std::string_view)>& quote) {
    // Every partition of the batch has a row to lock: a READ COMMITTED
    // locking read of a missing row locks nothing, and two engines on a
    // fresh view would both apply.
    std::string rows = "INSERT IGNORE INTO " + offsets_table_ + " (entity_type, partition_id, event_id) VALUES ";
    std::set<uint32_t> partitions;
    for (size_t i : which) partitions.insert(events[i].partition);
    for (uint32_t p : partitions) {
      rows += rows.back() == ' ' ? "(" : ",(";
      quote(rows, cfg_.entity);
      rows += "," + std::to_string(p) + ",0)";
    }
    if (auto made = conn_->Execute(rows); !made.ok()) return made.status();
    std::string q = "SELECT partition_id, event_id FROM " + offsets_table_ + " WHERE entity_type=";
    quote(q, cfg_.entity);
    ASSIGN_OR_RETURN(auto offset_rows, conn_->Query(q + " FOR UPDATE"));
    RETURN_IF_ERROR(CheckLeases(partitions, quote));
    std::map<uint32_t, uint64_t> offsets;
    for (const auto& r : offset_rows) {
      offsets[static_cast<uint32_t>(std::stoul(r[0].value_or("0")))] = std::stoull(r[1].value_or("0"));
    }
    // The events past the offsets must be the view's next ones, without a
    // gap: otherwise moving the offsets would skip events never applied.
    std::map<uint32_t, uint64_t> expect;
    for (size_t i : which) {
      const ChangeEvent& e = events[i];
      const uint64_t at = offsets.count(e.partition) ? offsets[e.partition] : 0;
      if (e.event_id <= at) continue;
      uint64_t& next = expect.try_emplace(e.partition, at + 1).first->second;
      if (e.event_id != next) {
        return FailedPrecondition(
            Context() + ": partition " + std::to_string(e.partition) + " of the view is at event " +
            std::to_string(at) + ", so its next event is " + std::to_string(next) + ", not " +
            std::to_string(e.event_id) + ": the view's offsets lost events (`sluice rebuild --sink " + cfg_.name +
            "` recomputes it), or a dead letter was retried before the view reached it (it is applied then)");
      }
      ++next;
    }
    const auto seen = [&](const ChangeEvent& e) {
      const auto it = offsets.find(e.partition);
      return it != offsets.end() && e.event_id <= it->second;
    };
    std::string among;
    for (size_t i : which) {
      if (!seen(events[i])) continue;
      among += (among.empty() ? "(" : ",(") + std::to_string(events[i].partition) + "," +
               std::to_string(events[i].event_id) + ")";
    }
    std::set<std::pair<uint32_t, uint64_t>> rejected_before;
    if (!among.empty()) {
      std::string r = "SELECT partition_id, event_id FROM " + rejected_table_ + " WHERE entity_type=";
      quote(r, cfg_.entity);
      ASSIGN_OR_RETURN(auto rows, conn_->Query(r + " AND (partition_id, event_id) IN (" + among + ")"));
      for (const auto& row : rows) {
        rejected_before.emplace(static_cast<uint32_t>(std::stoul(row[0].value_or("0"))),
                                std::stoull(row[1].value_or("0")));
      }
    }
    // The code of what Prepare did not run, all at once.
    std::vector<const ChangeEvent*> unprepared;
    std::map<size_t, size_t> unprepared_at;  // event index -> index in `ran`
    for (size_t i : which) {
      const ChangeEvent& e = events[i];
      const bool applies = !seen(e) || rejected_before.count({e.partition, e.event_id}) > 0;
      if (applies && !refused.count(i) && dynamic_cast<const PreparedOps*>(e.prepared.get()) == nullptr) {
        unprepared_at[i] = unprepared.size();
        unprepared.push_back(&e);
      }
    }
    std::vector<PreparedOps> ran;
    if (!unprepared.empty()) ran = RunCode(*code_, unprepared);
    OpFold fold(options(), suffix_);
    std::map<uint32_t, uint64_t> next;
    std::vector<std::string> add_rejected, drop_rejected;  // rows of the statements below
    for (size_t i : which) {
      const ChangeEvent& e = events[i];
      uint64_t& hi = next[e.partition];
      hi = std::max(hi, e.event_id);
      const bool was_rejected = rejected_before.count({e.partition, e.event_id}) > 0;
      if (seen(e) && !was_rejected) {
        results[i] = {Outcome::kStale, {}};
        continue;
      }
      if (!refused.count(i)) {
        results[i] = {Outcome::kApplied, {}};
        const auto* prepared = dynamic_cast<const PreparedOps*>(e.prepared.get());
        if (prepared == nullptr) prepared = &ran[unprepared_at.at(i)];
        if (!prepared->rejected.empty()) {
          results[i] = {Outcome::kRejected, prepared->rejected};
        } else {
          std::string refused_why;
          RETURN_IF_ERROR(FoldEvent(fold, prepared->ops, &refused_why));
          if (!refused_why.empty()) results[i] = {Outcome::kRejected, "view code: " + code_->file() + ": " + refused_why};
        }
      }
      if (results[i].outcome == Outcome::kRejected) {
        if (!was_rejected) {
          std::string& row = add_rejected.emplace_back("(");
          quote(row, cfg_.entity);
          row += "," + std::to_string(e.partition) + "," + std::to_string(e.event_id) + ",";
          quote(row, results[i].reason);
          row += ')';
        }
        continue;
      }
      if (was_rejected) {
        drop_rejected.push_back("(" + std::to_string(e.partition) + "," + std::to_string(e.event_id) + ")");
      }
    }
    std::vector<std::string> statements = fold.Statements(quote);
    for (std::string& s : MultiRowStatements("INSERT IGNORE INTO " + rejected_table_ +
                                                 " (entity_type, partition_id, event_id, reason) VALUES ",
                                             add_rejected, "")) {
      statements.push_back(std::move(s));
    }
    std::string drop = "DELETE FROM " + rejected_table_ + " WHERE entity_type=";
    quote(drop, cfg_.entity);
    for (std::string& s : MultiRowStatements(drop + " AND (partition_id, event_id) IN (", drop_rejected, ")")) {
      statements.push_back(std::move(s));
    }
    std::string moved = "INSERT INTO " + offsets_table_ + " (entity_type, partition_id, event_id) VALUES ";
    bool first = true;
    for (const auto& [p, id] : next) {
      moved += first ? "(" : ",(";
      first = false;
      quote(moved, cfg_.entity);
      moved += "," + std::to_string(p) + "," + std::to_string(id) + ")";
    }
    statements.push_back(moved + " ON DUPLICATE KEY UPDATE event_id=GREATEST(event_id, VALUES(event_id))");
    for (const std::string& s : statements) {
      if (auto r = conn_->Execute(s); !r.ok()) return r.status();
    }
    return Status::Ok();
  }

  // Folds an event's operations; when their sums with the batch's earlier
  // ones would not fit a column, writes the fold so far (in the transaction)
  // and folds the event anew. A failed write is returned; `*refused` says
  // why the event's own operations do not fit (its dead letter), empty when
  // they were folded.
  // An event's operations, or why the code gave none.
  struct PreparedOps : PreparedEvent {
    std::string rejected;
    std::vector<Op> ops;
  };
  // Each event's operations (one entry into the code per run of events).
  std::vector<PreparedOps> RunCode(ViewCode& code, ViewCode::Events events) const {
    std::vector<handlers::JsValueOutcome> results = code.AggregateMany(events);
    std::vector<PreparedOps> out(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      handlers::JsValueOutcome& r = results[i];
      if (r.kind != handlers::JsOutcome::Kind::kApplied) {
        out[i].rejected = "view code: " + r.message;
      } else if (auto parsed = ParseOps(r.json, options()); !parsed.ok()) {
        out[i].rejected = "view code: " + code.file() + ": " + parsed.status().message();
      } else {
        out[i].ops = std::move(parsed).value();
      }
    }
    return out;
  }

  Status FoldEvent(OpFold& fold, const std::vector<Op>& ops, std::string* refused) {
    Status added = fold.Add(ops);
    if (added.code() == StatusCode::kResourceExhausted) {
      for (const std::string& s : fold.Statements([this](std::string& out, std::string_view v) {
             conn_->AppendQuoted(out, v);
           })) {
        if (auto r = conn_->Execute(s); !r.ok()) return r.status();
      }
      fold.Clear();
      added = fold.Add(ops);
    }
    refused->assign(added.ok() ? "" : added.message());
    return Status::Ok();
  }

  const config::SinkConfig cfg_;
  const sql::ConnectParams params_;
  const std::string leases_;  // `db`.sluice_leases of the entity type's server
  std::unique_ptr<ViewCode> code_;
  CodeAhead ahead_{*code_, "sink " + cfg_.name};  // Prepare's (the preparer's), of code_'s text
  const std::string shared_with_;  // another sink writing one of its tables ("" when none)
  const std::string shadow_of_;
  const std::string suffix_;  // after each declared table's name: "__rebuild" in a shadow
  const std::string offsets_table_, rejected_table_;  // quoted
  std::optional<TakenOver> fence_;  // the engine's leases (TakeOver); none: not fenced
  std::unique_ptr<sql::Connection> conn_;
  bool shadow_prepared_ = false;
};

}  // namespace

std::string AggregateOffsetsTable(const std::string& sink) { return OwnTable("vo", sink); }

// The storage server holding every partition of the sink's entity type.
Result<const config::MysqlConfig*> AggregateServer(const config::SinkConfig& sink, const config::Config& global) {
  const auto entity = global.entities.find(sink.entity);
  const std::string& name = global.ServerOf(sink.entity, 0);
  if (entity != global.entities.end()) {
    for (uint32_t p = 1; p < entity->second.partitions; ++p) {
      if (global.ServerOf(sink.entity, p) != name) {
        return InvalidArgument("sink " + sink.name + ": an aggregate view's entity type must be stored on one server, "
                               "and entities." + sink.entity + " spans several (storage across servers, "
                               "docs/deployment.md#storage-servers)");
      }
    }
  }
  const config::MysqlConfig* server = global.FindServer(name);
  if (server == nullptr) return InvalidArgument("sink " + sink.name + ": no storage server " + name);
  return server;
}

Result<std::unique_ptr<Sink>> MakeAggregateSink(const config::SinkConfig& sink, const config::Config& global) {
  const std::string context = "sink " + sink.name;
  const AggregateSinkOptions& o = sink.Options<AggregateSinkOptions>();
  if (o.tables.empty()) return InvalidArgument(context + ": an aggregate sink needs tables");
  if (sink.code.empty()) return InvalidArgument(context + ": an aggregate sink needs code");
  ASSIGN_OR_RETURN(auto code, ViewCode::LoadFor(sink, ViewCode::Purpose::kAggregate));
  // The view's tables and its offsets are written in one transaction, which
  // checks the partitions' leases: all on the server of the entity type.
  ASSIGN_OR_RETURN(const config::MysqlConfig* server, AggregateServer(sink, global));
  sql::ConnectParams p = sql::ParamsFrom(*server);
  if (!o.database.empty()) p.database = o.database;
  if (p.database.empty()) return InvalidArgument(context + ": no database for the view's tables");
  std::string leases = sql::QuoteIdent(server->database) + ".sluice_leases";
  // Another aggregate sink writing one of its tables (a view fed by several entity types).
  std::string shared_with;
  for (const config::SinkConfig& other : global.sinks) {
    if (other.name == sink.name || other.type != sink.type) continue;
    const AggregateSinkOptions& oo = other.Options<AggregateSinkOptions>();
    auto other_server = AggregateServer(other, global);
    if (!other_server.ok() || *other_server != server) continue;
    if ((oo.database.empty() ? server->database : oo.database) != p.database) continue;
    for (const AggregateTable& a : o.tables) {
      for (const AggregateTable& b : oo.tables) {
        if (Lower(a.name) == Lower(b.name) && shared_with.empty()) shared_with = other.name;
      }
    }
  }
  return std::unique_ptr<Sink>(new AggregateSink(sink, std::move(p), std::move(leases), std::move(code), shared_with));
}

}  // namespace sluice::connectors::aggregate
