// Names for sluice's threads, so that top -H, ps -L, perf and gdb tell
// them apart (docs/operations.md lists them).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace sluice {

// Names the calling thread. Linux keeps the first 15 bytes of a name.
void SetCurrentThreadName(std::string_view name);

// The calling thread's name ("" if it cannot be read).
std::string CurrentThreadName();

// How many threads of process `pid` (0: this one) carry each name, from
// /proc; empty if it cannot be read (the process is gone).
std::map<std::string, int> ThreadNamesOf(pid_t pid = 0);

// Starts a thread that names itself `name`, then runs `body`.
template <typename F>
std::thread StartNamedThread(std::string name, F body) {
  return std::thread([name = std::move(name), body = std::move(body)]() mutable {
    SetCurrentThreadName(name);
    body();
  });
}

}  // namespace sluice
