#include "bench/bench_common.h"

#include <errno.h>  // program_invocation_short_name
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sluice::bench {

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// utime+stime of a process (or of a thread, given its stat path) in clock
// ticks; 0 when it cannot be read.
uint64_t StatTicks(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) may hold spaces; the fields after it do not.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

}  // namespace

std::string NewRunId() {
  const uint64_t now = static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t h = SplitMix64(now ^ (static_cast<uint64_t>(getpid()) << 40));
  char buf[16];
  std::snprintf(buf, sizeof buf, "wb%010llx", static_cast<unsigned long long>(h & 0xffffffffffULL));
  return buf;
}

uint64_t EntityOf(uint64_t index, uint64_t entities, uint64_t seed) {
  if (entities <= 1) return 0;
  return SplitMix64(index ^ SplitMix64(seed)) % entities;
}

std::string EntityId(std::string_view run_id, uint64_t entity, uint64_t entities) {
  std::string id(run_id);
  if (entities <= 1) return id + "-hot";
  return id + "-e" + std::to_string(entity);
}

std::string CommandId(std::string_view run_id, uint64_t index) {
  return std::string(run_id) + "-c" + std::to_string(index);
}

std::string CommandBody(uint64_t index, std::string_view note) {
  std::string b = R"({"n":)";
  b += std::to_string(index);
  b += R"(,"note":")";
  b += note;
  b += "\"}";
  return b;
}

std::string MakeNote(std::string_view run_id, size_t bytes) {
  std::string note = "writer_bench " + std::string(run_id) + " ";
  static constexpr char kFill[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  while (note.size() < bytes) note += kFill[note.size() % (sizeof kFill - 1)];
  note.resize(bytes);
  return note;
}

void WorkQueue::Open(uint64_t begin, uint64_t count, double min_seconds) {
  begin_ = begin;
  limit_ = begin + count;
  started_ = Clock::now();
  deadline_ = started_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(min_seconds));
  next_.store(begin);
  closed_.store(false);
  end_.store(begin);
}

bool WorkQueue::Claim(uint64_t& index) {
  if (closed_.load(std::memory_order_relaxed)) return false;
  const uint64_t i = next_.fetch_add(1);
  // Past the count, the phase goes on only until its minimum duration is up.
  if (i >= limit_ && Clock::now() >= deadline_) {
    closed_.store(true);
    return false;
  }
  index = i;
  uint64_t seen = end_.load();
  while (seen < i + 1 && !end_.compare_exchange_weak(seen, i + 1)) {
  }
  return true;
}

uint64_t WorkQueue::end() const { return end_.load(); }

LatencySummary Summarize(std::vector<uint64_t> ns) {
  LatencySummary s;
  s.count = ns.size();
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  auto at = [&](double p) {
    const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(ns.size())));
    return static_cast<double>(ns[std::clamp<size_t>(rank, 1, ns.size()) - 1]) / 1e6;
  };
  s.p50_ms = at(0.50);
  s.p90_ms = at(0.90);
  s.p99_ms = at(0.99);
  s.p999_ms = at(0.999);
  s.max_ms = static_cast<double>(ns.back()) / 1e6;
  return s;
}

bool ParseWatch(const std::vector<std::string>& items, std::vector<std::pair<std::string, pid_t>>* out,
                std::string* error) {
  for (const auto& item : items) {
    const size_t eq = item.find('=');
    char* end = nullptr;
    const long pid = eq == std::string::npos ? 0 : std::strtol(item.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || *end != '\0' || pid <= 0) {
      *error = "--watch wants NAME=PID, got " + item;
      return false;
    }
    out->emplace_back(item.substr(0, eq), static_cast<pid_t>(pid));
  }
  return true;
}

void CpuWatch::Watch(std::string name, pid_t pid) { watched_.emplace_back(std::move(name), pid); }

CpuWatch::Sample CpuWatch::Take() const {
  Sample s;
  s.at = Clock::now();
  for (const auto& [name, pid] : watched_) {
    const std::string dir = "/proc/" + std::to_string(pid);
    s.process_ticks.push_back(StatTicks(dir + "/stat"));
    std::vector<std::pair<pid_t, uint64_t>> threads;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(dir + "/task", ec)) {
      const std::string tid = task.path().filename().string();
      threads.emplace_back(static_cast<pid_t>(std::stol(tid)), StatTicks(task.path().string() + "/stat"));
    }
    s.thread_ticks.push_back(std::move(threads));
  }
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[8] = {};
  if (in >> cpu && cpu == "cpu") {
    for (auto& x : v) in >> x;
  }
  // user nice system idle iowait irq softirq steal
  s.user = v[0] + v[1];
  s.system = v[2] + v[5] + v[6];
  s.idle = v[3];
  s.iowait = v[4];
  s.steal = v[7];
  for (uint64_t x : v) s.total += x;
  return s;
}

std::vector<std::pair<std::string, std::string>> CpuWatch::Compare(const Sample& a, const Sample& b,
                                                                   uint64_t ops) const {
  std::vector<std::pair<std::string, std::string>> out;
  auto fixed = [](double v, int decimals) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return std::string(buf);
  };
  const double wall = std::chrono::duration<double>(b.at - a.at).count();
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  auto percent = [&](uint64_t ticks) { return wall > 0 ? 100.0 * static_cast<double>(ticks) / hz / wall : 0.0; };
  // Processes watched under one name (several engines) count as one.
  std::vector<std::string> names;
  for (const auto& [name, pid] : watched_) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  for (const std::string& name : names) {
    uint64_t ticks = 0;
    std::vector<uint64_t> per_thread;
    for (size_t i = 0; i < watched_.size(); ++i) {
      if (watched_[i].first != name) continue;
      ticks += b.process_ticks[i] - a.process_ticks[i];
      for (const auto& [tid, after] : b.thread_ticks[i]) {
        uint64_t before = 0;
        for (const auto& [t, v] : a.thread_ticks[i]) {
          if (t == tid) before = v;
        }
        // A thread that ended between listing /proc/PID/task and reading its
        // stat reads as 0: count nothing for it rather than wrap around.
        per_thread.push_back(after >= before ? after - before : 0);
      }
    }
    out.emplace_back(name + "_cpu", fixed(percent(ticks), 0));
    if (ops > 0) {
      out.emplace_back(name + "_us_per_op", fixed(1e6 * static_cast<double>(ticks) / hz / static_cast<double>(ops), 1));
    }
    std::sort(per_thread.rbegin(), per_thread.rend());
    std::string busiest;
    for (size_t k = 0; k < per_thread.size() && k < 3; ++k) {
      if (k > 0) busiest += '/';
      busiest += fixed(percent(per_thread[k]), 0);
    }
    out.emplace_back(name + "_threads", busiest.empty() ? "-" : busiest);
  }
  // Everything else that ran meanwhile (other people's builds, the kernel's
  // threads), in % of one core: it competes with the processes measured.
  // Steal (time the hypervisor gave our virtual CPUs to other guests) is
  // reported apart: it is nobody's work in this machine.
  uint64_t watched_ticks = 0;
  for (size_t i = 0; i < watched_.size(); ++i) watched_ticks += b.process_ticks[i] - a.process_ticks[i];
  const uint64_t busy =
      (b.total - b.idle - b.iowait - b.steal) - (a.total - a.idle - a.iowait - a.steal);
  out.emplace_back("other_cpu", fixed(busy > watched_ticks ? percent(busy - watched_ticks) : 0.0, 0));
  out.emplace_back("steal_cpu", fixed(percent(b.steal - a.steal), 0));
  const double total = static_cast<double>(b.total - a.total);
  auto share = [&](uint64_t x, uint64_t y) {
    return fixed(total > 0 ? 100.0 * static_cast<double>(y - x) / total : 0.0, 0);
  };
  out.emplace_back("machine_user", share(a.user, b.user));
  out.emplace_back("machine_system", share(a.system, b.system));
  out.emplace_back("machine_iowait", share(a.iowait, b.iowait));
  out.emplace_back("machine_idle", share(a.idle, b.idle));
  out.emplace_back("machine_steal", share(a.steal, b.steal));
  return out;
}

ProgressLine::ProgressLine(std::string label, std::function<std::string(double)> what) {
  thread_ = std::thread([this, label = std::move(label), what = std::move(what)] {
    const auto start = Clock::now();
    std::unique_lock lock(mu_);
    for (int tick = 1;; ++tick) {
      if (cv_.wait_until(lock, start + std::chrono::seconds(tick), [this] { return stop_; })) return;
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      std::cerr << "[" << program_invocation_short_name << "] " << label << " " << static_cast<int>(elapsed) << "s: " << what(elapsed) << "\n";
    }
  });
}

ProgressLine::~ProgressLine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Report::Add(std::string key, std::string value) { items_.emplace_back(std::move(key), std::move(value)); }

void Report::Add(std::string key, double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  items_.emplace_back(std::move(key), buf);
}

void Report::Add(std::string key, uint64_t value) { items_.emplace_back(std::move(key), std::to_string(value)); }

void Report::Print(bool one_line) const {
  if (one_line) {
    std::string line;
    for (const auto& [k, v] : items_) {
      std::string value = v;
      std::replace(value.begin(), value.end(), ' ', '_');
      if (!line.empty()) line += ' ';
      line += k + "=" + value;
    }
    std::cout << line << "\n";
    return;
  }
  size_t width = 0;
  for (const auto& [k, v] : items_) width = std::max(width, k.size());
  for (const auto& [k, v] : items_) std::cout << k << ":" << std::string(width + 2 - k.size(), ' ') << v << "\n";
}

std::string WithCommas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace sluice::bench
