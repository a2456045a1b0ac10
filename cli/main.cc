// sluice: one binary, one subcommand per job.
//
// Exit codes: 0 success, 1 failure (invalid config, storage refused, runtime
// error), 2 usage error.
#include <sys/resource.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/program_options.hpp>
#ifdef SLUICE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include "config/config.h"
#include "connectors/builtin_sink_types.h"
#include "connectors/plugin/plugin_host.h"
#include "admin/admin_client.h"
#include "admin/admin_service.h"
#include "engine/operator.h"
#include "offsets/offset_store.h"
#include "engine/health_monitor.h"
#include "engine/sync_engine.h"
#include "metrics/metrics.h"
#include "metrics/metrics_server.h"
#include "handlers/handler_files.h"
#include "http/server.h"
#include "core/log.h"
#include "sql/connection.h"
#include "sql/params.h"
#include "sql/schema.h"
#include "writer/writer_service.h"

namespace po = boost::program_options;

namespace sluice::cli {
namespace {

// The allocator that serves this binary's malloc, for `sluice version`
// (CMake's SLUICE_JEMALLOC links jemalloc into the programs). Checked, not
// assumed: a malloc must show up in jemalloc's count of this thread's bytes.
std::string AllocatorName() {
#ifdef SLUICE_JEMALLOC
  const char* version = "?";
  size_t size = sizeof version;
  mallctl("version", &version, &size, nullptr, 0);
  const std::string name = std::string("jemalloc ") + version;
  uint64_t before = 0;
  uint64_t after = 0;
  size = sizeof before;
  if (mallctl("thread.allocated", &before, &size, nullptr, 0) != 0) return name + " (its counters are off)";
  void* volatile probe = std::malloc(4096);
  size = sizeof after;
  mallctl("thread.allocated", &after, &size, nullptr, 0);
  std::free(probe);
  return after > before ? name : "the C library's malloc (" + name + " is linked but does not serve malloc)";
#else
  return "the C library's malloc";
#endif
}

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

constexpr const char* kTopHelp = R"(sluice: a change-data pipeline whose source of truth lives in MySQL

usage: sluice <command> [options]

commands:
  serve --config FILE        run the writer (HTTP API) and the sync engine in one process
  writer --config FILE       run the writer alone
  sync --config FILE         run the sync engine alone (pull every partition into the sinks)
  init --config FILE         create the database, metadata and event tables (idempotent)
  status --config FILE       offset, head, lag and state per sink and partition (--json)
  verify --config FILE       compare every view with main storage; exit 1 on any difference
                             (--repair: rewrite what differs from main storage)
  deadletters list|retry|discard --config FILE
                             show, re-apply or give up on events a sink rejected
  pause|resume --config FILE --sink NAME
                             stop / restart applying a sink in the running process
  rewind --config FILE --sink NAME --to N|beginning [--partition P]
                             move a sink's offsets back in the running process
  rebuild --config FILE --sink NAME
                             replay a sink into a fresh view, then swap it in
  config check FILE          validate a config file and print every problem with file:line:column
  version                    print the version

Run `sluice <command> --help` for the options of a command.
Exit codes: 0 success, 1 failure, 2 usage error.
)";

struct Usage {
  std::string message;
};

// Parses a command's arguments against `desc` (what its --help shows).
// `positionals` names its positional arguments in order: each is read as a
// string under that name and not listed by --help. Throws Usage on a bad
// command line, including an argument that nothing takes.
po::variables_map Parse(const po::options_description& desc, const std::vector<std::string>& args,
                        const std::vector<std::string>& positionals = {}) {
  constexpr const char* kStray = "stray-argument";
  po::options_description hidden;
  po::positional_options_description pos;
  for (const std::string& name : positionals) {
    hidden.add_options()(name.c_str(), po::value<std::string>());
    pos.add(name.c_str(), 1);
  }
  hidden.add_options()(kStray, po::value<std::vector<std::string>>());
  pos.add(kStray, -1);
  po::options_description all;
  all.add(desc).add(hidden);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
    if (vm.count(kStray)) throw Usage{"unexpected argument '" + vm[kStray].as<std::vector<std::string>>().front() + "'"};
    po::notify(vm);
  } catch (const po::error& e) {
    throw Usage{e.what()};
  }
  return vm;
}

void RaiseFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

Result<config::Config> LoadOrExplain(const std::string& path) {
  auto cfg = config::LoadConfig(path, connectors::BuiltinSinkTypes());
  if (!cfg.ok()) {
    std::cerr << cfg.status().message() << "\n";
    return cfg;
  }
  // Plugin libraries load here, so a bad library or a plugin sink's bad
  // options stop every command (config check included) before it starts.
  if (Status st = connectors::plugin::CheckPlugins(*cfg); !st.ok()) {
    std::cerr << st.message() << "\n";
    return st;
  }
  return cfg;
}

std::vector<sql::EntityTypeSpec> Specs(const config::Config& cfg) {
  std::vector<sql::EntityTypeSpec> specs;
  for (const auto& [name, e] : cfg.entities) specs.push_back({name, e.partitions});
  return specs;
}

int ConfigCheck(const std::vector<std::string>& args) {
  po::options_description desc("usage: sluice config check FILE\n\nValidates FILE and prints every problem as FILE:LINE:COLUMN: message.\n\noptions");
  desc.add_options()("help,h", "show this help")("config", po::value<std::string>(), "the config file (same as FILE)")(
      "print", "print the resolved config, secrets shown as their ${env:...}/${file:...} references or ***");
  auto vm = Parse(desc, args, {"file"});
  if (vm.count("help")) {
    std::cout << desc << "\nExit codes: 0 valid, 1 invalid, 2 usage error.\n";
    return kExitOk;
  }
  std::string path = vm.count("file") ? vm["file"].as<std::string>() : "";
  if (path.empty() && vm.count("config")) path = vm["config"].as<std::string>();
  if (path.empty()) throw Usage{"config check needs a FILE"};
  auto cfg = LoadOrExplain(path);
  if (!cfg.ok()) return kExitFailure;
  // Handler files are compiled as `serve` would, so a syntax error shows here with file and line.
  if (auto scripts = handlers::LoadHandlerScripts(*cfg); !scripts.ok()) {
    std::cerr << scripts.status().message() << "\n";
    return kExitFailure;
  }
  if (vm.count("print")) std::cout << cfg->Redacted();
  std::cout << path << ": ok\n";
  return kExitOk;
}

// Connects to the configured server without selecting the database.
Result<std::unique_ptr<sql::Connection>> ConnectServer(const config::Config& cfg) {
  sql::ConnectParams p = sql::ParamsFrom(cfg.mysql);
  p.database.clear();
  return sql::Connection::Open(p);
}

Status RunInit(const config::Config& cfg, bool verbose) {
  ASSIGN_OR_RETURN(auto conn, ConnectServer(cfg));
  ASSIGN_OR_RETURN(auto report, sql::InitSchema(*conn, cfg.mysql.database, Specs(cfg)));
  if (verbose) {
    std::cout << "database " << cfg.mysql.database << ": " << report.tables_created << " event tables created, "
              << report.types_registered << " entity types registered";
    if (report.tables_created == 0 && report.types_registered == 0) std::cout << " (already up to date)";
    std::cout << "\n";
  }
  return Status::Ok();
}

int Init(const std::vector<std::string>& args) {
  po::options_description desc("usage: sluice init --config FILE\n\nCreates the database, the metadata tables and one event table per entity type and\npartition. Running it again changes nothing; a partition count that differs from\nthe existing tables is refused.\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file");
  auto vm = Parse(desc, args);
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  if (!vm.count("config")) throw Usage{"init needs --config FILE"};
  auto cfg = LoadOrExplain(vm["config"].as<std::string>());
  if (!cfg.ok()) return kExitFailure;
  if (Status st = RunInit(*cfg, true); !st.ok()) {
    std::cerr << "sluice init: " << st.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

// Refuses weak durability settings unless allowed; warns when allowed.
Status CheckDurability(const config::Config& cfg, bool allow_weak) {
  sql::ConnectParams p = sql::ParamsFrom(cfg.mysql);
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(p));
  ASSIGN_OR_RETURN(auto d, sql::ReadDurability(*conn));
  if (d.durable()) return Status::Ok();
  const std::string what = "MySQL's durability settings are weaker than sluice needs (" + d.Describe() +
                           "): a committed command can be lost in a crash. Set "
                           "innodb_flush_log_at_trx_commit=1 (and sync_binlog=1 when the binlog is on)";
  if (!allow_weak) {
    return FailedPrecondition(what + ", or start with --allow-weak-durability / writer.allow_weak_durability: true");
  }
  Log(LogLevel::kWarn, "WARNING: " + what + ". Continuing because weak durability is allowed.");
  return Status::Ok();
}


// Loads the config named by --config, or explains why not (nullopt).
std::optional<config::Config> ConfigFrom(const po::variables_map& vm, const std::string& command) {
  if (!vm.count("config")) throw Usage{command + " needs --config FILE"};
  auto cfg = LoadOrExplain(vm["config"].as<std::string>());
  if (!cfg.ok()) return std::nullopt;
  return std::move(cfg).value();
}

int Run(const std::vector<std::string>& args, const std::string& name) {
  const bool with_writer = name == "serve" || name == "writer";
  const bool with_engine = name == "serve" || name == "sync";
  std::string what = name == "serve"   ? "Runs the writer's HTTP API and the sync engine in one process.\nCreates missing tables first unless --no-init.\n"
                     : name == "writer" ? "Runs the writer's HTTP API alone. The schema must exist (`sluice init`).\n"
                                        : "Runs the sync engine alone: pulls every partition into the configured sinks.\nThe schema must exist (`sluice init`).\n";
  po::options_description desc("usage: sluice " + name + " --config FILE\n\n" + what +
                               "Stops cleanly on SIGINT or SIGTERM (queued commands are finished, offsets saved).\n\noptions");
  const config::Process process = name == "serve"    ? config::Process::kServe
                                  : name == "writer" ? config::Process::kWriter
                                                     : config::Process::kSync;
  const std::string metrics_key = name == "serve" ? "metrics.listen" : "metrics." + name + "_listen";
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file");
  // Each mode lists only the flags it acts on.
  if (name == "serve") desc.add_options()("no-init", "do not create missing tables");
  if (with_writer) {
    desc.add_options()("allow-weak-durability", "start even when MySQL may lose committed transactions in a crash");
  }
  desc.add_options()("metrics-listen", po::value<std::string>(),
                     ("HOST:PORT of this process's metrics listener, instead of " + metrics_key +
                      " (opens it even without a metrics section)").c_str());
  auto vm = Parse(desc, args);
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  std::optional<std::pair<std::string, uint16_t>> metrics_listen;
  if (vm.count("metrics-listen")) {
    auto parsed = config::ParseListenAddress(vm["metrics-listen"].as<std::string>());
    if (!parsed.ok()) throw Usage{"--metrics-listen " + parsed.status().message()};
    metrics_listen = std::move(parsed).value();
  }
  auto cfg = ConfigFrom(vm, name);
  if (!cfg) return kExitFailure;

  // Block the stop signals before any thread starts so that only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  RaiseFileLimit();

  Status st = Status::Ok();
  if (name == "serve" && !vm.count("no-init")) {
    st = RunInit(*cfg, false);
  } else {
    st = [&]() -> Status {
      ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(cfg->mysql)));
      return sql::CheckSchema(*conn, Specs(*cfg));
    }();
  }
  if (st.ok() && with_writer) {
    st = CheckDurability(*cfg, cfg->writer.allow_weak_durability || vm.count("allow-weak-durability") > 0);
  }
  if (!st.ok()) {
    std::cerr << "sluice " << name << ": " << st.message() << "\n";
    return kExitFailure;
  }
  // Everything below counts into one registry, served on this process's metrics listener;
  // plugins count through the host's callbacks, collected at each scrape.
  metrics::Registry registry;
  registry.AddCollector(&connectors::plugin::PluginMetricFamilies);
  std::unique_ptr<engine::SyncEngine> sync;
  if (with_engine) {
    sync = std::make_unique<engine::SyncEngine>(*cfg, &registry);
    if (Status s = sync->Start(); !s.ok()) {
      std::cerr << "sluice " << name << ": " << s.message() << "\n";
      return kExitFailure;
    }
  }
  // Lag per sink and partition, and what /readyz answers (DESIGN 7).
  auto monitor = std::make_unique<engine::HealthMonitor>(*cfg, sync.get(), with_writer, registry);
  monitor->Start();
  // This process's own metrics listener, so that writer and sync can run side by side from one file.
  metrics::HttpListenerMetrics metrics_listener(registry, "metrics");
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (cfg->metrics.enabled || metrics_listen) {
    http::ServerOptions o;
    std::tie(o.host, o.port) = metrics_listen ? *metrics_listen : cfg->metrics.ListenOf(process);
    const config::ListenerLimits& l = cfg->metrics.limits;
    o.limits = {l.max_connections, l.header_timeout, l.body_timeout, l.idle_timeout, l.write_timeout};
    metrics_listener.Attach(o);
    const std::string host = o.host;
    auto started = metrics::MetricsServer::Start(std::move(o), registry, monitor->Routes());
    if (!started.ok()) {
      std::cerr << "sluice " << name << ": " << started.status().message() << " ("
                << (metrics_listen ? "--metrics-listen" : metrics_key) << ")\n";
      return kExitFailure;
    }
    metrics_server = std::move(started).value();
    std::printf("sluice %s: metrics on http://%s/metrics (also /healthz, /readyz)\n", name.c_str(),
                config::FormatListenAddress(host, metrics_server->port()).c_str());
  }
  std::unique_ptr<writer::WriterService> service;
  if (with_writer) {
    engine::SyncEngine* wake = sync.get();
    service = std::make_unique<writer::WriterService>(*cfg, wake ? std::function<void()>([wake] { wake->Wake(); })
                                                                 : std::function<void()>(),
                                                 &registry);
    // The writer's listener is ready when it can serve commands, whatever its views' state.
    service->SetReadiness([&monitor] { return monitor->WriterReadiness(); });
    if (Status s = service->Start(); !s.ok()) {
      std::cerr << "sluice " << name << ": " << s.message() << "\n";
      return kExitFailure;
    }
    std::string types;
    for (const auto& [t, e] : cfg->entities) {
      if (!types.empty()) types += ", ";
      types += t + "[" + std::to_string(e.partitions) + "]";
    }
    std::printf("sluice %s: listening on http://%s:%u (entity types: %s)\n", name.c_str(),
                cfg->writer.listen_host.c_str(), service->port(), types.c_str());
  }
  if (sync) {
    std::string sinks;
    for (const auto& s : cfg->sinks) {
      if (!sinks.empty()) sinks += ", ";
      sinks += s.name + " (" + s.type + ")";
    }
    std::printf("sluice %s: syncing %zu sink(s)%s%s\n", name.c_str(), cfg->sinks.size(), sinks.empty() ? "" : ": ",
                sinks.c_str());
  }
  std::unique_ptr<admin::AdminService> admin_service;
  if (sync && cfg->admin.enabled) {
    admin_service = std::make_unique<admin::AdminService>(*cfg, *sync, &registry);
    if (Status s = admin_service->Start(); !s.ok()) {
      std::cerr << "sluice " << name << ": " << s.message() << " (admin.listen)\n";
      return kExitFailure;
    }
    std::printf("sluice %s: admin endpoint on http://%s:%u%s\n", name.c_str(), cfg->admin.listen_host.c_str(),
                admin_service->port(), cfg->admin.token.empty() ? " (no admin.token: changes refused)" : "");
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  Log(LogLevel::kInfo, std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ", stopping");
  metrics_server.reset();
  if (admin_service) admin_service->Stop();
  if (service) service->Stop();
  monitor->Stop();
  if (sync) sync->Stop();
  return kExitOk;
}

int Status_(const std::vector<std::string>& args) {
  po::options_description desc("usage: sluice status --config FILE [--json]\n\nPer sink and partition: offset, head, lag in events and seconds, state,\ncounters and the last error, read from MySQL (no running process needed).\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "json", "print one JSON document (for scripts)");
  auto vm = Parse(desc, args);
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  auto cfg = ConfigFrom(vm, "status");
  if (!cfg) return kExitFailure;
  if (Status st = engine::PrintStatus(*cfg, vm.count("json") > 0, std::cout); !st.ok()) {
    std::cerr << "sluice status: " << st.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

int Verify(const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: sluice verify --config FILE [--sink NAME] [--repair]\n\n"
      "Compares every view (or one) with main storage: missing, extra, version\n"
      "mismatch and content mismatch. Exit 0 when every view matches, 1 otherwise.\n\n"
      "--repair then rewrites, in the views of redis, mysql and elasticsearch sinks,\n"
      "only the entities that differ, from their latest event in main storage\n"
      "(without a running process, or beside one), compares them again, and says\n"
      "what was repaired and what remains and why. A row newer than storage, or of\n"
      "an entity storage has no events for, is overwritten or removed where the sink\n"
      "can do it safely (redis, mysql); elasticsearch gets advice (rebuild). Kafka\n"
      "and plugin sinks are only verified. Exit 0 when nothing remains different.\n\n"
      "options");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "verify only this sink")(
      "repair", "rewrite the entities that differ from main storage, then verify them again");
  auto vm = Parse(desc, args);
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  auto cfg = ConfigFrom(vm, "verify");
  if (!cfg) return kExitFailure;
  std::optional<std::string> sink;
  if (vm.count("sink")) sink = vm["sink"].as<std::string>();
  auto diffs = vm.count("repair") ? engine::VerifyAndRepair(*cfg, sink, std::cout) : engine::Verify(*cfg, sink, std::cout);
  if (!diffs.ok()) {
    std::cerr << "sluice verify: " << diffs.status().message() << "\n";
    return kExitFailure;
  }
  return *diffs == 0 ? kExitOk : kExitFailure;
}

int DeadLetters(const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: sluice deadletters list|retry|discard --config FILE [--sink NAME] [--id N] [--all] [--json]\n\n"
      "  list     show the events sinks rejected (unresolved ones unless --all); --json for scripts\n"
      "  retry    re-apply unresolved dead letters: every one, a sink's (--sink), or one (--id);\n"
      "           exit 1 while any of them stays unresolved\n"
      "  discard  give up on dead letters without applying them: one (--id), or every unresolved\n"
      "           one of a sink (--sink); one of the two is required. Nothing asks for confirmation\n"
      "           and nothing is deleted: each is marked resolved as `discarded` (list --all shows\n"
      "           it). The view lacks that version until the entity changes again or is rebuilt.\n\n"
      "options");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "only this sink")("id", po::value<uint64_t>(), "retry, discard: only this dead letter")(
      "all", "list: include resolved dead letters")("json", "list: print one JSON document (for scripts)");
  auto vm = Parse(desc, args, {"action"});
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  const std::string action = vm.count("action") ? vm["action"].as<std::string>() : "";
  if (action != "list" && action != "retry" && action != "discard") {
    throw Usage{action.empty() ? "deadletters needs list, retry or discard"
                               : "deadletters: unknown action '" + action + "' (list, retry or discard)"};
  }
  if (action != "list" && (vm.count("all") || vm.count("json"))) throw Usage{"--all and --json are for deadletters list"};
  if (action == "list" && vm.count("id")) throw Usage{"--id is for deadletters retry and discard"};
  if (action == "discard" && !vm.count("id") && !vm.count("sink")) {
    throw Usage{"deadletters discard needs --id N or --sink NAME (it never discards every sink's at once)"};
  }
  auto cfg = ConfigFrom(vm, "deadletters");
  if (!cfg) return kExitFailure;
  engine::DeadLetterFilter filter;
  if (vm.count("sink")) filter.sink = vm["sink"].as<std::string>();
  if (vm.count("id")) filter.id = vm["id"].as<uint64_t>();
  if (action == "list") {
    if (Status st = engine::ListDeadLetters(*cfg, filter.sink, vm.count("all") > 0, vm.count("json") > 0, std::cout);
        !st.ok()) {
      std::cerr << "sluice deadletters: " << st.message() << "\n";
      return kExitFailure;
    }
    return kExitOk;
  }
  auto done = action == "retry" ? engine::RetryDeadLetters(*cfg, filter, std::cout)
                                : engine::DiscardDeadLetters(*cfg, filter, std::cout);
  if (!done.ok()) {
    std::cerr << "sluice deadletters: " << done.status().message() << "\n";
    return kExitFailure;
  }
  // retry: how many are still unresolved; discard: how many were discarded.
  return action == "retry" && *done > 0 ? kExitFailure : kExitOk;
}

// ---- operator commands that reach a running process (admin/) ----

constexpr const char* kAdminNeeds =
    "The process is reached through the admin endpoint of the config (admin.listen)\n"
    "with the bearer token admin.token from the same config (or its secret).\n";

// The sink named --sink, or nullptr after saying why not.
const config::SinkConfig* SinkOrExplain(const config::Config& cfg, const po::variables_map& vm,
                                        const std::string& command) {
  if (!vm.count("sink")) throw Usage{command + " needs --sink NAME"};
  const std::string name = vm["sink"].as<std::string>();
  std::string known;
  for (const auto& s : cfg.sinks) {
    if (s.name == name) return &s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  std::cerr << "sluice " << command << ": no sink named '" << name << "' in " << cfg.path
            << (known.empty() ? " (it declares no sinks)" : " (sinks: " + known + ")") << "\n";
  return nullptr;
}

bool AdminOrExplain(const config::Config& cfg, const std::string& command) {
  if (cfg.admin.enabled) return true;
  std::cerr << "sluice " << command << ": " << cfg.path
            << " has no admin section, so no running process can be reached; add\n"
               "  admin: {listen: 127.0.0.1:9470, token: \"${env:SLUICE_ADMIN_TOKEN}\"}\n"
               "and restart the process\n";
  return false;
}

// Sends one change; prints why it failed (false) or returns the reply body.
std::optional<Json> AdminChange(const config::Config& cfg, const std::string& command, const std::string& target,
                                const Json& body, int* http_status = nullptr) {
  admin::AdminClient client(cfg.admin);
  auto reply = client.Post(target, body);
  if (!reply.ok()) {
    std::cerr << "sluice " << command << ": " << reply.status().message() << "\n";
    return std::nullopt;
  }
  if (http_status) *http_status = reply->status;
  if (reply->status / 100 != 2) {
    if (http_status && reply->status == 409) return reply->body;
    std::cerr << "sluice " << command << ": " << reply->ErrorMessage() << " (HTTP " << reply->status << ")\n";
    return std::nullopt;
  }
  return reply->body;
}

int PauseResume(const std::vector<std::string>& args, const std::string& name) {
  const std::string what =
      name == "pause"
          ? "Stops the sink applying events in the running process, after the batch in flight.\n"
            "Its offsets are kept, `sluice status` shows state paused, and the pause outlives a\n"
            "restart until `sluice resume`. Lag grows meanwhile.\n"
          : "Lets a paused sink carry on from its kept offsets.\n";
  po::options_description desc("usage: sluice " + name + " --config FILE --sink NAME\n\n" + what + kAdminNeeds +
                               "Exit codes: 0 done, 1 failure (unknown sink, no process, refused), 2 usage.\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "the sink");
  auto vm = Parse(desc, args);
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  auto cfg = ConfigFrom(vm, name);
  if (!cfg) return kExitFailure;
  const config::SinkConfig* sink = SinkOrExplain(*cfg, vm, name);
  if (!sink || !AdminOrExplain(*cfg, name)) return kExitFailure;
  auto body = AdminChange(*cfg, name, "/v1/sinks/" + sink->name + "/" + name, Json::object());
  if (!body) return kExitFailure;
  std::cout << "sink " << sink->name << ": " << (name == "pause" ? "paused" : "resumed") << " (state "
            << body->value("state", std::string("?")) << ")\n";
  return kExitOk;
}

int Rewind(const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: sluice rewind --config FILE --sink NAME --to N|beginning [--partition P] [--offline]\n\n"
      "Moves the sink's offset (of one partition, or of all) back to event_id N, or to 0\n"
      "with `beginning`: the running process stops that sink's applier between two\n"
      "batches, sets the offsets, and carries on from there. Events after N are applied\n"
      "again; the version check counts those the view already holds as stale, so the\n"
      "view never goes back. Offsets only move back: a target past an offset is refused.\n" +
      std::string(kAdminNeeds) +
      "With --offline, no process may be running: the offsets are written to\n"
      "sluice_offsets directly and take effect at the next start.\n"
      "Exit codes: 0 done, 1 failure (unknown sink, no process, refused), 2 usage.\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "the sink")("to", po::value<std::string>(), "an event_id, or beginning (0)")(
      "partition", po::value<uint32_t>(), "only this partition")(
      "offline", "write sluice_offsets directly (no process may be running)");
  auto vm = Parse(desc, args);
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  if (!vm.count("to")) throw Usage{"rewind needs --to N or --to beginning"};
  const std::string to_text = vm["to"].as<std::string>();
  uint64_t to = 0;
  if (to_text != "beginning") {
    size_t used = 0;
    try {
      to = std::stoull(to_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != to_text.size() || to_text[0] == '-') {
      throw Usage{"--to takes an event_id (0 or more) or beginning, not '" + to_text + "'"};
    }
  }
  auto cfg = ConfigFrom(vm, "rewind");
  if (!cfg) return kExitFailure;
  const config::SinkConfig* sink = SinkOrExplain(*cfg, vm, "rewind");
  if (!sink) return kExitFailure;
  const uint32_t partitions = cfg->entities.at(sink->entity).partitions;
  std::optional<uint32_t> partition;
  if (vm.count("partition")) {
    partition = vm["partition"].as<uint32_t>();
    if (*partition >= partitions) {
      std::cerr << "sluice rewind: sink " << sink->name << " has partitions 0.." << partitions - 1 << ", not "
                << *partition << "\n";
      return kExitFailure;
    }
  }
  if (vm.count("offline")) {
    if (cfg->admin.enabled && admin::AdminClient(cfg->admin, std::chrono::seconds(5)).Get("/v1/status").ok()) {
      std::cerr << "sluice rewind: a process answers on the admin endpoint " << cfg->admin.listen_host << ":"
                << cfg->admin.listen_port << "; rewind it online (without --offline)\n";
      return kExitFailure;
    }
    offsets::OffsetStore store(sql::ParamsFrom(cfg->mysql));
    auto current = store.Load(sink->name, sink->entity);
    if (!current.ok()) {
      std::cerr << "sluice rewind: " << current.status().message() << "\n";
      return kExitFailure;
    }
    for (uint32_t p = 0; p < partitions; ++p) {
      if (partition && *partition != p) continue;
      const uint64_t from = current->count(p) ? (*current)[p].event_id : 0;
      if (to > from) {
        std::cerr << "sluice rewind: rewind only moves offsets back: partition " << p << " is at " << from
                  << ", so moving it to " << to << " would skip events; nothing was changed\n";
        return kExitFailure;
      }
    }
    if (Status st = store.Rewind(sink->name, sink->entity, partition, to, partitions); !st.ok()) {
      std::cerr << "sluice rewind: " << st.message() << "\n";
      return kExitFailure;
    }
    std::cout << "sink " << sink->name << ": offsets set to " << to << " in sluice_offsets"
              << (partition ? " (partition " + std::to_string(*partition) + ")" : "") << "\n";
    return kExitOk;
  }
  if (!AdminOrExplain(*cfg, "rewind")) return kExitFailure;
  Json body = {{"to", to}};
  if (partition) body["partition"] = *partition;
  auto reply = AdminChange(*cfg, "rewind", "/v1/sinks/" + sink->name + "/rewind", body);
  if (!reply) return kExitFailure;
  for (const auto& p : (*reply)["partitions"]) {
    std::cout << "sink " << sink->name << " partition " << p["partition"] << ": offset " << p["from"] << " -> "
              << p["to"] << "\n";
  }
  return kExitOk;
}

std::string ProgressLine(const Json& p) {
  const uint64_t replayed = p.value("replayed", uint64_t{0});
  const uint64_t total = p.value("total", uint64_t{0});
  const double rate = p.value("rate", 0.0);
  const std::string sink = p.value("sink", std::string());
  const std::string phase = p.value("phase", std::string());
  char line[256];
  // With nothing to replay (yet) there is no fraction to show: never "0/0 (100.0%)".
  if (total == 0) {
    std::snprintf(line, sizeof line, "rebuild %s: %s; the entity type has no events yet, so there is nothing to replay",
                  sink.c_str(), phase.c_str());
    return line;
  }
  const double pct = 100.0 * static_cast<double>(replayed) / static_cast<double>(total);
  std::string eta = "?";
  if (rate > 0) eta = std::to_string(static_cast<uint64_t>(static_cast<double>(total - std::min(total, replayed)) / rate)) + "s";
  std::snprintf(line, sizeof line, "rebuild %s: %s %llu/%llu events (%.1f%%), %.0f events/s, ETA %s", sink.c_str(),
                phase.c_str(), static_cast<unsigned long long>(replayed), static_cast<unsigned long long>(total), pct,
                rate, eta.c_str());
  return line;
}

int Rebuild(const std::vector<std::string>& args) {
  po::options_description desc(
      "usage: sluice rebuild --config FILE --sink NAME\n\n"
      "Replays the sink's whole history into a fresh view beside the live one, while the\n"
      "live view keeps being served and updated, then swaps the fresh view in atomically\n"
      "and carries on from it. Prints a progress line (events replayed / total, rate,\n"
      "ETA) until it is done. How each sink type swaps:\n"
      "  mysql          <table>__rebuild replaces <table> in one RENAME TABLE\n"
      "  elasticsearch  <index>__rebuild_<n> becomes the index behind the alias <index>,\n"
      "                 in one POST /_aliases that also deletes the old index\n"
      "  redis          keys written under a __rebuild: prefix are RENAMEd onto the live\n"
      "                 keys while the live sink is paused: atomic per key, not per view\n"
      "  plugins        those whose sink type has the rebuild hooks (plugin ABI 1.1)\n"
      "kafka sinks and other plugins are refused, saying why.\n"
      "If a rebuild of the sink is already running, follows it. Interrupting this command\n"
      "does not stop the rebuild.\n" +
      std::string(kAdminNeeds) +
      "Exit codes: 0 rebuilt, 1 failure (unknown sink, no process, refused, rebuild failed), 2 usage.\n\noptions");
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file")(
      "sink", po::value<std::string>(), "the sink");
  auto vm = Parse(desc, args);
  if (vm.count("help")) {
    std::cout << desc;
    return kExitOk;
  }
  auto cfg = ConfigFrom(vm, "rebuild");
  if (!cfg) return kExitFailure;
  const config::SinkConfig* sink = SinkOrExplain(*cfg, vm, "rebuild");
  if (!sink || !AdminOrExplain(*cfg, "rebuild")) return kExitFailure;
  int http_status = 0;
  auto started = AdminChange(*cfg, "rebuild", "/v1/sinks/" + sink->name + "/rebuild", Json::object(), &http_status);
  if (!started) return kExitFailure;
  if (http_status == 409) {
    const bool running = started->contains("error") && (*started)["error"].value("code", "") == "rebuilding";
    if (!running) {
      std::cerr << "sluice rebuild: " << (*started)["error"].value("message", started->dump()) << "\n";
      return kExitFailure;
    }
    std::cout << "rebuild " << sink->name << ": already running; following it\n";
  }
  const bool tty = isatty(STDOUT_FILENO) != 0;
  admin::AdminClient client(cfg->admin);
  auto last_line = std::chrono::steady_clock::time_point{};
  if (http_status == 202) {
    std::cout << (tty ? "\r" : "") << ProgressLine(*started) << (tty ? "" : "\n") << std::flush;
    last_line = std::chrono::steady_clock::now();
  }
  for (;;) {
    auto reply = client.Get("/v1/sinks/" + sink->name + "/rebuild");
    if (!reply.ok() || reply->status != 200) {
      std::cerr << (tty ? "\n" : "") << "sluice rebuild: lost the process while following the rebuild: "
                << (reply.ok() ? reply->ErrorMessage() : reply.status().message()) << "\n";
      return kExitFailure;
    }
    const Json& p = reply->body;
    const std::string phase = p.value("phase", "");
    const bool finished = phase == "done" || phase == "failed" || phase == "abandoned";
    const auto now = std::chrono::steady_clock::now();
    if (tty) {
      std::cout << "\r" << ProgressLine(p) << "   " << std::flush;
    } else if (finished || now - last_line >= std::chrono::seconds(2)) {
      std::cout << ProgressLine(p) << "\n" << std::flush;
      last_line = now;
    }
    if (finished) {
      if (tty) std::cout << "\n";
      if (phase == "done") {
        std::printf("rebuild %s: done in %.1f s; the rebuilt view is live\n", sink->name.c_str(),
                    p.value("seconds", 0.0));
        return kExitOk;
      }
      std::cerr << "sluice rebuild: " << phase << ": " << p.value("error", "") << " (the live view is still served)\n";
      return kExitFailure;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kTopHelp;
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  // Where a usage error points: the command's own help once the command is known.
  std::string help = "sluice --help";
  try {
    if (cmd == "version" || cmd == "--version") {
      if (!rest.empty()) throw Usage{"version takes no arguments, got '" + rest[0] + "'"};
      std::cout << "sluice 0.1.0\nallocator: " << AllocatorName() << "\n";
      return kExitOk;
    }
    static const std::set<std::string> kCommands = {"init",   "serve", "writer", "sync",  "status", "verify",
                                                    "deadletters", "pause", "resume", "rewind", "rebuild"};
    if (kCommands.count(cmd)) help = "sluice " + cmd + " --help";
    if (cmd == "config") help = "sluice config check --help";
    if (cmd == "config") {
      if (rest.empty() || rest[0] == "--help" || rest[0] == "-h") {
        std::cout << "usage: sluice config check FILE\n";
        return rest.empty() ? kExitUsage : kExitOk;
      }
      if (rest[0] != "check") throw Usage{"unknown config subcommand '" + rest[0] + "'"};
      return ConfigCheck({rest.begin() + 1, rest.end()});
    }
    if (cmd == "init") return Init(rest);
    if (cmd == "serve" || cmd == "writer" || cmd == "sync") return Run(rest, cmd);
    if (cmd == "status") return Status_(rest);
    if (cmd == "verify") return Verify(rest);
    if (cmd == "deadletters") return DeadLetters(rest);
    if (cmd == "pause" || cmd == "resume") return PauseResume(rest, cmd);
    if (cmd == "rewind") return Rewind(rest);
    if (cmd == "rebuild") return Rebuild(rest);
    throw Usage{"unknown command '" + cmd + "'"};
  } catch (const Usage& u) {
    std::cerr << "sluice: " << u.message << "\nRun `" << help << "` for usage.\n";
    return kExitUsage;
  }
}

}  // namespace
}  // namespace sluice::cli

int main(int argc, char** argv) {
  const int code = sluice::cli::Main(argc, argv);
  // Every sink is gone by now, on the failing paths too.
  sluice::connectors::plugin::ShutdownPlugins();
  return code;
}
