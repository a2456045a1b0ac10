#include "bench/engine_bench_archive.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "bench/bench_common.h"
#include "bench/engine_bench_es.h"
#include "bench/engine_bench_util.h"
#include "core/json.h"
#include "sql/connection.h"
#include "sql/params.h"
#include "sql/schema.h"

namespace sluice::bench {

namespace {

double ChildrenCpuSeconds() {
  struct rusage u {};
  getrusage(RUSAGE_CHILDREN, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

const config::EntityTypeConfig& OnlyEntity(const config::Config& config) { return config.entities.begin()->second; }

std::vector<std::string> EventTables(const config::Config& config) {
  const auto& entity = OnlyEntity(config);
  std::vector<std::string> tables;
  for (uint32_t p = 0; p < entity.partitions; ++p) tables.push_back(sql::EventTableName(entity.name, p));
  return tables;
}

uint64_t ToU64(const sql::Row& row, size_t i) { return row.at(i) ? std::stoull(*row.at(i)) : 0; }

// Every event table: `statement` (ANALYZE or OPTIMIZE TABLE), then rows and bytes.
Result<HotTables> MeasureTables(sql::Connection& conn, const config::Config& config, const char* statement) {
  HotTables t;
  for (const auto& table : EventTables(config)) {
    RETURN_IF_ERROR(conn.Query(std::string(statement) + " TABLE `" + table + "`").status());
    ASSIGN_OR_RETURN(auto size, conn.Query("SELECT COALESCE(data_length + index_length, 0) "
                                           "FROM information_schema.tables WHERE table_schema = DATABASE() "
                                           "AND table_name = '" + table + "'"));
    ASSIGN_OR_RETURN(auto rows, conn.Query("SELECT COUNT(*) FROM `" + table + "`"));
    if (size.empty() || rows.empty()) return Internal("no table " + table);
    t.bytes += ToU64(size[0], 0);
    t.rows += ToU64(rows[0], 0);
  }
  return t;
}

struct ArchiveTotals {
  uint64_t segments = 0, events = 0, bytes = 0, state_bytes = 0, stubs = 0;
};

// `sluice archive status --json`, summed over the partitions.
Result<ArchiveTotals> ReadStatus(const ArchiveBenchOptions& o) {
  const std::string out = o.log_path + ".status.json";
  std::remove(out.c_str());
  ASSIGN_OR_RETURN(int code,
                   RunProgram({o.sluice_binary, "archive", "status", "--config", o.config_path, "--json"}, out));
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  if (code != 0) return Internal("sluice archive status exited " + std::to_string(code) + ": " + text.str());
  ArchiveTotals t;
  try {
    const Json doc = Json::parse(text.str());  // kept: a range-for over a temporary's member dangles
    for (const auto& p : doc.at("partitions")) {
      t.segments += p.at("segments").get<uint64_t>();
      t.events += p.at("archived_events").get<uint64_t>();
      t.bytes += p.at("archive_bytes").get<uint64_t>();
      t.state_bytes += p.at("archived_state_bytes").get<uint64_t>();
      t.stubs += p.at("stubs").get<uint64_t>();
    }
  } catch (const Json::exception& e) {
    return Internal(std::string("sluice archive status --json: ") + e.what());
  }
  return t;
}

CpuWatch Watching(const ArchiveBenchOptions& o) {
  CpuWatch cpu;
  cpu.Watch("engine_bench", getpid());
  for (const auto& [name, pid] : o.watch) cpu.Watch(name, pid);
  return cpu;
}

}  // namespace

Result<ArchiveBenchResult> RunArchive(const config::Config& config, const ArchiveBenchOptions& o) {
  ArchiveBenchResult r;
  // A file store's directory must exist (sluice does not make it): a fresh one per run.
  if (const std::string file = "file://"; config.archive.store.rfind(file, 0) == 0) {
    std::error_code ec;
    std::filesystem::create_directories(config.archive.store.substr(file.size()), ec);
    if (ec) return Internal("cannot create " + config.archive.store + ": " + ec.message());
  }
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));
  ASSIGN_OR_RETURN(r.before, MeasureTables(*conn, config, "ANALYZE"));
  ASSIGN_OR_RETURN(const ArchiveTotals start, ReadStatus(o));

  std::cerr << "[engine_bench] sluice archive run (output in " << o.log_path << ")\n";
  CpuWatch cpu = Watching(o);
  const CpuWatch::Sample cpu_start = cpu.Take();
  const double child_cpu = ChildrenCpuSeconds();
  const auto started = Clock::now();
  {
    ProgressLine progress("sluice archive run", [](double) { return std::string("running"); });
    ASSIGN_OR_RETURN(int code, RunProgram({o.sluice_binary, "archive", "run", "--config", o.config_path}, o.log_path));
    if (code != 0) return Internal("sluice archive run exited " + std::to_string(code) + " (log: " + o.log_path + ")");
  }
  r.seconds = SecondsSince(started);
  r.sluice_cpu_seconds = ChildrenCpuSeconds() - child_cpu;
  const CpuWatch::Sample cpu_end = cpu.Take();

  ASSIGN_OR_RETURN(const ArchiveTotals end, ReadStatus(o));
  r.events = end.events - start.events;
  r.segments = end.segments - start.segments;
  r.stubs = end.stubs;
  r.archive_bytes = end.bytes;
  r.archived_state_bytes = end.state_bytes;
  r.cpu = cpu.Compare(cpu_start, cpu_end, r.events);
  if (r.events == 0) r.problems.push_back("sluice archive run archived nothing");

  ASSIGN_OR_RETURN(r.after, MeasureTables(*conn, config, "ANALYZE"));
  const auto optimize = Clock::now();
  ASSIGN_OR_RETURN(r.optimized, MeasureTables(*conn, config, "OPTIMIZE"));
  r.optimize_seconds = SecondsSince(optimize);
  if (r.after.rows != r.before.rows) {
    r.problems.push_back("the event tables' rows went from " + std::to_string(r.before.rows) + " to " +
                         std::to_string(r.after.rows) + ": archiving must keep every row (stubs)");
  }
  return r;
}

Result<RebuildBenchResult> RunRebuild(const config::Config& config, const ArchiveBenchOptions& o) {
  RebuildBenchResult r;
  ASSIGN_OR_RETURN(auto conn, sql::Connection::Open(sql::ParamsFrom(config.mysql)));
  for (const auto& table : EventTables(config)) {
    ASSIGN_OR_RETURN(auto head, conn->Query("SELECT COALESCE(MAX(event_id), 0) FROM `" + table + "`"));
    r.events += head.empty() ? 0 : ToU64(head[0], 0);
  }
  std::cerr << "[engine_bench] sluice rebuild --sink " << o.sink << " (output in " << o.log_path << ")\n";
  CpuWatch cpu = Watching(o);
  std::vector<pid_t> engines;  // the running sluice, which does the rebuild
  for (const auto& [name, pid] : o.watch) {
    if (name == "sluice") engines.push_back(pid);
  }
  std::optional<MemorySampler> memory;
  if (!engines.empty()) memory.emplace(std::move(engines), std::chrono::milliseconds(100));
  const CpuWatch::Sample cpu_start = cpu.Take();
  const auto started = Clock::now();
  {
    ProgressLine progress("sluice rebuild " + o.sink, [&](double) {
      return memory ? "running, RSS " + std::to_string(memory->now_kib() / 1024) + " MiB" : std::string("running");
    });
    ASSIGN_OR_RETURN(int code, RunProgram({o.sluice_binary, "rebuild", "--config", o.config_path, "--sink", o.sink},
                                          o.log_path));
    if (code != 0) return Internal("sluice rebuild exited " + std::to_string(code) + " (log: " + o.log_path + ")");
  }
  r.seconds = SecondsSince(started);
  r.cpu = cpu.Compare(cpu_start, cpu.Take(), r.events);
  if (memory) {
    memory->Stop();
    r.rss_peak_kib = memory->peak_kib();
    r.hwm_kib = memory->hwm_kib();
    r.rss_samples = memory->samples();
  }
  return r;
}

Result<HistoryBenchResult> RunHistory(const Backlog& backlog, const Endpoint& writer, uint64_t sample,
                                      const ArchiveBenchOptions& o) {
  HistoryBenchResult r;
  const auto& spec = backlog.spec();
  sample = std::min(sample, spec.entities);
  HttpConnection http(writer);
  auto problem = [&](std::string what) {
    if (r.problems.size() < 5) r.problems.push_back(std::move(what));
  };
  CpuWatch cpu = Watching(o);
  const CpuWatch::Sample cpu_start = cpu.Take();
  const auto started = Clock::now();
  std::atomic<uint64_t> done{0};  // read by the progress line's thread
  uint64_t last_done = 0;
  double last_t = 0;
  ProgressLine progress("GET .../events", [&](double elapsed) {
    return RateText(done.load(), sample, elapsed, last_done, last_t, "histories");
  });
  for (uint64_t i = 0; i < sample; ++i) {
    const uint64_t k = i * spec.entities / sample;
    const std::string& id = backlog.EntityId(k);
    uint32_t expect = 1;  // the next version
    for (;;) {
      const std::string target = "/v1/entities/" + spec.type + "/" + id +
                                 "/events?limit=1000&after_version=" + std::to_string(expect - 1);
      ASSIGN_OR_RETURN(auto reply, http.Send("GET", target));
      ++r.requests;
      if (reply.status != 200) {
        return Internal("GET " + target + ": HTTP " + std::to_string(reply.status) + " " + reply.body.substr(0, 300));
      }
      Json doc;
      try {
        doc = Json::parse(reply.body);
      } catch (const Json::exception& e) {
        return Internal("GET events of " + id + ": not JSON: " + e.what());
      }
      const Json& events = doc["events"];
      for (const auto& e : events) {
        const uint64_t v = e.value("version", uint64_t{0});
        if (v != expect) {
          problem(id + ": version " + std::to_string(v) + " where " + std::to_string(expect) + " was due");
        } else if (!e.contains("state") || e["state"] != Json::parse(backlog.State(k, v))) {
          problem(id + " v" + std::to_string(v) + ": state differs from the one loaded");
        } else if (e.value("command_id", std::string()) != backlog.CommandId(k, v)) {
          problem(id + " v" + std::to_string(v) + ": command_id differs from the one loaded");
        }
        ++expect;
        ++r.events;
      }
      if (events.size() < 1000) break;
    }
    if (expect != spec.versions + 1) {
      problem(id + ": " + std::to_string(expect - 1) + " versions where " + std::to_string(spec.versions) +
              " were loaded");
    }
    ++r.entities;
    done.store(r.entities);
  }
  r.seconds = SecondsSince(started);
  r.cpu = cpu.Compare(cpu_start, cpu.Take(), r.events);
  return r;
}

}  // namespace sluice::bench
