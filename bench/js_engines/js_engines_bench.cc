// js_engines_bench: which JavaScript engine for command handlers and for view
// code (per-event transforms in the sync engine). Measures, per engine built
// in, in one thread (a new one per engine), CPU time of that thread
// (CLOCK_THREAD_CPUTIME_ID) after a warm-up, and of the whole process beside
// it (V8 and SpiderMonkey compile and collect on helper threads). The engines:
//
//   sluice     the project's own handlers::JsRuntime (SpiderMonkey 102 with the
//              handlers' sandbox), JSON in and out through nlohmann::json as
//              the writer and the sinks use it (sluice_engine.cc); always built.
//   mozjs      SpiderMonkey 102 used directly, a realm per runtime, JSON texts
//              parsed and stringified by the engine (libmozjs-102-dev).
//   duktape    stock Duktape 2.7, a heap per runtime (Debian duktape-dev's
//              duktape.c, unpatched; built only when it is installed).
//   v8, v8ctx  V8 from node 18's libnode, an isolate per runtime, or a
//              context per runtime in one isolate (only when libnode is found).
//
// The workloads:
//
//   handler    bench/handlers/ledger.js `record` called as the writer does:
//              state, request and ctx JSON texts parsed by the engine, the
//              new state and response back as JSON.stringify text, the state
//              fed to the next call (one hot entity). For sluice the texts
//              go through nlohmann::json, and the state and response come
//              back as CanonicalJson text (sluice_engine.cc).
//   transform  bench/js_engines/transform.js (ES2020; Duktape cannot parse it
//              and runs transform_es5.js), one event of ~600 bytes of JSON
//              text in, JSON text out.
//   batch      transform_batch: one call with an array of --batch-events
//              events, per event.
//   aggregate  bench/js_engines/aggregate.js, the operations on a sum table.
//   runtime    --runtimes runtimes made with the transform file loaded: CPU
//              ms to make one, and RSS growth per runtime, also after one
//              transform call in each (runtime_used_kib).
//   es2020     whether the engine compiles transform.js.
//   limits     a CPU-time limit tried on `while(true){}` and a call on the
//              same runtime after it, a heap limit, a fixed Date and no
//              Math.random, file:line of an error (js_engine.h ProbeLimits).
//
//   js_engines_bench [--engines sluice,mozjs,duktape,v8,v8ctx] [--calls 100000]
//                    [--batches 50] [--batch-events 1000] [--runtimes 50]
//                    [--dir SOURCE_DIR] [--if-built]
//
// Prints a table, the limits found, and last one line of key=value pairs
// (bench/scenarios/js_engines.bench): <engine>_handler_us and so on, and with
// one engine also the same keys without the prefix. --if-built skips engines
// this build lacks (their library was not found) instead of failing; without
// --engines every engine built in runs, and one that is not is named on
// stderr. Exit status 0; 1 when a call failed or two engines disagreed on an
// output; 2 on a bad command line.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/js_engines/js_engine.h"
#include "core/json.h"

namespace sluice::bench::js {
namespace {

struct Options {
  std::vector<std::string> engines;
  uint64_t calls = 100000;
  uint64_t batches = 50;
  uint64_t batch_events = 1000;
  uint64_t runtimes = 50;
  std::string dir = SLUICE_SOURCE_DIR;
  bool if_built = false;  // skip engines this build lacks instead of failing
};

struct Cost {
  double thread_us = 0;   // per call or event, this thread
  double process_us = 0;  // the same, all threads of the process
};

struct Figures {
  std::string version;
  Cost handler;
  Cost transform;
  Cost batch;
  Cost aggregate;
  double runtime_kib = 0;       // RSS per runtime, the file loaded
  double runtime_used_kib = 0;  // the same after one transform call in each
  double create_ms = 0;
  bool es2020 = false;
  std::string es2020_error;
  LimitProbe limits;
  std::vector<std::string> samples;  // outputs compared across engines
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  if (!in || !(text << in.rdbuf())) {
    std::cerr << "js_engines_bench: cannot read " << path << "\n";
    std::exit(2);
  }
  return text.str();
}

size_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  size_t resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// Called on an engine's thread: _Exit, since exit() would run the engines'
// static destructors while that thread still holds its JavaScript context.
[[noreturn]] void Fail(std::string_view engine, std::string_view what, const std::string& error) {
  std::cout.flush();
  std::cerr << "js_engines_bench: " << engine << " " << what << ": " << error << std::endl;
  std::_Exit(1);
}

// One account event as the sync engine would hand it to view code: about
// 600 bytes of JSON text, different per i.
std::string EventJson(uint64_t i) {
  const uint64_t owner = i % 97;
  const uint64_t before_owner = (i + 1) % 97;
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      R"({"id":"acct-%06llu","version":%llu,"command":"deposit",)"
      R"("state":{"owner":{"name":"owner-%03llu","region":"eu-west-%llu"},"balance":%llu.25,"currency":"EUR",)"
      R"("tags":["gold","retail","region-%llu"],"status":"active","limits":{"daily":5000,"monthly":50000},)"
      R"("created_at":"2026-01-02T03:04:05Z","updated_at":"2026-11-26T10:00:%02lluZ","note":"ok"},)"
      R"("before":{"owner":{"name":"owner-%03llu","region":"eu-west-%llu"},"balance":%llu.5,"currency":"EUR",)"
      R"("tags":["gold","retail"],"status":"active","limits":{"daily":5000,"monthly":50000},)"
      R"("created_at":"2026-01-02T03:04:05Z","updated_at":"2026-11-25T09:00:00Z","note":"ok"}})",
      static_cast<unsigned long long>(i), static_cast<unsigned long long>(i % 1000 + 2),
      static_cast<unsigned long long>(owner), static_cast<unsigned long long>(owner % 3 + 1),
      static_cast<unsigned long long>(1000 + i * 7 % 10000), static_cast<unsigned long long>(owner % 3 + 1),
      static_cast<unsigned long long>(i % 60), static_cast<unsigned long long>(before_owner),
      static_cast<unsigned long long>(before_owner % 3 + 1), static_cast<unsigned long long>(900 + i * 3 % 10000));
  return buf;
}

// Runs `step(i)` for warm-up then `n` times; the cost per call, divided by
// `per` (events per call).
template <typename Step>
Cost Measure(uint64_t n, uint64_t per, Step&& step) {
  for (uint64_t i = 0; i < std::max<uint64_t>(n / 10, 1); ++i) step(i);
  const double t0 = ThreadCpuSeconds();
  const double p0 = ProcessCpuSeconds();
  for (uint64_t i = 0; i < n; ++i) step(i);
  const double units = static_cast<double>(n * per);
  return Cost{(ThreadCpuSeconds() - t0) * 1e6 / units, (ProcessCpuSeconds() - p0) * 1e6 / units};
}

void MeasureHandler(JsEngine& engine, const Options& opt, Figures* f) {
  const std::string file = opt.dir + "/bench/handlers/ledger.js";
  std::string error;
  auto rt = engine.NewRuntime(file, ReadFile(file), &error);
  if (rt == nullptr) Fail(engine.name(), "ledger.js", error);
  std::vector<std::string> args(3);
  args[0] = "{}";
  std::string response;
  std::string state;
  uint64_t done = 0;
  f->handler = Measure(opt.calls, 1, [&](uint64_t i) {
    args[1] = R"({"n":)" + std::to_string(i) + R"(,"note":"writer_bench js 0123456789abcdef"})";
    args[2] = R"({"command_id":"c)" + std::to_string(done) + R"(","version":)" + std::to_string(done) +
              R"(,"exists":)" + (done > 0 ? "true" : "false") + R"(,"now":1764150000000})";
    if (!rt->Call("record", args, &response, &state, &error)) Fail(engine.name(), "record", error);
    args[0].swap(state);
    ++done;
  });
  const Json last = ParseJsonOrDiscarded(args[0]);
  if (!last.is_object() || last.value("count", uint64_t{0}) != done) {
    Fail(engine.name(), "record", "final state " + args[0] + " does not count " + std::to_string(done) + " calls");
  }
  f->samples.push_back(response);
}

// Whether the engine compiles transform.js; the file it is to run.
std::string CheckEs2020(JsEngine& engine, const Options& opt, Figures* f) {
  const std::string es2020_file = opt.dir + "/bench/js_engines/transform.js";
  std::string error;
  f->es2020 = engine.NewRuntime(es2020_file, ReadFile(es2020_file), &error) != nullptr;
  if (f->es2020) return es2020_file;
  f->es2020_error = error;
  return opt.dir + "/bench/js_engines/transform_es5.js";
}

void MeasureViewCode(JsEngine& engine, const Options& opt, const std::string& transform_file, Figures* f) {
  std::string error;
  auto transform = engine.NewRuntime(transform_file, ReadFile(transform_file), &error);
  if (transform == nullptr) Fail(engine.name(), transform_file, error);
  const std::string aggregate_file = opt.dir + "/bench/js_engines/aggregate.js";
  auto aggregate = engine.NewRuntime(aggregate_file, ReadFile(aggregate_file), &error);
  if (aggregate == nullptr) Fail(engine.name(), "aggregate.js", error);

  std::vector<std::string> events(1000);
  std::string batch = "[";
  for (uint64_t i = 0; i < events.size(); ++i) events[i] = EventJson(i);
  for (uint64_t i = 0; i < opt.batch_events; ++i) batch += (i > 0 ? "," : "") + events[i % events.size()];
  batch += "]";
  std::vector<std::string> arg(1);
  std::string out;

  f->transform = Measure(opt.calls, 1, [&](uint64_t i) {
    arg[0] = events[i % events.size()];
    if (!transform->Call("transform", arg, &out, nullptr, &error)) Fail(engine.name(), "transform", error);
  });
  for (uint64_t i = 0; i < 3; ++i) {
    arg[0] = events[i];
    if (!transform->Call("transform", arg, &out, nullptr, &error)) Fail(engine.name(), "transform", error);
    f->samples.push_back(out);
  }

  arg[0] = batch;
  f->batch = Measure(opt.batches, opt.batch_events, [&](uint64_t) {
    if (!transform->Call("transform_batch", arg, &out, nullptr, &error)) Fail(engine.name(), "transform_batch", error);
  });
  f->samples.push_back(out.substr(0, 400));

  f->aggregate = Measure(opt.calls, 1, [&](uint64_t i) {
    arg[0] = events[i % events.size()];
    if (!aggregate->Call("aggregate", arg, &out, nullptr, &error)) Fail(engine.name(), "aggregate", error);
  });
  f->samples.push_back(out);
}

// Runtimes with the transform file loaded, kept alive together.
void MeasureRuntimes(JsEngine& engine, const Options& opt, const std::string& file, Figures* f) {
  const std::string source = ReadFile(file);
  std::string error;
  // One made and dropped first: what the engine sets up once is not per runtime.
  if (engine.NewRuntime(file, source, &error) == nullptr) Fail(engine.name(), "runtime", error);
  std::vector<std::unique_ptr<JsEngineRuntime>> runtimes;
  const size_t rss0 = RssBytes();
  const double t0 = ThreadCpuSeconds();
  for (uint64_t i = 0; i < opt.runtimes; ++i) {
    runtimes.push_back(engine.NewRuntime(file, source, &error));
    if (runtimes.back() == nullptr) Fail(engine.name(), "runtime", error);
  }
  f->create_ms = (ThreadCpuSeconds() - t0) * 1e3 / static_cast<double>(opt.runtimes);
  const size_t rss1 = RssBytes();
  f->runtime_kib = static_cast<double>(rss1 - rss0) / 1024.0 / static_cast<double>(opt.runtimes);
  // A heap grows on first use (V8's young generation, for one): each runtime runs one event.
  const std::vector<std::string> event = {EventJson(0)};
  std::string out;
  for (auto& rt : runtimes) {
    if (!rt->Call("transform", event, &out, nullptr, &error)) Fail(engine.name(), "transform", error);
  }
  f->runtime_used_kib = static_cast<double>(RssBytes() - rss0) / 1024.0 / static_cast<double>(opt.runtimes);
}

std::unique_ptr<JsEngine> MakeEngine(const std::string& name) {
  if (name == "sluice") return MakeSluiceEngine();
#ifdef SLUICE_BENCH_HAVE_DUKTAPE
  if (name == "duktape") return MakeDuktapeEngine();
#endif
#ifdef SLUICE_BENCH_HAVE_V8
  if (name == "v8" || name == "v8ctx") return MakeV8Engine(name == "v8ctx");
#endif
#ifdef SLUICE_BENCH_HAVE_MOZJS
  if (name == "mozjs") return MakeMozjsEngine();
#endif
  return nullptr;
}

std::vector<std::string> BuiltEngines() {
  std::vector<std::string> names = {"sluice"};
#ifdef SLUICE_BENCH_HAVE_MOZJS
  names.push_back("mozjs");
#endif
#ifdef SLUICE_BENCH_HAVE_DUKTAPE
  names.push_back("duktape");
#endif
#ifdef SLUICE_BENCH_HAVE_V8
  names.push_back("v8");
  names.push_back("v8ctx");
#endif
  return names;
}

// Why an engine is not built in, for the message that says so.
std::string NotBuiltWhy(const std::string& name) {
  if (name == "duktape") return " (no Duktape source at configure time: Debian duktape-dev, SLUICE_DUKTAPE_SRC_DIR)";
  if (name == "v8" || name == "v8ctx") return " (libnode and its include/node/v8.h not found at configure time)";
  if (name == "mozjs") return " (mozjs-102 not found through pkg-config at configure time)";
  return " (no such engine)";
}

// Measures one engine, on a thread of its own: a SpiderMonkey context
// belongs to its thread and JsRuntime keeps one per thread until the thread
// exits, so that "sluice" and "mozjs" can run in one process.
void MeasureEngine(JsEngine& engine, const Options& opt, Figures* f) {
  f->version = engine.version();
  // Runtimes first, before the workloads leave freed memory to reuse.
  const std::string transform_file = CheckEs2020(engine, opt, f);
  MeasureRuntimes(engine, opt, transform_file, f);
  MeasureViewCode(engine, opt, transform_file, f);
  MeasureHandler(engine, opt, f);
  f->limits = engine.ProbeLimits();
}

int Usage(const char* why) {
  std::string built;
  for (const std::string& e : BuiltEngines()) built += (built.empty() ? "" : ",") + e;
  std::cerr << (why ? std::string("js_engines_bench: ") + why + "\n" : "")
            << "usage: js_engines_bench [--engines " << built
            << "] [--calls N] [--batches N] [--batch-events N] [--runtimes N]\n"
               "                        [--dir SOURCE_DIR] [--if-built]\n";
  return why ? 2 : 0;
}

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace
}  // namespace sluice::bench::js

int main(int argc, char** argv) {
  using namespace sluice::bench::js;
  Options opt;
  opt.engines = BuiltEngines();
  bool engines_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return Usage(nullptr);
    if (a == "--if-built") {
      opt.if_built = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(("missing value for " + a).c_str());
    const std::string v = argv[++i];
    auto number = [&](uint64_t* out) {
      *out = std::strtoull(v.c_str(), nullptr, 10);
      return *out > 0;
    };
    if (a == "--engines") {
      engines_given = true;
      opt.engines.clear();
      std::stringstream list(v);
      for (std::string e; std::getline(list, e, ',');) opt.engines.push_back(e);
    } else if (a == "--calls") {
      if (!number(&opt.calls)) return Usage("--calls must be a positive number");
    } else if (a == "--batches") {
      if (!number(&opt.batches)) return Usage("--batches must be a positive number");
    } else if (a == "--batch-events") {
      if (!number(&opt.batch_events)) return Usage("--batch-events must be a positive number");
    } else if (a == "--runtimes") {
      if (!number(&opt.runtimes)) return Usage("--runtimes must be a positive number");
    } else if (a == "--dir") {
      opt.dir = v;
    } else {
      return Usage(("unknown option " + a).c_str());
    }
  }

  if (!engines_given) {
    for (const std::string name : {"mozjs", "duktape", "v8"}) {
      const std::vector<std::string> built = BuiltEngines();
      if (std::find(built.begin(), built.end(), name) == built.end()) {
        std::cerr << "js_engines_bench: " << name << " is not built in" << NotBuiltWhy(name) << ", no " << name
                  << " rows\n";
      }
    }
  }
  std::map<std::string, Figures> figures;
  std::vector<std::string> order;
  for (const std::string& name : opt.engines) {
    const std::vector<std::string> built = BuiltEngines();
    if (std::find(built.begin(), built.end(), name) == built.end()) {
      if (!opt.if_built) return Usage(("engine not built in: " + name + NotBuiltWhy(name)).c_str());
      std::cerr << "js_engines_bench: " << name << " is not built in" << NotBuiltWhy(name) << ", skipped\n";
      continue;
    }
    Figures& f = figures[name];
    order.push_back(name);
    std::thread([&] {
      std::unique_ptr<JsEngine> engine = MakeEngine(name);
      MeasureEngine(*engine, opt, &f);
    }).join();
  }

  if (order.empty()) {
    std::cout << "skipped=1\n";
    return 0;
  }
  const Figures& first = figures[order.front()];
  for (const std::string& name : order) {
    if (figures[name].samples != first.samples) {
      std::cerr << "js_engines_bench: " << name << " and " << order.front() << " disagree:\n";
      for (size_t i = 0; i < first.samples.size(); ++i) {
        std::cerr << "  " << order.front() << ": " << first.samples[i] << "\n  " << name << ": "
                  << figures[name].samples[i] << "\n";
      }
      return 1;
    }
  }

  std::cout << "calls=" << opt.calls << " batches=" << opt.batches << "x" << opt.batch_events
            << " runtimes=" << opt.runtimes << "; us of CPU per call or event, this thread (whole process)\n\n";
  std::printf("%-9s %-20s %-17s %-17s %-17s %-17s %-11s %-10s %-7s %-9s %-9s\n", "engine", "version", "handler_us",
              "transform_us", "batch_us/event", "aggregate_us", "runtime_KiB", "create_ms", "ES2020", "cpu_limit",
              "mem_limit");
  std::printf("%-9s %-20s %-17s %-17s %-17s %-17s %-11s\n", "", "", "", "", "", "", "(used)");
  auto cost = [](const Cost& c) { return Fixed(c.thread_us, 2) + " (" + Fixed(c.process_us, 2) + ")"; };
  for (const std::string& name : order) {
    const Figures& f = figures[name];
    std::printf("%-9s %-20s %-17s %-17s %-17s %-17s %-11s %-10s %-7s %-9s %-9s\n", name.c_str(), f.version.c_str(),
                cost(f.handler).c_str(), cost(f.transform).c_str(), cost(f.batch).c_str(), cost(f.aggregate).c_str(),
                Fixed(f.runtime_kib, 0).c_str(), Fixed(f.create_ms, 3).c_str(), f.es2020 ? "yes" : "no",
                f.limits.cpu_limit_works ? "yes" : "no", f.limits.memory_limit_works ? "yes" : "no");
    std::printf("%-9s %-20s %-17s %-17s %-17s %-17s %-11s\n", "", "", "", "", "", "", Fixed(f.runtime_used_kib, 0).c_str());
  }
  std::cout << "\n";
  for (const std::string& name : order) {
    const Figures& f = figures[name];
    std::cout << name << ":\n";
    if (!f.es2020) std::cout << "  es2020:      no, ran transform_es5.js (" << f.es2020_error << ")\n";
    std::cout << "  cpu limit:   " << f.limits.cpu_limit << "\n"
              << "  mem limit:   " << f.limits.memory_limit << "\n"
              << "  determinism: " << f.limits.determinism << "\n"
              << "  error:       " << f.limits.error_location << "\n";
    if (!f.limits.notes.empty()) std::cout << "  notes:       " << f.limits.notes << "\n";
  }

  std::string kv;
  auto keys = [&kv](const std::string& prefix, const Figures& f) {
    auto put = [&](const std::string& key, const std::string& value) { kv += prefix + key + "=" + value + " "; };
    put("handler_us", Fixed(f.handler.thread_us, 3));
    put("handler_proc_us", Fixed(f.handler.process_us, 3));
    put("transform_us", Fixed(f.transform.thread_us, 3));
    put("transform_proc_us", Fixed(f.transform.process_us, 3));
    put("batch_us", Fixed(f.batch.thread_us, 3));
    put("batch_proc_us", Fixed(f.batch.process_us, 3));
    put("aggregate_us", Fixed(f.aggregate.thread_us, 3));
    put("aggregate_proc_us", Fixed(f.aggregate.process_us, 3));
    put("runtime_kib", Fixed(f.runtime_kib, 0));
    put("runtime_used_kib", Fixed(f.runtime_used_kib, 0));
    put("create_ms", Fixed(f.create_ms, 3));
    put("es2020", f.es2020 ? "1" : "0");
    put("cpu_limit", f.limits.cpu_limit_works ? "1" : "0");
    put("mem_limit", f.limits.memory_limit_works ? "1" : "0");
  };
  for (const std::string& name : order) keys(name + "_", figures[name]);
  if (order.size() == 1) {
    kv += "engine=" + order.front() + " ";
    keys("", figures[order.front()]);
  }
  kv.pop_back();
  std::cout << "\n" << kv << "\n";
  return 0;
}
