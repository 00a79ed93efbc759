// SPDX-License-Identifier: Apache-2.0
// dspipe::Loader: the options' validation, Loader::Create / Open and OpenLoaderDataset (the
// dataset, through the cache), ResolveNormalization, the oneTBB parallelism lease, LoaderImpl's
// construction, and what a loader reports (stats, shape, corrupt records, where it reads from).
// The pipeline is in loader_run.cc, the resume identity in loader_state.cc (loader_impl.h).
#include "dspipe/loader.h"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "codec/image.h"
#include "dspipe/cuda.h"
#include "dspipe/log.h"
#include "dspipe/option_fields.h"
#include "loader/cache_copy.h"
#include "loader/loader_dataset.h"
#include "loader/loader_impl.h"

namespace dspipe {

namespace {

// The size of record 0, for datasets whose manifest does not fix one (plain LMDBs).
Status ProbeFirstRecord(const Dataset& ds, int* height, int* width) {
  return ds.Read(0, [&](const RecordView& rec) -> Status {
    if (rec.header.height > 0 && rec.header.width > 0) {
      *height = static_cast<int>(rec.header.height);
      *width = static_cast<int>(rec.header.width);
      return Status::OK();
    }
    codec::ImageProbe probe;
    Status s = codec::Probe(rec.image, &probe);
    if (!s.ok()) {
      return s.WithContext("loader: sizing the batches from key " + ds.KeyName(0) + " in " +
                           ds.info().path);
    }
    *height = probe.height;
    *width = probe.width;
    return Status::OK();
  });
}

// A plain LMDB's values are image files nobody checked: one deeper than 8 bits (its record 0
// stands for the rest, as for the size) is refused, since decoding keeps only the high byte.
Status CheckPlainDepth(const Dataset& ds) {
  if (ds.info().kind != DatasetKind::kPlain || ds.info().count == 0) return Status::OK();
  return ds.Read(0, [&](const RecordView& rec) -> Status {
    codec::ImageProbe probe;
    if (!codec::Probe(rec.image, &probe).ok()) return Status::OK();  // the batch says why
    return codec::CheckLoaderDepth(probe).WithContext("loader: key " + ds.KeyName(0) + " in " +
                                                      ds.info().path);
  });
}

Status Invalid(const std::string& what) { return Status::InvalidArgument("loader: " + what); }

std::string List(const std::vector<double>& v, double scale = 1) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    std::ostringstream one;
    one << std::setprecision(6) << v[i] * scale;
    s += (i ? ", " : "") + one.str();
  }
  return s + "]";
}

// mean/std (pixel units) that look like 0..1 units (the torchvision / ImageNet habit) on a
// dataset of 0..255 pixels: "" when they do not. mean 0 / std 1 (no normalization) is fine.
std::string UnitsWarning(const DatasetInfo& info, const std::vector<double>& mean,
                         const std::vector<double>& std, bool from_pipeline) {
  const auto at_most_1 = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::abs(x) <= 1; });
  };
  const bool identity = std::all_of(mean.begin(), mean.end(), [](double x) { return x == 0; }) &&
                        std::all_of(std.begin(), std.end(), [](double x) { return x == 1; });
  if (mean.empty() || std.empty() || identity || !at_most_1(mean) || !at_most_1(std)) return "";
  std::string line = "loader: mean " + List(mean) + " and std " + List(std) +
                     " are all <= 1, but the pixels of " + info.path +
                     " are 0..255 and mean/std are in pixel units, so the values come out "
                     "about 255 times too large; ";
  if (from_pipeline) {
    return line +
           "the transform pipeline's Normalize has max_pixel_value=1: leave it at 255 "
           "(albumentations' default), or pass mean/std already multiplied by 255";
  }
  return line + "pass them multiplied by 255 (mean=" + List(mean, 255) + ", std=" + List(std, 255) +
         "), or use a Normalize in the transform pipeline with max_pixel_value=255";
}

// LoaderOptions::mean_std: which mean/std (empty = the manifest's, resolved later).
Status ChooseMeanStd(const LoaderOptions& o, const TransformPipeline& pipeline, int channels,
                     std::vector<double>* mean, std::vector<double>* std) {
  const bool given = !o.mean.empty() || !o.std.empty();
  if (o.mean_std == MeanStdSource::kIdentity && given) {
    return Invalid(Opt("LoaderOptions::mean_std", "identity") + " (no normalization) and " +
                   Opt("LoaderOptions::mean") + "/" + Opt("LoaderOptions::std") +
                   " exclude each other: drop one");
  }
  if (pipeline.has_normalize()) {  // A.Normalize maps onto the normalize stage
    if (given) {
      return Invalid("the transform pipeline's Normalize sets mean/std: leave " +
                     Opt("LoaderOptions::mean") + " and " + Opt("LoaderOptions::std") + " empty");
    }
    *mean = pipeline.normalize_mean();
    *std = pipeline.normalize_std();
    // albumentations normalizes a 1-channel image with the first of several values (the
    // ImageNet recipe on gray data); so does the loader, for its gray batches.
    if (channels == 1) {
      mean->resize(std::min<size_t>(mean->size(), 1));
      std->resize(std::min<size_t>(std->size(), 1));
    }
    return Status::OK();
  }
  const bool albumentations = o.transform && o.mean_std == MeanStdSource::kAuto;
  if (!given && (o.mean_std == MeanStdSource::kIdentity || albumentations)) {
    *mean = {0.0};
    *std = {1.0};
  }
  return Status::OK();
}

}  // namespace

namespace loader {

namespace {

// The registry behind ParallelismLease (loader_impl.h).
std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
std::multiset<size_t>& Wants() {
  static std::multiset<size_t> wants;
  return wants;
}
std::unique_ptr<tbb::global_control>& Control() {
  static std::unique_ptr<tbb::global_control> control;
  return control;
}
void Update() {  // REQUIRES: Mu() held
  const size_t want = Wants().empty() ? 0 : *Wants().rbegin();
  auto& control = Control();
  const size_t have =
      control ? tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism) : 0;
  if (control && have == want) return;
  control.reset();  // first: a second live control would cap the new one at the old value
  // Below the default (the CPUs of the affinity mask) no control is needed, and one would
  // cap the rest of the process's oneTBB work.
  if (want > static_cast<size_t>(tbb::info::default_concurrency())) {
    control =
        std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, want);
  }
}

}  // namespace

ParallelismLease::ParallelismLease(size_t want) : want_(want) {
  std::lock_guard<std::mutex> lock(Mu());
  Wants().insert(want_);
  Update();
}

ParallelismLease::~ParallelismLease() {
  if (abandoned_) return;
  std::lock_guard<std::mutex> lock(Mu());
  Wants().erase(Wants().find(want_));
  Update();
}

LoaderImpl::LoaderImpl(std::shared_ptr<const Dataset> dataset, LoaderOptions options,
                       BatchShape shape, Sampler sampler, NormalizeParams norm,
                       std::string content_sha256,
                       std::shared_ptr<const TransformPipeline> pipeline)
    : content_sha256_(std::move(content_sha256)),
      dataset_(std::move(dataset)),
      options_(std::move(options)),
      shape_(shape),
      sampler_(std::move(sampler)),
      seed_(options_.sampler.seed),
      // Kept: the batches in flight, the one the consumer holds and the one being handed over
      // (a Python for loop still holds the previous batch while it asks for the next).
      pool_(loader::BatchPool::Create(shape_, options_.allocator,
                                      static_cast<size_t>(options_.prefetch) + 2)),
      // oneTBB starts cores - 1 workers by default; make sure ours exist (see the lease).
      parallelism_(static_cast<size_t>(options_.threads) + 1),
      // No slot reserved for an application thread: the consumer never joins the arena.
      arena_(std::make_unique<tbb::task_arena>(options_.threads, 0)),
      pid_(::getpid()),
      data_(dataset_, options_.cache_overlap) {
  ctx_.dataset = dataset_.get();
  ctx_.options = &options_;
  ctx_.shape = shape_;
  ctx_.normalize = norm;
  ctx_.stats = &stats_;
  ctx_.pipeline = std::move(pipeline);
  ctx_.samples = ctx_.pipeline->samples_per_record();
  stats_.SetTransformRows(ctx_.pipeline->segment_labels());
  epoch_end_ = EpochEnd(0);
  state_options_ = LoaderStateOptions(options_);
  data_.Plan(sampler_, 0);
}

LoaderImpl::~LoaderImpl() {
  Drain();
  if (Forked()) {  // the TBB threads did not survive fork: leave their state alone
    (void)arena_.release();
    parallelism_.Abandon();
  }
}

std::string LoaderImpl::reading_from() const {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  return data_.Describe();
}

void LoaderImpl::WaitForCacheCopy() const { data_.WaitForCopies(); }

LoaderShape LoaderImpl::loader_shape() const {
  std::lock_guard<std::mutex> consumer(consumer_mu_);
  LoaderShape s;
  s.batch_size = options_.batch_size;
  s.threads = options_.threads;
  s.prefetch = options_.prefetch;
  s.store = dataset_->info().store.empty() ? "encoded" : dataset_->info().store;
  s.gpu = false;
  s.cuda_usable = CudaAvailable();
  s.cpu_cores = UsableCpus();
  return s;
}

void LoaderImpl::Warn(std::string line) {
  Log(LogLevel::kWarn, line);
  warnings_.push_back(std::move(line));
}

CorruptReport LoaderImpl::corrupt_records() const { return corrupt_.Report(); }

}  // namespace loader

void loader::WaitForCacheCopy(const Loader& loader) {
  if (const auto* impl = dynamic_cast<const loader::LoaderImpl*>(&loader)) {
    impl->WaitForCacheCopy();
  }
}

Status loader::ResolveNormalization(const DatasetInfo& info, int channels,
                                    std::vector<double>* mean, std::vector<double>* std,
                                    NormalizeParams* params) {
  if (mean->empty() != std->empty()) {
    return Status::InvalidArgument("set both " + Opt("LoaderOptions::mean") + " and " +
                                   Opt("LoaderOptions::std") + ", or neither");
  }
  if (mean->empty()) {
    if (!info.has_stats) {
      return Status::InvalidArgument("normalize needs mean/std, and " + info.path +
                                     " has no statistics in its manifest: set " +
                                     Opt("LoaderOptions::mean") + " and " +
                                     Opt("LoaderOptions::std"));
    }
    if (channels == 1 && info.mean.size() == 3 && info.std.size() == 3) {
      // The gray conversion weighs R, G, B so (cv::COLOR_RGB2GRAY): the gray mean follows from
      // the manifest's; its std needs the channels' covariances, so only a bound does.
      const double w[3] = {0.299, 0.587, 0.114};
      double m = 0, s = 0;
      for (int k = 0; k < 3; ++k) m += w[k] * info.mean[k], s += w[k] * info.std[k];
      std::ostringstream ms, ss;
      ms << std::setprecision(4) << m;
      ss << std::setprecision(4) << s;
      return Status::InvalidArgument(
          Opt("LoaderOptions::channels", "1") + " converts the RGB images of " + info.path +
          " to gray, and its manifest's mean/std are per RGB channel (mean " + List(info.mean) +
          ", std " + List(info.std) +
          "; none were set): pass the gray images' own, one value "
          "each, e.g. " +
          Opt("LoaderOptions::mean", ms.str()) + " " + Opt("LoaderOptions::std", ss.str()) +
          " (the mean is 0.299 R + 0.587 G + 0.114 B of the manifest's means, the std an upper "
          "bound from its stds), or build the dataset with " +
          Opt("BuildOptions::gray", "true") + " so that its manifest has them");
    }
    for (size_t k = 0; k < info.std.size(); ++k) {
      if (info.std[k] != 0) continue;
      std::ostringstream v;
      v << std::setprecision(6) << (k < info.mean.size() ? info.mean[k] : 0.0);
      return Status::InvalidArgument(
          info.path + ": its manifest gives channel " + std::to_string(k) +
          " a std of 0 (every pixel of it holds " + v.str() +
          " in every record), so normalizing by the dataset's statistics would divide by zero: "
          "pass " +
          Opt("LoaderOptions::mean_std", "identity") +
          " (no normalization) or your "
          "own " +
          Opt("LoaderOptions::mean") + " and " + Opt("LoaderOptions::std"));
    }
    *mean = info.mean;
    *std = info.std;
  }
  const auto c = static_cast<size_t>(channels);
  if (mean->size() == 1) mean->assign(c, (*mean)[0]);
  if (std->size() == 1) std->assign(c, (*std)[0]);
  if (mean->size() != c || std->size() != c) {
    return Status::InvalidArgument(Opt("LoaderOptions::mean") + "/" + Opt("LoaderOptions::std") +
                                   " have " + std::to_string(mean->size()) + "/" +
                                   std::to_string(std->size()) + " values for " +
                                   std::to_string(channels) + " channels");
  }
  if (channels < 1 || channels > kMaxChannels) {
    return Status::InvalidArgument(info.path + ": " + std::to_string(channels) +
                                   " channels to normalize; at most " +
                                   std::to_string(kMaxChannels));
  }
  params->channels = channels;
  for (size_t k = 0; k < c; ++k) {
    params->mean[k] = static_cast<float>((*mean)[k]);
    params->std[k] = static_cast<float>((*std)[k]);
  }
  // Typed images (volumes' modalities, 2.5D slice stacks) are normalized by the CPU's typed
  // path, which takes up to kMaxChannels; the uint8 kernels (CPU and CUDA) 1..4.
  return IsTyped(info.sample_type, info.channels) ? ValidateTypedNormalizeParams(*params)
                                                  : ValidateNormalizeParams(*params);
}

Status Loader::Create(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                      std::unique_ptr<Loader>* out) {
  if (!dataset) return Invalid("no dataset");
  LoaderOptions o = options;
  if (o.batch_size < 1) return Invalid(Opt("LoaderOptions::batch_size") + " must be >= 1");
  if (o.prefetch < 1) return Invalid(Opt("LoaderOptions::prefetch") + " must be >= 1");
  if (o.readahead < -1) {
    return Invalid(Opt("LoaderOptions::readahead") +
                   " must be >= 0 (samples), or -1 = prefetch x batch");
  }
  if (o.threads < 0)
    return Invalid(Opt("LoaderOptions::threads") + " must be >= 0 (0 = usable CPUs)");
  if (o.max_corrupt < 0) return Invalid(Opt("LoaderOptions::max_corrupt") + " must be >= 0");
  if (o.height < 0 || o.width < 0 || (o.height == 0) != (o.width == 0)) {
    return Invalid("the output size (" + Opt("LoaderOptions::height,LoaderOptions::width") +
                   ") is height " + std::to_string(o.height) + ", width " +
                   std::to_string(o.width) +
                   ": give both > 0, or both 0 for the dataset's own size");
  }
  if (o.channels != 0 && o.channels != 1 && o.channels != 3) {
    return Invalid(Opt("LoaderOptions::channels") + " must be 0 (dataset's), 1 or 3");
  }
  DSPIPE_RETURN_IF_ERROR(o.augment.Validate());
  if (o.defer_hflip && o.normalize != NormalizeMode::kNone) {
    return Invalid("defer_hflip is for consumers that normalize themselves (normalize = kNone)");
  }
  if (o.threads == 0) o.threads = UsableCpus();
  DSPIPE_RETURN_IF_ERROR(CheckPlainDepth(*dataset));

  const DatasetInfo& info = dataset->info();
  BatchShape shape;
  shape.batch_size = o.batch_size;
  shape.channels = o.channels != 0 ? o.channels : (info.channels == 1 ? 1 : 3);
  shape.masks = info.has_masks;
  shape.normalized = o.normalize == NormalizeMode::kCpuFloat32;
  shape.image_type = info.sample_type;
  shape.mask_type = info.has_masks ? info.mask_type : SampleType::kUint8;
  // Typed images (uint16, int16, float32) keep their channels and come out as float32 in their
  // own units as well (normalized() with mean 0 and std 1 unless normalize asks otherwise). So
  // do the images of any dataset under a MONAI config, which computes on float32 pixels: the
  // batch's images are its float32 output.
  const bool float_pixels = o.transform && o.transform->float_pixels();
  if (IsTyped(info.sample_type, info.channels) || float_pixels) {
    const std::string what = float_pixels
                                 ? std::string(
                                       "the transform is a MONAI config, which computes on the "
                                       "float32 pixels of the images' own channels (") +
                                       std::to_string(info.channels) + " in " + info.path + ")"
                                 : std::string("the images of ") + info.path + " are " +
                                       std::to_string(info.channels) + " channel(s) of " +
                                       SampleTypeName(info.sample_type);
    if (o.channels != 0 && o.channels != info.channels) {
      return Invalid(what + ", and " + Opt("LoaderOptions::channels") + " = " +
                     std::to_string(o.channels) +
                     " would convert them: typed datasets keep their channels; leave it at 0");
    }
    if (o.defer_hflip) {
      return Invalid(what + ": defer_hflip is for the GPU normalize of 8-bit images");
    }
    shape.channels = info.channels;
    if (float_pixels) shape.image_type = SampleType::kFloat32;
    if (!shape.normalized) {
      shape.normalized = true;
      if (o.mean.empty() && o.std.empty()) o.mean_std = MeanStdSource::kIdentity;
    }
  }
  // The pipeline (the transform, or augment's) and the batch size it gives (sample.h).
  std::shared_ptr<const TransformPipeline> pipeline;
  int input_h = 0, input_w = 0;
  DSPIPE_RETURN_IF_ERROR(loader::ResolvePipeline(o, info, ProbeFirstRecord, *dataset, &o.height,
                                                 &o.width, &pipeline, &input_h, &input_w));
  DSPIPE_RETURN_IF_ERROR(loader::CheckTypedPipeline(*pipeline, info));
  DSPIPE_RETURN_IF_ERROR(ChooseMeanStd(o, *pipeline, shape.channels, &o.mean, &o.std));
  const std::string units = IsTyped(info.sample_type, info.channels) || float_pixels
                                ? std::string()
                                : UnitsWarning(info, o.mean, o.std, pipeline->has_normalize());
  o.channels = shape.channels;
  shape.height = o.height;
  shape.width = o.width;
  // A pipeline that yields several samples per record (MONAI's num_samples): a batch of
  // batch_size records holds that many times as many samples.
  const int per_record = pipeline->samples_per_record();
  if (per_record > loader::kMaxSamplesPerRecord) {
    return Invalid("the transform yields " + std::to_string(per_record) +
                   " samples per record; at most " + std::to_string(loader::kMaxSamplesPerRecord));
  }
  shape.batch_size = o.batch_size * per_record;
  loader::BatchLayout layout;
  DSPIPE_RETURN_IF_ERROR(
      loader::ComputeBatchLayout(shape, &layout).WithContext("loader over " + info.path));

  NormalizeParams norm;
  if (shape.normalized) {
    DSPIPE_RETURN_IF_ERROR(
        loader::ResolveNormalization(info, shape.channels, &o.mean, &o.std, &norm)
            .WithContext("loader"));
  }

  Sampler sampler;
  Status s = Sampler::Create(
      info.shard_sizes.empty() ? std::vector<uint64_t>{info.count} : info.shard_sizes, o.sampler,
      &sampler);
  if (!s.ok()) return s.WithContext("loader over " + info.path);
  std::string content = loader::ContentSha256(*dataset);
  auto impl = std::make_unique<loader::LoaderImpl>(std::move(dataset), std::move(o), shape,
                                                   std::move(sampler), norm, std::move(content),
                                                   std::move(pipeline));
  impl->RequireInputSize(input_h, input_w);
  if (!units.empty()) impl->Warn(units);
  *out = std::move(impl);
  return Status::OK();
}

Status loader::OpenLoaderDataset(const std::string& path, const LoaderOptions& options,
                                 std::shared_ptr<const Dataset>* out, CacheResult* cache) {
  CacheOptions co;
  co.mode = options.cache;
  co.cache_limit = options.cache_limit;
  cache::OpenMode mode;
  mode.overlap = options.cache_overlap;  // the first epoch reads in place while it is made
  // The batch buffers this loader will hold: prefetch in flight, one with the consumer, one
  // being filled (the device path's slots are of the same order). Sizes the dataset does not
  // fix (varying sizes, no resize) are taken as 1024 x 1024: an estimate, on the safe side.
  const auto pipeline_bytes = [&options](const DatasetInfo& info) -> uint64_t {
    uint64_t h = static_cast<uint64_t>(options.height > 0 ? options.height : info.height);
    uint64_t w = static_cast<uint64_t>(options.width > 0 ? options.width : info.width);
    if (h == 0 || w == 0) h = w = 1024;
    const uint64_t c = static_cast<uint64_t>(options.channels > 0 ? options.channels : 3);
    // Saturating: sizes Loader::Create refuses (ComputeBatchLayout) must not wrap to a small
    // estimate here first.
    bool over = false;
    const auto mul = [&over](uint64_t a, uint64_t b) {
      uint64_t r = 0;
      over |= __builtin_mul_overflow(a, b, &r);
      return r;
    };
    const auto add = [&over](uint64_t a, uint64_t b) {
      uint64_t r = 0;
      over |= __builtin_add_overflow(a, b, &r);
      return r;
    };
    const uint64_t hwc = mul(mul(h, w), c);
    uint64_t per_sample = add(hwc, info.has_masks ? mul(h, w) : 0);
    if (options.normalize == NormalizeMode::kCpuFloat32) per_sample = add(per_sample, mul(hwc, 4));
    const uint64_t batches = static_cast<uint64_t>(std::max(options.prefetch, 1)) + 2;
    const uint64_t total =
        mul(mul(batches, static_cast<uint64_t>(std::max(options.batch_size, 1))), per_sample);
    return over ? std::numeric_limits<uint64_t>::max() : total;
  };
  DatasetOpenOptions open_options = options.dataset;
  // A rank of order kShards reads only its shards: open each when first read (docs/SCALE.md).
  if (options.sampler.order == SampleOrder::kShards) {
    open_options.lazy_shards = true;
    mode.per_shard = true;  // and caches only the shards it asks for (docs/CACHE.md)
  }
  // A remote sharded dataset in an order with few shards in use at once: streamed.
  mode.stream = options.sampler.order != SampleOrder::kGlobal;
  mode.stream_ahead = options.stream_ahead;
  return cache::OpenDatasetCached(path, open_options, co, mode, pipeline_bytes, out, cache);
}

Status Loader::Open(const std::string& path, const LoaderOptions& options,
                    std::unique_ptr<Loader>* out) {
  std::shared_ptr<const Dataset> ds;
  DSPIPE_RETURN_IF_ERROR(loader::OpenLoaderDataset(path, options, &ds));
  return Create(std::move(ds), options, out);
}

}  // namespace dspipe
