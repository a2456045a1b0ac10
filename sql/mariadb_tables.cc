#include "sql/mariadb_tables.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/partitioner.h"
#include "sql/delta_states.h"
#include "sql/mariadb_session.h"
#include "sql/schema.h"

namespace sluice::sql {
namespace {

std::string Table(const std::string& type, uint32_t partition) {
  return QuoteIdent(EventTableName(type, partition));
}

// The pull loop's columns, in the order EventFromRow reads them.
constexpr const char* kReadColumns =
    "event_id, entity_id, version, deleted, state, command_name, command_id, "
    "CAST(UNIX_TIMESTAMP(committed_at) * 1000000 AS UNSIGNED), delta, archived";

EventRow EventFromRow(Row& r, size_t first) {
  EventRow e;
  e.event_id = U64(r[first]);
  e.entity_id = std::move(r[first + 1]).value_or("");
  e.version = U64(r[first + 2]);
  e.deleted = r[first + 3].value_or("0") != "0";
  e.archived = r[first + 9].value_or("0") != "0";
  e.delta = e.deleted || e.archived ? std::string() : std::move(r[first + 8]).value_or("");
  // A row with a delta has no state: DeltaStates fills it in. A stub has neither.
  e.state = e.deleted || e.archived || !e.delta.empty() ? std::string() : std::move(r[first + 4]).value_or("null");
  e.command_name = std::move(r[first + 5]).value_or("");
  e.command_id = std::move(r[first + 6]).value_or("");
  e.committed_at_us = static_cast<int64_t>(U64(r[first + 7]));
  return e;
}

// The latest event (kReadColumns) of each entity the derived table selects:
// `SELECT entity_id AS id, MAX(version) AS v FROM <table> [WHERE where]
// GROUP BY entity_id [tail]`, in entity_id order.
std::string LatestQuery(const std::string& type, uint32_t partition, const std::string& where,
                        const std::string& tail) {
  const std::string t = Table(type, partition);
  return std::string("SELECT ") + kReadColumns + " FROM " + t + " e JOIN (SELECT entity_id AS id, MAX(version) AS v FROM " +
         t + (where.empty() ? "" : " WHERE " + where) + " GROUP BY entity_id" + tail +
         ") m ON e.entity_id=m.id AND e.version=m.v ORDER BY entity_id";
}

std::vector<EventRow> EventsFromRows(std::vector<Row>& rows) {
  std::vector<EventRow> out;
  out.reserve(rows.size());
  for (auto& r : rows) out.push_back(EventFromRow(r, 0));
  return out;
}

// `SELECT [prefix]columns FROM <table> WHERE event_id > after ORDER BY event_id LIMIT limit`
std::string ReadQuery(const std::string& type, uint32_t partition, uint64_t after, uint32_t limit,
                      const std::string& prefix, EventLog::Columns columns) {
  return "SELECT " + prefix + kReadColumns + (columns == EventLog::Columns::kFull ? ", request, response" : "") +
         " FROM " + Table(type, partition) + " WHERE event_id > " + std::to_string(after) + " ORDER BY event_id LIMIT " +
         std::to_string(limit);
}

// EventFromRow, and request and response after kReadColumns when read.
EventRow EventWithBodiesFromRow(Row& r, size_t first, EventLog::Columns columns) {
  EventRow e = EventFromRow(r, first);
  if (columns == EventLog::Columns::kFull) {
    e.request = std::move(r.at(first + 10)).value_or(e.archived ? "" : "null");
    e.response = std::move(r.at(first + 11)).value_or(e.archived ? "" : "null");
  }
  return e;
}

class MariaDbAppend : public EventAppend {
 public:
  MariaDbAppend(const std::string& type, uint32_t partition, Connection* quoting)
      : statement_("INSERT INTO " + Table(type, partition) + " " + kEventInsertColumns + " VALUES "),
        quoting_(quoting) {}

  bool TryAdd(const NewEvent& e, size_t max_bytes) override {
    row_.clear();
    row_ += rows_ == 0 ? "(" : ",(";
    row_ += std::to_string(e.event_id);
    row_ += ',';
    Quote(row_, e.entity_id);
    row_ += ',';
    row_ += std::to_string(e.version);
    row_ += ',';
    Quote(row_, e.command_id);
    row_ += ',';
    Quote(row_, e.command_name);
    row_ += ',';
    row_ += e.expected_version ? std::to_string(*e.expected_version) : "NULL";
    row_ += ',';
    Quote(row_, e.request);
    row_ += ',';
    Quote(row_, e.response);
    row_ += ',';
    if (e.deleted) {
      row_ += "NULL,NULL,1)";
    } else if (!e.delta.empty()) {
      row_ += "NULL,";
      Quote(row_, e.delta);
      row_ += ",0)";
    } else {
      Quote(row_, e.state);
      row_ += ",NULL,0)";
    }
    if (rows_ > 0 && statement_.size() + row_.size() > max_bytes) return false;
    statement_ += row_;
    ++rows_;
    return true;
  }
  size_t rows() const override { return rows_; }
  const std::string& statement() const { return statement_; }
  bool quoted() const { return quoting_ != nullptr; }

 private:
  void Quote(std::string& out, std::string_view s) {
    if (quoting_ != nullptr) {
      quoting_->AppendQuoted(out, s);
      return;
    }
    // No session to escape with: Append() refuses this append.
    (void)s;
    out += "NULL";
  }

  std::string statement_;
  std::string row_;
  size_t rows_ = 0;
  Connection* quoting_;
};

class MariaDbEventLog : public EventLog {
 public:
  explicit MariaDbEventLog(ConnectParams params) : session_(std::move(params)) {}
  explicit MariaDbEventLog(Connection& conn) : session_(conn) {}

  bool healthy() const override { return session_.healthy(); }
  Status Open() override { return session_.Get().status(); }

  Result<uint64_t> Head(const std::string& type, uint32_t partition) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(auto rows, c->Query("SELECT COALESCE(MAX(event_id),0) FROM " + Table(type, partition)));
    return U64(rows.at(0).at(0));
  }

  Result<std::map<uint32_t, uint64_t>> Heads(const std::string& type,
                                             const std::vector<uint32_t>& partitions) override {
    std::map<uint32_t, uint64_t> out;
    if (partitions.empty()) return out;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    // MAX(event_id) is read off the primary key's last entry: one index dive per table.
    std::string q;
    for (const uint32_t p : partitions) {
      if (!q.empty()) q += " UNION ALL ";
      q += "SELECT " + std::to_string(p) + ",COALESCE(MAX(event_id),0) FROM " + Table(type, p);
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    for (const auto& r : rows) out[static_cast<uint32_t>(U64(r.at(0)))] = U64(r.at(1));
    return out;
  }

  Result<std::map<uint32_t, double>> SecondsSinceCommit(
      const std::string& type, const std::vector<std::pair<uint32_t, uint64_t>>& events) override {
    std::map<uint32_t, double> out;
    if (events.empty()) return out;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    // A primary-key lookup per table, all of them in one statement.
    std::string q;
    for (const auto& [p, event_id] : events) {
      if (!q.empty()) q += " UNION ALL ";
      q += "SELECT " + std::to_string(p) + ",TIMESTAMPDIFF(MICROSECOND, committed_at, NOW(6)) FROM " + Table(type, p) +
           " WHERE event_id=" + std::to_string(event_id);
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    for (const auto& r : rows) {
      if (r.at(1)) out[static_cast<uint32_t>(U64(r.at(0)))] = std::max(0.0, std::stod(*r[1]) / 1e6);
    }
    return out;
  }

  Result<std::map<uint32_t, std::vector<EventRow>>> ReadAfter(const std::string& type,
                                                              const std::vector<std::pair<uint32_t, uint64_t>>& from,
                                                              uint32_t limit, Columns columns) override {
    std::map<uint32_t, std::vector<EventRow>> out;
    if (from.empty()) return out;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    if (from.size() == 1) {
      ASSIGN_OR_RETURN(auto rows, c->Query(ReadQuery(type, from[0].first, from[0].second, limit, "", columns)));
      auto& events = out[from[0].first];
      events.reserve(rows.size());
      for (auto& r : rows) events.push_back(EventWithBodiesFromRow(r, 0, columns));
      RETURN_IF_ERROR(Resolve(*c, type, from[0].first, events));
      return out;
    }
    // One ordered, limited SELECT per partition in a UNION ALL: one round trip.
    std::string q;
    for (const auto& [partition, after] : from) {
      if (!q.empty()) q += " UNION ALL ";
      q += '(' + ReadQuery(type, partition, after, limit, std::to_string(partition) + ", ", columns) + ')';
      out[partition];
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    for (auto& r : rows) {
      const uint32_t partition = static_cast<uint32_t>(std::stoul(r[0].value_or("0")));
      auto it = out.find(partition);
      if (it == out.end()) return Internal("the union of event reads returned partition " + std::to_string(partition));
      it->second.push_back(EventWithBodiesFromRow(r, 1, columns));
    }
    const auto by_event_id = [](const EventRow& a, const EventRow& b) { return a.event_id < b.event_id; };
    // Each part is ordered; a UNION ALL does not promise to keep that order.
    for (auto& [partition, list] : out) {
      if (!std::is_sorted(list.begin(), list.end(), by_event_id)) std::sort(list.begin(), list.end(), by_event_id);
      RETURN_IF_ERROR(Resolve(*c, type, partition, list));
    }
    return out;
  }

  Result<std::vector<EventRow>> LatestOf(const std::string& type, uint32_t partition,
                                         const std::vector<std::string>& ids) override {
    if (ids.empty()) return std::vector<EventRow>{};
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(auto rows, c->Query(LatestQuery(type, partition, "entity_id IN (" + InList(*c, ids) + ")", "")));
    return Resolved(*c, type, partition, EventsFromRows(rows));
  }

  Result<std::vector<EventRow>> LatestAfter(const std::string& type, uint32_t partition, const std::string& after_id,
                                            uint32_t limit) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string where;
    if (!after_id.empty()) {
      where = "entity_id > ";
      c->AppendQuoted(where, after_id);
    }
    const std::string tail = limit == 0 ? "" : " ORDER BY entity_id LIMIT " + std::to_string(limit);
    ASSIGN_OR_RETURN(auto rows, c->Query(LatestQuery(type, partition, where, tail)));
    return Resolved(*c, type, partition, EventsFromRows(rows));
  }

  Result<std::map<std::string, uint64_t>> LatestVersions(const std::string& type, uint32_t partition,
                                                         const std::vector<std::string>& ids) override {
    std::map<std::string, uint64_t> out;
    if (ids.empty()) return out;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(auto rows, c->Query("SELECT entity_id, MAX(version) FROM " + Table(type, partition) +
                                         " WHERE entity_id IN (" + InList(*c, ids) + ") GROUP BY entity_id"));
    for (const auto& r : rows) out[r.at(0).value_or("")] = U64(r.at(1));
    return out;
  }

  Result<std::vector<EventRow>> FindCommands(const std::string& type, uint32_t partition,
                                             const std::vector<std::pair<std::string, std::string>>& commands) override {
    std::vector<EventRow> out;
    if (commands.empty()) return out;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q =
        "SELECT entity_id, command_id, version, event_id, command_name, expected_version, request, response, archived "
        "FROM " + Table(type, partition) + " WHERE ";
    for (size_t k = 0; k < commands.size(); ++k) {
      if (k > 0) q += " OR ";
      q += "(entity_id=";
      c->AppendQuoted(q, commands[k].first);
      q += " AND command_id=";
      c->AppendQuoted(q, commands[k].second);
      q += ')';
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    out.reserve(rows.size());
    for (auto& r : rows) {
      EventRow e;
      e.entity_id = std::move(r.at(0)).value_or("");
      e.command_id = std::move(r.at(1)).value_or("");
      e.version = U64(r.at(2));
      e.event_id = U64(r.at(3));
      e.command_name = std::move(r.at(4)).value_or("");
      if (r.at(5)) e.expected_version = std::stoull(*r[5]);
      e.request = std::move(r.at(6)).value_or("");
      e.response = std::move(r.at(7)).value_or("null");
      e.archived = r.at(8).value_or("0") != "0";
      out.push_back(std::move(e));
    }
    return out;
  }

  Result<std::vector<EventRow>> ByIds(const std::string& type, uint32_t partition,
                                      const std::vector<uint64_t>& event_ids) override {
    if (event_ids.empty()) return std::vector<EventRow>{};
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string in;
    for (uint64_t id : event_ids) {
      if (!in.empty()) in += ',';
      in += std::to_string(id);
    }
    ASSIGN_OR_RETURN(auto rows, c->Query(std::string("SELECT ") + kReadColumns + ", request, response FROM " +
                                         Table(type, partition) + " WHERE event_id IN (" + in + ") ORDER BY event_id"));
    std::vector<EventRow> out;
    out.reserve(rows.size());
    for (auto& r : rows) out.push_back(EventWithBodiesFromRow(r, 0, Columns::kFull));
    return Resolved(*c, type, partition, std::move(out));
  }

  Result<std::vector<EventRow>> AtVersions(const std::string& type, uint32_t partition,
                                           const std::vector<std::pair<std::string, uint64_t>>& keys) override {
    if (keys.empty()) return std::vector<EventRow>{};
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q = "SELECT entity_id, version, deleted, state, delta, archived, event_id FROM " + Table(type, partition) +
                    " WHERE (entity_id, version) IN (";
    for (size_t i = 0; i < keys.size(); ++i) {
      q += i == 0 ? "(" : ",(";
      c->AppendQuoted(q, keys[i].first);
      q += ',' + std::to_string(keys[i].second) + ')';
    }
    q += ')';
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    std::vector<EventRow> out;
    out.reserve(rows.size());
    for (auto& r : rows) out.push_back(ChainRowFrom(r));
    return Resolved(*c, type, partition, std::move(out));
  }

  Result<std::vector<EventRow>> History(const std::string& type, uint32_t partition, const std::string& entity_id,
                                        uint64_t after_version, uint32_t limit) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q = std::string("SELECT ") + kReadColumns + ", request, response FROM " + Table(type, partition) +
                    " WHERE entity_id=";
    c->AppendQuoted(q, entity_id);
    q += " AND version > " + std::to_string(after_version) + " ORDER BY version LIMIT " + std::to_string(limit);
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    std::vector<EventRow> out;
    out.reserve(rows.size());
    for (auto& r : rows) out.push_back(EventWithBodiesFromRow(r, 0, Columns::kFull));
    return Resolved(*c, type, partition, std::move(out));
  }

  std::unique_ptr<EventAppend> NewAppend(const std::string& type, uint32_t partition) override {
    auto c = session_.Get();
    return std::make_unique<MariaDbAppend>(type, partition, c.ok() ? *c : nullptr);
  }

  Status Append(EventAppend& append) override {
    if (append.rows() == 0) return Status::Ok();
    auto& a = static_cast<MariaDbAppend&>(append);
    if (!a.quoted()) return Unavailable("main storage was unreachable when the append was built");
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    // One statement in autocommit: one transaction.
    return c->Execute(a.statement()).status();
  }

  Status Stage(EventAppend& append) override {
    if (append.rows() == 0) return Status::Ok();
    auto& a = static_cast<MariaDbAppend&>(append);
    if (!a.quoted()) {
      Rollback();
      return Unavailable("main storage was unreachable when the append was built");
    }
    if (staged_ && !session_.healthy()) {
      staged_ = false;
      return Unavailable("the session of the staged appends was lost");
    }
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    if (!staged_) RETURN_IF_ERROR(c->Execute("START TRANSACTION").status());
    if (Status st = c->Execute(a.statement()).status(); !st.ok()) {
      // A duplicate key leaves the transaction open, a deadlock has ended it.
      staged_ = false;
      if (c->healthy()) (void)c->Execute("ROLLBACK");
      // The session lost at the ROLLBACK: an outage, whatever the INSERT said.
      if (!c->healthy() && st.code() != StatusCode::kUnavailable) return Unavailable(st.message());
      return st;
    }
    staged_ = true;
    return Status::Ok();
  }

  Status Commit() override {
    if (!staged_) return Status::Ok();
    staged_ = false;
    // Never on a new session: what was staged went with the old one.
    if (!session_.healthy()) return Unavailable("the session of the staged appends was lost before their COMMIT");
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    Status st = c->Execute("COMMIT").status();
    // A COMMIT refused with the session still up (a deadlock has ended the
    // transaction already): nothing of it may ride on a later COMMIT.
    if (!st.ok() && c->healthy()) (void)c->Execute("ROLLBACK");
    // The session lost at the ROLLBACK: an outage, whatever the COMMIT said.
    if (!st.ok() && !c->healthy() && st.code() != StatusCode::kUnavailable) return Unavailable(st.message());
    return st;
  }

  void Rollback() override {
    if (!staged_) return;
    staged_ = false;
    if (!session_.healthy()) return;  // the server rolled it back with the session
    if (auto c = session_.Get(); c.ok()) (void)(*c)->Execute("ROLLBACK");
  }

 private:
  static std::string InList(Connection& c, const std::vector<std::string>& ids) {
    std::string in;
    for (const auto& id : ids) {
      if (!in.empty()) in += ',';
      c.AppendQuoted(in, id);
    }
    return in;
  }

  // A row of `entity_id, version, deleted, state, delta[, archived, event_id]`.
  static EventRow ChainRowFrom(Row& r) {
    EventRow e;
    e.entity_id = std::move(r[0]).value_or("");
    e.version = U64(r[1]);
    e.deleted = r[2].value_or("0") != "0";
    e.archived = r.size() > 5 && r[5].value_or("0") != "0";
    if (r.size() > 6) e.event_id = U64(r[6]);
    e.delta = e.deleted || e.archived ? std::string() : std::move(r[4]).value_or("");
    e.state = e.deleted || e.archived || !e.delta.empty() ? std::string() : std::move(r[3]).value_or("null");
    return e;
  }

  // The full state of every row of a read that stored a delta (DeltaStates):
  // the chains it needs come in one query, a part per entity, each from the
  // entity's nearest snapshot (a row without a delta) at or below the
  // version wanted: an index range on uk_entity_version.
  Status Resolve(Connection& c, const std::string& type, uint32_t partition, std::vector<EventRow>& rows) {
    return deltas_.Resolve(type, partition, rows, [&](const std::vector<std::pair<std::string, uint64_t>>& want)
                                                      -> Result<std::vector<EventRow>> {
      const std::string t = Table(type, partition);
      std::string q;
      for (const auto& [id, version] : want) {
        std::string quoted;
        c.AppendQuoted(quoted, id);
        const std::string v = std::to_string(version);
        if (!q.empty()) q += " UNION ALL ";
        q += "(SELECT entity_id, version, deleted, state, delta FROM " + t + " WHERE entity_id=" + quoted +
             " AND version <= " + v + " AND version >= (SELECT COALESCE(MAX(version), 0) FROM " + t +
             " WHERE entity_id=" + quoted + " AND version <= " + v + " AND delta IS NULL AND archived=0))";
      }
      ASSIGN_OR_RETURN(auto found, c.Query(q));
      std::vector<EventRow> out;
      out.reserve(found.size());
      for (auto& r : found) out.push_back(ChainRowFrom(r));
      return out;
    });
  }
  Result<std::vector<EventRow>> Resolved(Connection& c, const std::string& type, uint32_t partition,
                                         std::vector<EventRow> rows) {
    RETURN_IF_ERROR(Resolve(c, type, partition, rows));
    return rows;
  }

  Session session_;
  DeltaStates deltas_;
  bool staged_ = false;  // a transaction with a staged append is open
};

class MariaDbOffsetTable : public OffsetTable {
 public:
  explicit MariaDbOffsetTable(ConnectParams params) : session_(std::move(params)) {}

  Result<std::map<uint32_t, OffsetRow>> Load(const std::string& sink, const std::string& type) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q =
        "SELECT partition_id, event_id, applied, stale, dead_lettered, state, last_error FROM sluice_offsets WHERE "
        "sink=";
    c->AppendQuoted(q, sink);
    q += " AND entity_type=";
    c->AppendQuoted(q, type);
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    std::map<uint32_t, OffsetRow> out;
    for (const auto& r : rows) {
      OffsetRow p;
      p.event_id = U64(r.at(1));
      p.applied = U64(r.at(2));
      p.stale = U64(r.at(3));
      p.dead_lettered = U64(r.at(4));
      p.state = r.at(5).value_or("running");
      p.last_error = r.at(6).value_or("");
      out[static_cast<uint32_t>(std::stoul(r.at(0).value_or("0")))] = std::move(p);
    }
    return out;
  }

  Status Save(const std::string& sink, const std::string& type, const std::map<uint32_t, OffsetRow>& rows) override {
    if (rows.empty()) return Status::Ok();
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    return SaveOn(*c, sink, type, rows);
  }

  Result<std::set<uint32_t>> SaveFenced(const std::string& sink, const std::string& type,
                                        const std::map<uint32_t, OffsetRow>& rows, const Fence& fence) override {
    std::set<uint32_t> refused;
    if (rows.empty()) return refused;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    if (!leases_ready_) {
      RETURN_IF_ERROR(c->Execute(kLeasesDdl).status());
      leases_ready_ = true;
    }
    std::vector<uint32_t> partitions;
    for (const auto& [p, row] : rows) partitions.push_back(p);
    RETURN_IF_ERROR(InTransaction(*c, [&]() -> Status {
      // The lease rows, locked: a takeover's UPDATE waits for this commit.
      ASSIGN_OR_RETURN(auto held, c->Query("SELECT partition_id, owner, token FROM sluice_leases WHERE " +
                                           LeaseKey(*c, fence.scope, type) + " AND partition_id IN (" +
                                           PartitionList(partitions) + ") FOR UPDATE"));
      std::map<uint32_t, OffsetRow> allowed;
      for (const auto& r : held) {
        const uint32_t p = static_cast<uint32_t>(U64(r.at(0)));
        const auto token = fence.tokens.find(p);
        if (r.at(1).value_or("") == fence.owner && token != fence.tokens.end() && U64(r.at(2)) == token->second) {
          allowed.emplace(p, rows.at(p));
        }
      }
      refused.clear();
      for (const auto& [p, row] : rows) {
        if (!allowed.count(p)) refused.insert(p);
      }
      if (allowed.empty()) return Status::Ok();
      return SaveOn(*c, sink, type, allowed);
    }));
    return refused;
  }

 private:
  static Status SaveOn(Connection& conn, const std::string& sink, const std::string& type,
                       const std::map<uint32_t, OffsetRow>& rows) {
    Connection* c = &conn;
    std::string q =
        "INSERT INTO sluice_offsets (sink, entity_type, partition_id, event_id, applied, stale, dead_lettered, state, "
        "last_error) VALUES ";
    bool first = true;
    for (const auto& [partition, p] : rows) {
      q += first ? "(" : ",(";
      first = false;
      c->AppendQuoted(q, sink);
      q += ',';
      c->AppendQuoted(q, type);
      q += ',' + std::to_string(partition) + ',' + std::to_string(p.event_id) + ',' + std::to_string(p.applied) +
           ',' + std::to_string(p.stale) + ',' + std::to_string(p.dead_lettered) + ',';
      c->AppendQuoted(q, p.state);
      q += ',';
      if (p.last_error.empty()) {
        q += "NULL";
      } else {
        c->AppendQuoted(q, p.last_error.substr(0, 2000));
      }
      q += ')';
    }
    q += " ON DUPLICATE KEY UPDATE event_id=VALUES(event_id), applied=VALUES(applied), stale=VALUES(stale),"
         " dead_lettered=VALUES(dead_lettered), state=VALUES(state), last_error=VALUES(last_error),"
         " updated_at=CURRENT_TIMESTAMP(6)";
    return c->Execute(q).status();
  }

 public:
  Status Delete(const std::string& sink, const std::string& type) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q = "DELETE FROM sluice_offsets WHERE sink=";
    c->AppendQuoted(q, sink);
    q += " AND entity_type=";
    c->AppendQuoted(q, type);
    return c->Execute(q).status();
  }

 private:
  Session session_;
  bool leases_ready_ = false;  // sluice_leases made (a database from before it)
};

class MariaDbDeadLetterTable : public DeadLetterTable {
 public:
  explicit MariaDbDeadLetterTable(ConnectParams params) : session_(std::move(params)) {}

  Status Add(const DeadLetter& d) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q =
        "INSERT IGNORE INTO sluice_dead_letters (sink, entity_type, partition_id, event_id, entity_id, version, "
        "error) VALUES (";
    c->AppendQuoted(q, d.sink);
    q += ',';
    c->AppendQuoted(q, d.entity_type);
    q += ',' + std::to_string(d.partition) + ',' + std::to_string(d.event_id) + ',';
    c->AppendQuoted(q, d.entity_id);
    q += ',' + std::to_string(d.version) + ',';
    c->AppendQuoted(q, d.error.substr(0, 4000));
    q += ')';
    return c->Execute(q).status();
  }

  Result<std::set<std::pair<uint32_t, uint64_t>>> Among(
      const std::string& sink, const std::string& type,
      const std::vector<std::pair<uint32_t, uint64_t>>& events) override {
    std::set<std::pair<uint32_t, uint64_t>> out;
    if (events.empty()) return out;
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    // By the unique key (sink, entity_type, partition_id, event_id).
    std::string q = "SELECT partition_id, event_id FROM sluice_dead_letters WHERE sink=";
    c->AppendQuoted(q, sink);
    q += " AND entity_type=";
    c->AppendQuoted(q, type);
    q += " AND (partition_id, event_id) IN (";
    for (size_t i = 0; i < events.size(); ++i) {
      q += (i > 0 ? ",(" : "(") + std::to_string(events[i].first) + "," + std::to_string(events[i].second) + ")";
    }
    q += ")";
    ASSIGN_OR_RETURN(auto rows, c->Query(q));
    for (const auto& r : rows) out.emplace(static_cast<uint32_t>(std::stoul(r.at(0).value_or("0"))), U64(r.at(1)));
    return out;
  }

  Result<std::vector<FiledDeadLetter>> List(const DeadLetterSelection& which) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(auto rows, c->Query("SELECT id, sink, entity_type, partition_id, event_id, entity_id, version, "
                                         "error, created_at, resolved_at, COALESCE(resolution,'') FROM "
                                         "sluice_dead_letters WHERE " +
                                         Where(*c, which) + " ORDER BY id"));
    std::vector<FiledDeadLetter> out;
    out.reserve(rows.size());
    for (auto& r : rows) {
      FiledDeadLetter f;
      f.id = U64(r.at(0));
      f.letter.sink = std::move(r.at(1)).value_or("");
      f.letter.entity_type = std::move(r.at(2)).value_or("");
      f.letter.partition = static_cast<uint32_t>(U64(r.at(3)));
      f.letter.event_id = U64(r.at(4));
      f.letter.entity_id = std::move(r.at(5)).value_or("");
      f.letter.version = U64(r.at(6));
      f.letter.error = std::move(r.at(7)).value_or("");
      f.created_at = std::move(r.at(8)).value_or("");
      f.resolved_at = std::move(r.at(9));
      f.resolution = std::move(r.at(10)).value_or("");
      out.push_back(std::move(f));
    }
    return out;
  }

  Result<uint64_t> Count(const DeadLetterSelection& which) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    ASSIGN_OR_RETURN(auto rows, c->Query("SELECT COUNT(*) FROM sluice_dead_letters WHERE " + Where(*c, which)));
    return U64(rows.at(0).at(0));
  }

  Result<uint64_t> Resolve(const DeadLetterSelection& which, std::string_view resolution) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    DeadLetterSelection unresolved = which;
    unresolved.unresolved_only = true;
    std::string q = "UPDATE sluice_dead_letters SET resolved_at=NOW(6), resolution=";
    c->AppendQuoted(q, resolution);
    return c->Execute(q + " WHERE " + Where(*c, unresolved));
  }

  Status SetError(uint64_t id, std::string_view error) override {
    ASSIGN_OR_RETURN(Connection * c, session_.Get());
    std::string q = "UPDATE sluice_dead_letters SET error=";
    c->AppendQuoted(q, error.substr(0, 4000));
    return c->Execute(q + " WHERE id=" + std::to_string(id)).status();
  }

 private:
  // The WHERE condition of a selection.
  static std::string Where(Connection& c, const DeadLetterSelection& which) {
    std::string w = which.unresolved_only ? "resolved_at IS NULL" : "1=1";
    if (which.sink) {
      w += " AND sink=";
      c.AppendQuoted(w, *which.sink);
    }
    if (which.id) w += " AND id=" + std::to_string(*which.id);
    return w;
  }

  Session session_;
};

}  // namespace

std::unique_ptr<EventLog> EventLogOn(Connection& conn) { return std::make_unique<MariaDbEventLog>(conn); }

std::unique_ptr<EventLog> MariaDbStorage::OpenEventLog() { return std::make_unique<MariaDbEventLog>(params_); }
std::unique_ptr<OffsetTable> MariaDbStorage::OpenOffsets() { return std::make_unique<MariaDbOffsetTable>(params_); }
std::unique_ptr<DeadLetterTable> MariaDbStorage::OpenDeadLetters() {
  return std::make_unique<MariaDbDeadLetterTable>(params_);
}

}  // namespace sluice::sql
