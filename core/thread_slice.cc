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

int GetAttr(SchedAttr* attr) {
  return static_cast<int>(::syscall(SYS_sched_getattr, 0, attr, sizeof(*attr), 0));
}

Status Errno(const char* what) {
  const int e = errno;
  return Internal(std::string(what) + ": " + std::strerror(e));
}

}  // namespace

Result<std::chrono::nanoseconds> SetCurrentThreadSlice(std::chrono::microseconds slice) {
  if (slice.count() <= 0) return InvalidArgument("thread slice must be positive");
  SchedAttr attr{};
  if (GetAttr(&attr) != 0) return Errno("sched_getattr");
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) return std::chrono::nanoseconds(0);
  // Only the slice changes: the policy and nice value are written back as
  // they were, which needs no privilege.
  attr.size = sizeof(attr);
  attr.sched_flags = 0;
  attr.sched_runtime = static_cast<uint64_t>(std::chrono::nanoseconds(slice).count());
  if (::syscall(SYS_sched_setattr, 0, &attr, 0) != 0) return Errno("sched_setattr");
  return CurrentThreadSlice();
}

Result<std::chrono::nanoseconds> CurrentThreadSlice() {
  SchedAttr attr{};
  if (GetAttr(&attr) != 0) return Errno("sched_getattr");
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) return std::chrono::nanoseconds(0);
  return std::chrono::nanoseconds(static_cast<int64_t>(attr.sched_runtime));
}

}  // namespace sluice
