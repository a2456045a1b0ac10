// writer_bench: throughput and latency of the writer's HTTP API, and the
// same-run baselines it is judged against (DESIGN 9). See bench/README.md.
//
//   writer_bench --mode http --url http://127.0.0.1:8080 --entities 1
//   writer_bench --mode naive --mysql-database sluice_bench_baselines
//   writer_bench --mode raw_insert --mysql-database sluice_bench_baselines
//
// Exit status: 0 when every command got a verified reply and every check
// passed, 1 otherwise (or when the run could not start), 2 on a bad command line.
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "bench/bench_common.h"
#include "bench/http_load.h"
#include "bench/mysql_bench.h"
#include "sql/schema.h"

namespace sluice::bench {
namespace {

namespace po = boost::program_options;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct Usage {
  std::string message;
};

struct Flags {
  std::string mode;
  std::string label;
  std::string format;
  uint64_t commands = 0;
  double min_seconds = 0;
  double warmup = 0;
  uint64_t entities = 1;
  std::string type;
  std::string command;
  std::string run_id;
  uint64_t note_bytes = 0;
  uint64_t state_bytes = 0;
  bool stored_bytes = false;
  uint64_t seed = 0;
  std::string url;
  std::string ca;
  uint32_t connections = 0;
  uint32_t threads = 0;
  uint32_t max_attempts = 0;
  uint32_t naive_threads = 0;
  uint32_t raw_threads = 0;
  uint32_t batch_rows = 0;
  sql::ConnectParams mysql;
  bool allow_weak_durability = false;
  std::vector<std::string> watch;
};

void RaiseFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// "http[s]://host:port[/]" -> host, port, whether https.
void ParseUrl(const std::string& url, std::string& host, uint16_t& port, bool& tls) {
  tls = url.rfind("https://", 0) == 0;
  const std::string scheme = tls ? "https://" : "http://";
  if (url.rfind(scheme, 0) != 0) throw Usage{"--url must start with http:// or https:// (got '" + url + "')"};
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || rest.find('/') != std::string::npos) {
    throw Usage{"--url must look like http[s]://HOST:PORT (got '" + url + "')"};
  }
  host = rest.substr(0, colon);
  const std::string p = rest.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos || std::stoul(p) == 0 ||
      std::stoul(p) > 65535) {
    throw Usage{"--url has no valid port (got '" + url + "')"};
  }
  port = static_cast<uint16_t>(std::stoul(p));
}

uint64_t WarmupCount(double fraction, uint64_t count) {
  if (fraction <= 0) return 0;
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(fraction * static_cast<double>(count))));
}

void AddLatency(Report& report, const LatencySummary& s) {
  report.Add("p50_ms", s.p50_ms, 3);
  report.Add("p90_ms", s.p90_ms, 3);
  report.Add("p99_ms", s.p99_ms, 3);
  report.Add("p999_ms", s.p999_ms, 3);
  report.Add("max_ms", s.max_ms, 3);
}

void PrintSamples(const std::string& what, const std::vector<std::string>& samples) {
  for (const auto& s : samples) std::cerr << "[writer_bench] " << what << ": " << s << "\n";
}

// Reads and reports MySQL's durability settings; false when they are weak
// and weak durability is not allowed.
bool CheckDurability(sql::Connection& conn, const Flags& f, Report& report) {
  auto d = sql::ReadDurability(conn);
  if (!d.ok()) {
    std::cerr << "writer_bench: cannot read MySQL's durability settings: " << d.status().message() << "\n";
    return false;
  }
  report.Add("innodb_flush_log_at_trx_commit", static_cast<uint64_t>(d->innodb_flush_log_at_trx_commit));
  report.Add("durable", d->durable() ? "yes" : "no");
  if (!d->durable()) {
    std::cerr << "writer_bench: MySQL is not durable (" << d->Describe() << ")"
              << (f.allow_weak_durability ? "; continuing because --allow-weak-durability was given\n"
                                          : "; the figures would not be comparable. Pass --allow-weak-durability "
                                            "to measure anyway\n");
    return f.allow_weak_durability;
  }
  return true;
}

// Samples the server's counters around the timed part, when connected.
class ServerWatch {
 public:
  explicit ServerWatch(sql::Connection* conn) : conn_(conn) {}
  void Before() { before_ = Read(); }
  void After() { after_ = Read(); }
  // Statements and fsyncs per second of the timed part, server-wide.
  void AddTo(Report& report, double seconds) const {
    if (!before_ || !after_ || seconds <= 0) return;
    auto rate = [&](uint64_t a, uint64_t b) { return static_cast<double>(b - a) / seconds; };
    report.Add("mysql_inserts_per_s", rate(before_->inserts, after_->inserts), 0);
    report.Add("mysql_selects_per_s", rate(before_->selects, after_->selects), 0);
    report.Add("mysql_fsyncs_per_s", rate(before_->fsyncs, after_->fsyncs), 0);
  }

 private:
  std::optional<ServerCounters> Read() {
    if (conn_ == nullptr) return std::nullopt;
    auto c = ReadServerCounters(*conn_);
    if (!c.ok()) {
      std::cerr << "writer_bench: cannot read MySQL's status counters: " << c.status().message() << "\n";
      return std::nullopt;
    }
    return *c;
  }
  sql::Connection* conn_;
  std::optional<ServerCounters> before_, after_;
};

CpuWatch MakeCpuWatch(const Flags& f) {
  CpuWatch watch;
  watch.Watch("loadgen", getpid());
  for (const auto& w : f.watch) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0) throw Usage{"--watch takes NAME=PID (got '" + w + "')"};
    const std::string pid = w.substr(eq + 1);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) {
      throw Usage{"--watch takes NAME=PID (got '" + w + "')"};
    }
    watch.Watch(w.substr(0, eq), static_cast<pid_t>(std::stol(pid)));
  }
  return watch;
}

void AddCpu(Report& report, const CpuWatch& watch, const CpuWatch::Sample& a, const CpuWatch::Sample& b,
            uint64_t ops) {
  for (const auto& [name, value] : watch.Compare(a, b, ops)) report.Add(name, value);
}

int RunHttp(const Flags& f) {
  HttpLoadOptions o;
  // "http://h:p" or several writers "http://h:p1,http://h:p2" (same host).
  {
    std::string rest = f.url;
    bool first = true;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string one = rest.substr(0, comma);
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
      std::string host;
      uint16_t port = 0;
      bool tls = false;
      ParseUrl(one, host, port, tls);
      if (first) {
        o.host = host;
        o.port = port;
        o.tls = tls;
        first = false;
      } else {
        if (tls != o.tls) throw Usage{"--url: every writer http:// or every writer https://"};
        o.more_ports.push_back(port);
      }
    }
  }
  o.type = f.type;
  o.command = f.command;
  o.connections = f.connections;
  o.threads = f.threads;
  o.entities = f.entities;
  o.seed = f.seed;
  o.run_id = f.run_id;
  o.note = MakeNote(f.run_id, f.note_bytes);
  o.max_attempts = f.max_attempts;
  o.state_bytes = f.state_bytes;
  o.tls_ca = f.ca;
  if (!o.tls && !f.ca.empty()) throw Usage{"--ca is for an https:// --url"};
  const uint64_t commands = f.commands ? f.commands : 200000;
  CpuWatch cpu = MakeCpuWatch(f);

  Report report;
  report.Add("mode", "http");
  report.Add("label", f.label.empty() ? (f.entities == 1 ? "hot" : "spread") : f.label);
  report.Add("run_id", f.run_id);
  report.Add("entities", f.entities);
  report.Add("command", f.command);
  report.Add("state_bytes", f.state_bytes);
  report.Add("connections", static_cast<uint64_t>(f.connections));
  report.Add("tls", o.tls ? "yes" : "no");
  report.Add("threads", static_cast<uint64_t>(f.threads));

  // With a database, the replies are also compared with what was stored.
  std::unique_ptr<sql::Connection> conn;
  uint32_t partitions = 0;
  if (!f.mysql.database.empty()) {
    auto c = sql::Connection::Open(f.mysql);
    if (!c.ok()) {
      std::cerr << "writer_bench: cannot connect to MySQL: " << c.status().message() << "\n";
      return kExitFailed;
    }
    conn = std::move(c).value();
    if (!CheckDurability(*conn, f, report)) return kExitFailed;
    auto p = RecordedPartitions(*conn, f.type);
    if (!p.ok()) {
      std::cerr << "writer_bench: " << p.status().message() << " (is --mysql-database the writer's database?)\n";
      return kExitFailed;
    }
    partitions = *p;
    report.Add("partitions", static_cast<uint64_t>(partitions));
  }

  auto load = HttpLoad::Create(o);
  if (!load.ok()) {
    std::cerr << "writer_bench: " << load.status().message() << "\n";
    return kExitFailed;
  }
  const std::string label = "http " + (f.entities == 1 ? std::string("hot") : std::to_string(f.entities) + " entities") +
                            " c=" + std::to_string(f.connections);
  const uint64_t warmup = WarmupCount(f.warmup, commands);
  // Phases in order: the creates (with --state-bytes), the warm-up, the timed part.
  uint32_t timed_phase = 0;
  HttpPhaseResult created;
  if (f.state_bytes > 0) {
    created = (*load)->CreateEntities(label + " create");
    ++timed_phase;
  }
  HttpPhaseResult warm;
  if (warmup > 0) {
    warm = (*load)->RunPhase((*load)->next_index(), warmup, 0, label + " warm-up");
    ++timed_phase;
  }
  ServerWatch server(conn.get());
  server.Before();
  const auto before = cpu.Take();
  HttpPhaseResult r = (*load)->RunPhase((*load)->next_index(), commands, f.min_seconds, label);
  const auto after = cpu.Take();
  server.After();

  std::vector<std::string> verify_samples;
  const uint64_t verify_problems = (*load)->VerifyReplies(verify_samples);
  uint64_t storage_problems = 0;
  std::optional<CommitStats> commits;
  std::optional<StoredBytes> stored;
  if (conn) {
    const std::vector<HttpReply> replies = (*load)->AllReplies();
    std::vector<std::string> ids;
    for (uint64_t e = 0; e < f.entities; ++e) ids.push_back((*load)->entity_id(e));
    auto problems = CompareRepliesWithStorage(*conn, f.type, partitions, f.run_id, replies, ids);
    std::vector<std::string> storage_samples;
    auto add = [&](const Result<std::vector<std::string>>& found) {
      if (!found.ok()) {
        ++storage_problems;
        storage_samples.push_back("check failed: " + found.status().message());
        return;
      }
      storage_problems += found->size();
      storage_samples.insert(storage_samples.end(), found->begin(), found->end());
    };
    add(problems);
    std::map<uint32_t, uint64_t> per_partition;
    for (const auto& rep : replies) ++per_partition[rep.partition];
    for (uint32_t p = 0; p < partitions; ++p) {
      add(CheckEventTable(*conn, sql::EventTableName(f.type, p), f.run_id + "-", per_partition[p]));
    }
    PrintSamples("storage check", storage_samples);
    auto stats = ReadCommitStats(*conn, f.type, partitions, f.run_id + "-", replies, timed_phase);
    if (stats.ok()) {
      commits = *stats;
    } else {
      std::cerr << "writer_bench: cannot read commit sizes: " << stats.status().message() << "\n";
    }
    if (f.stored_bytes) {
      auto bytes = ReadStoredBytes(*conn, f.type, partitions, f.run_id + "-");
      if (bytes.ok()) {
        stored = *bytes;
      } else {
        ++storage_problems;
        std::cerr << "writer_bench: cannot read the stored bytes: " << bytes.status().message() << "\n";
      }
    }
  }

  report.Add("commands", r.ok + r.failures);
  report.Add("created", created.ok + created.failures);
  report.Add("warmup", warm.ok + warm.failures);
  report.Add("seconds", r.seconds, 2);
  report.Add("rate", r.seconds > 0 ? static_cast<double>(r.ok) / r.seconds : 0, 0);
  AddLatency(report, Summarize(std::move(r.latencies_ns)));
  const uint64_t failures = r.failures + warm.failures + created.failures;
  report.Add("failures", failures);
  report.Add("retries_503", r.retries + warm.retries + created.retries);
  report.Add("reconnects", r.reconnects + warm.reconnects + created.reconnects);
  report.Add("verify_problems", verify_problems);
  report.Add("storage_checked", conn ? "yes" : "no");
  report.Add("storage_problems", storage_problems);
  if (commits) {
    report.Add("commits", commits->commits);
    report.Add("commits_per_s", r.seconds > 0 ? static_cast<double>(commits->commits) / r.seconds : 0, 0);
    report.Add("rows_per_commit_mean", commits->mean_rows, 1);
    report.Add("rows_per_commit_median", commits->median_rows_weighted);
    report.Add("rows_per_commit_max", commits->max_rows);
  }
  if (stored && stored->events > 0) {
    // Every event of the run (creates and warm-up too) and the tables as a whole.
    const auto per_event = [&](uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(stored->events); };
    report.Add("events_stored", stored->events);
    report.Add("delta_events", stored->delta_events);
    report.Add("event_bytes", per_event(stored->state + stored->delta + stored->request + stored->response), 1);
    report.Add("state_bytes_per_event", per_event(stored->state), 1);
    report.Add("delta_bytes_per_event", per_event(stored->delta), 1);
    report.Add("table_bytes_per_event",
               stored->table_rows > 0
                   ? static_cast<double>(stored->table_bytes) / static_cast<double>(stored->table_rows)
                   : 0,
               1);
  }
  server.AddTo(report, std::chrono::duration<double>(after.at - before.at).count());
  AddCpu(report, cpu, before, after, r.ok);
  PrintSamples("failure", created.failure_samples);
  PrintSamples("failure", warm.failure_samples);
  PrintSamples("failure", r.failure_samples);
  PrintSamples("verify", verify_samples);
  report.Print(f.format == "kv");
  return failures == 0 && verify_problems == 0 && storage_problems == 0 ? kExitOk : kExitFailed;
}

int RunSql(const Flags& f) {
  const bool naive = f.mode == "naive";
  SqlBenchOptions o;
  o.mysql = f.mysql;
  if (o.mysql.database.empty()) o.mysql.database = "sluice_bench_baselines";
  o.run_id = f.run_id;
  o.note = MakeNote(f.run_id, f.note_bytes);
  o.entities = f.entities;
  o.seed = f.seed;
  o.threads = naive ? f.naive_threads : f.raw_threads;
  o.count = f.commands ? f.commands : (naive ? 5000 : 200000);
  o.warmup = WarmupCount(f.warmup, o.count);
  o.min_seconds = f.min_seconds;
  o.batch_rows = f.batch_rows;
  if (o.threads == 0) throw Usage{naive ? "--naive-threads must be at least 1" : "--raw-threads must be at least 1"};
  CpuWatch cpu = MakeCpuWatch(f);

  Report report;
  report.Add("mode", f.mode);
  report.Add("label", f.label.empty() ? f.mode : f.label);
  report.Add("run_id", f.run_id);
  report.Add("entities", f.entities);
  report.Add("threads", static_cast<uint64_t>(o.threads));
  if (!naive) report.Add("batch_rows", static_cast<uint64_t>(o.batch_rows));
  auto conn = sql::Connection::Open([&] {
    sql::ConnectParams p = o.mysql;
    p.database.clear();
    return p;
  }());
  if (!conn.ok()) {
    std::cerr << "writer_bench: cannot connect to MySQL: " << conn.status().message() << "\n";
    return kExitFailed;
  }
  if (!CheckDurability(**conn, f, report)) return kExitFailed;
  // The counters and CPU cover the warm-up as well: it is 2% of the run.
  ServerWatch server(conn->get());
  server.Before();
  const auto before = cpu.Take();
  auto r = naive ? RunNaive(o) : RunRawInsert(o);
  const auto after = cpu.Take();
  server.After();
  if (!r.ok()) {
    std::cerr << "writer_bench: " << f.mode << ": " << r.status().ToString() << "\n";
    return kExitFailed;
  }
  report.Add(naive ? "commands" : "rows", r->ok);
  report.Add("seconds", r->seconds, 2);
  report.Add("rate", r->seconds > 0 ? static_cast<double>(r->ok) / r->seconds : 0, 0);
  if (naive) {
    report.Add("conflicts", r->conflicts);
    report.Add("latency_of", "command");
  } else {
    report.Add("statements", r->statements);
    report.Add("latency_of", "statement");
  }
  AddLatency(report, Summarize(std::move(r->latencies_ns)));
  report.Add("failures", r->failures);
  report.Add("storage_problems", r->table_problems);
  server.AddTo(report, std::chrono::duration<double>(after.at - before.at).count());
  AddCpu(report, cpu, before, after, r->ok);
  PrintSamples("failure", r->failure_samples);
  PrintSamples("storage check", r->table_samples);
  report.Print(f.format == "kv");
  return r->failures == 0 && r->table_problems == 0 ? kExitOk : kExitFailed;
}

int Main(int argc, char** argv) {
  Flags f;
  const char* env_password = std::getenv("SLUICE_MYSQL_PASSWORD");
  po::options_description general("general");
  general.add_options()("help,h", "show this help and exit")(
      "mode", po::value(&f.mode)->default_value("http"),
      "what to measure: http (the writer's HTTP API, end to end), naive (per-command read + INSERT + commit "
      "straight against MySQL, the baseline for one hot entity) or raw_insert (multi-row INSERTs of the same "
      "rows, MySQL's ceiling)")(
      "commands", po::value(&f.commands)->default_value(0),
      "timed commands (http, naive) or rows (raw_insert); 0 means the mode's default: 200000 for http and "
      "raw_insert, 5000 for naive")(
      "min-seconds", po::value(&f.min_seconds)->default_value(0),
      "http and naive: keep sending past --commands until the timed part has lasted this long")(
      "warmup", po::value(&f.warmup)->default_value(0.02),
      "untimed warm-up before the timed part, as a fraction of --commands (its replies are verified too)")(
      "entities", po::value(&f.entities)->default_value(1),
      "entities the commands are spread over: 1 is ONE hot entity, 100000 spreads them (each command picks "
      "one by a hash of its index)")(
      "type", po::value(&f.type)->default_value("account"), "entity type to write (http; must be configured)")(
      "command", po::value(&f.command)->default_value("patch"),
      "command to send (http): patch, or a JavaScript command of the type's handler file that takes "
      "the same {\"n\":..,\"note\":..} body, such as bench/handlers/ledger.js's record")(
      "run-id", po::value(&f.run_id),
      "prefix of every entity id and Idempotency-Key (default: a fresh id, so that runs never collide)")(
      "note-bytes", po::value(&f.note_bytes)->default_value(24),
      "length of the \"note\" string in each body {\"n\":<i>,\"note\":\"...\"}")(
      "state-bytes", po::value(&f.state_bytes)->default_value(0),
      "http: before the warm-up, `create` each entity with a state of about this many bytes (the body "
      "plus a \"pad\" string), so that each command then changes one small member of a large state; 0: no "
      "creates, the first command makes the entity")(
      "stored-bytes", po::bool_switch(&f.stored_bytes),
      "http with --mysql-database: after the run, report the bytes the run's events take in storage, per "
      "event: event_bytes (LENGTH of state + delta + request + response), state/delta_bytes_per_event, "
      "table_bytes_per_event (the event tables' data_length + index_length after ANALYZE TABLE, over "
      "their rows), and delta_events")(
      "seed", po::value(&f.seed)->default_value(1), "seed of the command -> entity hash")(
      "label", po::value(&f.label), "scenario name in the report (default: hot/spread or the mode)")(
      "format", po::value(&f.format)->default_value("text"),
      "report format on stdout: text (one key: value per line) or kv (one line of key=value, for scripts)")(
      "watch", po::value(&f.watch)->composing(),
      "NAME=PID: also report the CPU that process used during the timed part, in % of one core as "
      "NAME_cpu (repeatable; the load generator itself is always reported as loadgen_cpu)")(
      "allow-weak-durability", po::bool_switch(&f.allow_weak_durability),
      "measure even when MySQL does not fsync every commit (innodb_flush_log_at_trx_commit != 1)");
  po::options_description http("http mode");
  http.add_options()("url", po::value(&f.url)->default_value("http://127.0.0.1:8080"),
                     "the writer's address, http://HOST:PORT or https://HOST:PORT; several writers (on one host): a comma list, connections spread over them")(
      "ca", po::value(&f.ca),
      "https: PEM file of the CAs the writer's certificate must chain to (it must also name HOST); default: "
      "this machine's CAs")(
      "connections", po::value(&f.connections)->default_value(256),
      "keep-alive connections, each with one command in flight")(
      "threads", po::value(&f.threads)->default_value(1), "event-loop threads of the load generator")(
      "max-attempts", po::value(&f.max_attempts)->default_value(20),
      "tries per command before it counts as failed (a 503 or a broken connection is retried with the same "
      "Idempotency-Key)");
  po::options_description mysql("MySQL (naive and raw_insert write here; in http mode, optional: the writer's "
                                "database, to compare replies with the stored rows and measure rows per commit)");
  mysql.add_options()("mysql-host", po::value(&f.mysql.host)->default_value("127.0.0.1"), "MySQL host")(
      "mysql-port", po::value(&f.mysql.port)->default_value(13306), "MySQL port")(
      "mysql-user", po::value(&f.mysql.user)->default_value("sluice"), "MySQL user")(
      "mysql-password", po::value(&f.mysql.password),
      "MySQL password (default: $SLUICE_MYSQL_PASSWORD, else empty)")(
      "mysql-database", po::value(&f.mysql.database),
      "database: for naive/raw_insert the baselines' own, created when missing, its bench_* tables dropped "
      "and re-created (default sluice_bench_baselines); for http the writer's (default: no storage checks)")(
      "naive-threads", po::value(&f.naive_threads)->default_value(8),
      "naive: concurrent connections running the per-command loop (on one hot entity they collide; "
      "collisions are counted and retried)")(
      "raw-threads", po::value(&f.raw_threads)->default_value(1),
      "raw_insert: concurrent connections, each appending to its own table")(
      "batch-rows", po::value(&f.batch_rows)->default_value(1000), "raw_insert: rows per INSERT statement");
  po::options_description all("usage: writer_bench [options]\n\n"
                              "Measures the writer's commands/s and latency over HTTP, or a same-run baseline "
                              "against MySQL,\nand verifies every reply. Exit status 0 only when every command got "
                              "a verified reply.\n\noptions");
  all.add(general).add(http).add(mysql);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, all), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw Usage{e.what()};
  }
  if (vm.count("help")) {
    std::cout << all;
    return kExitOk;
  }
  if (f.mode != "http" && f.mode != "naive" && f.mode != "raw_insert") {
    throw Usage{"--mode must be http, naive or raw_insert (got '" + f.mode + "')"};
  }
  if (f.format != "text" && f.format != "kv") throw Usage{"--format must be text or kv"};
  if (f.entities == 0) throw Usage{"--entities must be at least 1"};
  if (f.connections == 0 || f.threads == 0) throw Usage{"--connections and --threads must be at least 1"};
  if (f.batch_rows == 0) throw Usage{"--batch-rows must be at least 1"};
  if (f.warmup < 0 || f.warmup > 1) throw Usage{"--warmup is a fraction between 0 and 1"};
  if (f.max_attempts == 0) throw Usage{"--max-attempts must be at least 1"};
  if (f.stored_bytes && (f.mode != "http" || f.mysql.database.empty())) {
    throw Usage{"--stored-bytes is for --mode http with --mysql-database (the writer's database)"};
  }
  if (!vm.count("mysql-password") && env_password != nullptr) f.mysql.password = env_password;
  if (f.run_id.empty()) f.run_id = NewRunId();
  if (f.run_id.size() > 40 || f.run_id.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
    throw Usage{"--run-id must be 1 to 40 of [a-z0-9_]"};
  }
  std::signal(SIGPIPE, SIG_IGN);
  RaiseFileLimit();
  return f.mode == "http" ? RunHttp(f) : RunSql(f);
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) {
  try {
    return sluice::bench::Main(argc, argv);
  } catch (const sluice::bench::Usage& u) {
    std::cerr << "writer_bench: " << u.message << "\nRun writer_bench --help for usage.\n";
    return sluice::bench::kExitUsage;
  }
}
