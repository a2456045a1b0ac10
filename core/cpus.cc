#include "core/cpus.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace sluice {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

std::optional<long long> Integer(std::string_view s) {
  s = Trim(s);
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string ReadSmallFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

unsigned UnderQuota(long long quota, long long period, unsigned cpus) {
  if (quota <= 0 || period <= 0) return cpus;  // -1 (v1) or "max" (v2): none
  const long long allowed = (quota + period - 1) / period;
  return static_cast<unsigned>(std::clamp<long long>(allowed, 1, std::max(cpus, 1u)));
}

// `dir` and each directory above it up to `top`, deepest first.
std::vector<std::filesystem::path> UpTo(const std::filesystem::path& top, const std::string& below) {
  std::vector<std::filesystem::path> dirs;
  std::filesystem::path rel = std::filesystem::path(below).relative_path().lexically_normal();
  for (;;) {
    dirs.push_back(top / rel);
    if (rel.empty() || rel == "." || !rel.has_parent_path()) break;
    rel = rel.parent_path();
  }
  if (dirs.back() != top) dirs.push_back(top);
  return dirs;
}

}  // namespace

unsigned CpusUnderQuota(std::string_view cpu_max, unsigned cpus) {
  cpu_max = Trim(cpu_max);
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return cpus;
  const auto quota = Integer(cpu_max.substr(0, space));
  const auto period = Integer(cpu_max.substr(space + 1));
  if (!quota || !period) return cpus;  // "max": no quota
  return UnderQuota(*quota, *period, cpus);
}

unsigned CpusUnderCgroupQuotas(const std::string& cgroup_root, std::string_view proc_self_cgroup, unsigned cpus) {
  const std::filesystem::path root(cgroup_root);
  bool named = false;  // /proc/self/cgroup named a cgroup with the cpu controller
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    // hierarchy-ID:controllers:path
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? std::string::npos : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    // Outside this cgroup namespace ("/../x"): only what it sees as its root.
    if (path.find("..") != std::string::npos) path = "/";
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {  // v2
      named = true;
      for (const auto& dir : UpTo(root, path)) cpus = CpusUnderQuota(ReadSmallFile(dir / "cpu.max"), cpus);
      continue;
    }
    std::istringstream names(controllers);
    bool cpu = false;
    for (std::string name; std::getline(names, name, ',');) cpu = cpu || name == "cpu";
    if (!cpu) continue;
    named = true;
    // v1: the cpu controller is mounted by the name of its controllers, or
    // as cpu, or with cpuacct.
    for (const std::string& mount : {controllers, std::string("cpu"), std::string("cpu,cpuacct"),
                                    std::string("cpuacct,cpu")}) {
      std::error_code ec;
      if (!std::filesystem::is_directory(root / mount, ec)) continue;
      for (const auto& dir : UpTo(root / mount, path)) {
        const auto quota = Integer(ReadSmallFile(dir / "cpu.cfs_quota_us"));
        const auto period = Integer(ReadSmallFile(dir / "cpu.cfs_period_us"));
        if (quota && period) cpus = UnderQuota(*quota, *period, cpus);
      }
      break;
    }
  }
  // /proc/self/cgroup unreadable: the quota of the cgroup root it sees.
  if (!named) cpus = CpusUnderQuota(ReadSmallFile(root / "cpu.max"), cpus);
  return std::max(cpus, 1u);
}

unsigned UsableCpus() {
  unsigned cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = static_cast<unsigned>(CPU_COUNT(&set));
  if (cpus == 0) cpus = std::thread::hardware_concurrency();
  if (cpus == 0) cpus = 1;
  return CpusUnderCgroupQuotas("/sys/fs/cgroup", ReadSmallFile("/proc/self/cgroup"), cpus);
}

}  // namespace sluice
