// SPDX-License-Identifier: Apache-2.0
// CUDA normalization kernels and their host wrappers (declared in dspipe/cuda.h).
//
// Memory traffic is dominated by the writes (4 or 2 bytes out per byte in), so the design
// coalesces the writes first: each thread owns 4 consecutive pixels of one image row, loads
// their 4*C interleaved bytes with C (or fewer, wider) aligned word loads, and stores one
// 16-byte float4 (8-byte half4) per channel plane. A warp thus writes 512 contiguous bytes per
// plane and reads 128*C contiguous bytes. Shapes that break the 4-pixel alignment use a scalar
// kernel (one thread per pixel), still coalesced, just more instructions.
//
// Arithmetic: __fsub_rn / __fmul_rn are never fused or altered by fast-math flags, so the
// float32 result is bit-identical to the CPU lookup table built with the same formula.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"
#include "dspipe/cuda.h"

namespace dspipe {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocksX = 1 << 16;  // grid-stride loops cover the rest
constexpr int kMaxBlocksY = 65535;        // CUDA's limit for gridDim.y

struct ChannelParams {
  float mean[4];
  float inv_std[4];
};

__device__ __forceinline__ float Norm(uint32_t x, float mean, float inv_std) {
  return __fmul_rn(__fsub_rn(static_cast<float>(x), mean), inv_std);
}

template <typename T>
struct Out;

template <>
struct Out<float> {
  __device__ static float Convert(float v) { return v; }
  __device__ static void Store4(float* dst, float a, float b, float c, float d) {
    *reinterpret_cast<float4*>(dst) = make_float4(a, b, c, d);
  }
};

struct alignas(8) Half4 {
  __half2 lo, hi;
};

template <>
struct Out<__half> {
  __device__ static __half Convert(float v) { return __float2half_rn(v); }
  __device__ static void Store4(__half* dst, float a, float b, float c, float d) {
    *reinterpret_cast<Half4*>(dst) = Half4{__floats2half2_rn(a, b), __floats2half2_rn(c, d)};
  }
};

// Loads the 4*C bytes of 4 pixels (s is aligned to 4*C bytes) into b[pixel][channel].
template <int C>
__device__ __forceinline__ void Load4Pixels(const uint8_t* s, uint32_t (&b)[4][C]) {
  uint32_t words[C];
  if constexpr (C == 4) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(s));
    words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
  } else if constexpr (C == 2) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(s));
    words[0] = v.x, words[1] = v.y;
  } else {
#pragma unroll
    for (int k = 0; k < C; ++k) words[k] = __ldg(reinterpret_cast<const uint32_t*>(s) + k);
  }
#pragma unroll
  for (int i = 0; i < 4 * C; ++i) b[i / C][i % C] = (words[i / 4] >> (8 * (i % 4))) & 0xffu;
}

__device__ __forceinline__ bool Mirrored(int img, bool mirror_all, const uint8_t* flags) {
  return mirror_all || (flags != nullptr && flags[img] != 0);
}

// Grid: blockIdx.y walks the images (no 64-bit division per element), x the pixels of one image
// with 32-bit indices (the wrapper checks h * w * channels < 2^31).

// REQUIRES: hw % 4 == 0; w % 4 == 0 if any image is mirrored; src, dst 16-byte aligned.
template <int C, typename T>
__global__ void NormalizeVec4Kernel(const uint8_t* __restrict__ src, int n, int w, int hw,
                                    ChannelParams p, bool mirror_all,
                                    const uint8_t* __restrict__ flags, T* __restrict__ dst) {
  const int groups = hw / 4;
  for (int img = blockIdx.y; img < n; img += gridDim.y) {
    const bool mirror = Mirrored(img, mirror_all, flags);
    const uint8_t* image = src + static_cast<size_t>(img) * hw * C;
    T* out_image = dst + static_cast<size_t>(img) * hw * C;
    for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
      const int pix = g * 4;  // first of 4 output pixels, all in one row when mirroring
      int src_pix = pix;
      if (mirror) {
        const int y = pix / w;
        src_pix = y * w + (w - 4 - (pix - y * w));
      }
      uint32_t b[4][C];
      Load4Pixels<C>(image + src_pix * C, b);
      if (mirror) {
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const uint32_t t0 = b[0][c], t1 = b[1][c];
          b[0][c] = b[3][c], b[1][c] = b[2][c], b[2][c] = t1, b[3][c] = t0;
        }
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const float m = p.mean[c], s = p.inv_std[c];
        Out<T>::Store4(out_image + c * hw + pix, Norm(b[0][c], m, s), Norm(b[1][c], m, s),
                       Norm(b[2][c], m, s), Norm(b[3][c], m, s));
      }
    }
  }
}

// Any shape and alignment: one thread per pixel.
template <typename T>
__global__ void NormalizeScalarKernel(const uint8_t* __restrict__ src, int n, int channels, int w,
                                      int hw, ChannelParams p, bool mirror_all,
                                      const uint8_t* __restrict__ flags, T* __restrict__ dst) {
  for (int img = blockIdx.y; img < n; img += gridDim.y) {
    const bool mirror = Mirrored(img, mirror_all, flags);
    const uint8_t* image = src + static_cast<size_t>(img) * hw * channels;
    T* out_image = dst + static_cast<size_t>(img) * hw * channels;
    for (int pix = blockIdx.x * blockDim.x + threadIdx.x; pix < hw; pix += gridDim.x * blockDim.x) {
      int src_pix = pix;
      if (mirror) {
        const int y = pix / w;
        src_pix = y * w + (w - 1 - (pix - y * w));
      }
      const uint8_t* s = image + src_pix * channels;
      for (int c = 0; c < channels; ++c) {
        out_image[c * hw + pix] = Out<T>::Convert(Norm(s[c], p.mean[c], p.inv_std[c]));
      }
    }
  }
}

// REQUIRES: hw % 4 == 0; w % 4 == 0 if any image is mirrored; src 4-, dst 16-byte aligned.
__global__ void MasksVec4Kernel(const uint8_t* __restrict__ src, int n, int w, int hw,
                                bool mirror_all, const uint8_t* __restrict__ flags,
                                int64_t* __restrict__ dst) {
  const int groups = hw / 4;
  for (int img = blockIdx.y; img < n; img += gridDim.y) {
    const bool mirror = Mirrored(img, mirror_all, flags);
    const uint8_t* image = src + static_cast<size_t>(img) * hw;
    int64_t* out_image = dst + static_cast<size_t>(img) * hw;
    for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
      const int pix = g * 4;
      int src_pix = pix;
      if (mirror) {
        const int y = pix / w;
        src_pix = y * w + (w - 4 - (pix - y * w));
      }
      const uint32_t v = __ldg(reinterpret_cast<const uint32_t*>(image + src_pix));
      long long b[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24};
      if (mirror) {
        const long long t0 = b[0], t1 = b[1];
        b[0] = b[3], b[1] = b[2], b[2] = t1, b[3] = t0;
      }
      longlong2* out = reinterpret_cast<longlong2*>(out_image + pix);
      out[0] = make_longlong2(b[0], b[1]);
      out[1] = make_longlong2(b[2], b[3]);
    }
  }
}

template <typename T>
__global__ void MasksScalarKernel(const uint8_t* __restrict__ src, int n, int w, int hw,
                                  bool mirror_all, const uint8_t* __restrict__ flags,
                                  T* __restrict__ dst) {
  for (int img = blockIdx.y; img < n; img += gridDim.y) {
    const bool mirror = Mirrored(img, mirror_all, flags);
    const uint8_t* image = src + static_cast<size_t>(img) * hw;
    T* out_image = dst + static_cast<size_t>(img) * hw;
    for (int pix = blockIdx.x * blockDim.x + threadIdx.x; pix < hw; pix += gridDim.x * blockDim.x) {
      int src_pix = pix;
      if (mirror) {
        const int y = pix / w;
        src_pix = y * w + (w - 1 - (pix - y * w));
      }
      out_image[pix] = static_cast<T>(image[src_pix]);
    }
  }
}

// x: enough blocks for one image's work items (capped; the loops stride), y: one per image.
dim3 Grid(int64_t items_per_image, int n) {
  const int64_t x = (items_per_image + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(x < kMaxBlocksX ? x : kMaxBlocksX),
              static_cast<unsigned>(n < kMaxBlocksY ? n : kMaxBlocksY));
}

bool Aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

Status CheckCommon(const char* fn, const void* src, const void* dst, int n, int h, int w,
                   int channels) {
  if (n < 0 || h < 0 || w < 0) {
    return Status::InvalidArgument(std::string(fn) + ": negative shape n=" + std::to_string(n) +
                                   " h=" + std::to_string(h) + " w=" + std::to_string(w));
  }
  if (static_cast<int64_t>(h) * w * channels > INT32_MAX) {
    return Status::InvalidArgument(std::string(fn) + ": image " + std::to_string(h) + "x" +
                                   std::to_string(w) + "x" + std::to_string(channels) +
                                   " has 2^31 or more elements");
  }
  std::string why;
  if (!CudaAvailable(&why)) return Status::Unsupported(std::string(fn) + ": " + why);
  if (n > 0 && h > 0 && w > 0 && (src == nullptr || dst == nullptr)) {
    return Status::InvalidArgument(std::string(fn) + ": null device pointer");
  }
  return Status::OK();
}

template <typename T>
void LaunchNormalize(const uint8_t* src, int n, int h, int w, int channels, const ChannelParams& cp,
                     bool mirror_all, const uint8_t* flags, T* dst, cudaStream_t stream) {
  const int hw = h * w;  // < 2^31, checked by CheckCommon
  const bool may_mirror = mirror_all || flags != nullptr;
  const bool vec =
      hw % 4 == 0 && (!may_mirror || w % 4 == 0) && Aligned(src, 16) && Aligned(dst, 16);
  if (!vec) {
    NormalizeScalarKernel<T>
        <<<Grid(hw, n), kThreads, 0, stream>>>(src, n, channels, w, hw, cp, mirror_all, flags, dst);
    return;
  }
  const dim3 grid = Grid(hw / 4, n);
  switch (channels) {
    case 1:
      NormalizeVec4Kernel<1, T>
          <<<grid, kThreads, 0, stream>>>(src, n, w, hw, cp, mirror_all, flags, dst);
      break;
    case 2:
      NormalizeVec4Kernel<2, T>
          <<<grid, kThreads, 0, stream>>>(src, n, w, hw, cp, mirror_all, flags, dst);
      break;
    case 3:
      NormalizeVec4Kernel<3, T>
          <<<grid, kThreads, 0, stream>>>(src, n, w, hw, cp, mirror_all, flags, dst);
      break;
    default:
      NormalizeVec4Kernel<4, T>
          <<<grid, kThreads, 0, stream>>>(src, n, w, hw, cp, mirror_all, flags, dst);
      break;
  }
}

}  // namespace

Status NormalizeNhwcToNchwGpu(const uint8_t* d_src, int n, int h, int w, const NormalizeParams& p,
                              const uint8_t* d_mirror_flags, ImageDtype dtype, void* d_dst,
                              void* stream) {
  DSPIPE_RETURN_IF_ERROR(ValidateNormalizeParams(p).WithContext("NormalizeNhwcToNchwGpu"));
  DSPIPE_RETURN_IF_ERROR(CheckCommon("NormalizeNhwcToNchwGpu", d_src, d_dst, n, h, w, p.channels));
  if (n == 0 || h == 0 || w == 0) return Status::OK();
  ChannelParams cp{};
  for (int c = 0; c < p.channels; ++c) {
    cp.mean[c] = p.mean[c];
    cp.inv_std[c] = 1.0f / p.std[c];  // host-side, as in the CPU path
  }
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == ImageDtype::kFloat16) {
    LaunchNormalize<__half>(d_src, n, h, w, p.channels, cp, p.mirror, d_mirror_flags,
                            static_cast<__half*>(d_dst), s);
  } else {
    LaunchNormalize<float>(d_src, n, h, w, p.channels, cp, p.mirror, d_mirror_flags,
                           static_cast<float*>(d_dst), s);
  }
  DSPIPE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::OK();
}

Status MasksToInt64Gpu(const uint8_t* d_src, int n, int h, int w, bool mirror,
                       const uint8_t* d_mirror_flags, int64_t* d_dst, void* stream) {
  DSPIPE_RETURN_IF_ERROR(CheckCommon("MasksToInt64Gpu", d_src, d_dst, n, h, w, 1));
  if (n == 0 || h == 0 || w == 0) return Status::OK();
  auto s = static_cast<cudaStream_t>(stream);
  const int hw = h * w;
  const bool may_mirror = mirror || d_mirror_flags != nullptr;
  if (hw % 4 == 0 && (!may_mirror || w % 4 == 0) && Aligned(d_src, 4) && Aligned(d_dst, 16)) {
    MasksVec4Kernel<<<Grid(hw / 4, n), kThreads, 0, s>>>(d_src, n, w, hw, mirror, d_mirror_flags,
                                                         d_dst);
  } else {
    MasksScalarKernel<int64_t>
        <<<Grid(hw, n), kThreads, 0, s>>>(d_src, n, w, hw, mirror, d_mirror_flags, d_dst);
  }
  DSPIPE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::OK();
}

Status MasksToUint8Gpu(const uint8_t* d_src, int n, int h, int w, bool mirror,
                       const uint8_t* d_mirror_flags, uint8_t* d_dst, void* stream) {
  DSPIPE_RETURN_IF_ERROR(CheckCommon("MasksToUint8Gpu", d_src, d_dst, n, h, w, 1));
  if (n == 0 || h == 0 || w == 0) return Status::OK();
  auto s = static_cast<cudaStream_t>(stream);
  // Masks are 1/3 of an RGB image's input and 1/12 of its float32 output: the scalar kernel
  // (one byte per thread, coalesced) is not worth a vector variant here.
  MasksScalarKernel<uint8_t>
      <<<Grid(h * w, n), kThreads, 0, s>>>(d_src, n, w, h * w, mirror, d_mirror_flags, d_dst);
  DSPIPE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::OK();
}

}  // namespace dspipe
