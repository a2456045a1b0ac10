// engine_bench: the sync engine's benchmarks (DESIGN 9) and their same-run
// baselines. One mode per run; bench/scenarios/*.bench string them together
// and prints the table that goes to docs/BENCHMARKS.md.
//
// Exit codes: 0 the run finished and verified its result, 1 it failed or
// its result did not verify, 2 a bad command line.
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>

#include "bench/bench_common.h"
#include "connectors/builtin_sink_types.h"
#include "connectors/elasticsearch/elasticsearch_options.h"
#include "bench/engine_bench_archive.h"
#include "bench/engine_bench_backlog.h"
#include "bench/engine_bench_drain.h"
#include "bench/engine_bench_es.h"
#include "bench/engine_bench_lag.h"
#include "bench/engine_bench_takeover.h"
#include "bench/engine_bench_util.h"
#include "config/config.h"
#include "sql/params.h"

namespace po = boost::program_options;

namespace sluice::bench {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

constexpr const char* kHelp = R"(engine_bench: benchmarks of the sync engine (pull path) and their baselines

usage: engine_bench --mode MODE --config FILE [options]

modes:
  load        insert a backlog straight into the event tables of a fresh, `sluice init`ed
              database: --entities entities (ids "<run-id>-a<k>", partition by the sluice
              partitioner) with versions 1..--versions each, event_ids dense per partition,
              versions of a partition's entities interleaved round by round; multi-row
              INSERTs (--rows-per-insert) on --threads connections; then checks that
              event_ids and versions are dense
  drain       start `sluice sync --config FILE` (FILE has exactly ONE sink, with no offsets
              yet) and time it from start until every partition's last event is visible
              in the view; samples VmRSS every 100 ms (peak) and VmHWM at the end, the CPU
              split of sluice and --watch processes; stops it, checks its stored counters
              and runs `sluice verify` on the sink
  direct      the sink's own Apply() (--sink; Send/Receive with as many chunks in flight
              as a pipelining sink takes) on the same events in the engine's order and
              chunking, without the engine or MySQL reads: what the sink costs alone
  redis_raw   baseline: SET <key> <the same json value> for every event, pipelined
              (--pipeline per round trip), one hiredis connection, into --sink's key space
  mysql_raw   baseline: multi-row INSERT ... ON DUPLICATE KEY UPDATE of the same rows
              (up to --rows-per-insert per statement, autocommit) over --threads connections,
              connection t with the partitions p % threads == t, into --sink's table
              (re-created by the sink in its own shape)
  es_raw      baseline: the same documents as plain _bulk index actions (no version
              check; with --es-versioned, each with its version and version_type
              external, as the sink writes them), up to the sink's batch_max per request,
              over the sink's connections (connection k with the partitions
              p % connections == k), into --sink's index (re-created as the sink creates it)
  lag         open-loop HTTP load at --rate commands/s against a running `sluice serve`
              or `sluice writer` (--url) while a sampler polls --sample entities' keys of
              the redis --sink; lag = first seen in Redis - committed_at; verifies.
              With --source storage: the same schedule of events inserted straight into
              the event tables (no writer; run `sluice sync` on FILE beside it)
  archive     run `sluice archive run --config FILE` (FILE has an archive and a policy) to
              completion: events archived per second and the CPU per event, the event
              tables' size before, after (ANALYZE TABLE) and after OPTIMIZE TABLE, the
              segments' bytes (from `sluice archive status --json`)
  rebuild     run `sluice rebuild --config FILE --sink NAME` against the process already
              running FILE (its admin endpoint), timed until it exits; events = every
              partition's head; CPU of --watch processes (give the running sluice), and the
              memory of the one watched as sluice=PID (VmRSS every 100 ms, peak; VmHWM)
  history     GET /v1/entities/<type>/<id>/events (pages followed) of --sample entities of
              the backlog (--run-id, --entities, --versions as loaded) from the writer at
              --url, one keep-alive connection; every history must be the backlog's, whole
              and in order; events/s, CPU of --watch processes
  cleanup     delete the keys of every redis sink and the index of every elasticsearch
              sink in FILE

The backlog modes (load, direct, redis_raw, mysql_raw, es_raw) regenerate the same events
from --run-id, --entities and --versions: give them the same values. The raw baselines write
the events partition by partition (--order partitions), or, with --order engine, in the
order the sync engine drains them in (read passes over the partitions in groups of up to
16, engine.batch_max per group, batches joined into chunks of --pipeline, --rows-per-insert
or the sink's batch_max; with several connections each takes its partitions' share of a
chunk), as direct always does with the sink's batch_max. Modes that write a view
finish with `sluice verify --config FILE --sink NAME` (needs --sluice) unless --no-verify;
its time (verify_s) and its own peak RSS (verify_rss_mib, the child's ru_maxrss) are reported.

options)";

struct Args {
  std::string mode;
  std::string config_path;
  std::string sink;
  std::string run_id;
  std::string label;
  std::string sluice;
  std::string log_path;
  std::string url;
  bool no_verify = false;
  bool one_line = false;
  uint64_t entities = 100000;
  uint32_t versions = 10;
  uint32_t threads = 2;
  uint32_t rows_per_insert = 1000;
  uint32_t pipeline = 1000;
  bool es_versioned = false;
  std::string order = "partitions";
  double timeout = 300;
  uint32_t engines = 1;
  uint32_t kills = 20;
  std::vector<std::pair<std::string, pid_t>> watch;
  ViewServers servers;
  LagOptions lag;
};

struct Usage {
  std::string message;
};

// host:port from http://host:port[/].
void ParseUrl(const std::string& url, LagOptions& lag) {
  std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : url;
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  auto server = ParseHostPort(rest);
  if (!server.ok()) throw Usage{"--url wants http://HOST:PORT, got " + url};
  lag.host = server->host;
  lag.port = server->port;
}

std::optional<Args> ParseArgs(int argc, char** argv) {
  Args a;
  std::vector<std::string> watch;
  std::string redis, opensearch;
  po::options_description desc(kHelp);
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("mode", po::value(&a.mode), "load | drain | direct | redis_raw | mysql_raw | es_raw | lag | takeover | archive | rebuild | history | cleanup")
    ("config", po::value(&a.config_path), "the sluice config: main storage, the entity type, the sinks")
    ("sink", po::value(&a.sink), "the sink (by name in --config) a mode writes or reads")
    ("run-id", po::value(&a.run_id), "prefix of entity and command ids (load, direct, *_raw, lag)")
    ("label", po::value(&a.label), "a name for this run in the report (default: the mode)")
    ("entities", po::value(&a.entities)->default_value(100000), "entities of the backlog; lag: entities written")
    ("versions", po::value(&a.versions)->default_value(10), "versions per entity in the backlog")
    ("threads", po::value(&a.threads)->default_value(2), "load, mysql_raw: concurrent INSERT connections")
    ("rows-per-insert", po::value(&a.rows_per_insert)->default_value(1000), "load, mysql_raw: rows per statement")
    ("pipeline", po::value(&a.pipeline)->default_value(1000), "redis_raw: SETs per round trip")
    ("es-versioned", po::bool_switch(&a.es_versioned), "es_raw: index actions with version_type external")
    ("order", po::value(&a.order)->default_value("partitions"), "redis_raw, mysql_raw, es_raw: partitions (each whole, one after the other) | engine (as the sync engine reads and chunks a backlog)")
    ("sluice", po::value(&a.sluice), "the sluice binary (drain; verification)")
    ("log", po::value(&a.log_path)->default_value("engine_bench_sluice.log"), "where child processes write their output")
    ("no-verify", po::bool_switch(&a.no_verify), "skip `sluice verify` at the end")
    ("timeout", po::value(&a.timeout)->default_value(300), "drain: give up after this many seconds")
    ("engines", po::value(&a.engines)->default_value(1), "drain: `sluice sync` processes sharing the sink (1-16)")
    ("kills", po::value(&a.kills)->default_value(20), "takeover: engines killed (SIGKILL), one takeover each")
    ("watch", po::value(&watch)->composing(), "NAME=PID: also report this process's CPU (repeatable)")
    ("url", po::value(&a.url), "lag: the writer, http://HOST:PORT")
    ("redis", po::value(&redis)->default_value("127.0.0.1:16379"), "HOST:PORT of the Redis the redis sinks write (database 0)")
    ("opensearch", po::value(&opensearch)->default_value("127.0.0.1:19200"), "HOST:PORT of the OpenSearch the elasticsearch sinks write")
    ("rate", po::value(&a.lag.rate)->default_value(10000), "lag: commands per second (open loop)")
    ("seconds", po::value(&a.lag.seconds)->default_value(20), "lag: measured window")
    ("warmup", po::value(&a.lag.warmup_seconds)->default_value(3), "lag: seconds at the same rate before it")
    ("connections", po::value(&a.lag.connections)->default_value(64), "lag: keep-alive HTTP connections")
    ("sample", po::value(&a.lag.sample)->default_value(300), "lag: entities the sampler polls; history: entities read")
    ("poll-interval-us", po::value(&a.lag.poll_interval_us)->default_value(1000), "lag: sampler pause between MGETs")
    ("source", po::value(&a.lag.source)->default_value("http"), "lag: http (commands to --url) | storage (rows into the event tables) | kafka_raw (a kafka sink's records produced straight into its topic, no sluice; in transactions when the sink is transactional)")
    ("storage-writers", po::value(&a.lag.storage_writers)->default_value(4), "lag, source storage: inserting threads, one transaction each per round")
    ("notices", po::bool_switch(&a.lag.notices), "lag, source storage: announce each commit to the engines, as a writer does (engine.notices)")
    ("raw-tx-producers", po::value(&a.lag.raw_tx_producers)->default_value(1), "lag, source kafka_raw with a transactional sink: producers per source partition, taking the rounds in turn")
    ("dump-lags", po::value(&a.lag.dump_path), "lag: write every lag sample to this file (committed_at_us lag_us entity version)")
    ("format", po::value<std::string>()->default_value("text"), "text | kv (one line of key=value)");
  // clang-format on
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw Usage{e.what()};
  }
  if (vm.count("help")) {
    std::cout << desc << "\nExit codes: 0 finished and verified, 1 failed or did not verify, 2 usage error.\n";
    return std::nullopt;
  }
  const std::string format = vm["format"].as<std::string>();
  if (format != "text" && format != "kv") throw Usage{"--format is text or kv"};
  a.one_line = format == "kv";
  static const std::vector<std::string> kModes = {"load", "drain", "direct", "redis_raw", "mysql_raw", "es_raw", "lag", "takeover", "archive", "rebuild", "history", "cleanup"};
  if (std::find(kModes.begin(), kModes.end(), a.mode) == kModes.end()) throw Usage{"--mode: unknown mode '" + a.mode + "'"};
  if (a.config_path.empty()) throw Usage{"--config is required"};
  const bool backlog =
      a.mode == "load" || a.mode == "direct" || a.mode == "redis_raw" || a.mode == "mysql_raw" || a.mode == "es_raw";
  if ((backlog || a.mode == "lag" || a.mode == "history") && a.run_id.empty()) throw Usage{"--mode " + a.mode + " needs --run-id"};
  if ((a.mode == "direct" || a.mode == "redis_raw" || a.mode == "mysql_raw" || a.mode == "es_raw" ||
       a.mode == "lag" || a.mode == "rebuild") &&
      a.sink.empty()) {
    throw Usage{"--mode " + a.mode + " needs --sink"};
  }
  if ((a.mode == "drain" || a.mode == "takeover" || a.mode == "archive" || a.mode == "rebuild") && a.sluice.empty()) {
    throw Usage{"--mode " + a.mode + " needs --sluice"};
  }
  if (a.engines < 1 || a.engines > 16) throw Usage{"--engines must be 1-16, got " + std::to_string(a.engines)};
  if (a.mode == "lag") {
    if (a.lag.source != "http" && a.lag.source != "storage" && a.lag.source != "kafka_raw") {
      throw Usage{"--source must be http, storage or kafka_raw"};
    }
    if (a.lag.raw_tx_producers < 1 || a.lag.raw_tx_producers > 8) throw Usage{"--raw-tx-producers must be 1..8"};
    if (a.lag.notices && a.lag.source != "storage") throw Usage{"--notices needs --source storage"};
    if (a.lag.source == "http") {
      if (a.url.empty()) throw Usage{"--mode lag needs --url (or --source storage)"};
      ParseUrl(a.url, a.lag);
    }
    a.lag.entities = vm["entities"].defaulted() ? 10000 : a.entities;
  }
  if (a.mode == "history") {
    if (a.url.empty()) throw Usage{"--mode history needs --url (the writer)"};
    ParseUrl(a.url, a.lag);
  }
  if (a.entities == 0 || a.versions == 0) throw Usage{"--entities and --versions must be positive"};
  if (std::string error; !ParseWatch(watch, &a.watch, &error)) throw Usage{error};
  auto redis_server = ParseHostPort(redis);
  auto opensearch_server = ParseHostPort(opensearch);
  if (!redis_server.ok()) throw Usage{"--redis: " + redis_server.status().message()};
  if (!opensearch_server.ok()) throw Usage{"--opensearch: " + opensearch_server.status().message()};
  a.servers = ViewServers{*redis_server, *opensearch_server};
  a.lag.redis = a.servers.redis;
  a.lag.watch = a.watch;
  a.lag.watch.insert(a.lag.watch.begin(), {"engine_bench", getpid()});
  a.lag.run_id = a.run_id;
  if (a.order != "partitions" && a.order != "engine") throw Usage{"--order: partitions or engine, not '" + a.order + "'"};
  if (a.label.empty()) a.label = a.mode;
  return a;
}

// Runs `sluice verify` on one sink; adds its time and outcome to the report.
// settle_seconds > 0 (lag runs, whose load ends with only the sampled
// entities known to be caught up): a difference may be the view still
// applying the rest, so verify runs again each second until it passes or
// the time is up; a real difference stays and fails the run.
bool VerifySink(const Args& a, const std::string& sink, Report& report, std::vector<std::string>& problems,
                double settle_seconds = 0) {
  if (a.no_verify) {
    report.Add("verify", "skipped");
    return true;
  }
  if (a.sluice.empty()) {
    problems.push_back("no --sluice binary to verify the view with (or pass --no-verify)");
    return false;
  }
  std::cerr << "[engine_bench] sluice verify --sink " << sink << " (output in " << a.log_path << ")\n";
  const auto start = Clock::now();
  Result<int> code = 0;
  uint64_t attempts = 0;
  long max_rss_kib = 0;  // the verify child's own peak RSS (ru_maxrss), the highest of the attempts
  {
    ProgressLine progress("sluice verify " + sink, [](double) { return std::string("running"); });
    for (;;) {
      ++attempts;
      rusage usage{};
      code = RunProgram({a.sluice, "verify", "--config", a.config_path, "--sink", sink}, a.log_path, &usage);
      max_rss_kib = std::max(max_rss_kib, usage.ru_maxrss);
      if (!code.ok() || *code == 0 || std::chrono::duration<double>(Clock::now() - start).count() >= settle_seconds) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  report.Add("verify_attempts", attempts);
  report.Add("verify_s", std::chrono::duration<double>(Clock::now() - start).count(), 1);
  report.Add("verify_rss_mib", static_cast<double>(max_rss_kib) / 1024.0, 1);
  if (!code.ok()) {
    problems.push_back("cannot run sluice verify: " + code.status().message());
    return false;
  }
  report.Add("verify_exit", static_cast<uint64_t>(*code));
  if (*code != 0) problems.push_back("sluice verify found differences or failed (exit " + std::to_string(*code) + ")");
  return *code == 0;
}

const config::SinkConfig* FindSink(const config::Config& cfg, const std::string& name) {
  for (const auto& s : cfg.sinks) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// events, seconds and rate (events/s) of a timed run.
void AddRate(Report& report, uint64_t events, double seconds) {
  report.Add("events", events);
  report.Add("seconds", seconds, 2);
  report.Add("rate", seconds > 0 ? static_cast<double>(events) / seconds : 0.0, 0);
}

// The memory of the sluice process(es) a run watched: the highest VmRSS
// sampled, VmHWM at the end, samples taken.
void AddMemory(Report& report, uint64_t rss_peak_kib, uint64_t hwm_kib, uint64_t samples) {
  report.Add("rss_peak_mib", static_cast<double>(rss_peak_kib) / 1024.0, 1);
  report.Add("hwm_mib", static_cast<double>(hwm_kib) / 1024.0, 1);
  report.Add("rss_samples", samples);
}

void AddCpu(Report& report, const std::vector<std::pair<std::string, std::string>>& cpu) {
  for (const auto& [k, v] : cpu) report.Add(k, v);
}

int Run(const Args& a) {
  auto cfg = config::LoadConfig(a.config_path, connectors::BuiltinSinkTypes());
  if (!cfg.ok()) {
    std::cerr << cfg.status().message() << "\n";
    return kExitFailure;
  }
  const config::SinkConfig* sink = nullptr;
  if (!a.sink.empty()) {
    sink = FindSink(*cfg, a.sink);
    if (!sink) {
      std::cerr << "engine_bench: no sink named '" << a.sink << "' in " << a.config_path << "\n";
      return kExitFailure;
    }
  }
  if (cfg->entities.size() != 1) {
    std::cerr << "engine_bench: " << a.config_path << " must declare exactly one entity type\n";
    return kExitFailure;
  }
  const auto& entity = cfg->entities.begin()->second;
  BacklogSpec spec;
  spec.run_id = a.run_id;
  spec.type = entity.name;
  spec.partitions = entity.partitions;
  spec.entities = a.entities;
  spec.versions = a.versions;

  Report report;
  report.Add("mode", a.mode);
  report.Add("label", a.label);
  const Backlog::Order order = a.order == "engine" ? Backlog::Order::kEngine : Backlog::Order::kPartitions;
  if (a.mode.ends_with("_raw")) report.Add("order", a.order);
  std::vector<std::string> problems;
  bool verified = true;
  Status failed = Status::Ok();

  // direct and *_raw: the CPU split while they run (the benchmark itself does
  // the sink's or the client's work there).
  CpuWatch cpu;
  cpu.Watch("engine_bench", getpid());
  for (const auto& [name, pid] : a.watch) cpu.Watch(name, pid);
  const CpuWatch::Sample cpu_start = cpu.Take();
  auto add_write = [&](const WriteResult& w) {
    AddCpu(report, cpu.Compare(cpu_start, cpu.Take(), w.events));
    AddRate(report, w.events, w.seconds);
    if (w.redis_us_per_event >= 0) report.Add("redis_us_per_event", w.redis_us_per_event, 2);
    problems.insert(problems.end(), w.problems.begin(), w.problems.end());
  };

  if (a.mode == "load") {
    Backlog backlog(spec);
    auto r = LoadBacklog(sql::ParamsFrom(cfg->mysql), backlog, a.threads, a.rows_per_insert);
    if (!r.ok()) {
      failed = r.status();
    } else {
      AddRate(report, r->rows, r->seconds);
      report.Add("entities", a.entities);
      report.Add("partitions", static_cast<uint64_t>(spec.partitions));
      report.Add("statements", r->statements);
      report.Add("state_bytes", static_cast<uint64_t>(backlog.State(a.entities - 1, a.versions).size()));
      problems = r->problems;
    }
  } else if (a.mode == "drain") {
    DrainOptions d;
    d.sluice_binary = a.sluice;
    d.config_path = a.config_path;
    d.log_path = a.log_path;
    d.engines = a.engines;
    d.watch = a.watch;
    d.timeout_seconds = a.timeout;
    d.servers = a.servers;
    auto r = RunDrain(*cfg, d);
    if (!r.ok()) {
      failed = r.status();
    } else {
      const auto& s = cfg->sinks.at(0);
      report.Add("sink", s.name + "(" + s.type + ")");
      AddRate(report, r->events, r->seconds);
      report.Add("first_visible_s", r->first_visible_seconds, 2);
      report.Add("offsets_s", r->offsets_seconds, 2);
      AddMemory(report, r->rss_peak_kib, r->hwm_kib, r->rss_samples);
      report.Add("applied", r->applied);
      report.Add("stale", r->stale);
      report.Add("dead_lettered", r->dead_lettered);
      report.Add("exit_code", static_cast<uint64_t>(r->exit_code));
      if (r->redis_us_per_event >= 0) report.Add("redis_us_per_event", r->redis_us_per_event, 2);
      report.Add("mysql_selects_per_s", r->mysql_selects_per_s, 0);
      report.Add("mysql_inserts_per_s", r->mysql_inserts_per_s, 0);
      report.Add("mysql_fsyncs_per_s", r->mysql_fsyncs_per_s, 0);
      report.Add("mysql_page_reads_per_event", r->mysql_page_reads_per_event, 2);
      AddCpu(report, r->cpu);
      problems = r->problems;
      verified = VerifySink(a, s.name, report, problems);
    }
  } else if (a.mode == "direct") {
    Backlog backlog(spec);
    auto r = ApplyDirect(*cfg, *sink, a.servers, backlog);
    if (!r.ok()) {
      failed = r.status();
    } else {
      report.Add("sink", sink->name + "(" + sink->type + ")");
      add_write(*r);
      report.Add("apply_s", r->busy_seconds, 2);
      report.Add("apply_rate", r->busy_seconds > 0 ? static_cast<double>(r->events) / r->busy_seconds : 0.0, 0);
      report.Add("applied", r->applied);
      verified = VerifySink(a, sink->name, report, problems);
    }
  } else if (a.mode == "redis_raw") {
    Backlog backlog(spec);
    auto r = RawRedisSets(*sink, a.servers.redis, backlog, a.pipeline, order, cfg->engine.batch_max);
    if (!r.ok()) {
      failed = r.status();
    } else {
      report.Add("pipeline", static_cast<uint64_t>(a.pipeline));
      add_write(*r);
      verified = VerifySink(a, sink->name, report, problems);
    }
  } else if (a.mode == "mysql_raw") {
    Backlog backlog(spec);
    auto r = RawMysqlUpserts(*cfg, *sink, backlog, a.rows_per_insert, a.threads, order);
    if (!r.ok()) {
      failed = r.status();
    } else {
      report.Add("rows_per_insert", static_cast<uint64_t>(a.rows_per_insert));
      report.Add("connections", static_cast<uint64_t>(a.threads));
      add_write(*r);
      verified = VerifySink(a, sink->name, report, problems);
    }
  } else if (a.mode == "es_raw") {
    Backlog backlog(spec);
    auto r = RawEsBulk(*cfg, *sink, a.servers.opensearch, backlog, a.es_versioned, order);
    if (!r.ok()) {
      failed = r.status();
    } else {
      report.Add("batch", static_cast<uint64_t>(sink->batch_max));
      report.Add("versioned", static_cast<uint64_t>(a.es_versioned ? 1 : 0));
      report.Add("connections",
                 uint64_t{sink->Options<connectors::elasticsearch::ElasticsearchSinkOptions>().connections});
      add_write(*r);
      verified = VerifySink(a, sink->name, report, problems);
    }
  } else if (a.mode == "takeover") {
    TakeoverOptions t;
    t.sluice_binary = a.sluice;
    t.config_path = a.config_path;
    t.log_path = a.log_path;
    t.kills = a.kills;
    t.timeout_seconds = a.timeout;
    auto r = RunTakeovers(*cfg, t);
    if (!r.ok()) {
      failed = r.status();
    } else {
      const LatencySummary l = Summarize(r->takeover_ns);
      const double ttl_ms = static_cast<double>(cfg->engine.lease_ttl.count());
      report.Add("kills", l.count);
      report.Add("partitions_moved", r->partitions_moved);
      report.Add("lease_ttl_ms", ttl_ms, 0);
      report.Add("takeover_p50_ms", l.p50_ms, 0);
      report.Add("takeover_p99_ms", l.p99_ms, 0);
      report.Add("takeover_max_ms", l.max_ms, 0);
      report.Add("p50_per_ttl", l.p50_ms / ttl_ms, 2);
      report.Add("p99_per_ttl", l.p99_ms / ttl_ms, 2);
      report.Add("settle_s", r->settle_seconds, 2);
      verified = true;
    }
  } else if (a.mode == "lag") {
    auto r = RunLag(*cfg, *sink, a.lag);
    if (!r.ok()) {
      failed = r.status();
    } else {
      report.Add("rate_target", a.lag.rate, 0);
      report.Add("seconds", a.lag.seconds, 1);
      report.Add("connections", static_cast<uint64_t>(a.lag.connections));
      report.Add("source", a.lag.source);
      if (a.lag.source == "storage") report.Add("notices", a.lag.notices ? "yes" : "no");
      report.Add("entities", a.lag.entities);
      report.Add("commands", r->commands);
      report.Add("achieved_rate", r->achieved_rate, 0);
      report.Add("ok", r->ok);
      report.Add("failures", r->failures);
      report.Add("retries_503", r->retries);
      report.Add("reconnects", r->reconnects);
      report.Add("max_waiting", r->max_backlog);
      report.Add("unsent", r->unsent);
      report.Add("http_p50_ms", r->http.p50_ms, 2);
      report.Add("http_p99_ms", r->http.p99_ms, 2);
      report.Add("http_max_ms", r->http.max_ms, 2);
      report.Add("sampled_entities", static_cast<uint64_t>(std::min<uint64_t>(a.lag.sample, a.lag.entities)));
      report.Add("versions_committed", r->versions_committed);
      report.Add("lag_samples", r->lag_samples);
      report.Add("lag_min_ms", r->lag_min_ms, 2);
      report.Add("lag_p50_ms", r->lag.p50_ms, 2);
      report.Add("lag_p90_ms", r->lag.p90_ms, 2);
      report.Add("lag_p99_ms", r->lag.p99_ms, 2);
      report.Add("lag_p999_ms", r->lag.p999_ms, 2);
      report.Add("lag_max_ms", r->lag.max_ms, 2);
      report.Add("polls", r->polls);
      report.Add("poll_cycle_ms", r->poll_cycle_ms, 2);
      report.Add("catchup_s", r->catchup_seconds, 2);
      report.Add("mysql_selects_per_s", r->mysql_selects_per_s, 0);
      report.Add("mysql_inserts_per_s", r->mysql_inserts_per_s, 0);
      report.Add("mysql_fsyncs_per_s", r->mysql_fsyncs_per_s, 0);
      AddCpu(report, r->cpu);
      problems = r->problems;
      // The raw producer's topic is no view of storage: nothing to verify
      // beyond what the observer checked (every version, in order, once).
      verified = a.lag.source == "kafka_raw" ? problems.empty()
                                             : VerifySink(a, sink->name, report, problems, /*settle_seconds=*/30);
    }
  } else if (a.mode == "archive" || a.mode == "rebuild") {
    ArchiveBenchOptions o;
    o.sluice_binary = a.sluice;
    o.config_path = a.config_path;
    o.log_path = a.log_path;
    o.sink = a.sink;
    o.watch = a.watch;
    auto per_event = [](uint64_t bytes, uint64_t events) {
      return events > 0 ? static_cast<double>(bytes) / static_cast<double>(events) : 0.0;
    };
    if (a.mode == "archive") {
      auto r = RunArchive(*cfg, o);
      if (!r.ok()) {
        failed = r.status();
      } else {
        AddRate(report, r->events, r->seconds);
        report.Add("segments", r->segments);
        report.Add("sluice_us_per_op", r->events > 0 ? r->sluice_cpu_seconds * 1e6 / r->events : 0.0, 1);
        report.Add("hot_rows", r->before.rows);
        report.Add("stubs", r->stubs);
        report.Add("hot_bytes_before", r->before.bytes);
        report.Add("hot_bytes_after", r->after.bytes);
        report.Add("hot_bytes_optimized", r->optimized.bytes);
        report.Add("hot_bytes_per_row_before", per_event(r->before.bytes, r->before.rows), 1);
        report.Add("hot_bytes_per_row_optimized", per_event(r->optimized.bytes, r->optimized.rows), 1);
        report.Add("hot_shrink", r->optimized.bytes > 0 ? static_cast<double>(r->before.bytes) / r->optimized.bytes : 0.0,
                   2);
        report.Add("optimize_s", r->optimize_seconds, 2);
        report.Add("archive_bytes", r->archive_bytes);
        report.Add("archive_bytes_per_event", per_event(r->archive_bytes, r->events), 1);
        report.Add("state_bytes_per_event", per_event(r->archived_state_bytes, r->events), 1);
        AddCpu(report, r->cpu);
        problems = r->problems;
      }
    } else {
      auto r = RunRebuild(*cfg, o);
      if (!r.ok()) {
        failed = r.status();
      } else {
        report.Add("sink", sink->name + "(" + sink->type + ")");
        AddRate(report, r->events, r->seconds);
        if (r->rss_samples > 0) AddMemory(report, r->rss_peak_kib, r->hwm_kib, r->rss_samples);
        AddCpu(report, r->cpu);
        verified = VerifySink(a, sink->name, report, problems);
      }
    }
  } else if (a.mode == "history") {
    ArchiveBenchOptions o;
    o.watch = a.watch;
    Backlog backlog(spec);
    auto r = RunHistory(backlog, Endpoint{a.lag.host, a.lag.port}, a.lag.sample, o);
    if (!r.ok()) {
      failed = r.status();
    } else {
      report.Add("entities", r->entities);
      report.Add("requests", r->requests);
      AddRate(report, r->events, r->seconds);
      report.Add("requests_per_s", r->seconds > 0 ? static_cast<double>(r->requests) / r->seconds : 0.0, 0);
      AddCpu(report, r->cpu);
      problems = r->problems;
    }
  } else if (a.mode == "cleanup") {
    uint64_t removed = 0;
    for (const auto& s : cfg->sinks) {
      if (s.type == "elasticsearch") {
        if (failed = DropEsIndex(s, a.servers.opensearch); !failed.ok()) break;
        continue;
      }
      if (s.type != "redis") continue;
      auto keys = BenchRedisKeys(s);
      auto conn = keys.ok() ? RedisConn::Open(a.servers.redis) : Result<std::unique_ptr<RedisConn>>(keys.status());
      if (!conn.ok()) {
        failed = conn.status();
        break;
      }
      // The pattern covers the tombstones (<key>:_tomb) too.
      auto n = (*conn)->DeleteMatching(keys->ScanPattern());
      if (!n.ok()) {
        failed = n.status();
        break;
      }
      removed += *n;
    }
    report.Add("keys_removed", removed);
  }

  if (!failed.ok()) {
    std::cerr << "engine_bench " << a.mode << ": " << failed.ToString() << "\n";
    return kExitFailure;
  }
  for (const auto& p : problems) std::cerr << "engine_bench " << a.mode << ": PROBLEM: " << p << "\n";
  const bool ok = verified && problems.empty();
  report.Add("problems", static_cast<uint64_t>(problems.size()));
  report.Add("verified", !ok ? "no" : a.no_verify ? "skipped" : "yes");
  report.Print(a.one_line);
  return ok ? kExitOk : kExitFailure;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) {
  using namespace sluice::bench;
  try {
    auto args = ParseArgs(argc, argv);
    if (!args) return kExitOk;
    return Run(*args);
  } catch (const Usage& u) {
    std::cerr << "engine_bench: " << u.message << "\nRun engine_bench --help for usage.\n";
    return kExitUsage;
  }
}
