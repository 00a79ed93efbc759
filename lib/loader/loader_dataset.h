// SPDX-License-Identifier: Apache-2.0
// What Loader::Open and DeviceLoader::Open share: the dataset opened for a loader (in place or
// through the cache) and the mean/std resolved. Internal to dspipe (lib/loader, lib/device,
// lib/profile and tests), not part of the installed API.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dspipe/cache.h"
#include "dspipe/dataset.h"
#include "dspipe/loader.h"
#include "dspipe/normalize.h"
#include "dspipe/status.h"

namespace dspipe::loader {

// Opens the dataset at `path` for a loader made with `options`: in place, or through the cache
// when options.cache is not "off" or path is an http(s):// dataset URL (the copy's lease lives
// as long as *out). *cache (optional)
// says which and why. Loader::Open and DeviceLoader::Open call it.
Status OpenLoaderDataset(const std::string& path, const LoaderOptions& options,
                         std::shared_ptr<const Dataset>* out, CacheResult* cache = nullptr);

// Resolves the mean/std used to normalize: *mean / *std as given (one value applies to every
// channel), or the dataset manifest's when both are empty; checks them against `channels` and
// fills *params. Shared by the CPU path (Loader) and the GPU path (DeviceLoader).
Status ResolveNormalization(const DatasetInfo& info, int channels, std::vector<double>* mean,
                            std::vector<double>* std, NormalizeParams* params);

}  // namespace dspipe::loader
