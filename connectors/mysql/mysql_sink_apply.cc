#include "connectors/mysql/mysql_sink_impl.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <thread>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/json.h"

namespace sluice::connectors::mysql {
namespace {

void AppendUint(std::string& out, uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

std::string RefusalText(const Status& refused) {
  // The upsert's first assignment sets `id` NULL on a clash with another
  // entity's row (see the constructor).
  if (sql::MysqlErrorCode(refused) == 1048 && refused.message().find("'id'") != std::string::npos) {
    return "another entity's row holds the same value in a unique key of the table (" + refused.message() + ")";
  }
  return refused.message();
}

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
  // Each event alone, read rather than guessed: a refusal is then decided on
  // the row as it is (an event older than its row is stale, not rejected).
  for (size_t i = 0; i < chunk.size(); ++i) {
    const Status one = ApplyInTransaction(lane, chunk.subspan(i, 1), results.subspan(i, 1), false);
    if (one.ok()) continue;
    if (!IsDataError(one)) return Fail(one, "applying event " + std::to_string(chunk[i].event->event_id));
    results[i] = {Outcome::kRejected, RefusalText(one)};
  }
  return Status::Ok();
}

Status MysqlSink::BeginAndLockRows(std::unique_ptr<sql::Connection>& conn, const std::string& select,
                                   const std::function<void(const std::string&, std::optional<uint64_t>)>& each) {
  if (auto begun = conn->Execute("BEGIN"); !begun.ok()) return begun.status();
  if (select.empty()) return Status::Ok();
  auto rows = conn->Query(select);
  if (!rows.ok()) {
    Rollback(conn);
    return rows.status();
  }
  for (const sql::Row& row : *rows) {
    if (row.size() < 2 || !row[0]) continue;
    // id is VARBINARY: only the exact bytes asked for come back.
    each(*row[0], ParseUint(row[1]));
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
                                     bool guess) {
  std::unique_ptr<sql::Connection>& conn = Lane(lane);
  VersionHints& hints = hints_[lane];
  guess = guess && hints.enabled();
  std::optional<bool> guess_absent;  // asked once, when the chunk has a candidate
  if (!conn || !conn->healthy()) return Unavailable(Context() + ": the MySQL connection was lost");
  // How an id's row is known: read (SELECT ... FOR UPDATE), from the lane's
  // hint, or guessed absent (its first version is 1). Also the order of the
  // statements that write them.
  enum Kind : uint8_t { kRead = 0, kHinted = 1, kAbsent = 2 };
  // Per distinct id: the version the view holds, then as decided so far,
  // and the index of the last applied event, the one written.
  struct IdState {
    std::optional<uint64_t> stored;
    std::optional<uint64_t> version;
    size_t winner = SIZE_MAX;
    size_t events = 0;
    uint64_t first_version = 0;
    Kind kind = kRead;  // kHinted: `stored` is the lane's hint
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
  // An id without a hint whose first event in the chunk is version 1 (its
  // creation: versions are never reused) is not read either: it is guessed
  // to have no row and is written by a plain INSERT, which fails on the
  // primary key when a row is there after all (a replay, the push path
  // first); then the chunk is decided again with every id read.
  std::string sql;
  sql.reserve(select_prefix_.size() + 16 + chunk.size() * 8);
  sql += select_prefix_;
  size_t to_read = 0;
  size_t hinted = 0;
  for (auto& [key, id] : ids) {
    if (guess) {
      const auto hint = hints.Find(key);
      if (id.events == 1 && hint && *hint < id.first_version) {
        id.kind = kHinted;
        id.stored = *hint;
        ++hinted;
        continue;
      }
      if (!hint && id.first_version == 1) {
        if (!guess_absent) guess_absent = absent_[lane].Allowed();
        if (*guess_absent) {
          id.kind = kAbsent;
          continue;
        }
      }
    }
    if (to_read++ > 0) sql += ',';
    conn->AppendQuoted(sql, key);
  }
  sql += ") FOR UPDATE";

  RETURN_IF_ERROR(BeginAndLockRows(conn, to_read > 0 ? sql : std::string(),
                                   [&](const std::string& id, std::optional<uint64_t> version) {
                                     if (auto it = ids.find(id); it != ids.end() && it->second.kind == kRead) {
                                       it->second.stored = version;
                                     }
                                   }));

  // Decide in event order; when an event to be written turns out to have an
  // unreadable state it is rejected and the decisions are made again without
  // it. Unless its id was guessed: read, it might have been stale instead.
  std::vector<size_t> winners;
  winners.reserve(ids.size());
  bool unverified = false;
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
      const IdState& id = ids.find(chunk[w].event->entity_id)->second;
      w = id.winner;
      if (Extract(chunk[w], results[w])) continue;
      decided = false;
      unverified = unverified || id.kind != kRead;
    }
  }
  // Decides the chunk again with every id read, after a guess proved wrong
  // (`counter`) or could not be checked.
  const auto read_instead = [&](std::atomic<uint64_t>* counter) -> Status {
    if (counter != nullptr) counter->fetch_add(1, std::memory_order_relaxed);
    Rollback(conn);
    if (!conn) return Unavailable(Context() + ": the MySQL connection was lost");
    for (const auto& [key, id] : ids) {
      if (id.kind == kHinted) hints.Forget(key);
    }
    for (PreparedEvent& p : chunk) p.rejected = false;  // decided under the guess
    return ApplyInTransaction(lane, chunk, results, false);
  };
  if (unverified) return read_instead(nullptr);
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
  // Three statements at most: the rows that were read, the hinted ones,
  // the ones guessed absent. The hinted rows are kept apart because only
  // their affected-row count proves anything: a read row the SELECT did not
  // find is not locked (READ COMMITTED takes no gap locks), so a concurrent
  // insert may change its count either way. The absent ones get no ON
  // DUPLICATE KEY clause: a row that is there fails the statement.
  // Each statement's rows in primary key order, like the locks.
  std::vector<Kind> kind_of(chunk.size(), kRead);
  for (const size_t w : winners) kind_of[w] = ids.find(chunk[w].event->entity_id)->second.kind;
  std::sort(winners.begin(), winners.end(), [&](size_t a, size_t b) {
    return std::tie(kind_of[a], chunk[a].event->entity_id) < std::tie(kind_of[b], chunk[b].event->entity_id);
  });
  const auto hinted_begin =
      std::partition_point(winners.begin(), winners.end(), [&](size_t w) { return kind_of[w] == kRead; });
  const auto absent_begin =
      std::partition_point(hinted_begin, winners.end(), [&](size_t w) { return kind_of[w] != kAbsent; });
  const std::span<const size_t> rows_of[] = {{winners.begin(), hinted_begin}, {hinted_begin, absent_begin},
                                             {absent_begin, winners.end()}};
  const auto write = [&](std::span<const size_t> rows, bool upsert) -> Result<uint64_t> {
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
    if (upsert) sql += upsert_suffix_;
    if (sql.size() > max_statement_bytes_) {
      return InvalidArgument("the row needs a statement of " + std::to_string(sql.size()) +
                             " bytes, more than the server's max_allowed_packet allows");
    }
    return conn->Execute(sql);
  };
  for (const Kind kind : {kRead, kHinted, kAbsent}) {
    const std::span<const size_t> rows = rows_of[kind];
    if (rows.empty()) continue;
    auto written = write(rows, kind != kAbsent);
    if (!written.ok()) {
      // A guessed row there after all: a duplicate on the primary key. Any
      // other refusal goes back as a data error, and ApplyChunk's replay
      // decides each event on its row as read (a stale replay stays stale).
      if (kind == kAbsent && sql::DuplicateKeyName(written.status()) == "PRIMARY") {
        absent_[lane].Wrong();
        return read_instead(&wrong_inserts_);
      }
      Rollback(conn);
      return written.status();
    }
    if (kind != kHinted) continue;
    // A hinted row exists (the sink saw it committed), and the row lock of
    // the upsert makes its count exact: 2 when it still held an older
    // version and took the event; 0 (1 with CLIENT_FOUND_ROWS) when someone
    // wrote a newer version; 1 when the row was deleted. So the sum is 2 per
    // row only when every guess was right.
    if (*written != 2 * rows.size()) return read_instead(&wrong_guesses_);
  }
  if (auto committed = conn->Execute("COMMIT"); !committed.ok()) {
    Rollback(conn);
    for (const auto& [key, id] : ids) hints.Forget(key);
    return committed.status();
  }
  remember();
  reads_skipped_.fetch_add(hinted, std::memory_order_relaxed);
  if (!rows_of[kAbsent].empty()) {
    absent_[lane].Right();
    inserted_unread_.fetch_add(rows_of[kAbsent].size(), std::memory_order_relaxed);
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
          chunk_results[i] = {Outcome::kRejected, RefusalText(one)};
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
  RETURN_IF_ERROR(BeginAndLockRows(conn, sql, [&](const std::string& id, std::optional<uint64_t> version) {
    if (auto it = ids.find(id); it != ids.end()) it->second.version = version;
  }));
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

}  // namespace sluice::connectors::mysql
