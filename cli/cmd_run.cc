// sluice serve, sluice writer, sluice sync: the long-running processes.
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "admin/admin_service.h"
#include "cli/command.h"
#include "connectors/builtin_sink_types.h"
#include "connectors/plugin/plugin_host.h"
#include "core/log.h"
#include "engine/health_monitor.h"
#include "engine/sync_engine.h"
#include "http/server.h"
#include "metrics/metrics.h"
#include "metrics/metrics_server.h"
#include "sql/connection.h"
#include "sql/layout_schema.h"
#include "sql/params.h"
#include "sql/schema.h"
#include "writer/writer_service.h"

namespace sluice::cli {
namespace {

void RaiseFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Refuses weak durability settings of any storage server unless allowed;
// warns when allowed.
Status CheckDurability(const config::Config& cfg, bool allow_weak) {
  const sql::StorageLayout layout = sql::LayoutFrom(cfg);
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    const std::string server =
        layout.single() ? "the MySQL server" : "storage server " + layout.servers[i].name;
    const std::string key = i == 0 ? "storage.mysql" : "storage.servers." + layout.servers[i].name;
    ASSIGN_OR_RETURN(auto conn, sql::ConnectServer(layout, i));
    ASSIGN_OR_RETURN(auto d, sql::ReadDurability(*conn));
    if (d.galera && d.cluster_status != "Primary") {
      // Not a setting to allow: such a node refuses every write.
      return FailedPrecondition(server + " is a Galera node outside the primary component (" + d.Describe() +
                                "): it cannot commit; point " + key + " at a node of the primary component");
    }
    if (d.galera) Log(LogLevel::kInfo, "storage: " + server + " is a Galera cluster node (" + d.Describe() + ")");
    if (d.durable()) continue;
    const std::string what = "MySQL's durability settings on " + server + " are weaker than sluice needs (" +
                             d.Describe() +
                             "): a committed command can be lost in a crash. Set "
                             "innodb_flush_log_at_trx_commit=1 (and sync_binlog=1 when the binlog is on)";
    if (!allow_weak) {
      return FailedPrecondition(what + ", or start with --allow-weak-durability / writer.allow_weak_durability: true");
    }
    Log(LogLevel::kWarn, "WARNING: " + what + ". Continuing because weak durability is allowed.");
  }
  return Status::Ok();
}

// Says loudly which servers are reached over TLS that does not verify who
// answers: storage servers with ssl_mode required or verify_ca, sinks with
// tls_verify: ca.
void WarnWeakTls(const config::Config& cfg) {
  const auto warn = [](const std::string& key, const config::MysqlConfig& m) {
    if (m.ssl_mode == config::MysqlSslMode::kRequired) {
      Log(LogLevel::kWarn, "WARNING: " + key + ".ssl_mode is required: the connection is encrypted but the "
                           "server's certificate is not checked, so anyone on the path can pose as the server; "
                           "use verify_identity with ssl_ca");
    } else if (m.ssl_mode == config::MysqlSslMode::kVerifyCa) {
      Log(LogLevel::kWarn, "WARNING: " + key + ".ssl_mode is verify_ca: any server with a certificate from " +
                           m.ssl_ca + " is accepted, whatever host it was issued to; use verify_identity");
    }
  };
  warn("storage.mysql", cfg.mysql);
  for (const auto& s : cfg.servers) warn("storage.servers." + s.name, s.mysql);
  for (const config::SinkConfig& sink : cfg.sinks) {
    for (const connectors::BuiltinSinkType& t : connectors::BuiltinSinkTypeList()) {
      if (t.config.name != sink.type || !t.config.warnings) continue;
      for (const std::string& w : t.config.warnings(sink)) Log(LogLevel::kWarn, w);
    }
  }
}

// The config key of this process's metrics listener.
std::string MetricsKey(const std::string& name) {
  return name == "serve" ? "metrics.listen" : "metrics." + name + "_listen";
}

po::options_description RunOptions(const std::string& name) {
  const bool with_writer = name == "serve" || name == "writer";
  std::string what = name == "serve"   ? "Runs the writer's HTTP API and the sync engine in one process.\nCreates missing tables first unless --no-init.\n"
                     : name == "writer" ? "Runs the writer's HTTP API alone. The schema must exist (`sluice init`).\n"
                                        : "Runs the sync engine alone: pulls every partition into the configured sinks.\nThe schema must exist (`sluice init`).\n";
  if (name != "writer") {
    what += "Engines on one database share the sinks' partitions: each partition is applied by\none engine at a time, under a lease (engine.lease_ttl) that another takes over\nwhen it stops (docs/deployment.md).\n";
  }
  if (with_writer) {
    what += "Writers on one database share the partitions as a hint: a command for a partition\nanother live writer owns is forwarded to it once (writer.routing; docs/deployment.md).\n";
  }
  po::options_description desc("usage: sluice " + name + " --config FILE [--id NAME]" +
                               "\n\n" + what +
                               "Stops cleanly on SIGINT or SIGTERM (queued commands are finished, offsets saved).\n\noptions");
  const std::string metrics_key = MetricsKey(name);
  desc.add_options()("help,h", "show this help")("config,c", po::value<std::string>(), "the config file");
  // Each mode lists only the flags it acts on.
  if (name == "serve") desc.add_options()("no-init", "do not create missing tables");
  if (with_writer) {
    desc.add_options()("allow-weak-durability", "start even when MySQL may lose committed transactions in a crash");
  }
  desc.add_options()("id", po::value<std::string>(),
                     name == "sync"     ? "this engine's name among the engines sharing the sinks, instead of "
                                          "engine.id (default: the host name); unique per process"
                     : name == "writer" ? "this writer's name among the writers, instead of writer.id (default: the "
                                          "host name); unique per process"
                                        : "this process's name among the engines and among the writers, instead "
                                          "of engine.id and writer.id (default: the host name); unique per process");
  desc.add_options()("metrics-listen", po::value<std::string>(),
                     ("HOST:PORT of this process's metrics listener, instead of " + metrics_key +
                      " (opens it even without a metrics section)").c_str());
  return desc;
}

int Run(const Invocation& call) {
  const std::string& name = call.name;
  const po::variables_map& vm = call.vm;
  const bool with_writer = name == "serve" || name == "writer";
  const bool with_engine = name == "serve" || name == "sync";
  const config::Process process = name == "serve"    ? config::Process::kServe
                                  : name == "writer" ? config::Process::kWriter
                                                     : config::Process::kSync;
  const std::string metrics_key = MetricsKey(name);
  std::optional<std::pair<std::string, uint16_t>> metrics_listen;
  if (vm.count("metrics-listen")) {
    auto parsed = config::ParseListenAddress(vm["metrics-listen"].as<std::string>());
    if (!parsed.ok()) throw Usage{"--metrics-listen " + parsed.status().message()};
    metrics_listen = std::move(parsed).value();
  }
  auto cfg = ConfigFrom(vm, name);
  if (!cfg) return kExitFailure;
  if (vm.count("id")) {
    const std::string id = vm["id"].as<std::string>();
    if (!config::IsValidMemberName(id)) throw Usage{"--id must be 1-128 letters, digits, '.', '_', ':' or '-', got '" + id + "'"};
    cfg->engine.id = id;
    cfg->writer.id = id;
  }

  // Block the stop signals before any thread starts so that only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  RaiseFileLimit();

  WarnWeakTls(*cfg);
  Status st = Status::Ok();
  if (name == "serve" && !vm.count("no-init")) {
    st = RunInit(*cfg, false);
  } else {
    st = sql::CheckLayout(sql::LayoutFrom(*cfg), sql::SpecsFrom(*cfg));
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
    // A second process under this engine's name: stop, and say so by the exit code.
    sync->SetOnFailure([](const std::string&) { kill(getpid(), SIGTERM); });
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
    if (cfg->metrics.tls.enabled()) {
      o.tls = http::ServerTls{cfg->metrics.tls.cert, cfg->metrics.tls.key, cfg->metrics.tls.client_ca};
    }
    metrics_listener.Attach(o);
    const std::string host = o.host;
    auto started = metrics::MetricsServer::Start(std::move(o), registry, monitor->Routes());
    if (!started.ok()) {
      std::cerr << "sluice " << name << ": " << started.status().message() << " ("
                << (metrics_listen ? "--metrics-listen" : metrics_key) << ")\n";
      return kExitFailure;
    }
    metrics_server = std::move(started).value();
    std::printf("sluice %s: metrics on %s://%s/metrics (also /healthz, /readyz)\n", name.c_str(),
                cfg->metrics.tls.enabled() ? "https" : "http",
                config::FormatListenAddress(host, metrics_server->port()).c_str());
  }
  // Before the writer's listener: once /healthz answers, so does the admin endpoint.
  std::unique_ptr<admin::AdminService> admin_service;
  if (sync && cfg->admin.enabled) {
    admin_service = std::make_unique<admin::AdminService>(*cfg, *sync, &registry);
    if (Status s = admin_service->Start(); !s.ok()) {
      std::cerr << "sluice " << name << ": " << s.message() << " (admin.listen)\n";
      return kExitFailure;
    }
    std::printf("sluice %s: admin endpoint on %s://%s:%u%s\n", name.c_str(), cfg->admin.tls.enabled() ? "https" : "http",
                cfg->admin.listen_host.c_str(), admin_service->port(),
                cfg->admin.token.empty() ? " (no admin.token: every request refused)" : "");
  }
  std::unique_ptr<writer::WriterService> service;
  if (with_writer) {
    engine::SyncEngine* wake = sync.get();
    writer::CommitHook announce;
    if (wake) {
      announce = [wake](const std::string& type, uint32_t partition, uint64_t head) {
        wake->Announce(type, partition, head);
      };
    }
    service = std::make_unique<writer::WriterService>(*cfg, std::move(announce), &registry);
    if (wake) service->SkipNoticeAddress(wake->notice_address());
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
    std::printf("sluice %s: listening on %s://%s:%u (entity types: %s)\n", name.c_str(),
                cfg->writer.tls.enabled() ? "https" : "http", cfg->writer.listen_host.c_str(), service->port(),
                types.c_str());
  }
  if (sync) {
    std::string sinks;
    for (const auto& s : cfg->sinks) {
      if (!sinks.empty()) sinks += ", ";
      sinks += s.name + " (" + s.type + ")";
    }
    std::printf("sluice %s: syncing %zu sink(s)%s%s as engine %s\n", name.c_str(), cfg->sinks.size(),
                sinks.empty() ? "" : ": ", sinks.c_str(), sync->member().c_str());
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
  if (sync && sync->Failed()) {
    std::cerr << "sluice " << name << ": " << *sync->Failed() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

Subcommand RunCommand(const std::string& name, const std::string& synopsis, const std::string& summary) {
  Subcommand c;
  c.names = {name};
  c.synopsis = synopsis;
  c.summary = summary;
  c.options = RunOptions;
  c.run = Run;
  return c;
}

}  // namespace sluice::cli
