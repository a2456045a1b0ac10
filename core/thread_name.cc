#include "core/thread_name.h"

#include <pthread.h>

#include <filesystem>
#include <fstream>
#include <system_error>

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

std::map<std::string, int> ThreadNamesOf(pid_t pid) {
  std::map<std::string, int> names;
  const std::string tasks = pid == 0 ? "/proc/self/task" : "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) ++names[name];
  }
  return names;
}

}  // namespace sluice
