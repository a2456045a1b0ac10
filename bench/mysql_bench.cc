#include "bench/mysql_bench.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/json.h"
#include "sql/schema.h"

namespace sluice::bench {

namespace {

constexpr uint64_t kMaxNaiveAttempts = 100000;
constexpr size_t kMaxSamples = 8;

Result<std::unique_ptr<sql::Connection>> OpenDatabase(const SqlBenchOptions& o) {
  sql::ConnectParams p = o.mysql;
  p.database.clear();
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(p));
  RETURN_IF_ERROR(conn->Execute("CREATE DATABASE IF NOT EXISTS " + sql::QuoteIdent(o.mysql.database)).status());
  RETURN_IF_ERROR(conn->Execute("USE " + sql::QuoteIdent(o.mysql.database)).status());
  return conn;
}

// Drops and re-creates the event tables type_p000.. of the baseline.
Status FreshTables(sql::Connection& conn, const std::string& type, uint32_t tables) {
  for (uint32_t t = 0; t < tables; ++t) {
    RETURN_IF_ERROR(conn.Execute("DROP TABLE IF EXISTS " + sql::QuoteIdent(sql::EventTableName(type, t))).status());
    RETURN_IF_ERROR(conn.Execute(sql::EventTableDdl(type, t)).status());
  }
  return Status::Ok();
}

// One row of the writer's shape: a patch whose request, and so the state it
// leaves, is CommandBody(index).
void AppendRow(sql::Connection& conn, std::string& out, uint64_t event_id, const std::string& entity_id,
               uint64_t version, const std::string& command_id, const std::string& request, const std::string& state) {
  out += '(';
  out += std::to_string(event_id);
  out += ',';
  conn.AppendQuoted(out, entity_id);
  out += ',';
  out += std::to_string(version);
  out += ',';
  conn.AppendQuoted(out, command_id);
  out += ",'patch',NULL,";
  conn.AppendQuoted(out, request);
  out += ",'{}',";
  conn.AppendQuoted(out, state);
  out += ",NULL,0)";
}

uint64_t Nanos(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// Shared by the threads of one baseline phase.
struct PhaseState {
  std::atomic<uint64_t> ok{0}, failures{0}, conflicts{0};
  std::mutex mu;
  std::vector<uint64_t> latencies_ns;
  std::vector<std::string> failure_samples;
  Clock::time_point last_done{};

  void Fail(std::string what) {
    failures.fetch_add(1);
    std::lock_guard lock(mu);
    if (failure_samples.size() < kMaxSamples) failure_samples.push_back(std::move(what));
  }
  void Merge(const std::vector<uint64_t>& latencies, Clock::time_point last) {
    std::lock_guard lock(mu);
    latencies_ns.insert(latencies_ns.end(), latencies.begin(), latencies.end());
    last_done = std::max(last_done, last);
  }
};

// The straightforward per-command write: read the latest event, write the
// next one, commit; on a lost race, read again.
Status NaiveCommand(sql::Connection& conn, const std::string& table, const std::string& entity_id,
                    const std::string& command_id, const std::string& request_text, const Json& request,
                    PhaseState& phase) {
  std::string read =
      "SELECT h.head, e.version, e.state FROM (SELECT COALESCE(MAX(event_id),0) AS head FROM " + table +
      ") h LEFT JOIN (SELECT version, state FROM " + table + " WHERE entity_id=";
  conn.AppendQuoted(read, entity_id);
  read += " ORDER BY version DESC LIMIT 1) e ON 1=1";
  for (uint64_t attempt = 0; attempt < kMaxNaiveAttempts; ++attempt) {
    ASSIGN_OR_RETURN(auto rows, conn.Query(read));
    if (rows.size() != 1) return Internal("the naive read returned " + std::to_string(rows.size()) + " rows");
    const uint64_t head = std::stoull(rows[0].at(0).value_or("0"));
    const uint64_t version = std::stoull(rows[0].at(1).value_or("0"));
    Json state = Json::object();
    if (rows[0].at(2)) {
      ASSIGN_OR_RETURN(state, ParseJson(*rows[0][2]));
    }
    ApplyMergePatch(state, request);
    std::string insert = "INSERT INTO " + table + " " + sql::kEventInsertColumns + " VALUES ";
    AppendRow(conn, insert, head + 1, entity_id, version + 1, command_id, request_text, CanonicalJson(state));
    auto done = conn.Execute(insert);
    if (done.ok()) return Status::Ok();
    if (done.status().code() != StatusCode::kAborted) return done.status();
    phase.conflicts.fetch_add(1, std::memory_order_relaxed);
  }
  return Aborted("still conflicting after " + std::to_string(kMaxNaiveAttempts) + " attempts");
}

struct NaivePhase {
  uint64_t begin = 0, count = 0;
  double min_seconds = 0;
};

Result<SqlBenchResult> RunNaivePhase(const SqlBenchOptions& o, const std::string& table,
                                     const std::vector<std::string>& entity_ids, const NaivePhase& ph,
                                     const std::string& label, WorkQueue& queue) {
  PhaseState state;
  queue.Open(ph.begin, ph.count, ph.min_seconds);
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress(label, [&](double t) {
      const uint64_t done = state.ok.load() + state.failures.load();
      const double rate = t > last_t ? static_cast<double>(done - last_done) / (t - last_t) : 0;
      last_done = done;
      last_t = t;
      return WithCommas(done) + "/" + WithCommas(ph.count) + " commands, " +
             WithCommas(static_cast<uint64_t>(rate)) + "/s now, conflicts " + WithCommas(state.conflicts.load()) +
             ", failures " + std::to_string(state.failures.load());
    });
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < o.threads; ++t) {
      threads.emplace_back([&] {
        auto conn = sql::Connection::Open(o.mysql);
        if (!conn.ok()) {
          uint64_t i;
          while (queue.Claim(i)) state.Fail("connect: " + conn.status().message());
          return;
        }
        std::vector<uint64_t> latencies;
        Clock::time_point last{};
        uint64_t i;
        while (queue.Claim(i)) {
          const std::string request_text = CommandBody(i, o.note);
          const Json request = Json::parse(request_text);
          const auto start = Clock::now();
          Status st = NaiveCommand(**conn, table, entity_ids[EntityOf(i, o.entities, o.seed)], CommandId(o.run_id, i),
                                   request_text, request, state);
          last = Clock::now();
          if (!st.ok()) {
            state.Fail(CommandId(o.run_id, i) + ": " + st.ToString());
            if (!(*conn)->healthy()) {
              auto again = sql::Connection::Open(o.mysql);
              if (again.ok()) conn = std::move(again);
            }
            continue;
          }
          latencies.push_back(Nanos(last - start));
          state.ok.fetch_add(1, std::memory_order_relaxed);
        }
        state.Merge(latencies, last);
      });
    }
    for (auto& t : threads) t.join();
  }
  SqlBenchResult r;
  r.ok = state.ok.load();
  r.failures = state.failures.load();
  r.conflicts = state.conflicts.load();
  r.seconds = std::chrono::duration<double>(std::max(state.last_done, queue.started()) - queue.started()).count();
  r.latencies_ns = std::move(state.latencies_ns);
  r.failure_samples = std::move(state.failure_samples);
  return r;
}

void AddTableProblems(SqlBenchResult& r, const std::vector<std::string>& problems) {
  r.table_problems += problems.size();
  for (const auto& p : problems) {
    if (r.table_samples.size() < kMaxSamples) r.table_samples.push_back(p);
  }
}

}  // namespace

Result<SqlBenchResult> RunNaive(const SqlBenchOptions& o) {
  ASSIGN_OR_RETURN(auto admin, OpenDatabase(o));
  RETURN_IF_ERROR(FreshTables(*admin, "bench_naive", 1));
  const std::string table = sql::QuoteIdent(sql::EventTableName("bench_naive", 0));
  std::vector<std::string> entity_ids;
  for (uint64_t e = 0; e < o.entities; ++e) entity_ids.push_back(EntityId(o.run_id, e, o.entities));

  WorkQueue queue;
  ASSIGN_OR_RETURN(auto warm, RunNaivePhase(o, table, entity_ids, {0, o.warmup, 0}, "naive warm-up", queue));
  ASSIGN_OR_RETURN(auto r, RunNaivePhase(o, table, entity_ids, {queue.end(), o.count, o.min_seconds}, "naive", queue));
  r.failures += warm.failures;
  r.failure_samples.insert(r.failure_samples.end(), warm.failure_samples.begin(), warm.failure_samples.end());
  ASSIGN_OR_RETURN(auto problems, CheckEventTable(*admin, sql::EventTableName("bench_naive", 0), o.run_id + "-",
                                                  warm.ok + r.ok));
  AddTableProblems(r, problems);
  return r;
}

Result<SqlBenchResult> RunRawInsert(const SqlBenchOptions& o) {
  ASSIGN_OR_RETURN(auto admin, OpenDatabase(o));
  RETURN_IF_ERROR(FreshTables(*admin, "bench_raw", o.threads));
  const uint64_t batch = std::max<uint32_t>(o.batch_rows, 1);

  // Every thread appends to its own table, as a partition worker would; the
  // statements are built before the clock starts.
  struct Lane {
    std::unique_ptr<sql::Connection> conn;
    std::vector<std::string> statements;
    size_t warmup_statements = 0;
    uint64_t rows = 0;
  };
  std::vector<Lane> lanes(o.threads);
  const uint64_t warm_per_lane = (o.warmup + o.threads - 1) / o.threads;
  const uint64_t timed_per_lane = (o.count + o.threads - 1) / o.threads;
  for (uint32_t t = 0; t < o.threads; ++t) {
    Lane& lane = lanes[t];
    ASSIGN_OR_RETURN(lane.conn, sql::Connection::Open(o.mysql));
    const std::string table = sql::QuoteIdent(sql::EventTableName("bench_raw", t));
    std::unordered_map<uint64_t, uint64_t> versions;
    uint64_t event_id = 0;
    const uint64_t first = t * (warm_per_lane + timed_per_lane);
    auto build = [&](uint64_t rows) {
      for (uint64_t done = 0; done < rows;) {
        std::string s = "INSERT INTO " + table + " " + sql::kEventInsertColumns + " VALUES ";
        const uint64_t n = std::min(batch, rows - done);
        for (uint64_t k = 0; k < n; ++k, ++done) {
          const uint64_t i = first + event_id;
          const uint64_t entity = EntityOf(i, o.entities, o.seed);
          const std::string body = CommandBody(i, o.note);
          if (k > 0) s += ',';
          AppendRow(*lane.conn, s, ++event_id, EntityId(o.run_id, entity, o.entities), ++versions[entity],
                    CommandId(o.run_id, i), body, body);
        }
        lane.statements.push_back(std::move(s));
      }
    };
    build(warm_per_lane);
    lane.warmup_statements = lane.statements.size();
    build(timed_per_lane);
    lane.rows = event_id;
  }

  auto run = [&](bool timed, const std::string& label) {
    PhaseState state;
    const uint64_t total = timed ? timed_per_lane * o.threads : warm_per_lane * o.threads;
    const auto started = Clock::now();
    {
      uint64_t last_done = 0;
      double last_t = 0;
      ProgressLine progress(label, [&](double t) {
        const uint64_t done = state.ok.load();
        const double rate = t > last_t ? static_cast<double>(done - last_done) / (t - last_t) : 0;
        last_done = done;
        last_t = t;
        return WithCommas(done) + "/" + WithCommas(total) + " rows, " + WithCommas(static_cast<uint64_t>(rate)) +
               " rows/s now, failures " + std::to_string(state.failures.load());
      });
      std::vector<std::thread> threads;
      for (auto& lane : lanes) {
        threads.emplace_back([&] {
          std::vector<uint64_t> latencies;
          Clock::time_point last{};
          const size_t from = timed ? lane.warmup_statements : 0;
          const size_t to = timed ? lane.statements.size() : lane.warmup_statements;
          for (size_t k = from; k < to; ++k) {
            const auto start = Clock::now();
            auto rows = lane.conn->Execute(lane.statements[k]);
            last = Clock::now();
            if (!rows.ok()) {
              state.Fail("INSERT: " + rows.status().ToString());
              continue;
            }
            latencies.push_back(Nanos(last - start));
            state.ok.fetch_add(*rows, std::memory_order_relaxed);
          }
          state.Merge(latencies, last);
        });
      }
      for (auto& t : threads) t.join();
    }
    SqlBenchResult r;
    r.ok = state.ok.load();
    r.failures = state.failures.load();
    r.statements = state.latencies_ns.size();
    r.seconds = std::chrono::duration<double>(std::max(state.last_done, started) - started).count();
    r.latencies_ns = std::move(state.latencies_ns);
    r.failure_samples = std::move(state.failure_samples);
    return r;
  };
  SqlBenchResult warm = run(false, "raw_insert warm-up");
  SqlBenchResult r = run(true, "raw_insert");
  r.failures += warm.failures;
  r.failure_samples.insert(r.failure_samples.end(), warm.failure_samples.begin(), warm.failure_samples.end());
  for (uint32_t t = 0; t < o.threads; ++t) {
    ASSIGN_OR_RETURN(auto problems,
                     CheckEventTable(*admin, sql::EventTableName("bench_raw", t), o.run_id + "-", lanes[t].rows));
    AddTableProblems(r, problems);
  }
  return r;
}

Result<std::vector<std::string>> CheckEventTable(sql::Connection& conn, const std::string& table,
                                                 const std::string& entity_prefix,
                                                 std::optional<uint64_t> expected_rows) {
  std::vector<std::string> problems;
  const std::string t = sql::QuoteIdent(table);
  ASSIGN_OR_RETURN(auto ids, conn.Query("SELECT COUNT(*), COALESCE(MIN(event_id),0), COALESCE(MAX(event_id),0) FROM " + t));
  const uint64_t count = std::stoull(ids.at(0).at(0).value_or("0"));
  const uint64_t min_id = std::stoull(ids.at(0).at(1).value_or("0"));
  const uint64_t max_id = std::stoull(ids.at(0).at(2).value_or("0"));
  if (count > 0 && (min_id != 1 || max_id != count)) {
    problems.push_back(table + ": event ids are not dense: " + std::to_string(count) + " rows span " +
                       std::to_string(min_id) + ".." + std::to_string(max_id));
  }
  std::string like;
  conn.AppendQuoted(like, entity_prefix + "%");
  ASSIGN_OR_RETURN(auto mine, conn.Query("SELECT COUNT(*) FROM " + t + " WHERE entity_id LIKE " + like));
  const uint64_t rows = std::stoull(mine.at(0).at(0).value_or("0"));
  if (expected_rows && rows != *expected_rows) {
    problems.push_back(table + ": " + std::to_string(rows) + " rows of this run stored, expected " +
                       std::to_string(*expected_rows));
  }
  ASSIGN_OR_RETURN(auto gaps, conn.Query("SELECT entity_id, COUNT(*), MIN(version), MAX(version) FROM " + t +
                                         " WHERE entity_id LIKE " + like +
                                         " GROUP BY entity_id HAVING MIN(version)<>1 OR MAX(version)<>COUNT(*)"
                                         " LIMIT 10"));
  for (const auto& g : gaps) {
    problems.push_back(table + ": entity " + g.at(0).value_or("?") + " has " + g.at(1).value_or("?") +
                       " versions spanning " + g.at(2).value_or("?") + ".." + g.at(3).value_or("?"));
  }
  return problems;
}

Result<ServerCounters> ReadServerCounters(sql::Connection& conn) {
  ASSIGN_OR_RETURN(auto rows, conn.Query("SHOW GLOBAL STATUS WHERE Variable_name IN "
                                         "('Com_insert','Com_select','Innodb_data_fsyncs',"
                                         "'Innodb_buffer_pool_read_requests')"));
  ServerCounters c;
  for (const auto& row : rows) {
    const std::string name = row.at(0).value_or("");
    const uint64_t value = std::stoull(row.at(1).value_or("0"));
    if (name == "Com_insert") c.inserts = value;
    if (name == "Com_select") c.selects = value;
    if (name == "Innodb_data_fsyncs") c.fsyncs = value;
    if (name == "Innodb_buffer_pool_read_requests") c.page_reads = value;
  }
  return c;
}

Result<uint32_t> RecordedPartitions(sql::Connection& conn, const std::string& type) {
  std::string q = "SELECT partitions FROM sluice_entity_types WHERE entity_type=";
  conn.AppendQuoted(q, type);
  ASSIGN_OR_RETURN(auto rows, conn.Query(q));
  if (rows.empty() || !rows[0].at(0)) return NotFound("entity type '" + type + "' is not recorded in this database");
  return static_cast<uint32_t>(std::stoul(*rows[0][0]));
}

Result<std::vector<std::string>> CompareRepliesWithStorage(sql::Connection& conn, const std::string& type,
                                                           uint32_t partitions, const std::string& run_id,
                                                           const std::vector<HttpReply>& replies,
                                                           const std::vector<std::string>& entity_ids) {
  std::vector<std::string> problems;
  auto problem = [&](std::string what) {
    if (problems.size() < kMaxSamples) problems.push_back(std::move(what));
  };
  std::unordered_map<uint64_t, const HttpReply*> by_index;
  by_index.reserve(replies.size());
  for (const auto& r : replies) by_index.emplace(r.index, &r);
  const std::string command_prefix = run_id + "-c";
  std::string like;
  conn.AppendQuoted(like, run_id + "-%");
  uint64_t stored = 0, mismatched = 0, unreported = 0;
  for (uint32_t p = 0; p < partitions; ++p) {
    ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT command_id, entity_id, version, event_id FROM " +
                                           sql::QuoteIdent(sql::EventTableName(type, p)) +
                                           " WHERE entity_id LIKE " + like));
    for (const auto& row : rows) {
      ++stored;
      const std::string command_id = row.at(0).value_or("");
      if (command_id.rfind(command_prefix, 0) != 0) {
        ++unreported;
        problem("stored command id " + command_id + " is not one of this run's");
        continue;
      }
      const uint64_t index = std::stoull(command_id.substr(command_prefix.size()));
      auto it = by_index.find(index);
      if (it == by_index.end()) {
        ++unreported;
        problem(command_id + " is stored (version " + row.at(2).value_or("?") + ") but no verified reply reported it");
        continue;
      }
      const HttpReply& r = *it->second;
      const bool same = row.at(1).value_or("") == entity_ids.at(r.entity) && r.partition == p &&
                        std::to_string(r.version) == row.at(2).value_or("") &&
                        std::to_string(r.event_id) == row.at(3).value_or("");
      if (!same) {
        ++mismatched;
        problem(command_id + ": reply said partition " + std::to_string(r.partition) + " version " +
                std::to_string(r.version) + " event_id " + std::to_string(r.event_id) + ", storage has partition " +
                std::to_string(p) + " version " + row.at(2).value_or("?") + " event_id " + row.at(3).value_or("?"));
      }
    }
  }
  if (stored != replies.size()) {
    problem(std::to_string(replies.size()) + " verified replies but " + std::to_string(stored) +
            " stored rows of this run");
  }
  const uint64_t total = mismatched + unreported + (stored != replies.size() ? 1 : 0);
  if (total > problems.size()) problems.push_back("... " + std::to_string(total - problems.size()) + " more");
  return problems;
}

Result<CommitStats> ReadCommitStats(sql::Connection& conn, const std::string& type, uint32_t partitions,
                                    const std::string& entity_prefix, const std::vector<HttpReply>& replies,
                                    uint32_t phase) {
  // Per partition, the first event id of the phase: earlier phases finished before it began.
  std::map<uint32_t, uint64_t> first_event;
  for (const auto& r : replies) {
    if (r.phase < phase) continue;
    auto [it, inserted] = first_event.emplace(r.partition, r.event_id);
    if (!inserted) it->second = std::min(it->second, r.event_id);
  }
  std::string like;
  conn.AppendQuoted(like, entity_prefix + "%");
  std::vector<uint64_t> sizes;
  for (uint32_t p = 0; p < partitions; ++p) {
    auto it = first_event.find(p);
    if (it == first_event.end()) continue;
    ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT COUNT(*) FROM " + sql::QuoteIdent(sql::EventTableName(type, p)) +
                                           " WHERE entity_id LIKE " + like + " AND event_id >= " +
                                           std::to_string(it->second) + " GROUP BY committed_at"));
    for (const auto& row : rows) sizes.push_back(std::stoull(row.at(0).value_or("0")));
  }
  CommitStats s;
  s.commits = sizes.size();
  if (sizes.empty()) return s;
  std::sort(sizes.begin(), sizes.end());
  for (uint64_t n : sizes) s.rows += n;
  s.max_rows = sizes.back();
  s.mean_rows = static_cast<double>(s.rows) / static_cast<double>(s.commits);
  uint64_t seen = 0;
  for (uint64_t n : sizes) {
    seen += n;
    if (2 * seen >= s.rows) {
      s.median_rows_weighted = n;
      break;
    }
  }
  return s;
}

Result<StoredBytes> ReadStoredBytes(sql::Connection& conn, const std::string& type, uint32_t partitions,
                                    const std::string& entity_prefix) {
  auto number = [](const std::optional<std::string>& v) -> uint64_t { return v ? std::stoull(*v) : 0; };
  std::string like;
  conn.AppendQuoted(like, entity_prefix + "%");
  StoredBytes b;
  for (uint32_t p = 0; p < partitions; ++p) {
    const std::string name = sql::EventTableName(type, p);
    const std::string table = sql::QuoteIdent(name);
    ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT COUNT(*), SUM(LENGTH(delta) > 0), SUM(LENGTH(state)), "
                                           "SUM(LENGTH(delta)), SUM(LENGTH(request)), SUM(LENGTH(response)) FROM " +
                                           table + " WHERE entity_id LIKE " + like));
    const auto& r = rows.at(0);
    b.events += number(r.at(0));
    b.delta_events += number(r.at(1));
    b.state += number(r.at(2));
    b.delta += number(r.at(3));
    b.request += number(r.at(4));
    b.response += number(r.at(5));
    ASSIGN_OR_RETURN(auto count, conn.Query("SELECT COUNT(*) FROM " + table));
    b.table_rows += number(count.at(0).at(0));
    RETURN_IF_ERROR(conn.Query("ANALYZE TABLE " + table).status());
    std::string q = "SELECT data_length + index_length FROM information_schema.TABLES "
                    "WHERE table_schema = DATABASE() AND table_name = ";
    conn.AppendQuoted(q, name);
    ASSIGN_OR_RETURN(auto size, conn.Query(q));
    if (size.empty()) return NotFound("no information_schema.TABLES row for " + name);
    b.table_bytes += number(size.at(0).at(0));
  }
  return b;
}

}  // namespace sluice::bench
