// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe: the nanobind layer under the `dspipe` Python package. It binds the options
// structs as classes (bind_options.h, from dspipe/option_fields.h), releases the GIL around
// blocking calls, turns Status errors into Python exceptions (options named as Python's keyword
// arguments, CorruptRecord with the key / path: errors.cc) and hands batch memory out through
// DLPack without copying (loader.cc). It adds no logic: everything it exposes is a call into the
// public headers (include/dspipe/). The Python package (python/dspipe/) fills the options by
// name, chooses defaults (device, rank) and builds dicts of tensors from these objects.
// This file is the module: it registers each part (bindings.h) and the small machine queries
// (cuda_available, build_info, log).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include <string>

#include "bind_options.h"
#include "bindings.h"
#include "build_info.h"
#include "dspipe/cuda.h"
#include "dspipe/loader.h"
#include "dspipe/log.h"
#include "errors.h"
#include "transforms.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_dspipe, m) {
  using namespace dspipe;
  m.doc() = "dspipe C++ core (see the dspipe package for the documented API)";

  RegisterErrors(m);
  RegisterDatasetFunctions(m);

  m.def("cuda_available", [] {
    std::string why;
    const bool ok = CudaAvailable(&why);
    return nb::make_tuple(ok, why, ok ? CudaDeviceCount() : 0);
  });
  m.def("build_info", [] {
    nb::dict d;
    d["version"] = DSPIPE_VERSION;
    d["build_type"] = DSPIPE_BUILD_TYPE;
    d["cuda_compiled"] = DSPIPE_HAVE_CUDA != 0;
    d["usable_cpus"] = UsableCpus();
    d["tbb_default_concurrency"] = tbb::info::default_concurrency();
    d["tbb_max_concurrency"] = tbb::this_task_arena::max_concurrency();
    return d;
  });
  m.def("log", [](const std::string& message) { Log(LogLevel::kInfo, message); });
  RegisterBuildInfo(m);
  RegisterTransforms(m);

  // The options structs (bind_options.h); the names Python gives them in messages: errors.cc.
  python::BindOptions(m);
  RegisterLoader(m);
  RegisterTestHooks(m);
}
