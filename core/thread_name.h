// Names for sluice's threads, so that top -H, ps -L, perf and gdb tell
// them apart (docs/operations.md lists them).
#pragma once

#include <string>
#include <string_view>

namespace sluice {

// Names the calling thread. Linux keeps the first 15 bytes of a name.
void SetCurrentThreadName(std::string_view name);

// The calling thread's name ("" if it cannot be read).
std::string CurrentThreadName();

}  // namespace sluice
