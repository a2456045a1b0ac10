#include "core/thread_name.h"

#include <pthread.h>

namespace sluice {
namespace {
constexpr size_t kMaxName = 15;  // TASK_COMM_LEN less the terminating NUL
}  // namespace

void SetCurrentThreadName(std::string_view name) {
  const std::string cut(name.substr(0, kMaxName));
  pthread_setname_np(pthread_self(), cut.c_str());
}

std::string CurrentThreadName() {
  char buf[kMaxName + 1] = {};
  if (pthread_getname_np(pthread_self(), buf, sizeof(buf)) != 0) return "";
  return buf;
}

}  // namespace sluice
