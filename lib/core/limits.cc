// SPDX-License-Identifier: Apache-2.0
#include "dspipe/limits.h"

#include <atomic>

namespace dspipe {
namespace {
std::atomic<uint32_t> g_max_side{DecodeLimits{}.max_side};
std::atomic<uint64_t> g_max_pixels{DecodeLimits{}.max_pixels};
}  // namespace

void SetDecodeLimits(const DecodeLimits& limits) {
  g_max_side.store(limits.max_side, std::memory_order_relaxed);
  g_max_pixels.store(limits.max_pixels, std::memory_order_relaxed);
}

DecodeLimits GetDecodeLimits() {
  DecodeLimits l;
  l.max_side = g_max_side.load(std::memory_order_relaxed);
  l.max_pixels = g_max_pixels.load(std::memory_order_relaxed);
  return l;
}

}  // namespace dspipe
