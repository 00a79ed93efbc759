// SPDX-License-Identifier: Apache-2.0
// DeviceLoader on a GPU (label `gpu`): its output against the CPU loader's normalization (fp32
// within 1 ulp, fp16 within 1e-3 relative, masks exactly, the same samples mirrored in image
// and mask), stats, streams, and buffers recycled only after release. Every test skips with the
// reason when no device is usable (and fails instead when DSPIPE_REQUIRE_GPU is set).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "device/device_fixture.h"
#include "dspipe/cuda.h"
#include "dspipe/device_loader.h"
#include "dspipe/normalize.h"

#if DSPIPE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dspipe {
namespace {

using testing::HostBatchCopy;
using testing::ReferenceEpoch;
using testing::SynthDataset;
using testing::TestLoaderOptions;
using testing::UlpDistance;

#define SKIP_WITHOUT_GPU()                                                               \
  do {                                                                                   \
    std::string why_;                                                                    \
    if (!CudaAvailable(&why_)) {                                                         \
      const char* req_ = std::getenv("DSPIPE_REQUIRE_GPU");                              \
      if (req_ != nullptr && *req_ != '\0') FAIL() << "no usable CUDA device: " << why_; \
      GTEST_SKIP() << "no usable CUDA device: " << why_;                                 \
    }                                                                                    \
  } while (0)

#if DSPIPE_HAVE_CUDA
template <typename T>
std::vector<T> ToHost(const void* device, size_t count) {
  std::vector<T> out(count);
  const cudaError_t e = cudaMemcpy(out.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return out;
}

std::unique_ptr<DeviceLoader> OpenGpu(const LoaderOptions& lo, const DeviceOptions& d) {
  std::unique_ptr<DeviceLoader> loader;
  const Status s = DeviceLoader::Open(SynthDataset(), lo, d, &loader);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (loader) {
    EXPECT_TRUE(loader->on_device());
  }
  return loader;
}
#endif

// kAuto follows the caller's current device, and no dspipe call leaves the current device
// changed (a data-parallel rank's trainer relies on it). Uses the last visible device so a
// multi-GPU machine tests a device other than 0.
TEST(DeviceLoaderGpu, AutoUsesTheCurrentDeviceAndRestoresIt) {
  SKIP_WITHOUT_GPU();
#if DSPIPE_HAVE_CUDA
  const int target = CudaDeviceCount() - 1;
  ASSERT_EQ(cudaSetDevice(target), cudaSuccess);
  EXPECT_EQ(CudaCurrentDevice(), target);
  DeviceOptions d;  // kAuto
  auto loader = OpenGpu(TestLoaderOptions(), d);
  ASSERT_NE(loader, nullptr);
  TensorBatch b;
  ASSERT_TRUE(loader->Next(&b).ok());
  ASSERT_TRUE(b);
  EXPECT_EQ(b.device(), target);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, b.images()), cudaSuccess);
  EXPECT_EQ(attr.device, target);
  int current = -1;
  // Explicitly on device 0 while the caller's current device is another one (when there is
  // another): still restored.
  if (target != 0) {
    DeviceOptions zero;
    zero.device = 0;
    auto on0 = OpenGpu(TestLoaderOptions(), zero);
    ASSERT_NE(on0, nullptr);
    TensorBatch b0;
    ASSERT_TRUE(on0->Next(&b0).ok());
    ASSERT_TRUE(b0.Release(nullptr).ok());
  }
  ASSERT_TRUE(b.Release(nullptr).ok());
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, target);
  loader.reset();
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, target);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
#endif
}

// One epoch against the reference. fp32: within 1 ulp; fp16: within 1e-3 relative (plus half's
// subnormal step near 0); masks: exact, int64 or uint8.
void CompareEpoch([[maybe_unused]] const LoaderOptions& lo, [[maybe_unused]] const DeviceOptions& d,
                  [[maybe_unused]] uint64_t epoch) {
#if DSPIPE_HAVE_CUDA
  auto loader = OpenGpu(lo, d);
  ASSERT_NE(loader, nullptr);
  const std::vector<HostBatchCopy> ref = ReferenceEpoch(lo, epoch);
  ASSERT_FALSE(ref.empty());
  loader->set_epoch(epoch);
  TensorBatch b;
  size_t k = 0;
  int mirrored = 0;
  for (;; ++k) {
    ASSERT_TRUE(loader->Next(&b).ok());
    if (!b) break;
    ASSERT_LT(k, ref.size());
    const HostBatchCopy& r = ref[k];
    ASSERT_TRUE(b.on_device());
    ASSERT_NE(b.stream(), nullptr);
    ASSERT_NE(b.ready_event(), nullptr);
    ASSERT_TRUE(b.WaitReady().ok());
    EXPECT_EQ(std::vector<uint64_t>(b.indices(), b.indices() + b.size()), r.indices);
    EXPECT_EQ(std::vector<uint8_t>(b.hflip(), b.hflip() + b.size()), r.hflip);
    for (int i = 0; i < b.size(); ++i) mirrored += b.hflip()[i];
    const size_t n = r.images.size();
    if (d.dtype == ImageDtype::kFloat16) {
      const auto got = ToHost<uint16_t>(b.images(), n);
      for (size_t i = 0; i < n; ++i) {
        const float g = HalfBitsToFloat(got[i]);
        ASSERT_LE(std::fabs(g - r.images[i]), 1e-3f * std::fabs(r.images[i]) + 6e-8f)
            << "batch " << k << " element " << i << ": " << g << " vs " << r.images[i];
      }
    } else {
      const auto got = ToHost<float>(b.images(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(UlpDistance(got[i], r.images[i]), 1)
            << "batch " << k << " element " << i << ": " << got[i] << " vs " << r.images[i];
      }
    }
    ASSERT_NE(b.masks(), nullptr);
    std::vector<int64_t> masks;
    if (d.mask_dtype == MaskDtype::kInt64) {
      masks = ToHost<int64_t>(b.masks(), r.masks.size());
    } else {
      const auto m8 = ToHost<uint8_t>(b.masks(), r.masks.size());
      masks.assign(m8.begin(), m8.end());
    }
    for (size_t i = 0; i < r.masks.size(); ++i) {
      ASSERT_EQ(masks[i], r.masks[i]) << "batch " << k << " mask pixel " << i;
    }
  }
  EXPECT_EQ(k, ref.size());
  EXPECT_GT(mirrored, 0) << "the test needs mirrored samples";
  // Released batches recorded their CUDA event times beside the CPU stages.
  EXPECT_TRUE(b.Release().ok());
  EXPECT_EQ(loader->stats().Summary(Stage::kH2D).count, ref.size());
  EXPECT_EQ(loader->stats().Summary(Stage::kNormalize).count, ref.size());
  EXPECT_GT(loader->stats().Summary(Stage::kH2D).total_ms, 0.0);
  EXPECT_TRUE(loader->loader_shape().gpu);
#endif
}

TEST(DeviceLoaderGpu, Fp32EqualsCpuLoaderWithin1UlpAndMasksExactly) {
  SKIP_WITHOUT_GPU();
  CompareEpoch(TestLoaderOptions(), DeviceOptions{}, 0);
  CompareEpoch(TestLoaderOptions(), DeviceOptions{}, 1);
}

TEST(DeviceLoaderGpu, Fp16WithinRelative1e3AndUint8Masks) {
  SKIP_WITHOUT_GPU();
  DeviceOptions d;
  d.dtype = ImageDtype::kFloat16;
  d.mask_dtype = MaskDtype::kUInt8;
  CompareEpoch(TestLoaderOptions(), d, 2);
}

// An output size that is not a multiple of 4 takes the kernels' scalar paths.
TEST(DeviceLoaderGpu, OddSizeAndGray) {
  SKIP_WITHOUT_GPU();
  LoaderOptions lo = TestLoaderOptions();
  lo.height = 21;
  lo.width = 35;
  CompareEpoch(lo, DeviceOptions{}, 0);
  lo.channels = 1;
  DeviceOptions d;
  d.device = 0;
  lo.mean = {120};  // the DeviceLoader and the reference loader get the same statistics
  lo.std = {55};
  CompareEpoch(lo, d, 1);
}

// A held batch's device buffers are not overwritten by later batches, with slots = 2 and a
// consumer stream; with every slot held and max_slots reached, Next refuses.
TEST(DeviceLoaderGpu, BuffersAreRecycledOnlyAfterRelease) {
  SKIP_WITHOUT_GPU();
#if DSPIPE_HAVE_CUDA
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  DeviceOptions d;
  d.slots = 2;
  d.max_slots = 2;
  d.consumer_stream = consumer;
  auto loader = OpenGpu(TestLoaderOptions(), d);
  ASSERT_NE(loader, nullptr);
  TensorBatch held;
  ASSERT_TRUE(loader->Next(&held).ok());
  ASSERT_TRUE(held.StreamWait(consumer).ok());
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  const size_t floats = static_cast<size_t>(held.size()) * 3 * 48 * 64;
  const auto before = ToHost<float>(held.images(), floats);
  const auto masks_before =
      ToHost<int64_t>(held.masks(), static_cast<size_t>(held.size()) * 48 * 64);
  TensorBatch other;
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(loader->Next(&other).ok());  // releases the previous `other` on `consumer`
    if (!other) continue;
    EXPECT_NE(other.images(), held.images());
    ASSERT_TRUE(other.StreamWait(consumer).ok());
    TensorBatch third;
    EXPECT_EQ(loader->Next(&third).code(), Status::Code::kInvalidArgument);
  }
  ASSERT_TRUE(other.Release(consumer).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(ToHost<float>(held.images(), floats), before);
  EXPECT_EQ(ToHost<int64_t>(held.masks(), masks_before.size()), masks_before);
  EXPECT_TRUE(held.Release(consumer).ok());
  EXPECT_LE(loader->loader().pool_buffers(), 2u + 2u + 1u);
  loader.reset();
  EXPECT_EQ(cudaStreamDestroy(consumer), cudaSuccess);
#endif
}

// Held beyond `slots` (default max_slots: no limit), each batch takes a new slot with its own
// device buffers: contents stay put while later batches are produced, and released slots are
// reused rather than grown.
TEST(DeviceLoaderGpu, HeldBatchesTakeNewSlots) {
  SKIP_WITHOUT_GPU();
#if DSPIPE_HAVE_CUDA
  DeviceOptions d;
  d.slots = 2;
  auto loader = OpenGpu(TestLoaderOptions(), d);
  ASSERT_NE(loader, nullptr);
  std::vector<TensorBatch> held;
  std::vector<std::vector<float>> copies;
  while (held.size() < 6) {
    TensorBatch b;
    ASSERT_TRUE(loader->Next(&b).ok());
    if (!b) continue;
    ASSERT_TRUE(b.WaitReady().ok());
    copies.push_back(ToHost<float>(b.images(), static_cast<size_t>(b.size()) * 3 * 48 * 64));
    held.push_back(std::move(b));
  }
  EXPECT_EQ(loader->slots_allocated(), 6u);
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(ToHost<float>(held[i].images(), copies[i].size()), copies[i]) << "batch " << i;
  }
  held.clear();
  TensorBatch b;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(loader->Next(&b).ok());
  EXPECT_EQ(loader->slots_allocated(), 6u);
#endif
}

}  // namespace
}  // namespace dspipe

namespace dspipe {
namespace {

// The CPU path with pin_memory: page-locked batches (a consumer's non_blocking copy is DMA),
// and a released batch's memory is reused only once the consumer's stream has passed the
// release: every copy queued before its batch's release reads that batch's own pixels.
TEST(DeviceLoaderGpu, PinMemoryBatchesArePinnedAndWaitForTheConsumerStream) {
  SKIP_WITHOUT_GPU();
#if DSPIPE_HAVE_CUDA
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  DeviceOptions d;
  d.device = DeviceOptions::kCpu;
  d.pin_memory = true;
  d.consumer_stream = consumer;
  const LoaderOptions lo = TestLoaderOptions();
  const std::vector<HostBatchCopy> ref = ReferenceEpoch(lo, 0);
  std::unique_ptr<DeviceLoader> loader;
  ASSERT_TRUE(DeviceLoader::Open(SynthDataset(), lo, d, &loader).ok());
  ASSERT_FALSE(loader->on_device());
  std::vector<float*> copies;
  TensorBatch b;
  for (size_t k = 0;; ++k) {
    ASSERT_TRUE(loader->Next(&b).ok());  // releases the previous batch on `consumer`
    if (!b) break;
    EXPECT_TRUE(b.pinned());
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, b.images()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "page-locked";
    const size_t floats = ref[k].images.size();
    float* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, floats * sizeof(float)), cudaSuccess);
    // Asynchronous: the copy may still be queued when the next Next() releases the batch.
    ASSERT_EQ(
        cudaMemcpyAsync(dev, b.images(), floats * sizeof(float), cudaMemcpyHostToDevice, consumer),
        cudaSuccess);
    copies.push_back(dev);
  }
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  ASSERT_EQ(copies.size(), ref.size());
  for (size_t k = 0; k < ref.size(); ++k) {
    EXPECT_EQ(ToHost<float>(copies[k], ref[k].images.size()), ref[k].images) << "batch " << k;
    cudaFree(copies[k]);
  }
  loader.reset();
  EXPECT_EQ(cudaStreamDestroy(consumer), cudaSuccess);
#endif
}

}  // namespace
}  // namespace dspipe
