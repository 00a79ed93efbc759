// SPDX-License-Identifier: Apache-2.0
// CPU normalize throughput, single thread (the loader parallelises over samples).
//   normalize_bench [--n 32] [--h 224] [--w 224] [--c 3] [--reps 20]
// Prints GB/s counting bytes read + bytes written, median over repetitions.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "dspipe/normalize.h"

namespace {

void Check(const dspipe::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// This thread's CPU time: robust against other processes on a shared machine, where wall time
// also counts the time we were preempted.
double ThreadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double MedianSeconds(int reps, const std::function<void()>& fn) {
  std::vector<double> t;
  fn();  // warm-up: page in the destination, build caches
  for (int r = 0; r < reps; ++r) {
    const double a = ThreadSeconds();
    fn();
    t.push_back(ThreadSeconds() - a);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Report(const char* what, size_t bytes_in, size_t bytes_out, double s, size_t images) {
  std::printf("%-28s %8.3f ms  %7.2f GB/s (in+out)  %9.0f images/s\n", what, s * 1e3,
              static_cast<double>(bytes_in + bytes_out) / s / 1e9, static_cast<double>(images) / s);
}

}  // namespace

int main(int argc, char** argv) {
  int n = 32, h = 224, w = 224, c = 3, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--n")
      n = v;
    else if (k == "--h")
      h = v;
    else if (k == "--w")
      w = v;
    else if (k == "--c")
      c = v;
    else if (k == "--reps")
      reps = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (n <= 0 || h <= 0 || w <= 0 || c < 1 || c > 4 || reps <= 0) {
    std::fprintf(stderr, "need n, h, w, reps > 0 and c in 1..4\n");
    return 2;
  }
  const size_t count = static_cast<size_t>(n) * h * w * c;
  const size_t pixels = static_cast<size_t>(n) * h * w;
  std::vector<uint8_t> src(count), masks(pixels);
  std::mt19937 rng(1);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  for (auto& b : masks) b = static_cast<uint8_t>(rng() % 21);
  std::vector<float> f32(count);
  std::vector<uint16_t> f16(count);
  std::vector<int64_t> m64(pixels);
  dspipe::NormalizeParams p = dspipe::NormalizeParams::ImageNet();
  p.channels = c;

  std::printf(
      "CPU normalize, 1 thread, batch %dx%dx%dx%d uint8 NHWC -> NCHW, median thread CPU time of "
      "%d\n",
      n, h, w, c, reps);
  Report(
      "fp32", count, count * 4,
      MedianSeconds(
          reps, [&] { Check(dspipe::NormalizeNhwcToNchwF32(src.data(), n, h, w, p, f32.data())); }),
      static_cast<size_t>(n));
  p.mirror = true;
  Report(
      "fp32 mirrored", count, count * 4,
      MedianSeconds(
          reps, [&] { Check(dspipe::NormalizeNhwcToNchwF32(src.data(), n, h, w, p, f32.data())); }),
      static_cast<size_t>(n));
  p.mirror = false;
  Report(
      "fp16", count, count * 2,
      MedianSeconds(
          reps, [&] { Check(dspipe::NormalizeNhwcToNchwF16(src.data(), n, h, w, p, f16.data())); }),
      static_cast<size_t>(n));
  Report("masks uint8->int64", pixels, pixels * 8,
         MedianSeconds(reps, [&] { dspipe::MasksToInt64(masks.data(), pixels, m64.data()); }),
         static_cast<size_t>(n));
  // Keep the outputs observable so nothing is optimised away.
  volatile float sink = f32[count / 2] + static_cast<float>(f16[count / 3] + m64[pixels / 2]);
  (void)sink;
  return 0;
}
