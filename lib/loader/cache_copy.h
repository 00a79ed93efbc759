// SPDX-License-Identifier: Apache-2.0
// WaitForCacheCopy: a loader's background cache copy, waited for. Internal to dspipe: for its
// tests, benches and the Python module (Loader.wait_for_cache_copy), not part of the installed
// API.
#pragma once

#include "dspipe/loader.h"

namespace dspipe::loader {

// Blocks until `loader`'s background cache copy (LoaderOptions::cache, cache_overlap) has
// committed or failed (at once when there is none, or for a Loader not made by Loader::Create /
// Open); the loader switches to it at the next epoch boundary.
void WaitForCacheCopy(const Loader& loader);

}  // namespace dspipe::loader
