// One sample's work on a loader worker: read the record (zero-copy), decode it, augment it and
// write it into its slot of a batch buffer (optionally normalized). Internal to dspipe.
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

// True for errors that mean "this record is bad" rather than "the loader cannot work".
bool IsCorruptRecord(const Status& s);

}  // namespace dspipe::pipeline
