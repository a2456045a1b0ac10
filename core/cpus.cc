#include "core/cpus.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace sluice {

unsigned CpusUnderQuota(std::string_view cpu_max, unsigned cpus) {
  const size_t space = cpu_max.find(' ');
  if (space == std::string_view::npos) return cpus;
  const std::string_view quota_text = cpu_max.substr(0, space);
  std::string_view period_text = cpu_max.substr(space + 1);
  while (!period_text.empty() && (period_text.back() == '\n' || period_text.back() == ' ')) period_text.remove_suffix(1);
  unsigned long long quota = 0, period = 0;
  if (std::from_chars(quota_text.data(), quota_text.data() + quota_text.size(), quota).ec != std::errc() ||
      std::from_chars(period_text.data(), period_text.data() + period_text.size(), period).ec != std::errc() ||
      quota == 0 || period == 0) {
    return cpus;  // "max": no quota
  }
  const unsigned long long allowed = (quota + period - 1) / period;
  return static_cast<unsigned>(std::clamp<unsigned long long>(allowed, 1, std::max(cpus, 1u)));
}

unsigned UsableCpus() {
  unsigned cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = static_cast<unsigned>(CPU_COUNT(&set));
  if (cpus == 0) cpus = std::thread::hardware_concurrency();
  if (cpus == 0) cpus = 1;
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::stringstream text;
  if (in) text << in.rdbuf();
  return CpusUnderQuota(text.str(), cpus);
}

}  // namespace sluice
