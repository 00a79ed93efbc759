// SPDX-License-Identifier: Apache-2.0
// dspipe/transforms.h: augmentation pipelines with albumentations 2.0.8's meaning, run in C++ by
// the loader's workers on image and mask together (docs/TRANSFORMS.md).
//
//   std::shared_ptr<const TransformPipeline> aug;
//   DSPIPE_RETURN_IF_ERROR(TransformPipeline::Parse(json_text, &aug));  // A.to_dict(...) JSON
//   LoaderOptions o;
//   o.transform = aug;
//
// The serialized form IS albumentations' `A.to_dict(compose)` JSON ({"__version__": ...,
// "transform": {"__class_fullname__": "Compose", "transforms": [...]}}); a bare Compose / OneOf
// / transform object or a JSON list of transforms is accepted too. Names, arguments, defaults
// and ranges follow albumentations 2.0.8 (a scalar where albumentations takes a range is
// widened its way, e.g. Rotate(limit=30) is (-30, 30)); a transform object without "p" has
// p=0.5, as albumentations' from_dict reads it (Compose and Sequential: their defaults). A
// transform or argument value dspipe does not implement is refused by Parse, naming it and listing
// what is supported; nothing is silently dropped.
//
// Determinism: every random draw depends only on (seed, epoch, sample index, the transform's
// position in the spec) - never on threads or timing - so batches are identical for any thread
// count and a restored loader continues exactly. The draws are dspipe's own (splitmix64), not
// numpy's: the same spec gives the same distributions as albumentations, not the same samples.
//
// Fusion: consecutive geometric transforms of a sample are composed into one affine map and
// resampled once, straight into the batch slot; flips, transposes, 90-degree rotations and
// crops stay exact copies. Per-pixel LUT ops (brightness/contrast, gamma) at the end are folded
// into the float32 normalize pass. Where fusion differs from albumentations' sequential
// application (one interpolation instead of several) is stated in docs/TRANSFORMS.md.
//
// Thread-safety: a TransformPipeline is immutable after Parse; every method is const and may be
// called from any number of threads. No OpenCV types in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dspipe/format.h"
#include "dspipe/status.h"

namespace dspipe {

// A view of a row-major HWC uint8 image (masks: channels 1). Does not own the pixels.
struct ImageRef {
  uint8_t* data = nullptr;
  int height = 0;
  int width = 0;
  int channels = 1;
};

// An owned row-major HWC uint8 image.
struct OwnedImage {
  std::vector<uint8_t> pixels;
  int height = 0;
  int width = 0;
  int channels = 0;
  ImageRef ref() { return {pixels.data(), height, width, channels}; }
};

// A view of a row-major HWC image of any sample type (masks: channels 1, uint8 or uint16).
struct PixelsRef {
  const void* data = nullptr;
  int height = 0;
  int width = 0;
  int channels = 1;
  SampleType type = SampleType::kUint8;
};

// An owned row-major HWC image of any sample type.
struct OwnedPixels {
  std::vector<uint8_t> bytes;
  int height = 0;
  int width = 0;
  int channels = 0;
  SampleType type = SampleType::kUint8;
};

// One row of the supported-transform table (docs/TRANSFORMS.md is generated from the same
// facts and checked against them by tests/transforms/spec_test.cc).
struct TransformInfo {
  std::string name;               // albumentations class name, e.g. "RandomResizedCrop"
  std::string kind;               // "geometric" | "photometric" | "normalize" | "container"
  std::string mask;               // what happens to the mask, e.g. "same geometry, nearest"
  bool fused = false;             // composed into the sample's geometric pass / folded LUT
  std::vector<std::string> args;  // argument names in albumentations' signature order
  double default_p = 0.5;         // the constructor's p (serialized without "p": 0.5)
};

// Every transform and container Parse accepts.
const std::vector<TransformInfo>& SupportedTransforms();

// One row of the MONAI table (docs/MONAI.md, checked against it by tests/transforms).
struct MonaiTransformInfo {
  std::string name;               // MONAI's class name, e.g. "ScaleIntensityRanged"
  std::string kind;               // "intensity" | "spatial" | "label output" | "no-op"
  std::string label;              // what happens to the label, e.g. "same crop"
  std::vector<std::string> args;  // the arguments read, in MONAI's signature order
};
// Every MONAI transform Parse accepts.
const std::vector<MonaiTransformInfo>& SupportedMonaiTransforms();

class TransformPipeline {
 public:
  // Parses albumentations JSON (see the top of this file), or a MONAI 1.6.1 config: a list of
  // dictionary transforms {"_target_": "ScaleIntensityRanged", "keys": ["image"], ...} or
  // {"_target_": "Compose", "transforms": [...]} (a bundle's preprocessing section, with its
  // references resolved). MONAI's names, arguments and defaults (a Rand* transform's prob
  // defaults to 0.1); keys name the image ("image") and the label ("label"; "seg", "mask").
  // Such a pipeline computes on float32 pixels (float_pixels()), as MONAI's LoadImaged gives
  // them, and its output is float32 in the units its transforms give (the loader adds no
  // normalization of its own unless mean/std are set); labels keep their ids. Errors:
  // InvalidArgument naming the transform (its position and class name) and the argument, with the
  // reason, e.g.
  //   "transform 3 (Affine): argument fit_output=true is not supported (supported: ...)".
  static Status Parse(const std::string& json_text, std::shared_ptr<const TransformPipeline>* out);
  ~TransformPipeline();
  TransformPipeline(const TransformPipeline&) = delete;
  TransformPipeline& operator=(const TransformPipeline&) = delete;

  // albumentations' A.to_dict() of this pipeline: {"__version__": "2.0.8", "transform": {...}}
  // with every argument filled in and normalized as albumentations does (indent < 0: compact).
  std::string ToJson(int indent = -1) const;

  // The output size for inputs of in_h x in_w when every sample gets the same one: true and the
  // size; false when it varies per sample (e.g. OneOf two sizes, Affine fit_output, a random
  // 90-degree turn of a non-square image). in_h/in_w 0 = unknown input size (true only when the
  // pipeline ends in a fixed size).
  bool OutputSize(int in_h, int in_w, int* out_h, int* out_w) const;
  // Why OutputSize is false, naming the transform that makes the size vary.
  std::string OutputSizeReason(int in_h, int in_w) const;
  // Inputs of in_h x in_w (0 = unknown) checked against the transforms, InvalidArgument naming
  // the transform, the size it gets and why:
  // - a transform whose arguments cannot fit the size it sees, wherever that size is known (a
  //   fixed input size, or after a fixed-size step such as Resize), with albumentations'
  //   reason, e.g. CoarseDropout holes larger than the image (when no size is known the
  //   sample's draw refuses it with the same reason);
  // - a step that every sample runs and that refuses its input for every draw (a crop larger
  //   than the image without pad_if_needed, e.g. RandomCrop(300, 300) on 256x256); a step that
  //   runs only sometimes (p < 1, inside OneOf / SomeOf) is not judged.
  Status CheckInputSize(int in_h, int in_w) const;

  // A MONAI config: pixels are converted to float32 before the first transform and come out
  // float32 (ApplyPixels; the loader's batches). albumentations specs: false.
  bool float_pixels() const;

  // The pipeline ends in Normalize (standard, p = 1) or ToFloat (mean 0, std max_value),
  // optionally followed by ToTensorV2 (the layout the batches have; no-op): its per-channel
  // mean and std in pixel units (mean * max_pixel_value, std * max_pixel_value). Normalize
  // maps onto the loader's normalize stage (LoaderOptions::mean/std), it is not applied by Apply.
  bool has_normalize() const;
  const std::vector<double>& normalize_mean() const;
  const std::vector<double>& normalize_std() const;

  // The rows the loader's stage table gets, one per static segment: a run of consecutive
  // geometric transforms (fused into one pass), a run of LUT ops, or another photometric op,
  // e.g. "geometric: SmallestMaxSize > RandomCrop > SquareSymmetry > Affine".
  const std::vector<std::string>& segment_labels() const;

  // Applies the pipeline to one sample (tests, Python, benchmarks): the same code the loader's
  // workers run, for (seed, epoch, index). image: 1 or 3 channels; mask: 1 channel or null.
  // Outputs are (re)allocated. The loader writes the result into its batch slot instead.
  Status Apply(uint64_t seed, uint64_t epoch, uint64_t index, const ImageRef& image,
               const ImageRef* mask, OwnedImage* out_image, OwnedImage* out_mask) const;
  // Apply for images of any sample type (uint8, uint16, int16, float32; 1..16 channels) and
  // uint8 / uint16 masks: what the loader's workers run for typed samples and MONAI configs,
  // each transform on its own in order. MONAI configs convert the image to float32 first and
  // give float32; albumentations specs keep the type (their typed-pixel rules: geometric
  // transforms and Normalize only). The mask keeps its type.
  Status ApplyPixels(uint64_t seed, uint64_t epoch, uint64_t index, const PixelsRef& image,
                     const PixelsRef* mask, OwnedPixels* out_image, OwnedPixels* out_mask) const;
  // Every sample a record yields: samples_per_record() images (and masks), sample 0 first;
  // what ApplyPixels gives is sample 0. The steps before the one that yields several run once.
  Status ApplyPixelsSamples(uint64_t seed, uint64_t epoch, uint64_t index, const PixelsRef& image,
                            const PixelsRef* mask, std::vector<OwnedPixels>* out_images,
                            std::vector<OwnedPixels>* out_masks) const;
  // A MONAI config with AsDiscreted(to_onehot=N) on the label: N, else 0. The label keeps its
  // ids through the transforms and ApplyPixels (the transform checks them < N, failing the
  // record otherwise); where the batch leaves the loader it becomes N one-hot float32 channels
  // (DeviceLoader's masks, dspipe.transforms.apply), as MONAI's AsDiscreted gives it.
  int label_classes() const;
  // How many samples each record yields: MONAI's num_samples (RandCropByPosNegLabeld), else 1.
  // A loader's batch holds batch_size x this many samples (each record's in a row), as MONAI's
  // DataLoader collates the lists such a transform returns.
  int samples_per_record() const;
  // As Apply but each transform applied on its own, in albumentations' order, with the same
  // draws (no fusion): the reference the fused path is compared with.
  Status ApplySequential(uint64_t seed, uint64_t epoch, uint64_t index, const ImageRef& image,
                         const ImageRef* mask, OwnedImage* out_image, OwnedImage* out_mask) const;
  // The draws of sample (seed, epoch, index) for an in_h x in_w input, as JSON: a list with one
  // object per applied transform {"position", "name", "params": {...}}, params named as
  // albumentations' apply() arguments (e.g. "crop_coords", "matrix"). Transforms whose draw
  // needs the pixels (CropNonEmptyMaskIfExists) need `mask`; pass null otherwise.
  Status Draws(uint64_t seed, uint64_t epoch, uint64_t index, int in_h, int in_w,
               const ImageRef* mask, std::string* json) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit TransformPipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspipe
