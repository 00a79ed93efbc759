// SPDX-License-Identifier: Apache-2.0
// CPU-time clocks for the bench programs: per-process (all threads) and per-thread CPU seconds,
// which other processes sharing the cores do not inflate the way wall time. Header-only.
#pragma once

#include <sys/resource.h>

#include <ctime>

// CPU seconds (user + system) of this process, all threads.
inline double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// This thread's CPU seconds: per-core cost.
inline double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
