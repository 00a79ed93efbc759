// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe.build_details(): what this binary was built with (python/src/build_info.cc).
#pragma once

#include <nanobind/nanobind.h>

namespace dspipe {

// Adds build_details() to the module: CUDA toolkit and archs, SIMD level (compiled and this
// CPU's), the version of every library linked in (bundled by the wheel), libstdc++ linkage.
void RegisterBuildInfo(nanobind::module_& m);

}  // namespace dspipe
