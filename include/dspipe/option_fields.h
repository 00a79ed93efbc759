// SPDX-License-Identifier: Apache-2.0
// dspipe/option_fields.h: every field of the public options structs, by name, with a pointer to
// it, and the names of the enums they use. Front ends walk these lists instead of restating the
// fields: the Python binding binds each listed field as an attribute of the struct's class, the
// loader builds its resume identity (LoaderState::options) from the fields marked kInState,
// the Python tests fail when a listed field has no keyword argument, and the CLI test when it
// has no flag in a command that fills its struct. So no option can be missing from a front end
// without a test or the build saying so.
//
// Adding a field to one of these structs: add one line to its list below, in declaration
// order. A static_assert fails the build while a field is missing (it counts the aggregate's
// fields), and another when a name or member is listed twice. Then give it a Python name
// (python/dspipe/_options.py) and a row in docs/PYTHON.md; tests/python/test_options.py says
// what is missing. And give it its flag in each command that fills the struct (dsbench:
// tools/dsbench/flags.cc; dsconvert: tools/dsconvert/cli_*.cc), the one tools/option_names.h
// names (the field with '-' for '_', a bool that defaults to true as --no-NAME, or that file's
// table), or the reason it has none in kNoFlag, the one list of fields without a flag, in
// tests/profile/cli_options_test.cc; that test says what is missing, and when a flag shows a
// default other than the field's.
//
// Header-only; everything is constexpr. Thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dspipe/augment.h"
#include "dspipe/cache.h"
#include "dspipe/convert.h"
#include "dspipe/dataset.h"
#include "dspipe/device_loader.h"
#include "dspipe/loader.h"
#include "dspipe/sampler.h"

namespace dspipe {

// Field flags.
inline constexpr unsigned kInState = 1;  // decides the batch stream: part of LoaderState::options

// One field of struct S: its name, the member, and flags.
template <class S, class T>
struct OptionField {
  using Struct = S;
  using Type = T;
  std::string_view name;
  T S::*member;
  unsigned flags = 0;
};

template <class S, class T>
constexpr OptionField<S, T> Field(std::string_view name, T S::*member, unsigned flags = 0) {
  return {name, member, flags};
}

// Specialized for each options struct: kName ("LoaderOptions") and kFields (a tuple of
// OptionField, in declaration order).
template <class S>
struct OptionFields;

// True for the structs listed here (nested options: LoaderOptions::sampler, ::augment, ...).
template <class T>
concept ListedOptions = requires {
  OptionFields<T>::kFields;
};

// Calls fn(field) for each field of S, in order.
template <class S, class Fn>
constexpr void ForEachOptionField(Fn&& fn) {
  std::apply([&](const auto&... f) { (fn(f), ...); }, OptionFields<S>::kFields);
}

// Enum value names, as option values are spelled in every front end ("pad", "global"):
// kName (the enum) and kValues (name, value pairs).
template <class E>
struct EnumNames;

// The name of `value` ("" when it has none).
template <class E>
constexpr std::string_view EnumName(E value) {
  for (const auto& [name, v] : EnumNames<E>::kValues) {
    if (v == value) return name;
  }
  return {};
}

// *out = the value named `name`; false when no value has that name.
template <class E>
constexpr bool ParseEnum(std::string_view name, E* out) {
  for (const auto& [n, v] : EnumNames<E>::kValues) {
    if (n == name) {
      *out = v;
      return true;
    }
  }
  return false;
}

template <class E>
concept NamedEnum = requires {
  EnumNames<E>::kValues;
};

namespace option_fields_internal {

// Converts to a reference to anything, so S{AnyField{}, ...} compiles exactly while there are
// no more initializers than S has fields. Unevaluated only.
struct AnyField {
  template <class T>
  operator T&() const noexcept;  // NOLINT: implicit on purpose
};

template <class S, size_t... I>
constexpr bool InitializableWith(std::index_sequence<I...>) {
  return requires { S{(static_cast<void>(I), AnyField{})...}; };
}

// The number of fields of aggregate S.
template <class S, size_t N = 0>
constexpr size_t CountFields() {
  if constexpr (N < 128 && InitializableWith<S>(std::make_index_sequence<N + 1>{})) {
    return CountFields<S, N + 1>();
  } else {
    return N;
  }
}

template <class A, class B>
constexpr bool SameField(const A& a, const B& b) {
  if constexpr (std::is_same_v<decltype(a.member), decltype(b.member)>) {
    return a.member == b.member || a.name == b.name;
  } else {
    return a.name == b.name;
  }
}

// True when no two entries of the list name the same member or the same name.
template <class Tuple>
constexpr bool AllDistinct(const Tuple& t) {
  return std::apply(
      [&t](const auto&... a) {
        size_t equal = 0;  // pairs (i, j) that match, i == j included
        (
            [&](const auto& x) {
              std::apply([&](const auto&... b) { ((equal += SameField(x, b) ? 1 : 0), ...); }, t);
            }(a),
            ...);
        return equal == sizeof...(a);
      },
      t);
}

template <class S>
constexpr bool Complete() {
  static_assert(std::is_aggregate_v<S>, "options structs are aggregates");
  return std::tuple_size_v<std::remove_cvref_t<decltype(OptionFields<S>::kFields)>> ==
         CountFields<S>();
}

}  // namespace option_fields_internal

// ---- enums -------------------------------------------------------------------------------

template <>
struct EnumNames<RemainderRule> {
  static constexpr std::string_view kName = "RemainderRule";
  static constexpr std::array<std::pair<std::string_view, RemainderRule>, 3> kValues{{
      {"pad", RemainderRule::kPad},
      {"drop", RemainderRule::kDrop},
      {"uneven", RemainderRule::kUneven},
  }};
};
template <>
struct EnumNames<SampleOrder> {
  static constexpr std::string_view kName = "SampleOrder";
  static constexpr std::array<std::pair<std::string_view, SampleOrder>, 4> kValues{{
      {"global", SampleOrder::kGlobal},
      {"blocks", SampleOrder::kBlocks},
      {"shards", SampleOrder::kShards},
      {"weighted", SampleOrder::kWeighted},
  }};
};
template <>
struct EnumNames<Interpolation> {
  static constexpr std::string_view kName = "Interpolation";
  static constexpr std::array<std::pair<std::string_view, Interpolation>, 4> kValues{{
      {"nearest", Interpolation::kNearest},
      {"linear", Interpolation::kLinear},
      {"area", Interpolation::kArea},
      {"cubic", Interpolation::kCubic},
  }};
};
template <>
struct EnumNames<NormalizeMode> {
  static constexpr std::string_view kName = "NormalizeMode";
  static constexpr std::array<std::pair<std::string_view, NormalizeMode>, 2> kValues{{
      {"none", NormalizeMode::kNone},
      {"cpu_float32", NormalizeMode::kCpuFloat32},
  }};
};
template <>
struct EnumNames<MeanStdSource> {
  static constexpr std::string_view kName = "MeanStdSource";
  static constexpr std::array<std::pair<std::string_view, MeanStdSource>, 3> kValues{{
      {"auto", MeanStdSource::kAuto},
      {"dataset", MeanStdSource::kDataset},
      {"identity", MeanStdSource::kIdentity},
  }};
};
template <>
struct EnumNames<ImageDtype> {
  static constexpr std::string_view kName = "ImageDtype";
  static constexpr std::array<std::pair<std::string_view, ImageDtype>, 2> kValues{{
      {"float32", ImageDtype::kFloat32},
      {"float16", ImageDtype::kFloat16},
  }};
};
template <>
struct EnumNames<MaskDtype> {
  static constexpr std::string_view kName = "MaskDtype";
  static constexpr std::array<std::pair<std::string_view, MaskDtype>, 2> kValues{{
      {"int64", MaskDtype::kInt64},
      {"uint8", MaskDtype::kUInt8},
  }};
};
template <>
struct EnumNames<StoreMode> {
  static constexpr std::string_view kName = "StoreMode";
  static constexpr std::array<std::pair<std::string_view, StoreMode>, 2> kValues{{
      {"encoded", StoreMode::kEncoded},
      {"raw", StoreMode::kRaw},
  }};
};
template <>
struct EnumNames<Compression> {
  static constexpr std::string_view kName = "Compression";
  static constexpr std::array<std::pair<std::string_view, Compression>, 2> kValues{{
      {"zstd", Compression::kZstd},
      {"none", Compression::kNone},
  }};
};
template <>
struct EnumNames<OnError> {
  static constexpr std::string_view kName = "OnError";
  static constexpr std::array<std::pair<std::string_view, OnError>, 2> kValues{{
      {"fail", OnError::kFail},
      {"skip", OnError::kSkip},
  }};
};
template <>
struct EnumNames<CheckLevel> {
  static constexpr std::string_view kName = "CheckLevel";
  static constexpr std::array<std::pair<std::string_view, CheckLevel>, 2> kValues{{
      {"header", CheckLevel::kHeader},
      {"decode", CheckLevel::kDecode},
  }};
};

// ---- structs -----------------------------------------------------------------------------

template <>
struct OptionFields<SamplerOptions> {
  using S = SamplerOptions;
  static constexpr std::string_view kName = "SamplerOptions";
  static constexpr auto kFields = std::make_tuple(  // seed: LoaderState::seed itself
      Field("shuffle", &S::shuffle, kInState), Field("seed", &S::seed),
      Field("world_size", &S::world_size, kInState), Field("rank", &S::rank, kInState),
      Field("remainder", &S::remainder, kInState), Field("order", &S::order, kInState),
      Field("block_size", &S::block_size, kInState), Field("weights", &S::weights, kInState),
      Field("num_samples", &S::num_samples, kInState),
      Field("replacement", &S::replacement, kInState));
};

template <>
struct OptionFields<AugmentOptions> {
  using S = AugmentOptions;
  static constexpr std::string_view kName = "AugmentOptions";
  static constexpr auto kFields =
      std::make_tuple(Field("hflip", &S::hflip, kInState), Field("vflip", &S::vflip, kInState),
                      Field("crop_scale_min", &S::crop_scale_min, kInState),
                      Field("crop_scale_max", &S::crop_scale_max, kInState),
                      Field("crop_ratio_min", &S::crop_ratio_min, kInState),
                      Field("crop_ratio_max", &S::crop_ratio_max, kInState),
                      Field("resize_shorter", &S::resize_shorter, kInState),
                      Field("image_interpolation", &S::image_interpolation, kInState));
};

template <>
struct OptionFields<PlainLmdbOptions> {
  using S = PlainLmdbOptions;
  static constexpr std::string_view kName = "PlainLmdbOptions";
  static constexpr auto kFields = std::make_tuple(
      Field("image_key", &S::image_key), Field("mask_key", &S::mask_key), Field("masks", &S::masks),
      Field("labels", &S::labels), Field("detect_masks", &S::detect_masks),
      Field("scan_keys", &S::scan_keys), Field("ignore_keys", &S::ignore_keys));
};

template <>
struct OptionFields<DatasetOpenOptions> {
  using S = DatasetOpenOptions;
  static constexpr std::string_view kName = "DatasetOpenOptions";
  static constexpr auto kFields = std::make_tuple(
      Field("verify_crc", &S::verify_crc), Field("max_readers", &S::max_readers),
      Field("os_readahead", &S::os_readahead), Field("plain", &S::plain),
      Field("lazy_shards", &S::lazy_shards), Field("resolve_shard", &S::resolve_shard));
};

template <>
struct OptionFields<LoaderOptions> {
  using S = LoaderOptions;
  static constexpr std::string_view kName = "LoaderOptions";
  static constexpr auto kFields = std::make_tuple(
      Field("batch_size", &S::batch_size, kInState), Field("threads", &S::threads),
      Field("prefetch", &S::prefetch), Field("readahead", &S::readahead),
      Field("sampler", &S::sampler, kInState), Field("drop_last", &S::drop_last, kInState),
      Field("height", &S::height, kInState), Field("width", &S::width, kInState),
      Field("channels", &S::channels, kInState), Field("augment", &S::augment, kInState),
      Field("transform", &S::transform, kInState), Field("defer_hflip", &S::defer_hflip),
      Field("normalize", &S::normalize), Field("mean", &S::mean), Field("std", &S::std),
      Field("mean_std", &S::mean_std), Field("max_corrupt", &S::max_corrupt),
      Field("allocator", &S::allocator), Field("dataset", &S::dataset), Field("cache", &S::cache),
      Field("cache_limit", &S::cache_limit), Field("cache_overlap", &S::cache_overlap),
      Field("stream_ahead", &S::stream_ahead));
};

template <>
struct OptionFields<DeviceOptions> {
  using S = DeviceOptions;
  static constexpr std::string_view kName = "DeviceOptions";
  static constexpr auto kFields = std::make_tuple(
      Field("device", &S::device), Field("dtype", &S::dtype), Field("mask_dtype", &S::mask_dtype),
      Field("slots", &S::slots), Field("max_slots", &S::max_slots),
      Field("consumer_stream", &S::consumer_stream), Field("pin_memory", &S::pin_memory));
};

template <>
struct OptionFields<CacheOptions> {
  using S = CacheOptions;
  static constexpr std::string_view kName = "CacheOptions";
  static constexpr auto kFields = std::make_tuple(
      Field("mode", &S::mode), Field("cache_limit", &S::cache_limit), Field("margin", &S::margin),
      Field("reserved_ram", &S::reserved_ram), Field("env", &S::env), Field("masks", &S::masks));
};

template <>
struct OptionFields<BuildOptions> {
  using S = BuildOptions;
  static constexpr std::string_view kName = "BuildOptions";
  static constexpr auto kFields = std::make_tuple(
      Field("source", &S::source), Field("plain", &S::plain), Field("output", &S::output),
      Field("staging", &S::staging), Field("store", &S::store),
      Field("compression", &S::compression), Field("zstd_level", &S::zstd_level),
      Field("resize_width", &S::resize_width), Field("resize_height", &S::resize_height),
      Field("max_side", &S::max_side), Field("jpeg_quality", &S::jpeg_quality),
      Field("jpeg_restarts", &S::jpeg_restarts), Field("gray", &S::gray), Field("depth", &S::depth),
      Field("pages_as_channels", &S::pages_as_channels), Field("mask_map", &S::mask_map),
      Field("slice_axis", &S::slice_axis), Field("skip_empty", &S::skip_empty),
      Field("context", &S::context), Field("allow_empty_classes", &S::allow_empty_classes),
      Field("drop_alpha", &S::drop_alpha), Field("spacing_rows", &S::spacing_rows),
      Field("spacing_cols", &S::spacing_cols), Field("slice_height", &S::slice_height),
      Field("slice_width", &S::slice_width), Field("shuffle", &S::shuffle), Field("seed", &S::seed),
      Field("threads", &S::threads), Field("shards", &S::shards),
      Field("shard_index", &S::shard_index), Field("resume", &S::resume),
      Field("overwrite", &S::overwrite), Field("on_error", &S::on_error), Field("check", &S::check),
      Field("stats_sample", &S::stats_sample),
      Field("archive_buffer_bytes", &S::archive_buffer_bytes),
      Field("commit_bytes", &S::commit_bytes), Field("sync", &S::sync),
      Field("progress", &S::progress), Field("cancelled", &S::cancelled), Field("env", &S::env));
};

template <>
struct OptionFields<VerifyOptions> {
  using S = VerifyOptions;
  static constexpr std::string_view kName = "VerifyOptions";
  static constexpr auto kFields =
      std::make_tuple(Field("threads", &S::threads), Field("max_listed", &S::max_listed),
                      Field("file_sha256", &S::file_sha256), Field("cancelled", &S::cancelled));
};

// Every listed struct, for code that walks them all (the binding, the tests).
using ListedOptionStructs =
    std::tuple<SamplerOptions, AugmentOptions, PlainLmdbOptions, DatasetOpenOptions, LoaderOptions,
               DeviceOptions, CacheOptions, BuildOptions, VerifyOptions>;

#define DSPIPE_CHECK_OPTION_FIELDS(S)                                                         \
  static_assert(option_fields_internal::Complete<S>(),                                        \
                "dspipe/option_fields.h: a field of " #S " is not listed in OptionFields<" #S \
                ">: add it (one line, declaration order)");                                   \
  static_assert(option_fields_internal::AllDistinct(OptionFields<S>::kFields),                \
                "dspipe/option_fields.h: OptionFields<" #S "> lists a field twice")
DSPIPE_CHECK_OPTION_FIELDS(SamplerOptions);
DSPIPE_CHECK_OPTION_FIELDS(AugmentOptions);
DSPIPE_CHECK_OPTION_FIELDS(PlainLmdbOptions);
DSPIPE_CHECK_OPTION_FIELDS(DatasetOpenOptions);
DSPIPE_CHECK_OPTION_FIELDS(LoaderOptions);
DSPIPE_CHECK_OPTION_FIELDS(DeviceOptions);
DSPIPE_CHECK_OPTION_FIELDS(CacheOptions);
DSPIPE_CHECK_OPTION_FIELDS(BuildOptions);
DSPIPE_CHECK_OPTION_FIELDS(VerifyOptions);
#undef DSPIPE_CHECK_OPTION_FIELDS

}  // namespace dspipe
