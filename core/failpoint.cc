#include "core/failpoint.h"

#include <csignal>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>

#include <unistd.h>

namespace sluice {
namespace {

struct Armed {
  FailAction action = FailAction::kNone;
  double probability = 1.0;
};

const std::unordered_map<std::string, Armed>& Table() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, Armed>();  // lives for the process
    const char* env = std::getenv("SLUICE_FAILPOINTS");
    std::string spec = env ? env : "";
    size_t pos = 0;
    while (pos < spec.size()) {
      size_t end = spec.find(';', pos);
      if (end == std::string::npos) end = spec.size();
      std::string item = spec.substr(pos, end - pos);
      pos = end + 1;
      const size_t eq = item.find('=');
      if (eq == std::string::npos) continue;
      Armed a;
      std::string what = item.substr(eq + 1);
      if (const size_t at = what.find('@'); at != std::string::npos) {
        a.probability = std::strtod(what.c_str() + at + 1, nullptr);
        what.resize(at);
      }
      if (what == "error") a.action = FailAction::kError;
      else if (what == "crash") a.action = FailAction::kCrash;
      else continue;
      (*t)[item.substr(0, eq)] = a;
    }
    return t;
  }();
  return *table;
}

}  // namespace

FailAction CheckFailpoint(std::string_view name) {
  const auto& table = Table();
  if (table.empty()) return FailAction::kNone;
  auto it = table.find(std::string(name));
  if (it == table.end()) return FailAction::kNone;
  if (it->second.probability < 1.0) {
    static std::mutex mu;
    static std::mt19937_64 rng(std::random_device{}());
    std::lock_guard lock(mu);
    if (std::uniform_real_distribution<double>(0, 1)(rng) >= it->second.probability) {
      return FailAction::kNone;
    }
  }
  if (it->second.action == FailAction::kCrash) {
    ::kill(::getpid(), SIGKILL);
    ::_exit(137);
  }
  return it->second.action;
}

}  // namespace sluice
