#include "bench/engine_bench_backlog.h"

#include "bench/engine_bench_es.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>

#include "bench/bench_common.h"
#include "bench/engine_bench_util.h"
#include "bench/mysql_bench.h"
#include "connectors/mysql/mysql_options.h"
#include "connectors/sink.h"
#include "core/partitioner.h"
#include "engine/read_groups.h"
#include "sql/params.h"
#include "sql/schema.h"

namespace sluice::bench {

namespace {

constexpr size_t kNoteBytes = 38;  // makes the whole state 78..82 bytes

}  // namespace

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string RateText(uint64_t done, uint64_t total, double elapsed, uint64_t& last_done, double& last_t,
                     const char* unit) {
  const double rate = elapsed > last_t ? static_cast<double>(done - last_done) / (elapsed - last_t) : 0;
  last_done = done;
  last_t = elapsed;
  return WithCommas(done) + "/" + WithCommas(total) + " " + unit + ", " + WithCommas(static_cast<uint64_t>(rate)) +
         "/s now";
}

Backlog::Backlog(BacklogSpec spec) : spec_(std::move(spec)) {
  ids_.reserve(spec_.entities);
  members_.resize(spec_.partitions);
  for (uint64_t k = 0; k < spec_.entities; ++k) {
    ids_.push_back(spec_.run_id + "-a" + std::to_string(k));
    members_[PartitionOf(ids_.back(), spec_.partitions)].push_back(k);
  }
}

std::vector<Backlog::Chunk> Backlog::Chunks(Order order, uint32_t batch_max, uint32_t chunk, uint32_t offset,
                                            uint32_t stride) const {
  chunk = std::max<uint32_t>(1, chunk);
  stride = std::max<uint32_t>(1, stride);
  std::vector<Chunk> out;
  // A batch larger than a chunk goes alone, in chunks (ApplyLoop).
  const auto split = [&](const Run& batch) {
    for (uint64_t first = batch.first; first <= batch.last; first += chunk) {
      out.push_back(Chunk{Run{batch.partition, first, std::min<uint64_t>(batch.last, first + chunk - 1)}});
    }
  };
  if (order == Order::kPartitions) {
    for (uint32_t p = offset; p < spec_.partitions; p += stride) {
      if (PartitionEvents(p) > 0) split(Run{p, 1, PartitionEvents(p)});
    }
    return out;
  }
  // The engine reads every partition; a writer of several takes its
  // partitions' share of each chunk.
  const auto mine = [&](const Run& run) { return run.partition % stride == offset; };
  // At the start every partition may hold a backlog; one stays backlogged
  // while its last read filled its share (SinkRunner::ReadLoop), so one read
  // to its end exactly is read once more, finding nothing.
  std::vector<uint64_t> read(spec_.partitions, 0);
  std::vector<uint32_t> backlogged(spec_.partitions);
  std::iota(backlogged.begin(), backlogged.end(), 0);
  Chunk joined;
  uint64_t events = 0;
  const auto flush = [&] {
    std::erase_if(joined, [&](const Run& run) { return !mine(run); });
    if (!joined.empty()) out.push_back(std::move(joined));
    joined.clear();
    events = 0;
  };
  while (!backlogged.empty()) {
    std::vector<uint32_t> still;
    for (const engine::ReadGroup& group : engine::BacklogReadGroups(backlogged, batch_max)) {
      for (const uint32_t p : group.partitions) {
        const Run batch{p, read[p] + 1, std::min<uint64_t>(PartitionEvents(p), read[p] + group.limit)};
        read[p] = batch.last;
        const uint64_t size = batch.last + 1 - batch.first;
        if (size >= group.limit) still.push_back(p);
        if (size == 0) continue;
        if (events > 0 && events + size > chunk) flush();
        if (size > chunk) {
          if (mine(batch)) split(batch);
          continue;
        }
        joined.push_back(batch);
        events += size;
        if (events >= chunk) flush();
      }
    }
    backlogged.swap(still);
  }
  flush();
  return out;
}

uint64_t Backlog::Balance(uint64_t entity, uint32_t version) const {
  return (entity * 7919 + uint64_t{version} * 104729) % 1000000;
}

std::string Backlog::Note(uint64_t entity, uint32_t version) const {
  std::string note = "v" + std::to_string(version) + " of " + std::to_string(entity) + " ";
  static constexpr char kFill[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  while (note.size() < kNoteBytes) note += kFill[(note.size() + entity) % (sizeof kFill - 1)];
  note.resize(kNoteBytes);
  return note;
}

std::string Backlog::State(uint64_t entity, uint32_t version) const {
  std::string s = R"({"balance":)";
  s += std::to_string(Balance(entity, version));
  s += R"(,"note":")";
  s += Note(entity, version);
  s += R"(","owner":"o)";
  s += std::to_string(entity % 1000);
  s += "\"}";
  return s;
}

std::string Backlog::Request(uint64_t entity, uint32_t version) const {
  if (version == 1) return State(entity, version);
  return R"({"balance":)" + std::to_string(Balance(entity, version)) + R"(,"note":")" + Note(entity, version) + "\"}";
}

std::string Backlog::CommandId(uint64_t entity, uint32_t version) const {
  return ids_[entity] + "-c" + std::to_string(version);
}

std::string Backlog::RedisValue(uint64_t entity, uint32_t version) const {
  const std::string state = State(entity, version);
  return R"({"_version":)" + std::to_string(version) + "," + state.substr(1);
}

void Backlog::ViewColumns(uint64_t entity, uint32_t version, std::string& owner, std::string& balance,
                          std::string& note) const {
  owner.assign(1, 'o');
  owner += std::to_string(entity % 1000);
  balance = std::to_string(Balance(entity, version));
  note = Note(entity, version);
}

Result<LoadResult> LoadBacklog(const sql::ConnectParams& mysql, const Backlog& backlog, uint32_t threads,
                               uint32_t rows_per_insert) {
  const BacklogSpec& spec = backlog.spec();
  ASSIGN_OR_RETURN(auto admin, sql::Connection::Open(mysql));
  ASSIGN_OR_RETURN(uint32_t recorded, RecordedPartitions(*admin, spec.type));
  if (recorded != spec.partitions) {
    return FailedPrecondition("the database records " + std::to_string(recorded) + " partitions for '" + spec.type +
                              "', the benchmark was told " + std::to_string(spec.partitions));
  }
  for (uint32_t p = 0; p < spec.partitions; ++p) {
    ASSIGN_OR_RETURN(auto rows, admin->Query("SELECT COUNT(*) FROM " +
                                             sql::QuoteIdent(sql::EventTableName(spec.type, p))));
    if (rows.at(0).at(0).value_or("0") != "0") {
      return FailedPrecondition(sql::EventTableName(spec.type, p) + " is not empty: load into a fresh database");
    }
  }
  threads = std::max<uint32_t>(1, std::min(threads, spec.partitions));
  rows_per_insert = std::max<uint32_t>(1, rows_per_insert);

  std::atomic<uint64_t> rows_done{0}, statements{0};
  std::atomic<uint32_t> next_partition{0};
  std::mutex mu;
  Status failure = Status::Ok();
  const auto start = Clock::now();
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress("load", [&](double t) {
      return RateText(rows_done.load(), backlog.total_events(), t, last_done, last_t, "events inserted");
    });
    std::vector<std::thread> workers;
    for (uint32_t t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        auto fail = [&](const Status& st) {
          std::lock_guard lock(mu);
          if (failure.ok()) failure = st;
        };
        auto conn = sql::Connection::Open(mysql);
        if (!conn.ok()) return fail(conn.status());
        sql::Connection& c = **conn;
        std::string q;
        for (uint32_t p; (p = next_partition.fetch_add(1)) < spec.partitions;) {
          const std::string prefix = "INSERT INTO " + sql::QuoteIdent(sql::EventTableName(spec.type, p)) + " " +
                                     sql::kEventInsertColumns + " VALUES ";
          const uint64_t n = backlog.PartitionEvents(p);
          for (uint64_t first = 1; first <= n; first += rows_per_insert) {
            q = prefix;
            const uint64_t last = std::min<uint64_t>(n, first + rows_per_insert - 1);
            for (uint64_t id = first; id <= last; ++id) {
              const Backlog::Event e = backlog.At(p, id);
              if (id > first) q += ',';
              q += '(';
              q += std::to_string(id);
              q += ',';
              c.AppendQuoted(q, backlog.EntityId(e.entity));
              q += ',';
              q += std::to_string(e.version);
              q += ',';
              c.AppendQuoted(q, backlog.CommandId(e.entity, e.version));
              q += ",'patch',NULL,";
              c.AppendQuoted(q, backlog.Request(e.entity, e.version));
              q += R"(,'{"version":)" + std::to_string(e.version) + "}',";
              c.AppendQuoted(q, backlog.State(e.entity, e.version));
              q += ",NULL,0)";
            }
            auto done = c.Execute(q);
            if (!done.ok()) return fail(done.status().WithContext(sql::EventTableName(spec.type, p)));
            rows_done.fetch_add(*done);
            statements.fetch_add(1);
          }
        }
      });
    }
    for (auto& w : workers) w.join();
  }
  RETURN_IF_ERROR(failure);
  LoadResult r;
  r.seconds = SecondsSince(start);
  r.rows = rows_done.load();
  r.statements = statements.load();
  // One statement per table reads all of it: at 10,000,000 rows that takes
  // longer than the configured io_timeout.
  sql::ConnectParams patient = mysql;
  patient.io_timeout = std::chrono::minutes(30);
  ASSIGN_OR_RETURN(auto checker, sql::Connection::Open(patient));
  std::atomic<uint32_t> checked{0};
  ProgressLine progress("load check", [&](double) {
    return std::to_string(checked.load()) + "/" + std::to_string(spec.partitions) +
           " event tables checked (event_ids and versions dense)";
  });
  for (uint32_t p = 0; p < spec.partitions; ++p, ++checked) {
    ASSIGN_OR_RETURN(auto problems, CheckEventTable(*checker, sql::EventTableName(spec.type, p), spec.run_id + "-",
                                                    backlog.PartitionEvents(p)));
    r.problems.insert(r.problems.end(), problems.begin(), problems.end());
  }
  if (r.rows != backlog.total_events()) {
    r.problems.push_back("inserted " + std::to_string(r.rows) + " rows, expected " +
                         std::to_string(backlog.total_events()));
  }
  return r;
}

Result<WriteResult> RawRedisSets(const config::SinkConfig& sink, const Endpoint& redis, const Backlog& backlog,
                                 uint32_t pipeline, Backlog::Order order, uint32_t batch_max) {
  if (sink.type != "redis") return InvalidArgument("sink " + sink.name + " is not a redis sink");
  ASSIGN_OR_RETURN(auto keys, BenchRedisKeys(sink));
  ASSIGN_OR_RETURN(auto conn, RedisConn::Open(redis));
  RETURN_IF_ERROR(conn->DeleteMatching(keys.ScanPattern()).status());
  ASSIGN_OR_RETURN(const double usec_before, conn->WriteCommandMicros());
  const std::vector<Backlog::Chunk> chunks = backlog.Chunks(order, batch_max, pipeline);

  WriteResult r;
  std::atomic<uint64_t> done{0};
  std::string key, value;
  const auto start = Clock::now();
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress("redis raw SET", [&](double t) {
      return RateText(done.load(), backlog.total_events(), t, last_done, last_t, "SETs");
    });
    for (const Backlog::Chunk& chunk : chunks) {
      uint64_t sent = 0;
      for (const Backlog::Run& run : chunk) {
        for (uint64_t id = run.first; id <= run.last; ++id, ++sent) {
          const Backlog::Event e = backlog.At(run.partition, id);
          key = keys.Key(backlog.EntityId(e.entity));
          value = backlog.RedisValue(e.entity, e.version);
          const char* args[] = {"SET", key.data(), value.data()};
          const size_t arg_lens[] = {3, key.size(), value.size()};
          RETURN_IF_ERROR(conn->AppendArgv(3, args, arg_lens));  // hiredis copies the arguments
        }
      }
      for (uint64_t k = 0; k < sent; ++k) {
        ASSIGN_OR_RETURN(auto reply, conn->Read());
        if (reply->type != REDIS_REPLY_STATUS) {
          r.problems.push_back("SET did not answer OK: " +
                               std::string(reply->str ? std::string(reply->str, reply->len) : "?"));
          if (r.problems.size() > 8) return Internal("redis refuses the SETs: " + r.problems.front());
        }
      }
      done.fetch_add(sent);
    }
  }
  r.seconds = SecondsSince(start);
  r.events = done.load();
  r.applied = r.events;
  ASSIGN_OR_RETURN(const double usec_after, conn->WriteCommandMicros());
  r.redis_us_per_event = (usec_after - usec_before) / static_cast<double>(std::max<uint64_t>(1, r.events));
  return r;
}

Result<WriteResult> RawMysqlUpserts(const config::Config& config, const config::SinkConfig& sink,
                                    const Backlog& backlog, uint32_t rows_per_insert, uint32_t threads,
                                    Backlog::Order order) {
  if (sink.type != "mysql") return InvalidArgument("sink " + sink.name + " is not a mysql sink");
  const auto& view = sink.Options<connectors::mysql::MysqlSinkOptions>();
  if (view.columns.size() != 3 || view.columns[0].pointer != "/owner" || view.columns[1].pointer != "/balance" ||
      view.columns[2].pointer != "/note") {
    return InvalidArgument("sink " + sink.name + " must map exactly the columns /owner, /balance, /note in that order");
  }
  sql::ConnectParams params = sql::ParamsFrom(config.mysql);
  if (!view.database.empty()) params.database = view.database;
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(params));
  // The sink itself creates the table, so that the baseline writes exactly its shape.
  RETURN_IF_ERROR(conn->Execute("DROP TABLE IF EXISTS " + sql::QuoteIdent(view.table)).status());
  {
    ASSIGN_OR_RETURN(auto maker, connectors::MakeSink(sink, config));
    RETURN_IF_ERROR(maker->Open());
    maker->Close();
  }
  std::string prefix = "INSERT INTO " + sql::QuoteIdent(view.table) + " (`id`,`_version`,`_deleted`";
  for (const auto& c : view.columns) prefix += "," + sql::QuoteIdent(c.name);
  prefix += ") VALUES ";
  std::string suffix = " ON DUPLICATE KEY UPDATE ";
  for (const auto& c : view.columns) {
    suffix += sql::QuoteIdent(c.name) + "=VALUES(" + sql::QuoteIdent(c.name) + "),";
  }
  suffix += "`_deleted`=VALUES(`_deleted`),`_version`=VALUES(`_version`)";
  rows_per_insert = std::max<uint32_t>(1, rows_per_insert);
  const BacklogSpec& spec = backlog.spec();

  // One connection per thread; thread t upserts partitions t, t + threads, ...
  // so that every entity's rows go over one connection, in order.
  threads = std::max<uint32_t>(1, std::min(threads, spec.partitions));
  std::vector<std::vector<Backlog::Chunk>> chunks;
  for (uint32_t t = 0; t < threads; ++t) {
    chunks.push_back(backlog.Chunks(order, config.engine.batch_max, rows_per_insert, t, threads));
  }
  std::vector<std::unique_ptr<sql::Connection>> conns;
  conns.push_back(std::move(conn));
  while (conns.size() < threads) {
    ASSIGN_OR_RETURN(auto more, sql::Connection::Open(params));
    conns.push_back(std::move(more));
  }

  WriteResult r;
  std::atomic<uint64_t> done{0};
  std::mutex failed_mu;
  Status failed;
  const auto upsert = [&](uint32_t t) {
    sql::Connection& c = *conns[t];
    std::string q, owner, balance, note;
    for (const Backlog::Chunk& chunk : chunks[t]) {
      q = prefix;
      uint64_t rows = 0;
      for (const Backlog::Run& run : chunk) {
        for (uint64_t id = run.first; id <= run.last; ++id, ++rows) {
          const Backlog::Event e = backlog.At(run.partition, id);
          backlog.ViewColumns(e.entity, e.version, owner, balance, note);
          if (rows > 0) q += ',';
          q += '(';
          c.AppendQuoted(q, backlog.EntityId(e.entity));
          q += ',' + std::to_string(e.version) + ",0,";
          c.AppendQuoted(q, owner);
          q += ',';
          c.AppendQuoted(q, balance);
          q += ',';
          c.AppendQuoted(q, note);
          q += ')';
        }
      }
      q += suffix;
      if (Status st = c.Execute(q).status(); !st.ok()) {
        std::lock_guard lock(failed_mu);
        if (failed.ok()) failed = st;
        return;
      }
      done.fetch_add(rows);
    }
  };
  const auto start = Clock::now();
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress("mysql raw upsert", [&](double t) {
      return RateText(done.load(), backlog.total_events(), t, last_done, last_t, "rows");
    });
    std::vector<std::thread> others;
    for (uint32_t t = 1; t < threads; ++t) others.emplace_back(upsert, t);
    upsert(0);
    for (auto& t : others) t.join();
  }
  RETURN_IF_ERROR(failed);
  r.seconds = SecondsSince(start);
  r.events = done.load();
  r.applied = r.events;
  return r;
}

connectors::ChangeEvent Backlog::ChangeEventAt(uint32_t p, uint64_t event_id, int64_t committed_at_us) const {
  const Event e = At(p, event_id);
  connectors::ChangeEvent ce;
  ce.entity_type = spec_.type;
  ce.partition = p;
  ce.event_id = event_id;
  ce.entity_id = EntityId(e.entity);
  ce.version = e.version;
  ce.state = State(e.entity, e.version);
  ce.command_name = "patch";
  ce.command_id = CommandId(e.entity, e.version);
  ce.committed_at_us = committed_at_us;
  return ce;
}

Result<WriteResult> ApplyDirect(const config::Config& config, const config::SinkConfig& sink, const ViewServers& servers,
                                const Backlog& backlog) {
  const BacklogSpec& spec = backlog.spec();
  if (sink.entity != spec.type) return InvalidArgument("sink " + sink.name + " is not of type " + spec.type);
  // A fresh view: no keys or rows left from an earlier run.
  std::unique_ptr<RedisConn> stats;
  double usec_before = 0;
  if (sink.type == "redis") {
    ASSIGN_OR_RETURN(auto keys, BenchRedisKeys(sink));
    ASSIGN_OR_RETURN(stats, RedisConn::Open(servers.redis));
    RETURN_IF_ERROR(stats->DeleteMatching(keys.ScanPattern()).status());
    ASSIGN_OR_RETURN(usec_before, stats->WriteCommandMicros());
  } else if (sink.type == "elasticsearch") {
    RETURN_IF_ERROR(DropEsIndex(sink, servers.opensearch));
  } else {
    const auto& table = sink.Options<connectors::mysql::MysqlSinkOptions>();
    sql::ConnectParams params = sql::ParamsFrom(config.mysql);
    if (!table.database.empty()) params.database = table.database;
    ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(params));
    RETURN_IF_ERROR(conn->Execute("DROP TABLE IF EXISTS " + sql::QuoteIdent(table.table)).status());
  }
  ASSIGN_OR_RETURN(auto view, connectors::MakeSink(sink, config));
  RETURN_IF_ERROR(view->Open());

  const std::vector<Backlog::Chunk> chunks =
      backlog.Chunks(Backlog::Order::kEngine, config.engine.batch_max, sink.batch_max);
  // As the engine's applier drives it: a sink that pipelines
  // (Capabilities::pipeline) gets the next chunk before the last one's
  // results, up to that many in flight.
  const size_t pipeline = std::max<uint32_t>(1, view->capabilities().pipeline);
  std::deque<std::vector<connectors::ChangeEvent>> parts;  // in flight (pipelining), oldest first
  WriteResult r;
  std::atomic<uint64_t> done{0};
  Clock::duration busy{};
  const auto take = [&](const connectors::ApplyResult& applied, size_t events) -> Status {
    if (!applied.status.ok()) return applied.status.WithContext("sink " + sink.name);
    if (applied.results.size() != events) return Internal("the sink returned the wrong number of results");
    for (const auto& er : applied.results) {
      switch (er.outcome) {
        case connectors::Outcome::kApplied: ++r.applied; break;
        case connectors::Outcome::kStale: ++r.stale; break;
        case connectors::Outcome::kRejected:
          ++r.rejected;
          if (r.problems.size() < 8) r.problems.push_back("rejected: " + er.reason);
          break;
      }
    }
    done.fetch_add(events);
    return Status::Ok();
  };
  // The oldest chunk in flight.
  const auto receive = [&]() -> Status {
    const auto t0 = Clock::now();
    connectors::ApplyResult applied = view->Receive();
    busy += Clock::now() - t0;
    const Status st = take(applied, parts.front().size());
    parts.pop_front();
    return st;
  };
  const auto start = Clock::now();
  {
    uint64_t last_done = 0;
    double last_t = 0;
    ProgressLine progress("direct Apply " + sink.name, [&](double t) {
      return RateText(done.load(), backlog.total_events(), t, last_done, last_t, "events applied");
    });
    Status failed;
    for (const Backlog::Chunk& chunk : chunks) {
      std::vector<connectors::ChangeEvent> part;
      const int64_t now_us = RealtimeMicros();
      for (const Backlog::Run& run : chunk) {
        for (uint64_t id = run.first; id <= run.last; ++id) {
          part.push_back(backlog.ChangeEventAt(run.partition, id, now_us));
        }
      }
      if (pipeline == 1) {
        const auto t0 = Clock::now();
        connectors::ApplyResult applied = view->Apply(part);
        busy += Clock::now() - t0;
        failed = take(applied, part.size());
      } else {
        if (parts.size() == pipeline) failed = receive();
        if (failed.ok()) {
          const auto t0 = Clock::now();
          parts.push_back(std::move(part));
          view->Send(parts.back());
          busy += Clock::now() - t0;
        }
      }
      if (!failed.ok()) break;
    }
    while (!parts.empty()) {
      const Status st = receive();
      if (failed.ok()) failed = st;
    }
    if (!failed.ok()) {
      view->Close();
      return failed;
    }
  }
  view->Close();
  r.seconds = SecondsSince(start);
  r.busy_seconds = std::chrono::duration<double>(busy).count();
  r.events = done.load();
  if (stats) {
    ASSIGN_OR_RETURN(const double usec_after, stats->WriteCommandMicros());
    r.redis_us_per_event = (usec_after - usec_before) / static_cast<double>(std::max<uint64_t>(1, r.events));
  }
  if (r.stale != 0 || r.rejected != 0) {
    r.problems.push_back(std::to_string(r.stale) + " stale and " + std::to_string(r.rejected) +
                         " rejected events; every event should apply");
  }
  return r;
}

}  // namespace sluice::bench
