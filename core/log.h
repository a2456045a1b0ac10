// Minimal structured logging to stderr, with a per-site rate limit for errors
// so that a failing server cannot flood the log. Thread-safe.
#pragma once

#include <string_view>

namespace sluice {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// Sets the lowest level printed (default kInfo). Call before starting threads.
void SetLogLevel(LogLevel level);

// Writes one line: "2026-11-21T12:00:00.123Z WARN  message".
void Log(LogLevel level, std::string_view message);

// Like Log, but at most one line per `site` every 10 seconds; the next line
// printed for that site says how many were suppressed.
void LogRateLimited(LogLevel level, std::string_view site, std::string_view message);

}  // namespace sluice

#define SLUICE_LOG_INFO(msg) ::sluice::Log(::sluice::LogLevel::kInfo, (msg))
#define SLUICE_LOG_WARN(msg) ::sluice::Log(::sluice::LogLevel::kWarn, (msg))
#define SLUICE_LOG_ERROR(msg) ::sluice::Log(::sluice::LogLevel::kError, (msg))
