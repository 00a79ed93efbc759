// SPDX-License-Identifier: Apache-2.0
// One sample's work on a loader worker: read the record (zero-copy), plan its transforms
// (dspipe/transforms.h: the loader's pipeline, or the one LoaderOptions::augment stands for),
// decode it, run the plan into its slot of a batch buffer and normalize it. Internal to dspipe.
//
// Paths, fastest first:
//  - Fused PNG: the plan is HorizontalFlips and LUT ops only (e.g. augment's flips, or
//    HorizontalFlip + RandomBrightnessContrast), the output has the stored size and the payload
//    is a PNG the fast decoder takes (codec::DecodePayload with fuse): decoded straight into
//    the slot, mirrored when the flips say so, and for CPU float32 normalize each row
//    normalized as the decoder finishes it (normalize::RowNormalizerF32 on the LUT'd row,
//    bit-identical to NormalizeNhwcToNchwF32 of the LUT'd image); the LUT is then applied to
//    the uint8 slot. That work is timed in decode: such samples record no augment span (nor a
//    mask one) and add nothing to the batch's normalize time.
//  - General: the plan is drawn first (the record header knows the source size; for plain
//    LMDBs the image header), then the decode router (codec::DecodePayload) decodes only what
//    the first fused geometric group reads (a JPEG's MCUs covering it, at a DCT scale when the
//    group shrinks it; see the decode call site's contract) into per-thread scratch - or into
//    the slot when the plan has no geometry - and transforms::Execute runs the fused groups
//    into the slot; trailing LUT ops are folded into the normalize pass (one pass writes the
//    LUT'd uint8 and the floats). Each sample's decode path is counted in the stats.
#pragma once

#include <cstdint>
#include <memory>

#include "dspipe/batch.h"
#include "dspipe/dataset.h"
#include "dspipe/loader.h"
#include "dspipe/normalize.h"
#include "dspipe/stats.h"
#include "dspipe/transforms.h"

namespace dspipe::loader {

// The most samples one record may yield (MONAI's num_samples; the parser allows 64).
inline constexpr int kMaxSamplesPerRecord = 64;

// Everything a worker needs that is fixed for the loader's lifetime.
struct SampleContext {
  const Dataset* dataset = nullptr;
  const LoaderOptions* options = nullptr;  // resolved (threads, size, mean/std filled in)
  BatchShape shape;
  NormalizeParams normalize;  // used when shape.normalized
  StageStats* stats = nullptr;
  // The pipeline the workers run (never null once the loader is created): options->transform
  // or augment's, with a final Resize when its output size is not fixed (ResolvePipeline).
  std::shared_ptr<const TransformPipeline> pipeline;
  // The size every record must have (0 = any): record 0's, when the batch size was taken from
  // it (a plain LMDB, whose sizes are unknown at open, with nothing that fixes the size). A
  // record of another size is an InvalidArgument naming it, never resized to record 0's size.
  int input_h = 0, input_w = 0;
  // Samples per record (TransformPipeline::samples_per_record): a record's are its slots in a
  // row, shape.batch_size = records per batch x this.
  int samples = 1;
};

// Where sample i of a batch goes.
struct SampleSlot {
  uint8_t* image = nullptr;  // shape.image_bytes()
  uint8_t* mask = nullptr;   // shape.mask_bytes(), or nullptr
  float* normalized = nullptr;
  int32_t* label = nullptr;
  uint8_t* hflip = nullptr;
};

// Loads dataset sample `index` for (seed, epoch) into slots[0 .. ctx.samples) (one unless the
// pipeline yields several samples per record). Thread-safe (per-thread scratch). Errors name
// the key; kCorruption / kBadInput mean the record itself is bad (skippable). *normalize_ns
// receives the time spent normalizing (recorded per batch by the caller).
Status LoadSample(const SampleContext& ctx, uint64_t seed, uint64_t epoch, uint64_t index,
                  const SampleSlot* slots, uint64_t* normalize_ns);

// The pipeline a loader runs for `options` over `info` (Loader::Create): options->transform,
// or augment's sugar, with a final Resize(height, width) when the pipeline's output size is not
// fixed. *height / *width: in, the requested size (0 = none); out, the batch size. `probe`
// gives record 0's size when the dataset does not fix one and it is needed (plain LMDBs); then
// *input_h / *input_w are that size (SampleContext::input_h), else 0. A dspipe dataset whose
// records differ in size needs the size or a pipeline that fixes it. Errors: InvalidArgument
// naming what to set.
Status ResolvePipeline(const LoaderOptions& options, const DatasetInfo& info,
                       Status (*probe)(const Dataset&, int*, int*), const Dataset& dataset,
                       int* height, int* width, std::shared_ptr<const TransformPipeline>* out,
                       int* input_h, int* input_w);

// A dataset of typed images (uint16 / int16 / float32): OK when every transform of `pipeline`
// runs on such pixels as it does on uint8 ones (the geometric ones, Normalize, ToTensorV2);
// else InvalidArgument naming the first that does not (a photometric transform's arithmetic is
// uint8's) and what to do. OK for any pipeline over uint8 images.
Status CheckTypedPipeline(const TransformPipeline& pipeline, const DatasetInfo& info);

// Process-wide switch for the fused PNG path (default on). Benchmarks and tests turn it off to
// run the general path in the same process.
void SetFusedDecodeEnabled(bool enabled);
bool FusedDecodeEnabled();

// True for errors that mean "this record is bad" rather than "the loader cannot work".
bool IsCorruptRecord(const Status& s);

}  // namespace dspipe::loader
