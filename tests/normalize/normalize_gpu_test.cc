// SPDX-License-Identifier: Apache-2.0
// GPU normalization against the CPU reference (labelled `gpu`). Every GPU test skips with a
// message when no device is usable; CudaRuntime.* runs everywhere and checks the no-GPU path.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dspipe/cuda.h"
#include "dspipe/normalize.h"

#if DSPIPE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dspipe {
namespace {

TEST(CudaRuntime, NoGpuPathWorksOrDeviceIsUsable) {
  std::string why;
  const bool available = CudaAvailable(&why);
  std::printf("CudaAvailable: %s%s%s\n", available ? "yes" : "no", why.empty() ? "" : ", ",
              why.c_str());
  EXPECT_EQ(CudaAvailable(nullptr), available);  // cached, stable
  void* p = AllocPinned(10000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  std::memset(p, 0xab, 10000);
  EXPECT_EQ(static_cast<unsigned char*>(p)[9999], 0xab);
  EXPECT_EQ(IsPinned(p), available);
  FreePinned(p);
  FreePinned(nullptr);
  EXPECT_EQ(AllocPinned(0), nullptr);
  std::vector<uint8_t> heap(16);
  EXPECT_FALSE(IsPinned(heap.data()));
  if (available) {
    EXPECT_TRUE(why.empty());
    EXPECT_GT(CudaDeviceCount(), 0);
    return;
  }
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(CudaDeviceCount(), 0);
  std::unique_ptr<GpuNormalizer> gpu;
  const Status s = GpuNormalizer::Create(GpuNormalizerOptions{}, &gpu);
  EXPECT_EQ(s.code(), Status::Code::kUnsupported);
  EXPECT_NE(s.message().find(why), std::string::npos) << s.ToString();
  EXPECT_EQ(gpu, nullptr);
  uint8_t px[3] = {};
  float out[3];
  EXPECT_EQ(NormalizeNhwcToNchwGpu(px, 1, 1, 1, NormalizeParams{}, nullptr, ImageDtype::kFloat32,
                                   out, nullptr)
                .code(),
            Status::Code::kUnsupported);
  int64_t m = 0;
  EXPECT_EQ(MasksToInt64Gpu(px, 1, 1, 1, false, nullptr, &m, nullptr).code(),
            Status::Code::kUnsupported);
  // The CPU path is unaffected.
  ASSERT_TRUE(NormalizeNhwcToNchwF32(px, 1, 1, 1, NormalizeParams{}, out).ok());
  EXPECT_EQ(out[0], 0.f);
}

// FreePinned decides by its own record of AllocPinned's blocks, never by asking CUDA: a pointer
// it did not hand out is left alone (freeing it with std::free corrupted the heap: a double free
// here), and a block is freed once.
TEST(CudaRuntime, FreePinnedFreesOnlyItsOwnBlocksOnce) {
  void* foreign = std::malloc(64);
  ASSERT_NE(foreign, nullptr);
  EXPECT_FALSE(IsPinned(foreign));
  FreePinned(foreign);          // not ours: ignored (logged)
  std::memset(foreign, 1, 64);  // still ours to use and free
  std::free(foreign);
  void* p = AllocPinned(8192);
  ASSERT_NE(p, nullptr);
  FreePinned(p);
  EXPECT_FALSE(IsPinned(p));
  FreePinned(p);  // a second free is ignored, not a double free
}

// After fork, cudaHostGetFlags fails in the child for the parent's pinned blocks; the old
// FreePinned then std::free'd page-locked memory. The child must free (or leak) it cleanly.
TEST(CudaRuntime, FreePinnedAfterForkIsSafe) {
  void* p = AllocPinned(1 << 16);
  ASSERT_NE(p, nullptr);
  const bool pinned = IsPinned(p);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FreePinned(p);
    ::_exit(IsPinned(p) ? 3 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "child died by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(IsPinned(p), pinned);  // the parent's record is untouched
  FreePinned(p);
}

// Detection, pinned allocation and the CPU kernels from many threads at once (run under TSan).
TEST(CudaRuntime, ConcurrentCallsAreSafe) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&failures, t] {
      std::vector<uint8_t> src(2 * 5 * 7 * 3, static_cast<uint8_t>(t));
      std::vector<float> dst(src.size());
      for (int i = 0; i < 20; ++i) {
        std::string why;
        const bool available = CudaAvailable(&why);
        if (available != why.empty()) failures++;  // a reason exactly when unavailable
        void* p = AllocPinned(4096 + static_cast<size_t>(i));
        if (p == nullptr) failures++;
        static_cast<uint8_t*>(p)[0] = 1;
        FreePinned(p);
        if (!NormalizeNhwcToNchwF32(src.data(), 2, 5, 7, NormalizeParams::ImageNet(), dst.data())
                 .ok()) {
          failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (CudaAvailable(&why)) return;
    // bench/gpu_check.sh sets DSPIPE_REQUIRE_GPU so a broken driver cannot pass as "skipped".
    const char* require = std::getenv("DSPIPE_REQUIRE_GPU");
    if (require != nullptr && *require != '\0') FAIL() << "DSPIPE_REQUIRE_GPU set but: " << why;
    GTEST_SKIP() << "no usable CUDA device: " << why;
  }
};

#if DSPIPE_HAVE_CUDA

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Device buffer, optionally offset by `offset` bytes to exercise unaligned pointers.
struct DeviceBytes {
  explicit DeviceBytes(size_t bytes, size_t offset = 0) : offset_(offset) {
    EXPECT_EQ(cudaMalloc(&base_, bytes + offset + 16), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(base_); }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + offset_);
  }
  void* base_ = nullptr;
  size_t offset_;
};

int64_t UlpDistance(float a, float b) {
  auto key = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(key(a) - key(b));
}

struct Case {
  int n, h, w, c;
  bool mirror_all, flags;
  size_t src_offset, dst_offset;  // bytes; non-zero forces the unaligned scalar kernel
};

std::vector<Case> Cases() {
  std::vector<Case> cases = {
      {4, 8, 8, 3, false, false, 0, 0}, {2, 16, 12, 3, true, false, 0, 0},
      {3, 8, 16, 1, false, true, 0, 0}, {2, 4, 8, 4, false, true, 0, 0},
      {2, 4, 8, 2, true, false, 0, 0},  {1, 1, 1, 3, false, false, 0, 0},
      {3, 5, 7, 3, true, false, 0, 0},  {2, 6, 6, 3, false, true, 0, 0},  // w%4 != 0
      {2, 8, 8, 3, false, false, 1, 4}, {1, 224, 224, 3, false, true, 0, 0},
  };
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> dn(1, 4), dhw(1, 40), dc(1, 4), db(0, 1);
  for (int i = 0; i < 20; ++i) {
    cases.push_back({dn(rng), dhw(rng), dhw(rng), dc(rng), db(rng) == 1, db(rng) == 1, 0, 0});
  }
  return cases;
}

struct HostData {
  std::vector<uint8_t> images, masks, flags;
  NormalizeParams p;
};

HostData MakeData(const Case& k, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255), bit(0, 1);
  std::uniform_real_distribution<float> mean(0.f, 255.f), sd(0.5f, 90.f);
  HostData d;
  d.images.resize(static_cast<size_t>(k.n) * k.h * k.w * k.c);
  for (auto& b : d.images) b = static_cast<uint8_t>(byte(rng));
  d.masks.resize(static_cast<size_t>(k.n) * k.h * k.w);
  for (auto& b : d.masks) b = static_cast<uint8_t>(byte(rng));
  d.flags.resize(static_cast<size_t>(k.n));
  for (auto& b : d.flags) b = static_cast<uint8_t>(bit(rng));
  d.p.channels = k.c;
  d.p.mirror = k.mirror_all;
  for (int c = 0; c < 4; ++c) d.p.mean[c] = mean(rng), d.p.std[c] = sd(rng);
  return d;
}

bool ImageMirrored(const HostData& d, bool use_flags, int i) {
  return d.p.mirror || (use_flags && d.flags[static_cast<size_t>(i)] != 0);
}

// CPU reference, image by image, honouring per-sample flags.
std::vector<float> CpuF32(const HostData& d, const Case& k, bool use_flags) {
  const size_t in_img = static_cast<size_t>(k.h) * k.w * k.c;
  std::vector<float> out(in_img * k.n);
  for (int i = 0; i < k.n; ++i) {
    NormalizeParams p = d.p;
    p.mirror = ImageMirrored(d, use_flags, i);
    const Status s = NormalizeNhwcToNchwF32(d.images.data() + i * in_img, 1, k.h, k.w, p,
                                            out.data() + i * in_img);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  return out;
}

std::vector<int64_t> CpuMasks(const HostData& d, const Case& k, bool use_flags) {
  const size_t hw = static_cast<size_t>(k.h) * k.w;
  std::vector<int64_t> out(hw * k.n);
  for (int i = 0; i < k.n; ++i) {
    MasksToInt64Nhw(d.masks.data() + i * hw, 1, k.h, k.w, ImageMirrored(d, use_flags, i),
                    out.data() + i * hw);
  }
  return out;
}

void ExpectF32Within1Ulp(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(UlpDistance(got[i], want[i]), 1)
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

void ExpectF16Close(const std::vector<uint16_t>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = HalfBitsToFloat(got[i]);
    ASSERT_LE(std::fabs(g - want[i]), 1e-3f * std::max(1.0f, std::fabs(want[i])))
        << "element " << i << ": " << g << " vs " << want[i];
  }
}

TEST_F(Gpu, RawKernelsMatchCpuReference) {
  std::mt19937 rng(77);
  for (const Case& k : Cases()) {
    SCOPED_TRACE(testing::Message() << "n=" << k.n << " h=" << k.h << " w=" << k.w << " c=" << k.c
                                    << " mirror=" << k.mirror_all << " flags=" << k.flags
                                    << " offsets=" << k.src_offset << "," << k.dst_offset);
    const HostData d = MakeData(k, rng);
    const std::vector<float> want = CpuF32(d, k, k.flags);
    const std::vector<int64_t> want_masks = CpuMasks(d, k, k.flags);
    const size_t count = want.size(), pixels = want_masks.size();
    DeviceBytes src(count, k.src_offset), dst(count * 4, k.dst_offset), flags(k.n);
    DeviceBytes msrc(pixels, k.src_offset), mdst(pixels * 8, k.dst_offset ? 8 : 0);
    CUDA_OK(cudaMemcpy(src.as<uint8_t>(), d.images.data(), count, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(msrc.as<uint8_t>(), d.masks.data(), pixels, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(flags.as<uint8_t>(), d.flags.data(), k.n, cudaMemcpyHostToDevice));
    const uint8_t* d_flags = k.flags ? flags.as<uint8_t>() : nullptr;

    Status s = NormalizeNhwcToNchwGpu(src.as<uint8_t>(), k.n, k.h, k.w, d.p, d_flags,
                                      ImageDtype::kFloat32, dst.as<void>(), nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<float> got(count);
    CUDA_OK(cudaMemcpy(got.data(), dst.as<void>(), count * 4, cudaMemcpyDeviceToHost));
    ExpectF32Within1Ulp(got, want);

    s = NormalizeNhwcToNchwGpu(src.as<uint8_t>(), k.n, k.h, k.w, d.p, d_flags, ImageDtype::kFloat16,
                               dst.as<void>(), nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<uint16_t> half(count);
    CUDA_OK(cudaMemcpy(half.data(), dst.as<void>(), count * 2, cudaMemcpyDeviceToHost));
    ExpectF16Close(half, want);

    s = MasksToInt64Gpu(msrc.as<uint8_t>(), k.n, k.h, k.w, d.p.mirror, d_flags, mdst.as<int64_t>(),
                        nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<int64_t> masks(pixels);
    CUDA_OK(cudaMemcpy(masks.data(), mdst.as<void>(), pixels * 8, cudaMemcpyDeviceToHost));
    ASSERT_EQ(masks, want_masks);
  }
}

void RunNormalizer(bool fp16) {
  GpuNormalizerOptions opt;
  opt.dtype = fp16 ? ImageDtype::kFloat16 : ImageDtype::kFloat32;
  std::unique_ptr<GpuNormalizer> gpu;
  Status s = GpuNormalizer::Create(opt, &gpu);
  ASSERT_TRUE(s.ok()) << s.ToString();
  cudaStream_t consumer = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  std::mt19937 rng(fp16 ? 5 : 6);
  // Growing, shrinking and odd shapes exercise buffer reuse, regrowth and both kernels.
  const Case cases[] = {{4, 32, 32, 3, false, true, 0, 0},
                        {8, 64, 48, 3, true, false, 0, 0},
                        {2, 17, 9, 3, false, true, 0, 0},
                        {8, 64, 64, 3, false, true, 0, 0},
                        {3, 16, 16, 1, false, false, 0, 0}};
  for (const Case& k : cases) {
    SCOPED_TRACE(testing::Message() << "n=" << k.n << " h=" << k.h << " w=" << k.w);
    const HostData d = MakeData(k, rng);
    auto* images = static_cast<uint8_t*>(AllocPinned(d.images.size()));
    auto* masks = static_cast<uint8_t*>(AllocPinned(d.masks.size()));
    ASSERT_TRUE(IsPinned(images));
    std::memcpy(images, d.images.data(), d.images.size());
    std::memcpy(masks, d.masks.data(), d.masks.size());
    HostBatch in;
    in.images = images, in.masks = masks, in.n = k.n, in.h = k.h, in.w = k.w;
    if (k.flags) in.mirror = d.flags.data();
    DeviceBatch b;
    s = gpu->Process(in, d.p, &b);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(b.n, k.n);
    EXPECT_EQ(b.c, k.c);
    EXPECT_EQ(b.dtype, opt.dtype);
    EXPECT_EQ(b.mask_dtype, MaskDtype::kInt64);
    ASSERT_TRUE(gpu->WaitInputConsumed(b).ok());
    std::memset(images, 0, d.images.size());  // safe now: the copy has finished
    ASSERT_TRUE(gpu->StreamWaitReady(b, consumer).ok());
    const size_t count = d.images.size(), pixels = d.masks.size();
    std::vector<uint16_t> half(count);
    std::vector<float> f32(count);
    std::vector<int64_t> got_masks(pixels);
    void* host_out = fp16 ? static_cast<void*>(half.data()) : static_cast<void*>(f32.data());
    CUDA_OK(cudaMemcpyAsync(host_out, b.images, count * (fp16 ? 2 : 4), cudaMemcpyDeviceToHost,
                            consumer));
    CUDA_OK(
        cudaMemcpyAsync(got_masks.data(), b.masks, pixels * 8, cudaMemcpyDeviceToHost, consumer));
    ASSERT_TRUE(gpu->Release(b, consumer).ok());
    CUDA_OK(cudaStreamSynchronize(consumer));
    const std::vector<float> want = CpuF32(d, k, k.flags);
    if (fp16) {
      ExpectF16Close(half, want);
    } else {
      ExpectF32Within1Ulp(f32, want);
    }
    EXPECT_EQ(got_masks, CpuMasks(d, k, k.flags));
    GpuTimings t;
    s = gpu->LastTimings(&t);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_GT(t.h2d_ms, 0.f);
    EXPECT_GT(t.normalize_ms, 0.f);
    FreePinned(images);
    FreePinned(masks);
  }
  CUDA_OK(cudaStreamDestroy(consumer));
}

TEST_F(Gpu, NormalizerFp32EndToEnd) { RunNormalizer(false); }
TEST_F(Gpu, NormalizerFp16EndToEnd) { RunNormalizer(true); }

TEST_F(Gpu, NormalizerRejectsBadInput) {
  std::unique_ptr<GpuNormalizer> gpu;
  GpuNormalizerOptions opt;
  opt.num_slots = 0;
  EXPECT_EQ(GpuNormalizer::Create(opt, &gpu).code(), Status::Code::kInvalidArgument);
  opt.num_slots = 2;
  opt.device = CudaDeviceCount();
  EXPECT_EQ(GpuNormalizer::Create(opt, &gpu).code(), Status::Code::kInvalidArgument);
  opt.device = 0;
  opt.timing = false;
  ASSERT_TRUE(GpuNormalizer::Create(opt, &gpu).ok());
  DeviceBatch b;
  EXPECT_EQ(gpu->Process(HostBatch{}, NormalizeParams{}, &b).code(),
            Status::Code::kInvalidArgument);
  uint8_t px[3] = {1, 2, 3};
  HostBatch in;
  in.images = px, in.n = 1, in.h = 1, in.w = 1;
  NormalizeParams bad;
  bad.std[0] = 0.f;
  EXPECT_EQ(gpu->Process(in, bad, &b).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(gpu->Process(in, NormalizeParams{}, &b).ok());  // pageable input works too
  ASSERT_TRUE(gpu->WaitReady(b).ok());
  GpuTimings t;
  EXPECT_EQ(gpu->LastTimings(&t).code(), Status::Code::kUnsupported);
  DeviceBatch foreign = b;
  foreign.slot = 7;
  EXPECT_EQ(gpu->WaitReady(foreign).code(), Status::Code::kInvalidArgument);
}

#else  // built without CUDA: the fixture skips with the reason.
TEST_F(Gpu, BuiltWithoutCuda) { FAIL() << "unreachable: SetUp skips without CUDA"; }
#endif

}  // namespace
}  // namespace dspipe
