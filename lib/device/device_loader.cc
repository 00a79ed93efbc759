// SPDX-License-Identifier: Apache-2.0
// DeviceLoader: a Loader configured for the chosen path plus, on the GPU path, a GpuNormalizer
// fed from the loader's pinned batches. See dspipe/device_loader.h and docs/GPU.md.
#include "dspipe/device_loader.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "device/device_select.h"
#include "device/device_state.h"
#include "dspipe/cuda.h"
#include "dspipe/log.h"
#include "dspipe/normalize.h"
#include "loader/loader_dataset.h"

namespace dspipe {
namespace {

Status Invalid(const std::string& what) { return Status::InvalidArgument("DeviceLoader: " + what); }

// Mean/std for the GPU path (the CPU path lets the loader resolve them the same way):
// DeviceOptions, then LoaderOptions, then the manifest; one value applies to every channel.
}  // namespace

namespace device {

CudaProbe ProbeCuda() {
  CudaProbe p;
  p.available = CudaAvailable(&p.why);
  p.count = CudaDeviceCount();
  p.current = p.available ? CudaCurrentDevice() : 0;
  return p;
}

Status PickDevice(const CudaProbe& probe, int requested, int* device) {
  *device = -1;
  if (requested >= 0) {
    if (!probe.available) {
      return Status::Unsupported("DeviceLoader: CUDA device " + std::to_string(requested) +
                                 " requested, but no CUDA device is usable: " + probe.why);
    }
    if (requested >= probe.count) {
      return Invalid("CUDA device " + std::to_string(requested) + " requested, but only " +
                     std::to_string(probe.count) + " visible");
    }
    *device = requested;
  } else if (requested == DeviceOptions::kAuto && probe.available) {
    if (probe.current < 0 || probe.current >= probe.count) {
      return Status::Internal("DeviceLoader: the current CUDA device " +
                              std::to_string(probe.current) + " is not one of the " +
                              std::to_string(probe.count) + " visible");
    }
    *device = probe.current;
  }
  return Status::OK();
}

}  // namespace device

struct DeviceLoader::Impl {
  DeviceOptions options;
  int label_classes = 0;  // the transform's AsDiscreted(to_onehot): masks come out one-hot
  bool gpu = false;
  int device = -1;
  std::vector<double> mean, stdev;
  NormalizeParams norm;
  GpuNormalizerOptions gpu_options;  // GPU path: for the slots added when all are held
  std::shared_ptr<device::DeviceState> state = std::make_shared<device::DeviceState>();
  std::unique_ptr<Loader> loader;
  // Serializes Next: a slot is chosen, filled and handed out by one call at a time, so two
  // threads calling Next get distinct batches in distinct slots.
  std::mutex next_mu;

  ~Impl() {
    // Batches still held may outlive us; they must not record into the loader's stats.
    std::lock_guard<std::mutex> lock(state->mu);
    state->stats = nullptr;
  }

  // A slot no TensorBatch holds; when all are held, a new one (max_slots permitting).
  Status FreeSlot(int* slot) {
    std::lock_guard<std::mutex> lock(state->mu);
    auto it = std::find(state->held.begin(), state->held.end(), false);
    if (it == state->held.end()) {
      const size_t n = state->held.size();
      if (options.max_slots > 0 && n >= static_cast<size_t>(options.max_slots)) {
        return Invalid("Next: all " + std::to_string(n) +
                       " slots are held by unreleased TensorBatches and " +
                       Opt("DeviceOptions::max_slots") + " is " +
                       std::to_string(options.max_slots) + "; release one first (or raise it)");
      }
      if (gpu) {
        GpuNormalizerOptions g = gpu_options;
        g.num_slots = 1;
        std::unique_ptr<GpuNormalizer> extra;
        DSPIPE_RETURN_IF_ERROR(GpuNormalizer::Create(g, &extra).WithContext(
            "DeviceLoader: adding slot " + std::to_string(n) + " for a held batch"));
        state->gpus.push_back(std::move(extra));
      }
      state->held.push_back(false);
      state->device_batches.emplace_back();
      state->cpu_masks.emplace_back();
      state->cpu_half.emplace_back();
      it = state->held.end() - 1;
    }
    *slot = static_cast<int>(it - state->held.begin());
    *it = true;
    return Status::OK();
  }

  // GPU path: enqueue copy + normalize + mirror + masks; returns without waiting.
  Status ToDevice(const Batch& host, int slot, TensorBatch* out) {
    HostBatch in;
    in.images = host.images();
    in.masks = host.masks();
    in.mirror = host.hflip();  // the loader deferred the flips (defer_hflip): do them here
    in.n = host.size(), in.h = host.height(), in.w = host.width();
    std::lock_guard<std::mutex> lock(state->mu);
    const auto s = static_cast<size_t>(slot);
    DeviceBatch& db = state->device_batches[s];
    DSPIPE_RETURN_IF_ERROR(state->gpu(s)->Process(in, norm, state->local_slot(s), &db));
    out->on_device_ = true;
    out->device_ = device;
    out->images_ = db.images;
    out->masks_ = db.masks;
    out->fp16_ = db.dtype == ImageDtype::kFloat16;
    out->masks_int64_ = db.masks != nullptr && db.mask_dtype == MaskDtype::kInt64;
    out->stream_ = db.stream;
    out->ready_event_ = db.ready_event;
    return Status::OK();
  }

  // CPU path: the loader's workers normalized to float32 already; the conversions asked for
  // (float16, int64 masks) run here into the slot's reused host buffers.
  Status OnHost(const Batch& host, int slot, TensorBatch* out) {
    const auto s = static_cast<size_t>(slot);
    out->images_ = host.normalized();
    if (options.dtype == ImageDtype::kFloat16) {
      const size_t count = static_cast<size_t>(host.size()) * host.shape().normalized_floats();
      auto* half = static_cast<uint16_t*>(
          state->cpu_half[s].Reserve(std::max<size_t>(count, 1) * sizeof(uint16_t), state->pin));
      if (half == nullptr) return Status::Aborted("DeviceLoader: out of memory (float16 batch)");
      for (size_t i = 0; i < count; ++i) half[i] = FloatToHalfBits(host.normalized()[i]);
      out->images_ = half;
    }
    out->fp16_ = options.dtype == ImageDtype::kFloat16;
    out->masks_ = host.masks();
    if (label_classes > 0 && host.masks() != nullptr) return OneHot(host, s, out);
    // uint16 ids always come out as int64 (what PyTorch's losses take; a uint16 tensor is not
    // one every PyTorch version can hold).
    const bool wide = host.shape().mask_type == SampleType::kUint16;
    const bool int64 = host.masks() != nullptr && (options.mask_dtype == MaskDtype::kInt64 || wide);
    if (int64) {
      const size_t count = static_cast<size_t>(host.size()) * host.shape().pixels();
      auto* masks = static_cast<int64_t*>(
          state->cpu_masks[s].Reserve(std::max<size_t>(count, 1) * sizeof(int64_t), state->pin));
      if (masks == nullptr) return Status::Aborted("DeviceLoader: out of memory (int64 masks)");
      if (wide) {
        const auto* ids = reinterpret_cast<const uint16_t*>(host.masks());
        for (size_t i = 0; i < count; ++i) masks[i] = ids[i];
      } else {
        MasksToInt64(host.masks(), count, masks);
      }
      out->masks_ = masks;
    }
    out->masks_int64_ = int64;
    out->pinned_ = state->pin;
    return Status::OK();
  }

  // The masks as label_classes one-hot float32 channels, [n][classes][h][w] (the transform
  // checked every id < classes).
  Status OneHot(const Batch& host, size_t s, TensorBatch* out) {
    const size_t pixels = host.shape().pixels(), n = static_cast<size_t>(host.size());
    const size_t classes = static_cast<size_t>(label_classes);
    const size_t count = n * classes * pixels;
    auto* dst = static_cast<float*>(
        state->cpu_masks[s].Reserve(std::max<size_t>(count, 1) * sizeof(float), state->pin));
    if (dst == nullptr) return Status::Aborted("DeviceLoader: out of memory (one-hot masks)");
    std::fill(dst, dst + count, 0.0f);
    const bool wide = host.shape().mask_type == SampleType::kUint16;
    for (size_t i = 0; i < n; ++i) {
      float* sample = dst + i * classes * pixels;
      for (size_t p = 0; p < pixels; ++p) {
        const size_t at = i * pixels + p;
        const size_t id =
            wide ? reinterpret_cast<const uint16_t*>(host.masks())[at] : host.masks()[at];
        if (id >= classes) {
          return Status::Internal("DeviceLoader: label id " + std::to_string(id) +
                                  " not below to_onehot=" + std::to_string(classes));
        }
        sample[id * pixels + p] = 1.0f;
      }
    }
    out->masks_ = dst;
    out->masks_int64_ = false;
    out->mask_classes_ = label_classes;
    out->pinned_ = state->pin;
    return Status::OK();
  }
};

DeviceLoader::DeviceLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeviceLoader::~DeviceLoader() = default;

Status DeviceLoader::Open(const std::string& path, const LoaderOptions& loader_options,
                          const DeviceOptions& device_options, std::unique_ptr<DeviceLoader>* out) {
  std::shared_ptr<const Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(loader::OpenLoaderDataset(path, loader_options, &ds));
  return Create(std::move(ds), loader_options, device_options, out);
}

Status DeviceLoader::Create(std::shared_ptr<const Dataset> dataset,
                            const LoaderOptions& loader_options,
                            const DeviceOptions& device_options,
                            std::unique_ptr<DeviceLoader>* out) {
  if (!dataset) return Invalid("no dataset");
  const DeviceOptions& d = device_options;
  if (d.slots < 1)
    return Invalid(Opt("DeviceOptions::slots") + " must be >= 1, got " + std::to_string(d.slots));
  if (d.max_slots < 0 || (d.max_slots > 0 && d.max_slots < d.slots)) {
    return Invalid(Opt("DeviceOptions::max_slots") +
                   " must be 0 (no limit) or >= " + Opt("DeviceOptions::slots") + " (" +
                   std::to_string(d.slots) + "), got " + std::to_string(d.max_slots));
  }
  if (d.device < DeviceOptions::kCpu) {
    return Invalid("device must be kAuto (-1), kCpu (-2) or a CUDA ordinal, got " +
                   std::to_string(d.device));
  }
  if (loader_options.normalize != NormalizeMode::kNone || loader_options.defer_hflip) {
    return Invalid(
        "leave LoaderOptions::normalize (kNone) and defer_hflip (false) at their "
        "defaults: the DeviceLoader sets them for the path it takes");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = d;
  impl->label_classes = loader_options.transform ? loader_options.transform->label_classes() : 0;
  const device::CudaProbe probe = device::ProbeCuda();
  DSPIPE_RETURN_IF_ERROR(device::PickDevice(probe, d.device, &impl->device));
  impl->gpu = impl->device >= 0;
  const DatasetInfo& types = dataset->info();
  const bool float_pixels = loader_options.transform && loader_options.transform->float_pixels();
  if (impl->gpu && (float_pixels || IsTyped(types.sample_type, types.channels) ||
                    (types.has_masks && types.mask_type != SampleType::kUint8))) {
    const std::string why =
        float_pixels ? std::string(
                           "the MONAI transform config computes on float32 pixels, and the CUDA "
                           "normalize reads uint8 ones for now")
                     : types.path + " holds " + std::to_string(types.channels) + "-channel " +
                           SampleTypeName(types.sample_type) + " images and " +
                           SampleTypeName(types.mask_type) +
                           " masks, and the CUDA normalize reads uint8 images of up to 4 "
                           "channels with uint8 masks for now";
    if (d.device != DeviceOptions::kAuto) {
      return Invalid(why + ": use the CPU path (" + Opt("DeviceOptions::device", "cpu") + ")");
    }
    Log(LogLevel::kInfo, "DeviceLoader: " + why + "; using the CPU path");
    impl->gpu = false;
    impl->device = DeviceOptions::kCpu;
  }
  if (!impl->gpu && d.device == DeviceOptions::kAuto) {
    static std::once_flag once;  // one line per process, however many loaders
    std::call_once(once, [&] {
      Log(LogLevel::kInfo, "dspipe: no usable CUDA device (" + probe.why + "); using the CPU path");
    });
  }

  LoaderOptions lo = loader_options;
  if (!impl->gpu && d.pin_memory) {
    if (probe.available) {
      if (!lo.allocator) lo.allocator = PinnedBatchAllocator();
      impl->state->pin = true;
    } else {
      static std::once_flag once;  // one line per process, however many loaders
      std::call_once(once, [&] {
        Log(LogLevel::kInfo, "dspipe: pin_memory does nothing here: no usable CUDA device (" +
                                 probe.why + "); batches stay in pageable memory");
      });
    }
  }
  if (impl->gpu) {
    if (!lo.allocator) lo.allocator = PinnedBatchAllocator();
    lo.defer_hflip = true;  // mirrored for free by the normalize kernel
  } else {
    lo.normalize = NormalizeMode::kCpuFloat32;
  }
  const DatasetInfo info = dataset->info();
  DSPIPE_RETURN_IF_ERROR(Loader::Create(std::move(dataset), lo, &impl->loader));
  const LoaderOptions& resolved = impl->loader->options();
  const int channels = impl->loader->shape().channels;
  impl->mean = resolved.mean;  // the loader chose them (LoaderOptions, pipeline, or manifest)
  impl->stdev = resolved.std;
  DSPIPE_RETURN_IF_ERROR(
      loader::ResolveNormalization(info, channels, &impl->mean, &impl->stdev, &impl->norm)
          .WithContext("DeviceLoader"));

  device::DeviceState& st = *impl->state;
  const auto slots = static_cast<size_t>(d.slots);
  st.held.assign(slots, false);
  st.device_batches.resize(slots);
  st.cpu_masks.resize(slots);
  st.cpu_half.resize(slots);
  st.consumer_stream = d.consumer_stream;
  st.base_slots = slots;
  st.stats = &impl->loader->stats();
  if (impl->gpu) {
    GpuNormalizerOptions& g = impl->gpu_options;
    g.device = impl->device;
    g.dtype = d.dtype;
    g.num_slots = d.slots;
    g.timing = true;
    g.mask_dtype = d.mask_dtype;
    st.gpus.emplace_back();
    DSPIPE_RETURN_IF_ERROR(GpuNormalizer::Create(g, &st.gpus[0]).WithContext("DeviceLoader"));
    Log(LogLevel::kInfo, "DeviceLoader: GPU path on CUDA device " + std::to_string(impl->device) +
                             (d.dtype == ImageDtype::kFloat16 ? " (float16)" : " (float32)"));
  }
  out->reset(new DeviceLoader(std::move(impl)));
  return Status::OK();
}

Status DeviceLoader::Next(TensorBatch* out) {
  std::lock_guard<std::mutex> serial(impl_->next_mu);
  DSPIPE_RETURN_IF_ERROR(out->Release(impl_->options.consumer_stream));
  if (impl_->state->pin) {
    std::lock_guard<std::mutex> lock(impl_->state->mu);
    impl_->state->ReapPending();
  }
  int slot = -1;
  DSPIPE_RETURN_IF_ERROR(impl_->FreeSlot(&slot));
  Batch host;
  Status s = impl_->loader->Next(&host);
  if (s.ok() && host) {
    if (impl_->gpu) {
      s = impl_->ToDevice(host, slot, out);
    } else {
      s = impl_->OnHost(host, slot, out);
    }
  }
  // Error or end of epoch: the slot was not used. (A failed Process leaves the CUDA context in
  // an error state; the host batch is returned to the pool regardless.)
  if (!s.ok() || !host) {
    std::lock_guard<std::mutex> lock(impl_->state->mu);
    impl_->state->held[static_cast<size_t>(slot)] = false;
    *out = TensorBatch();
    return s;
  }
  out->state_ = impl_->state;
  out->host_ = std::move(host);
  out->slot_ = slot;
  return Status::OK();
}

bool DeviceLoader::on_device() const { return impl_->gpu; }
const std::vector<double>& DeviceLoader::mean() const { return impl_->mean; }
const std::vector<double>& DeviceLoader::std() const { return impl_->stdev; }
Loader& DeviceLoader::loader() { return *impl_->loader; }

size_t DeviceLoader::slots_allocated() const {
  std::lock_guard<std::mutex> lock(impl_->state->mu);
  return impl_->state->held.size();
}

LoaderShape DeviceLoader::loader_shape() {
  LoaderShape shape = impl_->loader->loader_shape();
  shape.gpu = impl_->gpu;
  return shape;
}

}  // namespace dspipe
