#include "bench/engine_bench_takeover.h"

#include <signal.h>

#include <chrono>
#include <map>
#include <thread>

#include "bench/bench_common.h"
#include "bench/engine_bench_util.h"
#include "sql/mariadb_tables.h"
#include "sql/params.h"

namespace sluice::bench {
namespace {

// Partition -> owner of every live lease of the scope.
Result<std::map<uint32_t, std::string>> LiveOwners(sql::LeaseTable& leases, const std::string& scope,
                                                   const std::string& type) {
  ASSIGN_OR_RETURN(auto rows, leases.List(scope));
  std::map<uint32_t, std::string> out;
  for (const sql::LeaseRow& l : rows) {
    if (l.entity_type == type && !l.owner.empty() && l.expires_in_ms > 0) out[l.partition] = l.owner;
  }
  return out;
}

}  // namespace

Result<TakeoverResult> RunTakeovers(const config::Config& config, const TakeoverOptions& options) {
  if (config.sinks.empty()) return InvalidArgument("the config has no sink");
  const config::SinkConfig& sink = config.sinks.front();
  const std::string scope = "sink/" + sink.name;
  const uint32_t partitions = config.entities.at(sink.entity).partitions;
  auto leases = sql::MariaDbStorage(sql::ParamsFrom(config.mysql)).OpenLeases();
  const std::vector<std::string> ids = {"takeover-a", "takeover-b"};
  std::map<std::string, std::unique_ptr<ChildProcess>> engines;
  auto spawn = [&](const std::string& id) -> Status {
    ASSIGN_OR_RETURN(engines[id], ChildProcess::Spawn({options.sluice_binary, "sync", "--config", options.config_path,
                                                       "--id", id},
                                                      options.log_path));
    return Status::Ok();
  };
  // Until every partition has a live lease and both engines hold some.
  auto settle = [&]() -> Result<double> {
    const auto t0 = Clock::now();
    for (;;) {
      ASSIGN_OR_RETURN(auto owners, LiveOwners(*leases, scope, sink.entity));
      std::map<std::string, uint32_t> held;
      for (const auto& [p, owner] : owners) ++held[owner];
      if (owners.size() == partitions && held.count(ids[0]) && held.count(ids[1])) return Since(t0);
      if (Since(t0) > options.timeout_seconds) {
        return Unavailable("the engines did not settle within " + std::to_string(options.timeout_seconds) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  for (const auto& id : ids) RETURN_IF_ERROR(spawn(id));
  RETURN_IF_ERROR(settle().status());

  TakeoverResult r;
  double settled = 0;
  ProgressLine progress("takeover", [&](double) {
    return std::to_string(r.takeover_ns.size()) + "/" + std::to_string(options.kills) + " takeovers";
  });
  for (uint32_t k = 0; k < options.kills; ++k) {
    const std::string& victim = ids[k % 2];
    const std::string& survivor = ids[(k + 1) % 2];
    ASSIGN_OR_RETURN(auto before, LiveOwners(*leases, scope, sink.entity));
    std::vector<uint32_t> moved;
    for (const auto& [p, owner] : before) {
      if (owner == victim) moved.push_back(p);
    }
    ::kill(engines[victim]->pid(), SIGKILL);
    const auto t0 = Clock::now();
    engines[victim]->Wait();
    for (;;) {
      ASSIGN_OR_RETURN(auto owners, LiveOwners(*leases, scope, sink.entity));
      bool done = true;
      for (const uint32_t p : moved) done = done && owners.count(p) && owners[p] == survivor;
      if (done) break;
      if (Since(t0) > options.timeout_seconds) {
        return Unavailable("the survivor did not take over within " + std::to_string(options.timeout_seconds) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    r.takeover_ns.push_back(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    r.partitions_moved += moved.size();
    RETURN_IF_ERROR(spawn(victim));
    ASSIGN_OR_RETURN(const double s, settle());
    settled += s;
  }
  r.settle_seconds = options.kills > 0 ? settled / options.kills : 0;
  for (auto& [id, e] : engines) {
    if (const int code = e->Terminate(); code != 0) {
      return Internal("sluice sync " + id + " exited with " + std::to_string(code) + "; see " + options.log_path);
    }
  }
  return r;
}

}  // namespace sluice::bench
