// SPDX-License-Identifier: Apache-2.0
// UsableCpus (dspipe/cpus.h): the size of the calling thread's affinity mask, at least 1.
#include "dspipe/cpus.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace dspipe {
namespace {

TEST(UsableCpus, CountsTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(UsableCpus(), CPU_COUNT(&set));
  EXPECT_GE(UsableCpus(), 1);
}

// A thread pinned to one CPU (as taskset -c N would pin the process) counts one, whatever the
// machine has.
TEST(UsableCpus, HonoursARestrictedMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  int first = 0;
  while (!CPU_ISSET(first, &set)) ++first;
  int seen = -1;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof(one), &one) == 0) seen = UsableCpus();
  });
  t.join();
  EXPECT_EQ(seen, 1);
}

}  // namespace
}  // namespace dspipe
