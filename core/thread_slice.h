// Scheduler hints for latency-critical threads (see thread_slice.cc).
#pragma once

#include <chrono>
#include <cstdint>

#include <sys/types.h>

#include "core/status.h"

namespace sluice {

// Asks the kernel to give the calling thread time slices of `slice` instead
// of the default (the kernel's base slice, scaled up with the CPU count:
// 1.4 ms on our 2-CPU machines under Linux 6.18). Linux 6.12
// and later schedule normal threads by EEVDF, where a thread's deadline is
// its eligible time plus its slice: a thread that wakes with a short slice
// has an earlier deadline than the threads using the CPU, so once eligible
// it runs sooner instead of waiting for their slices to end. It gets no
// more CPU than before, only sooner and in smaller pieces; no privilege is
// needed, and the thread's policy and nice value stay as they are. The
// kernel clamps the slice to 100 us .. 100 ms. Threads the thread starts
// afterwards inherit the slice, as they inherit the rest of its scheduling
// (unless it has SCHED_RESET_ON_FORK, which is kept as it is).
//
// Returns the slice the kernel reports afterwards: 0 when it does not
// report one, which is what kernels before 6.12 do (they accept the call and
// ignore the slice). A thread under any policy other than SCHED_OTHER or
// SCHED_BATCH (real-time, deadline, SCHED_IDLE, SCHED_EXT) is left alone
// and gets kFailedPrecondition; a refused system call (a seccomp filter may
// forbid sched_setattr) gets kInternal with the errno's message.
Result<std::chrono::nanoseconds> SetCurrentThreadSlice(std::chrono::microseconds slice);

// The calling thread's slice as the kernel reports it (0: not reported).
Result<std::chrono::nanoseconds> CurrentThreadSlice();

// Any thread's slice by its thread id (0: the caller), as above. Reading
// another process's threads needs no privilege.
Result<std::chrono::nanoseconds> ThreadSlice(pid_t tid);

}  // namespace sluice
