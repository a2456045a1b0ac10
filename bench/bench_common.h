// Pieces shared by the writer benchmark's modes (bench/writer_bench.cc):
// the shape of the commands every mode writes, how work is handed out to
// concurrent workers, latency percentiles, CPU accounting from /proc, a
// once-per-second progress line and the report printed at the end.
//
// Threads: WorkQueue, ProgressLine and the counters are safe from any thread;
// everything else is used from one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>
#include <utility>
#include <vector>

namespace sluice::bench {

using Clock = std::chrono::steady_clock;

// Seconds since t0.
inline double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A fresh run id ("wb" + 10 hex digits from the clock and pid), so that the
// keys and entity ids of two runs never collide.
std::string NewRunId();

// The entity that command `index` goes to: always 0 when entities == 1,
// otherwise a hash of the index (so concurrent commands sometimes share an
// entity, as they would in real traffic). Deterministic.
uint64_t EntityOf(uint64_t index, uint64_t entities, uint64_t seed);

// "<run>-hot" for the single hot entity, "<run>-e<k>" otherwise.
std::string EntityId(std::string_view run_id, uint64_t entity, uint64_t entities);

// "<run>-c<index>": the Idempotency-Key / command id of command `index`.
std::string CommandId(std::string_view run_id, uint64_t index);

// {"n":<index>,"note":"<note>"}: the request body of command `index`, which
// is also its canonical stored form and, for a patch of an entity written
// only by this benchmark, the entity's state afterwards.
std::string CommandBody(uint64_t index, std::string_view note);

// A note of exactly `bytes` printable characters naming the run.
std::string MakeNote(std::string_view run_id, size_t bytes);

// Hands out command indices to concurrent workers. A phase covers at least
// `count` indices starting at `begin` and, when min_seconds > 0, keeps
// handing out more until that much time has passed since Open().
class WorkQueue {
 public:
  void Open(uint64_t begin, uint64_t count, double min_seconds);
  // Claims the next index; false once the phase is over.
  bool Claim(uint64_t& index);
  // The first index no claim of this phase returned (the next phase's begin).
  uint64_t end() const;
  Clock::time_point started() const { return started_; }

 private:
  uint64_t begin_ = 0;
  uint64_t limit_ = 0;
  Clock::time_point started_;
  Clock::time_point deadline_;
  std::atomic<uint64_t> next_{0};
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> end_{0};
};

// Percentiles of per-operation latencies.
struct LatencySummary {
  uint64_t count = 0;
  double p50_ms = 0, p90_ms = 0, p99_ms = 0, p999_ms = 0, max_ms = 0;
};
LatencySummary Summarize(std::vector<uint64_t> latencies_ns);

// The NAME=PID items of a benchmark's repeatable --watch option, in order.
// On a malformed item: false, with the reason in *error.
bool ParseWatch(const std::vector<std::string>& items, std::vector<std::pair<std::string, pid_t>>* out,
                std::string* error);

// CPU time of named processes and of the whole machine, from /proc. Take a
// sample before and after the timed part; Compare() gives, for each process,
// the share of one core it used in between, and the machine's split.
class CpuWatch {
 public:
  // Processes watched under one name are reported as one (their sum).
  void Watch(std::string name, pid_t pid);
  struct Sample {
    Clock::time_point at;
    std::vector<uint64_t> process_ticks;  // per watched process, utime+stime
    std::vector<std::vector<std::pair<pid_t, uint64_t>>> thread_ticks;  // per process: (tid, ticks)
    uint64_t user = 0, system = 0, iowait = 0, idle = 0, steal = 0, total = 0;  // /proc/stat "cpu"
  };
  Sample Take() const;
  // (name, value) pairs: for each process "<name>_cpu" (% of one core),
  // "<name>_us_per_op" (CPU microseconds per operation, when ops > 0) and
  // "<name>_threads" (the busiest threads' % of one core, "61/17/2"); then
  // other_cpu (% of one core used by every process not watched), steal_cpu
  // (the same unit, for the hypervisor's steal) and
  // machine_user/system/iowait/idle/steal in % of all cores (steal: time the
  // hypervisor ran other guests on our virtual CPUs; not in other_cpu).
  std::vector<std::pair<std::string, std::string>> Compare(const Sample& a, const Sample& b, uint64_t ops) const;

 private:
  std::vector<std::pair<std::string, pid_t>> watched_;
};

// Prints `label: <what()>` on stderr about once per second until destroyed.
class ProgressLine {
 public:
  ProgressLine(std::string label, std::function<std::string(double elapsed_s)> what);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The result of one run, as ordered key/value pairs; printed either as
// "key: value" lines (for people) or as one line of key=value (for scripts).
class Report {
 public:
  void Add(std::string key, std::string value);
  void Add(std::string key, double value, int decimals);
  void Add(std::string key, uint64_t value);
  void Print(bool one_line) const;

 private:
  std::vector<std::pair<std::string, std::string>> items_;
};

// "12,345".
std::string WithCommas(uint64_t v);

}  // namespace sluice::bench
