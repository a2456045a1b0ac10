#include "bench/engine_bench_drain.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <thread>

#include "bench/engine_bench_es.h"
#include "bench/engine_bench_util.h"
#include "bench/mysql_bench.h"
#include "connectors/aggregate/aggregate_options.h"
#include "connectors/aggregate/aggregate_sink.h"
#include "connectors/mysql/mysql_options.h"
#include "sql/connection.h"
#include "sql/params.h"
#include "sql/schema.h"

namespace sluice::bench {

namespace {

constexpr size_t kProbeWindow = 16;

struct LastEvent {
  std::string entity_id;
  uint64_t version = 0;
};

// Whether the view shows each partition's last event yet. The drain asks
// about at most kProbeWindow partitions not seen done per look, taken in
// turn, so that the probe's own load on the server does not grow with the
// partition count: one look at all 1,024 ids every 5 ms made MariaDB do 1.7
// index lookups per drained event, and doubled its page reads per event in
// a MySQL drain (BENCHMARKS_LOG.md, 2026-12-02 01:00).
class ViewProbe {
 public:
  virtual ~ViewProbe() = default;
  // For each of `partitions`, the version the view holds for its last
  // event's entity (0: none).
  virtual Result<std::vector<uint64_t>> Versions(const std::vector<uint32_t>& partitions) = 0;
  // How many partitions one look asks about: a probe whose look costs the
  // same whatever it asks (it reads every row, or caches) asks about all.
  virtual size_t window() const { return kProbeWindow; }
};

class RedisProbe final : public ViewProbe {
 public:
  RedisProbe(std::unique_ptr<RedisConn> conn, std::vector<std::string> keys)
      : conn_(std::move(conn)), keys_(std::move(keys)) {}
  Result<std::vector<uint64_t>> Versions(const std::vector<uint32_t>& partitions) override {
    std::vector<std::string_view> args = {"MGET"};
    for (const uint32_t p : partitions) args.push_back(keys_[p]);
    ASSIGN_OR_RETURN(auto reply, conn_->Run(args));
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != partitions.size()) {
      return Internal("redis: unexpected reply to MGET");
    }
    std::vector<uint64_t> out;
    for (size_t i = 0; i < reply->elements; ++i) {
      const redisReply& r = *reply->element[i];
      out.push_back(r.type == REDIS_REPLY_STRING ? VersionOfJsonValue({r.str, r.len}) : 0);
    }
    return out;
  }

 private:
  std::unique_ptr<RedisConn> conn_;
  std::vector<std::string> keys_;
};

class MysqlProbe final : public ViewProbe {
 public:
  MysqlProbe(std::unique_ptr<sql::Connection> conn, const std::string& table, std::vector<std::string> ids)
      : conn_(std::move(conn)), ids_(std::move(ids)) {
    query_ = "SELECT `id`, `_version` FROM " + sql::QuoteIdent(table) + " WHERE `id` IN (";
  }
  Result<std::vector<uint64_t>> Versions(const std::vector<uint32_t>& partitions) override {
    std::vector<uint64_t> out(partitions.size(), 0);
    std::string q = query_;
    for (size_t i = 0; i < partitions.size(); ++i) {
      if (i > 0) q += ',';
      conn_->AppendQuoted(q, ids_[partitions[i]]);
    }
    q += ')';
    auto rows = conn_->Query(q);
    // The sink creates its table when it opens: until then, nothing is visible.
    if (!rows.ok()) return out;
    std::map<std::string, uint64_t> got;
    for (const auto& r : *rows) got[r.at(0).value_or("")] = std::stoull(r.at(1).value_or("0"));
    for (size_t i = 0; i < partitions.size(); ++i) {
      const std::string& id = ids_[partitions[i]];
      out[i] = got.count(id) ? got[id] : 0;
    }
    return out;
  }

 private:
  std::unique_ptr<sql::Connection> conn_;
  std::vector<std::string> ids_;
  std::string query_;
};

// An aggregate view has no row per entity: a partition is done once the
// view's own offsets (committed with its rows) reach the partition's head.
// Versions() answers the last event's version for a done partition, 0 else.
class AggregateProbe final : public ViewProbe {
 public:
  AggregateProbe(std::unique_ptr<sql::Connection> conn, const std::string& sink, const std::string& entity,
                 std::vector<uint64_t> heads, std::vector<uint64_t> last_versions)
      : conn_(std::move(conn)), heads_(std::move(heads)), last_versions_(std::move(last_versions)) {
    query_ = "SELECT partition_id, event_id FROM " + sql::QuoteIdent(connectors::aggregate::AggregateOffsetsTable(sink)) +
             " WHERE entity_type=";
    conn_->AppendQuoted(query_, entity);
  }
  size_t window() const override { return SIZE_MAX; }  // every row is read anyway
  Result<std::vector<uint64_t>> Versions(const std::vector<uint32_t>& partitions) override {
    std::vector<uint64_t> all(heads_.size(), 0), out;
    auto rows = conn_->Query(query_);
    if (rows.ok()) {  // the sink creates its tables when it opens
      for (const auto& r : *rows) {
        const size_t p = std::stoul(r.at(0).value_or("0"));
        if (p < heads_.size() && std::stoull(r.at(1).value_or("0")) >= heads_[p]) all[p] = last_versions_[p];
      }
    }
    for (const uint32_t p : partitions) out.push_back(all[p]);
    return out;
  }

 private:
  std::unique_ptr<sql::Connection> conn_;
  std::vector<uint64_t> heads_, last_versions_;
  std::string query_;
};

class EsProbe final : public ViewProbe {
 public:
  EsProbe(std::unique_ptr<HttpConnection> client, std::string index,
          std::vector<std::string> ids)
      : client_(std::move(client)), index_(std::move(index)), ids_(std::move(ids)) {}
  // At most one _mget per 50 ms: the probe must not load the 2-core
  // machine's search server the way a 5 ms loop would (the result is then up
  // to 50 ms late on a drain of tens of seconds).
  size_t window() const override { return SIZE_MAX; }  // answers from its cache between two _mgets
  Result<std::vector<uint64_t>> Versions(const std::vector<uint32_t>& partitions) override {
    const auto now = Clock::now();
    if (last_.empty() || now - fetched_ >= std::chrono::milliseconds(50)) {
      std::vector<std::string> ids;
      for (const uint32_t p : partitions) ids.push_back(ids_[p]);
      ASSIGN_OR_RETURN(auto versions, EsVersions(*client_, index_, ids));
      for (size_t i = 0; i < partitions.size() && i < versions.size(); ++i) last_[partitions[i]] = versions[i];
      fetched_ = now;
    }
    std::vector<uint64_t> out;
    for (const uint32_t p : partitions) out.push_back(last_.count(p) ? last_[p] : 0);
    return out;
  }

 private:
  std::unique_ptr<HttpConnection> client_;
  std::string index_;
  std::vector<std::string> ids_;
  std::map<uint32_t, uint64_t> last_;  // as of the last _mget
  Clock::time_point fetched_;
};

struct OffsetsRow {
  uint64_t event_sum = 0, applied = 0, stale = 0, dead_lettered = 0, rows = 0;
  bool all_running = true;
};

Result<OffsetsRow> ReadOffsets(sql::Connection& conn, const config::SinkConfig& sink) {
  std::string q =
      "SELECT COALESCE(SUM(event_id),0), COALESCE(SUM(applied),0), COALESCE(SUM(stale),0), "
      "COALESCE(SUM(dead_lettered),0), COUNT(*), COALESCE(SUM(state<>'running'),0) FROM sluice_offsets WHERE sink=";
  conn.AppendQuoted(q, sink.name);
  q += " AND entity_type=";
  conn.AppendQuoted(q, sink.entity);
  ASSIGN_OR_RETURN(auto rows, conn.Query(q));
  const auto& r = rows.at(0);
  OffsetsRow o;
  o.event_sum = std::stoull(r.at(0).value_or("0"));
  o.applied = std::stoull(r.at(1).value_or("0"));
  o.stale = std::stoull(r.at(2).value_or("0"));
  o.dead_lettered = std::stoull(r.at(3).value_or("0"));
  o.rows = std::stoull(r.at(4).value_or("0"));
  o.all_running = r.at(5).value_or("0") == "0";
  return o;
}


}  // namespace

Result<DrainResult> RunDrain(const config::Config& config, const DrainOptions& options) {
  if (config.sinks.size() != 1) {
    return InvalidArgument(config.path + " must configure exactly one sink (the one drained), it has " +
                           std::to_string(config.sinks.size()));
  }
  const config::SinkConfig& sink = config.sinks[0];
  const uint32_t partitions = config.entities.at(sink.entity).partitions;
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));

  // Heads and last events; the sink must start from nothing.
  std::vector<LastEvent> last(partitions);
  std::vector<uint64_t> heads(partitions);
  uint64_t total = 0;
  for (uint32_t p = 0; p < partitions; ++p) {
    ASSIGN_OR_RETURN(auto rows, conn->Query("SELECT event_id, entity_id, version FROM " +
                                            sql::QuoteIdent(sql::EventTableName(sink.entity, p)) +
                                            " ORDER BY event_id DESC LIMIT 1"));
    if (rows.empty()) return FailedPrecondition(sql::EventTableName(sink.entity, p) + " is empty: load a backlog first");
    heads[p] = std::stoull(rows[0].at(0).value_or("0"));
    total += heads[p];
    last[p] = LastEvent{rows[0].at(1).value_or(""), std::stoull(rows[0].at(2).value_or("0"))};
  }
  ASSIGN_OR_RETURN(auto before, ReadOffsets(*conn, sink));
  if (before.rows != 0) {
    return FailedPrecondition("sink " + sink.name + " already has offsets: drain into a new sink name");
  }

  std::unique_ptr<ViewProbe> probe;
  std::unique_ptr<RedisConn> stats;  // redis: the server's own time
  double usec_before = 0;
  std::vector<std::string> ids;
  for (const auto& l : last) ids.push_back(l.entity_id);
  if (sink.type == "redis") {
    ASSIGN_OR_RETURN(auto keys, BenchRedisKeys(sink));
    ASSIGN_OR_RETURN(auto redis, RedisConn::Open(options.servers.redis));
    ASSIGN_OR_RETURN(uint64_t removed, redis->DeleteMatching(keys.ScanPattern()));
    if (removed > 0) std::cerr << "[engine_bench] removed " << removed << " old keys of " << sink.name << "\n";
    std::vector<std::string> probe_keys;
    for (const auto& id : ids) probe_keys.push_back(keys.Key(id));
    probe = std::make_unique<RedisProbe>(std::move(redis), std::move(probe_keys));
    ASSIGN_OR_RETURN(stats, RedisConn::Open(options.servers.redis));
    ASSIGN_OR_RETURN(usec_before, stats->WriteCommandMicros());
  } else if (sink.type == "elasticsearch") {
    RETURN_IF_ERROR(DropEsIndex(sink, options.servers.opensearch));
    ASSIGN_OR_RETURN(std::string index, BenchIndexName(sink));
    probe = std::make_unique<EsProbe>(std::make_unique<HttpConnection>(options.servers.opensearch), std::move(index), ids);
  } else if (sink.type == "aggregate") {
    const auto& agg = sink.Options<connectors::aggregate::AggregateSinkOptions>();
    sql::ConnectParams params = sql::ParamsFrom(config.mysql);
    if (!agg.database.empty()) params.database = agg.database;
    ASSIGN_OR_RETURN(auto view_conn, sql::Connection::Open(params));
    std::vector<std::string> drop;
    for (const auto& t : agg.tables) drop.push_back(t.name);
    drop.push_back(connectors::aggregate::AggregateOffsetsTable(sink.name));
    for (const auto& t : drop) {
      RETURN_IF_ERROR(view_conn->Execute("DROP TABLE IF EXISTS " + sql::QuoteIdent(t)).status());
    }
    std::vector<uint64_t> versions;
    for (const auto& l : last) versions.push_back(l.version);
    probe = std::make_unique<AggregateProbe>(std::move(view_conn), sink.name, sink.entity, heads, std::move(versions));
  } else {
    const auto& table = sink.Options<connectors::mysql::MysqlSinkOptions>();
    sql::ConnectParams params = sql::ParamsFrom(config.mysql);
    if (!table.database.empty()) params.database = table.database;
    ASSIGN_OR_RETURN(auto view_conn, sql::Connection::Open(params));
    RETURN_IF_ERROR(view_conn->Execute("DROP TABLE IF EXISTS " + sql::QuoteIdent(table.table)).status());
    probe = std::make_unique<MysqlProbe>(std::move(view_conn), table.table, ids);
  }

  DrainResult r;
  r.events = total;
  ASSIGN_OR_RETURN(const ServerCounters counters_start, ReadServerCounters(*conn));
  CpuWatch cpu;
  const auto t0 = Clock::now();
  // One or several engines; with several, each takes its share of the
  // partitions through the leases (their CPU is reported as one sum).
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (uint32_t i = 1; i <= std::max<uint32_t>(options.engines, 1); ++i) {
    ASSIGN_OR_RETURN(auto c, ChildProcess::Spawn({options.sluice_binary, "sync", "--config", options.config_path, "--id",
                                                  "drain-" + std::to_string(i)},
                                                 options.log_path));
    cpu.Watch("sluice", c->pid());
    children.push_back(std::move(c));
  }
  for (const auto& [name, pid] : options.watch) cpu.Watch(name, pid);
  const CpuWatch::Sample cpu_start = cpu.Take();
  // The engines' memory together.
  std::vector<pid_t> pids;
  for (const auto& c : children) pids.push_back(c->pid());
  MemorySampler memory(std::move(pids), std::chrono::milliseconds(options.rss_interval_ms));

  std::atomic<uint64_t> offsets_sum{0}, partitions_done{0};
  auto fail = [&](Status st) -> Result<DrainResult> {
    for (auto& c : children) c->Terminate();
    return st;
  };
  {
    uint64_t last_sum = 0;
    double last_t = 0;
    ProgressLine progress("drain " + sink.name, [&](double t) {
      const uint64_t sum = offsets_sum.load();
      const double rate = t > last_t ? static_cast<double>(sum - last_sum) / (t - last_t) : 0;
      last_sum = sum;
      last_t = t;
      return WithCommas(sum) + "/" + WithCommas(total) + " events by the flushed offsets (" +
             WithCommas(static_cast<uint64_t>(rate)) + "/s), " + std::to_string(partitions_done.load()) + "/" +
             std::to_string(partitions) + " partitions done, RSS " + std::to_string(memory.now_kib() / 1024) + " MiB";
    });
    auto next_offsets = Clock::now() + std::chrono::seconds(1);
    bool seen_any = false;
    std::vector<uint32_t> pending;  // partitions whose last event the view does not show yet
    for (uint32_t p = 0; p < partitions; ++p) pending.push_back(p);
    uint32_t done = 0;
    for (;;) {
      for (auto& c : children) {
        if (!c->Running()) {
          return Status(FailedPrecondition("sluice sync exited early with code " + std::to_string(c->Wait()) +
                                           "; see " + options.log_path));
        }
      }
      const auto now = Clock::now();
      if (now >= next_offsets) {
        auto o = ReadOffsets(*conn, sink);
        if (o.ok()) offsets_sum = o->event_sum;
        next_offsets += std::chrono::seconds(1);
      }
      // A partition that shows its last event is done for good: nothing
      // older overwrites a view's row. The partitions looked at go to the
      // back of the line: the last one is noticed within pending / window
      // looks, and a look that finds some done is followed by the next at
      // once (partitions of a drain finish together, at its end).
      const size_t look = std::min(pending.size(), probe->window());
      const std::vector<uint32_t> window(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(look));
      auto versions = probe->Versions(window);
      if (!versions.ok()) return fail(versions.status());
      bool any = done > 0;
      const uint32_t done_before = done;
      std::vector<uint32_t> still(pending.begin() + static_cast<std::ptrdiff_t>(look), pending.end());
      for (size_t i = 0; i < window.size(); ++i) {
        if ((*versions)[i] > 0) any = true;
        if ((*versions)[i] >= last[window[i]].version) {
          ++done;
        } else {
          still.push_back(window[i]);
        }
      }
      pending.swap(still);
      partitions_done = done;
      if (any && !seen_any) {
        seen_any = true;
        r.first_visible_seconds = Since(t0);
      }
      if (done == partitions) {
        r.seconds = Since(t0);
        break;
      }
      if (Since(t0) > options.timeout_seconds) {
        return fail(Unavailable("the drain did not finish within " + std::to_string(options.timeout_seconds) +
                                " s (" + std::to_string(done) + " partitions done)"));
      }
      if (done == done_before) std::this_thread::sleep_for(std::chrono::milliseconds(options.probe_interval_ms));
    }
    const CpuWatch::Sample cpu_end = cpu.Take();
    r.cpu = cpu.Compare(cpu_start, cpu_end, total);
    if (auto counters = ReadServerCounters(*conn); counters.ok() && r.seconds > 0) {
      r.mysql_selects_per_s = static_cast<double>(counters->selects - counters_start.selects) / r.seconds;
      r.mysql_inserts_per_s = static_cast<double>(counters->inserts - counters_start.inserts) / r.seconds;
      r.mysql_fsyncs_per_s = static_cast<double>(counters->fsyncs - counters_start.fsyncs) / r.seconds;
      r.mysql_page_reads_per_event =
          static_cast<double>(counters->page_reads - counters_start.page_reads) / static_cast<double>(std::max<uint64_t>(total, 1));
    }
    if (stats) {
      auto usec = stats->WriteCommandMicros();
      if (usec.ok()) r.redis_us_per_event = (*usec - usec_before) / static_cast<double>(total);
    }

    // The flushed offsets follow within engine.offset_flush_interval.
    for (;;) {
      ASSIGN_OR_RETURN(auto o, ReadOffsets(*conn, sink));
      offsets_sum = o.event_sum;
      if (o.event_sum >= total) {
        r.offsets_seconds = Since(t0);
        break;
      }
      if (Since(t0) > r.seconds + 30) return fail(Unavailable("the flushed offsets did not reach the heads in 30 s"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    memory.Stop();
    r.rss_peak_kib = memory.peak_kib();
    r.hwm_kib = memory.hwm_kib();
    r.rss_samples = memory.samples();
  }
  for (auto& c : children) {
    r.exit_code = c->Terminate();
    if (r.exit_code != 0) r.problems.push_back("sluice sync exited with " + std::to_string(r.exit_code) + " on SIGTERM");
  }

  ASSIGN_OR_RETURN(auto after, ReadOffsets(*conn, sink));
  r.applied = after.applied;
  r.stale = after.stale;
  r.dead_lettered = after.dead_lettered;
  if (after.rows != partitions) {
    r.problems.push_back(std::to_string(after.rows) + " offset rows, expected " + std::to_string(partitions));
  }
  if (after.event_sum != total) {
    r.problems.push_back("offsets sum to " + std::to_string(after.event_sum) + ", heads to " + std::to_string(total));
  }
  if (after.applied != total || after.stale != 0 || after.dead_lettered != 0) {
    r.problems.push_back("counters: applied " + std::to_string(after.applied) + ", stale " +
                         std::to_string(after.stale) + ", dead-lettered " + std::to_string(after.dead_lettered) +
                         "; expected every one of " + std::to_string(total) + " applied");
  }
  if (!after.all_running) r.problems.push_back("a partition's state is not 'running'");
  return r;
}

}  // namespace sluice::bench
