#include "sql/tables.h"

#include <cstdio>
#include <ctime>

namespace sluice::sql {

std::string TimestampText(int64_t us) {
  int64_t seconds = us / 1000000;
  int64_t micros = us % 1000000;
  if (micros < 0) {
    micros += 1000000;
    --seconds;
  }
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[96];
  std::snprintf(text, sizeof text, "%04d-%02d-%02d %02d:%02d:%02d.%06lld", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(micros));
  return text;
}

}  // namespace sluice::sql
