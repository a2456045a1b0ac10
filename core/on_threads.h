// Running a few pieces of work at once, each on a thread of its own.
#pragma once

#include <cstddef>
#include <functional>

namespace sluice {

// Runs work(0) .. work(n - 1) at the same time and returns once every one
// has returned: work(0) on the calling thread (after the others started),
// each other on a new thread. Where the process cannot start a thread (its
// limit on threads), that work runs on the calling thread instead, before
// work(0): nothing is skipped, only fewer run at once.
//
// For work that mostly waits on servers (round trips, a client's threads
// ending); work(k) must not throw.
void OnThreads(size_t n, const std::function<void(size_t)>& work);

}  // namespace sluice
