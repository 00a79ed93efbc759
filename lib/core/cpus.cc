// SPDX-License-Identifier: Apache-2.0
// UsableCpus (dspipe/cpus.h): the size of this process's CPU affinity mask.
#include "dspipe/cpus.h"

#include <sched.h>

#include <algorithm>

namespace dspipe {

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

}  // namespace dspipe
