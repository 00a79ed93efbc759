// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe's transform functions (transforms.cc), registered by module.cc.
#pragma once

#include <nanobind/nanobind.h>

namespace dspipe {
void RegisterTransforms(nanobind::module_& m);
}  // namespace dspipe
