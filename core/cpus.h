// How many CPUs this process can use: the CPUs its affinity mask allows,
// fewer when a cgroup CPU quota allows less (a container given `--cpus 2`
// on a large host, a systemd unit with CPUQuota=): the quotas of the
// process's cgroup and of every cgroup above it, cgroup v2 (cpu.max) or v1
// (cpu.cfs_quota_us / cpu.cfs_period_us). Sizes the thread pools whose
// default follows the machine (writer.batch_threads: auto, the view code
// pools).
#pragma once

#include <string>
#include <string_view>

namespace sluice {

// At least 1.
unsigned UsableCpus();

// `cpus` under the quotas of the cgroups named by `proc_self_cgroup` (the
// text of /proc/self/cgroup) and their parents, read below `cgroup_root`
// (/sys/fs/cgroup): quota / period rounded up, at most `cpus`, at least 1.
unsigned CpusUnderCgroupQuotas(const std::string& cgroup_root, std::string_view proc_self_cgroup, unsigned cpus);

// The CPUs a cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max PERIOD") allows
// on top of `cpus`: quota / period rounded up, at most `cpus`; `cpus` when
// the text says no quota or cannot be read.
unsigned CpusUnderQuota(std::string_view cpu_max, unsigned cpus);

}  // namespace sluice
