// How many CPUs this process can use: the CPUs its affinity mask allows,
// fewer when a cgroup (v2) CPU quota allows less (a container given
// `--cpus 2` on a large host). Sizes the thread pools whose default follows
// the machine (writer.batch_threads: auto, the view code pools).
#pragma once

#include <string_view>

namespace sluice {

// At least 1.
unsigned UsableCpus();

// The CPUs a cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max PERIOD") allows
// on top of `cpus`: quota / period rounded up, at most `cpus`; `cpus` when
// the text says no quota or cannot be read.
unsigned CpusUnderQuota(std::string_view cpu_max, unsigned cpus);

}  // namespace sluice
