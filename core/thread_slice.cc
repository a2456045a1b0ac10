#include "core/thread_slice.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace sluice {
namespace {

// The kernel's struct sched_attr (SCHED_ATTR_SIZE_VER1, 56 bytes). glibc
// 2.36 (Debian 12) has no wrappers for sched_getattr/sched_setattr, and
// <linux/sched/types.h> cannot be included next to <sched.h> (both define
// struct sched_param).
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;  // for SCHED_OTHER and SCHED_BATCH: the slice, in ns
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};
static_assert(sizeof(SchedAttr) == 56);

int GetAttr(pid_t tid, SchedAttr* attr) {
  return static_cast<int>(::syscall(SYS_sched_getattr, tid, attr, sizeof(*attr), 0));
}

// SCHED_FLAG_RESET_ON_FORK from <linux/sched.h>: threads and processes the
// thread starts get the kernel's default scheduling, not its own. Only a
// privileged thread may clear it, so it is written back as it was.
constexpr uint64_t kResetOnFork = 0x01;

bool FairPolicy(uint32_t policy) { return policy == SCHED_OTHER || policy == SCHED_BATCH; }

std::string PolicyName(uint32_t policy) {
  switch (policy) {
    case SCHED_FIFO:
      return "SCHED_FIFO";
    case SCHED_RR:
      return "SCHED_RR";
    case SCHED_IDLE:
      return "SCHED_IDLE";
    case 6:
      return "SCHED_DEADLINE";
    case 7:
      return "SCHED_EXT";
    default:
      return "policy " + std::to_string(policy);
  }
}

Status Errno(const char* what) {
  const int e = errno;
  return Internal(std::string(what) + ": " + std::strerror(e));
}

}  // namespace

Result<std::chrono::nanoseconds> SetCurrentThreadSlice(std::chrono::microseconds slice) {
  if (slice.count() <= 0) return InvalidArgument("thread slice must be positive");
  SchedAttr attr{};
  if (GetAttr(0, &attr) != 0) return Errno("sched_getattr");
  if (!FairPolicy(attr.sched_policy)) {
    return FailedPrecondition("the thread runs under " + PolicyName(attr.sched_policy) +
                              "; a custom slice applies only to SCHED_OTHER and SCHED_BATCH");
  }
  // Only the slice changes: the policy, nice value and reset-on-fork flag
  // are written back as they were, which needs no privilege. Threads this
  // one starts afterwards inherit the slice (the MySQL sink's lane threads
  // do a push's work too), unless the flag was set.
  attr.size = sizeof(attr);
  attr.sched_flags &= kResetOnFork;
  attr.sched_runtime = static_cast<uint64_t>(std::chrono::nanoseconds(slice).count());
  if (::syscall(SYS_sched_setattr, 0, &attr, 0) != 0) return Errno("sched_setattr");
  return CurrentThreadSlice();
}

Result<std::chrono::nanoseconds> CurrentThreadSlice() { return ThreadSlice(0); }

Result<std::chrono::nanoseconds> ThreadSlice(pid_t tid) {
  SchedAttr attr{};
  if (GetAttr(tid, &attr) != 0) return Errno("sched_getattr");
  if (!FairPolicy(attr.sched_policy)) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<int64_t>(attr.sched_runtime));
}

}  // namespace sluice
