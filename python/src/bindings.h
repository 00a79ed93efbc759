// SPDX-License-Identifier: Apache-2.0
// The parts of dspipe._dspipe that module.cc registers, one per file: the Loader, Batch and
// LoaderState classes (loader.cc) and the dataset functions: synth, build, assemble, fetch,
// fetch_dataset, push, verify, info, describe, redact_url, url_identity (datasets.cc); the
// builder's test seam for the Ray tests (test_hooks.cc).
// Errors (errors.h), transforms (transforms.h) and build details (build_info.h) have their own.
#pragma once

#include <nanobind/nanobind.h>

namespace dspipe {

void RegisterLoader(nanobind::module_& m);
void RegisterDatasetFunctions(nanobind::module_& m);
void RegisterTestHooks(nanobind::module_& m);  // test_hooks.cc: tests/python/test_ray.py's seam

}  // namespace dspipe
