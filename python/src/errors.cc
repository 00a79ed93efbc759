// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe's errors (errors.h): the Python exception for each Status code, the Python
// names of the options (python/dspipe/_options.py, set at import) that messages show, and the
// CorruptRecord type (python/dspipe/errors.py, set at import) raised with a record's key / path.
#include "errors.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/unordered_map.h>

#include <string>
#include <unordered_map>

namespace nb = nanobind;
using namespace nb::literals;

namespace dspipe {
namespace {

// Python exception types, set once at import from dspipe/errors.py (CorruptRecord is the one
// the C++ code raises for Status::kCorruption / kBadInput).
nb::handle g_corrupt_record;  // a strong reference, never dropped (module lifetime)

// What Python calls each C++ option (python/dspipe/_options.py, set at import): messages name
// the keyword argument, e.g. "threads" for {{LoaderOptions::threads}}.
std::unordered_map<std::string, std::string>& PythonNames() {
  static auto* names = new std::unordered_map<std::string, std::string>();
  return *names;
}

}  // namespace

std::string PythonOptionName(std::string_view field, std::string_view value) {
  if (!value.empty()) {  // a value Python spells otherwise (normalize=False)
    const auto whole = PythonNames().find(std::string(field) + "=" + std::string(value));
    if (whole != PythonNames().end()) return whole->second;
  }
  const auto it = PythonNames().find(std::string(field));
  const std::string name = it != PythonNames().end() ? it->second : std::string(field);
  if (value.empty()) return name;
  if (value == "true" || value == "false") return name + (value == "true" ? "=True" : "=False");
  const bool number = value.find_first_not_of("0123456789.-+e") == std::string_view::npos;
  return name + "=" + (number ? std::string(value) : "'" + std::string(value) + "'");
}

void ThrowIfError(const Status& s) {
  if (s.ok()) return;
  const std::string message = s.Render(PythonOptionName);
  PyObject* type = PyExc_RuntimeError;
  switch (s.code()) {
    case Status::Code::kInvalidArgument:
      type = PyExc_ValueError;
      break;
    case Status::Code::kNotFound:
      type = PyExc_FileNotFoundError;
      break;
    case Status::Code::kIOError:
    case Status::Code::kAlreadyExists:
      type = PyExc_OSError;
      break;
    case Status::Code::kCorruption:
    case Status::Code::kBadInput:
      if (g_corrupt_record.is_valid()) {
        auto subject = [](const std::string& v) -> nb::object {
          if (v.empty()) return nb::none();
          return nb::str(v.c_str());
        };
        nb::object e = g_corrupt_record(message, subject(s.key()), subject(s.path()));
        PyErr_SetObject(g_corrupt_record.ptr(), e.ptr());
        throw nb::python_error();
      }
      break;
    default:
      break;
  }
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

void RegisterErrors(nb::module_& m) {
  m.def("_set_corrupt_record", [](nb::handle type) { g_corrupt_record = type.inc_ref(); });
  m.def("_set_option_names",
        [](const std::unordered_map<std::string, std::string>& names) { PythonNames() = names; });
  m.def(
      "render_message",
      [](const std::string& message) { return RenderOptions(message, PythonOptionName); },
      "message"_a, "A message with option markers ({{Struct::field=value}}) in Python's names.");
}

}  // namespace dspipe
