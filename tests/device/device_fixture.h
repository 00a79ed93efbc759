// SPDX-License-Identifier: Apache-2.0
// Shared by the device tests: a small synthetic segmentation dataset (dspipe::Synthesize +
// dspipe::BuildDataset), the options every comparison uses, and host copies of batches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dspipe/device_loader.h"
#include "dspipe/loader.h"

namespace dspipe::testing {

// Builds (once per process) a 13-sample 64x48 RGB PNG dataset with 3-class masks and manifest
// statistics, under the build tree; returns its path. Asserts on failure.
const std::string& SynthDataset();

// Batch 4 (13 samples: the last batch is short), 2 threads, seed 7, shuffled, flips drawn
// both ways so mirrored and unmirrored samples occur in every epoch.
LoaderOptions TestLoaderOptions();

// The reference: the plain Loader with CPU float32 normalization, whole epochs.
struct HostBatchCopy {
  std::vector<float> images;   // float32 NCHW
  std::vector<uint8_t> masks;  // uint8 NHW
  std::vector<int32_t> labels;
  std::vector<uint64_t> indices;
  std::vector<uint8_t> hflip;
};
std::vector<HostBatchCopy> ReferenceEpoch(const LoaderOptions& options, uint64_t epoch);

// Float32 x with its bits compared as ordered integers: the distance in units in the last place.
int64_t UlpDistance(float a, float b);

}  // namespace dspipe::testing
