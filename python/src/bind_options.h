// SPDX-License-Identifier: Apache-2.0
// The options structs as Python classes (dspipe._dspipe.LoaderOptions, ...), bound from the
// field lists of dspipe/option_fields.h: every listed field of a bindable type becomes an
// attribute with the C++ default (a default-constructed struct), nested structs are attributes
// holding their own class (lo.sampler.seed = 3 sets the loader's), enums are Python enums with
// the option value names ("pad", "global"). Fields Python cannot hold (callbacks, allocators,
// Env pointers) are not bound; void* fields (CUDA streams) are ints; a transform pipeline
// (LoaderOptions::transform) is its A.to_dict JSON text ("" = none; setting it parses it, a bad
// spec raises ValueError). option_fields() lists
// every field with its type and whether it is bound, for the tests that keep the Python
// keyword arguments complete. Nothing here knows a field by name: a new field in a listed
// struct is bound by its one line in option_fields.h.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dspipe/option_fields.h"
#include "dspipe/transforms.h"

namespace dspipe::python {

namespace nb = nanobind;

// A field holding a parsed transform pipeline: bound as its JSON text.
template <class T>
constexpr bool kPipeline = std::is_same_v<T, std::shared_ptr<const TransformPipeline>>;

template <class T>
constexpr bool kBindable = std::is_arithmetic_v<T> || NamedEnum<T> || ListedOptions<T> ||
                           std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<double>>;

// The Python-side type of a field, as option_fields() reports it.
template <class T>
std::string TypeName() {
  if constexpr (std::is_same_v<T, bool>) {
    return "bool";
  } else if constexpr (std::is_integral_v<T>) {
    return "int";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "float";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "str";
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    return "list[float]";
  } else if constexpr (NamedEnum<T>) {
    return std::string(EnumNames<T>::kName);
  } else if constexpr (ListedOptions<T>) {
    return std::string(OptionFields<T>::kName);
  } else if constexpr (std::is_same_v<T, void*>) {
    return "int (a pointer)";
  } else if constexpr (kPipeline<T>) {
    return "str (a transform pipeline's JSON)";
  } else {
    return "";  // not bound (callback, allocator, Env)
  }
}

template <class E>
void BindEnum(nb::module_& m) {
  nb::enum_<E> e(m, EnumNames<E>::kName.data());
  for (const auto& [name, value] : EnumNames<E>::kValues) e.value(name.data(), value);
}

template <class S>
std::string Repr(const S& s);

template <class T>
std::string ValueRepr(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "True" : "False";
  } else if constexpr (std::is_arithmetic_v<T>) {
    return nb::cast<std::string>(nb::repr(nb::cast(v)));
  } else if constexpr (NamedEnum<T>) {
    return "'" + std::string(EnumName(v)) + "'";
  } else if constexpr (ListedOptions<T>) {
    return Repr(v);
  } else if constexpr (kBindable<T>) {
    return nb::cast<std::string>(nb::repr(nb::cast(v)));
  } else if constexpr (kPipeline<T>) {
    return v ? nb::cast<std::string>(nb::repr(nb::cast(v->ToJson()))) : "''";
  } else {
    return "...";
  }
}

// "LoaderOptions(batch_size=8, threads=0, ...)".
template <class S>
std::string Repr(const S& s) {
  std::string out = std::string(OptionFields<S>::kName) + "(";
  bool first = true;
  ForEachOptionField<S>([&](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::Type;
    if constexpr (kBindable<T> || kPipeline<T>) {
      out += (first ? "" : ", ") + std::string(f.name) + "=" + ValueRepr(s.*(f.member));
      first = false;
    }
  });
  return out + ")";
}

template <class S>
void BindOptionsStruct(nb::module_& m) {
  nb::class_<S> c(m, OptionFields<S>::kName.data());
  c.def(nb::init<>());
  c.def(nb::init<const S&>());  // a copy
  ForEachOptionField<S>([&c](const auto& f) {
    using T = typename std::remove_cvref_t<decltype(f)>::Type;
    auto member = f.member;
    if constexpr (kBindable<T>) {
      c.def_rw(f.name.data(), member);
    } else if constexpr (std::is_same_v<T, void*>) {
      c.def_prop_rw(
          f.name.data(), [member](const S& s) { return reinterpret_cast<uintptr_t>(s.*member); },
          [member](S& s, uintptr_t v) { s.*member = reinterpret_cast<void*>(v); });
    } else if constexpr (kPipeline<T>) {
      c.def_prop_rw(
          f.name.data(),
          [member](const S& s) { return s.*member ? (s.*member)->ToJson() : std::string(); },
          [member](S& s, const std::string& json) {
            if (json.empty()) {
              s.*member = nullptr;
              return;
            }
            std::shared_ptr<const TransformPipeline> p;
            const Status st = TransformPipeline::Parse(json, &p);
            if (!st.ok()) throw nb::value_error(st.ToString().c_str());
            s.*member = std::move(p);
          });
    }
  });
  c.def("__repr__", [](const S& s) { return Repr(s); });
}

// [(struct, field, type, bound)] for every listed field of every listed struct.
inline std::vector<std::tuple<std::string, std::string, std::string, bool>> OptionFieldList() {
  std::vector<std::tuple<std::string, std::string, std::string, bool>> out;
  std::apply(
      [&out](auto... structs) {
        (ForEachOptionField<decltype(structs)>([&out](const auto& f) {
           using F = std::remove_cvref_t<decltype(f)>;
           using T = typename F::Type;
           out.emplace_back(std::string(OptionFields<typename F::Struct>::kName),
                            std::string(f.name), TypeName<T>(),
                            kBindable<T> || kPipeline<T> || std::is_same_v<T, void*>);
         }),
         ...);
      },
      ListedOptionStructs{});
  return out;
}

// Binds the enums, then every listed struct (nested ones first: the list is in that order).
inline void BindOptions(nb::module_& m) {
  BindEnum<RemainderRule>(m);
  BindEnum<SampleOrder>(m);
  BindEnum<Interpolation>(m);
  BindEnum<NormalizeMode>(m);
  BindEnum<MeanStdSource>(m);
  BindEnum<ImageDtype>(m);
  BindEnum<MaskDtype>(m);
  BindEnum<StoreMode>(m);
  BindEnum<Compression>(m);
  BindEnum<OnError>(m);
  BindEnum<CheckLevel>(m);
  std::apply([&m](auto... structs) { (BindOptionsStruct<decltype(structs)>(m), ...); },
             ListedOptionStructs{});
  m.def("option_fields", &OptionFieldList,
        "Every field of the C++ options structs: (struct, field, type, bound to Python).");
}

}  // namespace dspipe::python
