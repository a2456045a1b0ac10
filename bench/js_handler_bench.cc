// js_handler_bench: the CPU cost of running a command through a JavaScript
// handler next to the built-in `patch`, in one process and one thread, with
// no HTTP and no MySQL: what the partition worker spends planning one command
// (docs/handlers.md, docs/BENCHMARKS.md).
//
//   js_handler_bench [--file bench/handlers/ledger.js] [--command record] [--calls 200000]
//
// Both runs feed each command's new state to the next, as on one hot entity,
// with the body writer_bench sends ({"n":i,"note":"..."}). Prints one line per
// run: calls, CPU seconds of this thread, calls per CPU second, microseconds
// per call. Exit status 0, or 1 when a call fails (or 2 on a bad command line).
#include <time.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "handlers/handler_files.h"
#include "writer/commands.h"

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

int Usage(const char* why) {
  std::cerr << (why ? std::string("js_handler_bench: ") + why + "\n" : "")
            << "usage: js_handler_bench [--file FILE.js] [--command NAME] [--calls N]\n"
               "  --file     handler file (default bench/handlers/ledger.js, from the source tree)\n"
               "  --command  its command taking {\"n\":..,\"note\":..} (default record)\n"
               "  --calls    calls per run (default 200000)\n";
  return why ? 2 : 0;
}

// Runs `name` `calls` times through `runner`; false when one is not applied.
bool Run(sluice::writer::CommandRunner& runner, const std::string& name, uint64_t calls) {
  using sluice::Json;
  Json state = Json::object();
  bool exists = false;
  const std::string note = "writer_bench js 0123456789abcdef";
  const double t0 = ThreadCpuSeconds();
  for (uint64_t i = 0; i < calls; ++i) {
    if (i % 1000 == 0) runner.BeginBatch();
    const Json request = {{"n", i}, {"note", note}};
    sluice::writer::CommandOutcome out =
        runner.Run(name, sluice::writer::EntityView{exists, i, &state}, request, "c" + std::to_string(i));
    if (!out.applied) {
      std::cerr << "js_handler_bench: " << name << " call " << i << " failed: " << out.message << "\n";
      return false;
    }
    // What the worker does with an applied command: the canonical texts it stores.
    const std::string stored = sluice::CanonicalJson(out.new_state) + sluice::CanonicalJson(out.response);
    if (stored.empty()) return false;
    state = std::move(out.new_state);
    exists = true;
  }
  const double cpu = ThreadCpuSeconds() - t0;
  std::cout << name << ": calls=" << calls << " cpu_s=" << cpu << " calls_per_cpu_s=" << static_cast<uint64_t>(calls / cpu)
            << " us_per_call=" << cpu * 1e6 / static_cast<double>(calls) << "\n";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file = std::string(SLUICE_SOURCE_DIR) + "/bench/handlers/ledger.js";
  std::string command = "record";
  uint64_t calls = 200000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") return Usage(nullptr);
    if (i + 1 >= argc) return Usage(("missing value for " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--file") {
      file = v;
    } else if (a == "--command") {
      command = v;
    } else if (a == "--calls") {
      calls = std::strtoull(v.c_str(), nullptr, 10);
      if (calls == 0) return Usage("--calls must be a positive number");
    } else {
      return Usage(("unknown option " + a).c_str());
    }
  }
  std::ifstream in(file);
  std::stringstream text;
  if (!in || !(text << in.rdbuf())) return Usage(("cannot read " + file).c_str());
  auto script = std::make_shared<sluice::handlers::HandlerScript>();
  script->file = file;
  script->source = text.str();
  auto rt = sluice::handlers::JsRuntime::Create(file, script->source, script->limits);
  if (!rt.ok()) {
    std::cerr << rt.status().message() << "\n";
    return 1;
  }
  script->commands = (*rt)->commands();
  if (!script->HasCommand(command)) return Usage((file + " has no command " + command).c_str());

  sluice::writer::CommandRunner builtin(nullptr);
  sluice::writer::CommandRunner js(script);
  // Twice each, alternating, so that neither run gets a warmer machine.
  for (int round = 0; round < 2; ++round) {
    if (!Run(builtin, "patch", calls) || !Run(js, command, calls)) return 1;
  }
  return 0;
}
