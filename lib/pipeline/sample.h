// One sample's work on a loader worker: read the record (zero-copy), decode it, augment it and
// write it into its slot of a batch buffer (optionally normalized). Internal to dspipe.
//
// Fused path: when the output has the stored size (no crop or resize), no vertical flip, and a
// payload is a PNG the fast decoder takes (codec::DecodePayload, fused), the horizontal flip is
// done by the decoder (it writes the rows mirrored) and, for images with CPU float32 normalize,
// each row is normalized as the decoder finishes it (kernels::RowNormalizerF32, bit-identical
// to NormalizeNhwcToNchwF32). That work is then timed in the decode stage: such samples record
// no augment span and add nothing to the batch's normalize time. Everything else takes the
// unfused path (decode, FlipInPlace, NormalizeNhwcToNchwF32 after the sample).
//
// General path (crop, resize, other size): the augmentation is drawn first, then the decode
// router (codec::DecodePayload) decodes only what the crop needs (a JPEG's MCUs covering it, at
// a DCT scale when the output is smaller) and codec::ResampleRegion resizes it into the slot
// with the flips (docs/DECODE.md). Each sample's decode path is counted in the stats.
#pragma once

#include <cstdint>

#include "dspipe/batch.h"
#include "dspipe/dataset.h"
#include "dspipe/loader.h"
#include "dspipe/normalize.h"
#include "dspipe/stats.h"

namespace dspipe::pipeline {

// Everything a worker needs that is fixed for the loader's lifetime.
struct SampleContext {
  const Dataset* dataset = nullptr;
  const LoaderOptions* options = nullptr;  // resolved (threads, size, mean/std filled in)
  BatchShape shape;
  NormalizeParams normalize;  // used when shape.normalized
  StageStats* stats = nullptr;
};

// Where sample i of a batch goes.
struct SampleSlot {
  uint8_t* image = nullptr;  // shape.image_bytes()
  uint8_t* mask = nullptr;   // shape.mask_bytes(), or nullptr
  float* normalized = nullptr;
  int32_t* label = nullptr;
  uint8_t* hflip = nullptr;
};

// Loads dataset sample `index` for (seed, epoch) into slot. Thread-safe (per-thread scratch).
// Errors name the key; kCorruption / kBadInput mean the record itself is bad (skippable).
// *normalize_ns receives the time spent normalizing (recorded per batch by the caller).
Status LoadSample(const SampleContext& ctx, uint64_t seed, uint64_t epoch, uint64_t index,
                  const SampleSlot& slot, uint64_t* normalize_ns);

// Process-wide switch for the fused path (default on). Benchmarks and tests turn it off to run
// the unfused path in the same process.
void SetFusedDecodeEnabled(bool enabled);
bool FusedDecodeEnabled();

// True for errors that mean "this record is bad" rather than "the loader cannot work".
bool IsCorruptRecord(const Status& s);

}  // namespace dspipe::pipeline
