// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe's errors: a failed Status raised as the Python exception for its code, with the
// options in its message named as Python's keyword arguments (errors.cc), and Call, which runs a
// C++ call with the GIL released and raises its Status. Used by every binding file.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <string_view>

#include "dspipe/status.h"

namespace dspipe {

// An option marker in Python's words: the keyword argument, with its value as Python writes
// it (resume=True, on_error='skip', threads=4). Options without a keyword keep the C++ name.
std::string PythonOptionName(std::string_view field, std::string_view value);

// Raises the Python exception for a failed Status, carrying its whole message with the options
// named as keyword arguments: InvalidArgument -> ValueError, NotFound -> FileNotFoundError,
// IOError -> OSError, Corruption / BadInput -> dspipe.CorruptRecord(message, key, path),
// anything else -> RuntimeError.
void ThrowIfError(const Status& s);

// Runs fn with the GIL released and raises its Status.
template <typename Fn>
void Call(Fn&& fn) {
  Status s;
  {
    nanobind::gil_scoped_release release;
    s = fn();
  }
  ThrowIfError(s);
}

// Adds _set_corrupt_record, _set_option_names (set once at import by the dspipe package) and
// render_message to the module.
void RegisterErrors(nanobind::module_& m);

}  // namespace dspipe
