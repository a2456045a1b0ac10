// Scheduler hints for latency-critical threads (see thread_slice.cc).
#pragma once

#include <chrono>
#include <cstdint>

#include "core/status.h"

namespace sluice {

// Asks the kernel to give the calling thread time slices of `slice` instead
// of the default (about 3 ms on 2 CPUs). Linux 6.12 and later schedule
// normal threads by EEVDF, where a thread's deadline is its eligible time
// plus its slice: a thread that wakes with a short slice has an earlier
// deadline than the threads using the CPU, so it runs at once instead of
// waiting for their slices to end. It gets no more CPU than before, only
// sooner and in smaller pieces; no privilege is needed, and the thread's
// policy and nice value stay as they are. The kernel clamps the slice to
// 100 us .. 100 ms.
//
// Returns the slice the kernel reports afterwards: 0 when it does not
// report one, which is what kernels before 6.12 do (they accept the call and
// ignore the slice). Threads with a real-time or deadline policy are left
// alone (and get 0). An error carries the errno's message.
Result<std::chrono::nanoseconds> SetCurrentThreadSlice(std::chrono::microseconds slice);

// The calling thread's slice as the kernel reports it (0: not reported).
Result<std::chrono::nanoseconds> CurrentThreadSlice();

}  // namespace sluice
