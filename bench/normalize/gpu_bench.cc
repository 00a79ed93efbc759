// SPDX-License-Identifier: Apache-2.0
// GPU normalize / transfer benchmark, run by bench/gpu_check.sh on a machine with a GPU.
// Prints, each as the median of repetitions timed with CUDA events:
//   - the normalize kernel's achieved bandwidth (bytes read + written) as % of the device's
//     theoretical peak (2 * memory clock * bus width / 8) and of a device-to-device cudaMemcpy;
//   - pinned vs pageable host->device cudaMemcpy GB/s and the best pinned rate over sizes;
//   - GpuNormalizer's own H2D rate (pinned batch + masks) as % of that best pinned rate.
// Targets: normalize >= 70% of peak; GpuNormalizer H2D >= 80% of best pinned cudaMemcpy.
// Without a usable device it says why and exits 0 (1 when DSPIPE_REQUIRE_GPU is set).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "dspipe/cuda.h"

#if DSPIPE_HAVE_CUDA
#include <cuda_runtime.h>

namespace {

#define CHECK_CUDA(call)                                                                 \
  do {                                                                                   \
    const cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "gpu_bench: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

#define CHECK_OK(expr)                                                           \
  do {                                                                           \
    const dspipe::Status s_ = (expr);                                            \
    if (!s_.ok()) {                                                              \
      std::fprintf(stderr, "gpu_bench: %s: %s\n", #expr, s_.ToString().c_str()); \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

constexpr int kReps = 20;

// Median milliseconds of fn() enqueued on `stream`, one event pair per repetition.
float MedianMs(cudaStream_t stream, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  fn();  // warm-up
  std::vector<float> ms;
  for (int r = 0; r < kReps; ++r) {
    CHECK_CUDA(cudaEventRecord(a, stream));
    fn();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double GBps(double bytes, float ms) { return bytes / (static_cast<double>(ms) * 1e-3) / 1e9; }

int Run() {
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0, bus_bits = 0;
  // cudaDeviceProp.memoryClockRate is gone in CUDA 13; the attribute may still report 0.
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess) {
    clock_khz = 0;
    (void)cudaGetLastError();
  }
  CHECK_CUDA(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
  const double peak = 2.0 * clock_khz * 1000.0 * bus_bits / 8.0 / 1e9;  // GB/s
  std::printf("device 0: %s, %d SMs, memory clock %d kHz, bus %d bits, peak %s\n", prop.name,
              prop.multiProcessorCount, clock_khz, bus_bits,
              peak > 0 ? (std::to_string(static_cast<int>(peak)) + " GB/s").c_str()
                       : "unknown (attribute reports 0)");
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Device-to-device copy: a practical ceiling (reads + writes).
  const size_t d2d_bytes = size_t{1} << 30;
  void *da = nullptr, *db = nullptr;
  CHECK_CUDA(cudaMalloc(&da, d2d_bytes));
  CHECK_CUDA(cudaMalloc(&db, d2d_bytes));
  CHECK_CUDA(cudaMemset(da, 1, d2d_bytes));
  const float d2d_ms = MedianMs(stream, [&] {
    CHECK_CUDA(cudaMemcpyAsync(db, da, d2d_bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double d2d = GBps(2.0 * d2d_bytes, d2d_ms);
  std::printf(
      "cudaMemcpy D2D 1 GiB: %.0f GB/s (read+write)%s\n", d2d,
      peak > 0 ? (", " + std::to_string(static_cast<int>(100 * d2d / peak)) + "% of peak").c_str()
               : "");

  // Normalize kernel: 256 x 512 x 512 x 3 uint8 -> NCHW.
  const int n = 256, h = 512, w = 512, c = 3;
  const size_t count = size_t{n} * h * w * c, pixels = size_t{n} * h * w;
  uint8_t* src = static_cast<uint8_t*>(da);  // reuse: 1 GiB >= 201 MB
  void* dst = nullptr;
  CHECK_CUDA(cudaMalloc(&dst, count * 4));
  dspipe::NormalizeParams p = dspipe::NormalizeParams::ImageNet();
  double worst_pct = 1e9;
  for (int variant = 0; variant < 4; ++variant) {
    const bool fp16 = variant == 1, mirror = variant == 2, masks = variant == 3;
    p.mirror = mirror;
    const float ms = MedianMs(stream, [&] {
      if (masks) {
        CHECK_OK(dspipe::MasksToInt64Gpu(src, n, h, w, false, nullptr, static_cast<int64_t*>(dst),
                                         stream));
      } else {
        CHECK_OK(dspipe::NormalizeNhwcToNchwGpu(
            src, n, h, w, p, nullptr,
            fp16 ? dspipe::ImageDtype::kFloat16 : dspipe::ImageDtype::kFloat32, dst, stream));
      }
    });
    const double bytes = masks ? pixels * 9.0 : count * (fp16 ? 3.0 : 5.0);
    const double bw = GBps(bytes, ms);
    const char* name = masks    ? "masks u8->i64"
                       : fp16   ? "normalize fp16"
                       : mirror ? "normalize fp32 mirror"
                                : "normalize fp32";
    const double pct = peak > 0 ? 100 * bw / peak : 100 * bw / d2d;
    if (!masks) worst_pct = std::min(worst_pct, pct);
    std::printf("%-22s %8.3f ms  %6.0f GB/s  %5.1f%% of %s  %5.1f%% of D2D\n", name, ms, bw, pct,
                peak > 0 ? "peak" : "D2D", 100 * bw / d2d);
  }
  std::printf("TARGET normalize >= 70%% of %s: %s (worst %.1f%%)\n", peak > 0 ? "peak" : "D2D",
              worst_pct >= 70 ? "PASS" : "MISS", worst_pct);

  // Host-to-device: pageable vs pinned, and the best pinned rate over sizes.
  const size_t h2d_bytes = size_t{256} << 20;
  void* pinned = dspipe::AllocPinned(h2d_bytes);
  std::vector<uint8_t> pageable(h2d_bytes, 7);
  if (!dspipe::IsPinned(pinned)) {
    std::fprintf(stderr, "gpu_bench: AllocPinned did not pin\n");
    return 1;
  }
  std::fill_n(static_cast<uint8_t*>(pinned), h2d_bytes, uint8_t{7});
  const size_t mid = size_t{64} << 20;
  const float pageable_ms = MedianMs(stream, [&] {
    CHECK_CUDA(cudaMemcpyAsync(da, pageable.data(), mid, cudaMemcpyHostToDevice, stream));
  });
  const float pinned_ms = MedianMs(stream, [&] {
    CHECK_CUDA(cudaMemcpyAsync(da, pinned, mid, cudaMemcpyHostToDevice, stream));
  });
  std::printf("H2D 64 MiB: pageable %.1f GB/s, pinned %.1f GB/s\n", GBps(mid, pageable_ms),
              GBps(mid, pinned_ms));
  double best = 0;
  for (size_t mib : {1, 4, 16, 64, 256}) {
    const size_t bytes = mib << 20;
    const float ms = MedianMs(stream, [&] {
      CHECK_CUDA(cudaMemcpyAsync(da, pinned, bytes, cudaMemcpyHostToDevice, stream));
    });
    best = std::max(best, GBps(bytes, ms));
  }
  std::printf("best pinned cudaMemcpy H2D: %.1f GB/s\n", best);

  // GpuNormalizer end to end: 128 x 224 x 224 x 3 batch + masks from pinned memory.
  std::unique_ptr<dspipe::GpuNormalizer> gpu;
  CHECK_OK(dspipe::GpuNormalizer::Create(dspipe::GpuNormalizerOptions{}, &gpu));
  dspipe::HostBatch in;
  in.n = 128, in.h = 224, in.w = 224;
  const size_t img_bytes = size_t{128} * 224 * 224 * 3, mask_bytes = size_t{128} * 224 * 224;
  in.images = static_cast<const uint8_t*>(pinned);
  in.masks = static_cast<const uint8_t*>(pinned) + img_bytes;
  std::vector<float> h2d_ms, norm_ms;
  p.mirror = false;
  for (int r = 0; r < kReps + 1; ++r) {
    dspipe::DeviceBatch b;
    CHECK_OK(gpu->Process(in, p, &b));
    dspipe::GpuTimings t;
    CHECK_OK(gpu->LastTimings(&t));
    CHECK_OK(gpu->Release(b, nullptr));
    if (r > 0) h2d_ms.push_back(t.h2d_ms), norm_ms.push_back(t.normalize_ms);
  }
  std::sort(h2d_ms.begin(), h2d_ms.end());
  std::sort(norm_ms.begin(), norm_ms.end());
  const double h2d = GBps(static_cast<double>(img_bytes + mask_bytes), h2d_ms[kReps / 2]);
  std::printf("GpuNormalizer 128x224x224x3 + masks: h2d %.3f ms (%.1f GB/s), normalize %.3f ms\n",
              h2d_ms[kReps / 2], h2d, norm_ms[kReps / 2]);
  std::printf("TARGET GpuNormalizer H2D >= 80%% of best pinned cudaMemcpy: %s (%.1f%%)\n",
              h2d >= 0.8 * best ? "PASS" : "MISS", 100 * h2d / best);
  gpu.reset();
  dspipe::FreePinned(pinned);
  CHECK_CUDA(cudaFree(dst));
  CHECK_CUDA(cudaFree(da));
  CHECK_CUDA(cudaFree(db));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
#endif

int main() {
  std::string why;
  if (!dspipe::CudaAvailable(&why)) {
    std::printf("gpu_bench: no usable CUDA device (%s); nothing to measure\n", why.c_str());
    const char* require = std::getenv("DSPIPE_REQUIRE_GPU");  // set by bench/gpu_check.sh
    return require != nullptr && *require != '\0' ? 1 : 0;
  }
#if DSPIPE_HAVE_CUDA
  return Run();
#else
  return 0;  // unreachable: CudaAvailable() is false without CUDA
#endif
}
