// SPDX-License-Identifier: Apache-2.0
// dspipe::UsableCpus: how many CPUs this process may run on, the default thread count of the
// loader (LoaderOptions::threads) and of dsconvert build (BuildOptions::threads).
#pragma once

namespace dspipe {

// The CPUs this process may run on (sched_getaffinity: the affinity mask, which taskset, numactl
// and a cgroup cpuset restrict), at least 1. A CPU quota (cgroup cpu.max) is not counted.
int UsableCpus();

}  // namespace dspipe
