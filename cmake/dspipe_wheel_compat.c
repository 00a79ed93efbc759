// SPDX-License-Identifier: Apache-2.0
// Wheel builds only (cmake/dspipeWheel.cmake): the static libstdc++ of gcc 12 on glibc 2.36
// seeds std::random_device from arc4random, a glibc 2.36 symbol, which alone would raise the
// wheel's floor to manylinux_2_36 (Colab's Ubuntu 22.04 has glibc 2.35). The link wraps that
// reference (-Wl,--wrap=arc4random) to this getrandom() version (glibc 2.25), the same kernel
// source glibc's own arc4random reads.
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

uint32_t __wrap_arc4random(void) {
  uint32_t v;
  for (;;) {
    const ssize_t n = getrandom(&v, sizeof v, 0);
    if (n == (ssize_t)sizeof v) return v;
    if (n < 0 && errno != EINTR) abort();  // as glibc's arc4random: it cannot fail
  }
}
