#include "core/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>
#include <unordered_map>

namespace sluice {
namespace {

std::mutex g_mu;
LogLevel g_level = LogLevel::kInfo;

struct SiteState {
  std::chrono::steady_clock::time_point last{};
  uint64_t suppressed = 0;
};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO ";
    case LogLevel::kWarn: return "WARN ";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

void WriteLocked(LogLevel level, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::fprintf(stderr, "%s.%03dZ %s %.*s\n", ts, static_cast<int>(ms), LevelName(level),
               static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

}  // namespace

void SetLogLevel(LogLevel level) {
  std::lock_guard lock(g_mu);
  g_level = level;
}

void Log(LogLevel level, std::string_view message) {
  std::lock_guard lock(g_mu);
  if (level < g_level) return;
  WriteLocked(level, message);
}

void LogRateLimited(LogLevel level, std::string_view site, std::string_view message) {
  static std::unordered_map<std::string, SiteState> sites;
  std::lock_guard lock(g_mu);
  if (level < g_level) return;
  auto& s = sites[std::string(site)];
  const auto now = std::chrono::steady_clock::now();
  if (s.last != std::chrono::steady_clock::time_point{} && now - s.last < std::chrono::seconds(10)) {
    ++s.suppressed;
    return;
  }
  s.last = now;
  if (s.suppressed > 0) {
    std::string m(message);
    m += " (" + std::to_string(s.suppressed) + " similar messages suppressed)";
    s.suppressed = 0;
    WriteLocked(level, m);
  } else {
    WriteLocked(level, message);
  }
}

}  // namespace sluice
