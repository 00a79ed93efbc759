// SPDX-License-Identifier: Apache-2.0
// dspipe._dspipe transform functions: what python/dspipe/transforms.py and the albumentations
// comparison tests need from include/dspipe/transforms.h - normalizing a spec to A.to_dict's
// form, the supported table, and applying a pipeline (fused, or step by step) to numpy image +
// mask arrays for a (seed, epoch, index), or listing its draws. No logic of its own.
#include "transforms.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "dspipe/transforms.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace dspipe {
namespace {

using U8Array = nb::ndarray<uint8_t, nb::c_contig, nb::device::cpu>;

void Raise(const Status& s) {
  if (s.ok()) return;
  PyErr_SetString(
      s.code() == Status::Code::kInvalidArgument ? PyExc_ValueError : PyExc_RuntimeError,
      s.ToString().c_str());
  throw nb::python_error();
}

std::shared_ptr<const TransformPipeline> Parse(const std::string& spec) {
  std::shared_ptr<const TransformPipeline> p;
  Raise(TransformPipeline::Parse(spec, &p));
  return p;
}

ImageRef RefOf(U8Array& a, const char* what) {
  if (a.ndim() != 2 && a.ndim() != 3) {
    Raise(Status::InvalidArgument(std::string(what) + " must be H x W or H x W x C uint8"));
  }
  ImageRef r;
  r.data = a.data();
  r.height = static_cast<int>(a.shape(0));
  r.width = static_cast<int>(a.shape(1));
  r.channels = a.ndim() == 3 ? static_cast<int>(a.shape(2)) : 1;
  return r;
}

nb::object ToNumpy(OwnedImage&& img, bool three_dims) {
  auto* owner = new OwnedImage(std::move(img));
  nb::capsule free(owner, [](void* p) noexcept { delete static_cast<OwnedImage*>(p); });
  const size_t shape3[3] = {static_cast<size_t>(owner->height), static_cast<size_t>(owner->width),
                            static_cast<size_t>(owner->channels)};
  return nb::cast(
      nb::ndarray<nb::numpy, uint8_t>(owner->pixels.data(), three_dims ? 3 : 2, shape3, free));
}

using AnyArray = nb::ndarray<nb::c_contig, nb::device::cpu>;

// An array's sample type; InvalidArgument for a dtype no record holds.
PixelsRef PixelsOf(AnyArray& a, const char* what) {
  if (a.ndim() != 2 && a.ndim() != 3) {
    Raise(Status::InvalidArgument(std::string(what) + " must be H x W or H x W x C"));
  }
  PixelsRef r;
  r.data = a.data();
  r.height = static_cast<int>(a.shape(0));
  r.width = static_cast<int>(a.shape(1));
  r.channels = a.ndim() == 3 ? static_cast<int>(a.shape(2)) : 1;
  const nb::dlpack::dtype t = a.dtype();
  if (t == nb::dtype<uint8_t>()) {
    r.type = SampleType::kUint8;
  } else if (t == nb::dtype<uint16_t>()) {
    r.type = SampleType::kUint16;
  } else if (t == nb::dtype<int16_t>()) {
    r.type = SampleType::kInt16;
  } else if (t == nb::dtype<float>()) {
    r.type = SampleType::kFloat32;
  } else {
    Raise(Status::InvalidArgument(std::string(what) +
                                  " must be uint8, uint16, int16 or float32 (the sample types a "
                                  "dataset holds)"));
  }
  return r;
}

nb::object PixelsToNumpy(OwnedPixels&& img, bool three_dims) {
  auto* owner = new OwnedPixels(std::move(img));
  nb::capsule free(owner, [](void* p) noexcept { delete static_cast<OwnedPixels*>(p); });
  const size_t shape3[3] = {static_cast<size_t>(owner->height), static_cast<size_t>(owner->width),
                            static_cast<size_t>(owner->channels)};
  const size_t ndim = three_dims ? 3 : 2;
  void* data = owner->bytes.data();
  switch (owner->type) {
    case SampleType::kUint16:
      return nb::cast(nb::ndarray<nb::numpy, uint16_t>(data, ndim, shape3, free));
    case SampleType::kInt16:
      return nb::cast(nb::ndarray<nb::numpy, int16_t>(data, ndim, shape3, free));
    case SampleType::kFloat32:
      return nb::cast(nb::ndarray<nb::numpy, float>(data, ndim, shape3, free));
    case SampleType::kUint8:
      break;
  }
  return nb::cast(nb::ndarray<nb::numpy, uint8_t>(data, ndim, shape3, free));
}

// The image and the optional mask of an apply call, as PixelsRef (the arrays stay referenced).
struct PixelArgs {
  PixelsRef image, mask;
  AnyArray mask_array;
  bool has_mask = false;
  bool three_dims = false;
  const PixelsRef* mask_ref() const { return has_mask ? &mask : nullptr; }
};

PixelArgs PixelArgsOf(AnyArray& image, const nb::object& mask) {
  PixelArgs a;
  a.image = PixelsOf(image, "image");
  a.three_dims = image.ndim() == 3;
  a.has_mask = !mask.is_none();
  if (a.has_mask) {
    a.mask_array = nb::cast<AnyArray>(mask);
    a.mask = PixelsOf(a.mask_array, "mask");
  }
  return a;
}

nb::tuple ApplyPixelsImpl(const std::string& spec, AnyArray image, nb::object mask, uint64_t seed,
                          uint64_t epoch, uint64_t index) {
  std::shared_ptr<const TransformPipeline> p = Parse(spec);
  const PixelArgs a = PixelArgsOf(image, mask);
  OwnedPixels out, out_mask;
  Status s;
  {
    nb::gil_scoped_release release;
    s = p->ApplyPixels(seed, epoch, index, a.image, a.mask_ref(), &out, &out_mask);
  }
  Raise(s);
  nb::object mo = a.has_mask ? PixelsToNumpy(std::move(out_mask), false) : nb::none();
  return nb::make_tuple(PixelsToNumpy(std::move(out), a.three_dims), mo);
}

// Every sample of the record (MONAI's num_samples): a list of (image, mask) tuples.
nb::list ApplySamplesImpl(const std::string& spec, AnyArray image, nb::object mask, uint64_t seed,
                          uint64_t epoch, uint64_t index) {
  std::shared_ptr<const TransformPipeline> p = Parse(spec);
  const PixelArgs a = PixelArgsOf(image, mask);
  std::vector<OwnedPixels> outs, out_masks;
  Status s;
  {
    nb::gil_scoped_release release;
    s = p->ApplyPixelsSamples(seed, epoch, index, a.image, a.mask_ref(), &outs, &out_masks);
  }
  Raise(s);
  nb::list list;
  for (size_t k = 0; k < outs.size(); ++k) {
    nb::object mo = a.has_mask ? PixelsToNumpy(std::move(out_masks[k]), false) : nb::none();
    list.append(nb::make_tuple(PixelsToNumpy(std::move(outs[k]), a.three_dims), mo));
  }
  return list;
}

nb::tuple ApplyImpl(bool sequential, const std::string& spec, U8Array image, nb::object mask,
                    uint64_t seed, uint64_t epoch, uint64_t index) {
  std::shared_ptr<const TransformPipeline> p = Parse(spec);
  ImageRef img = RefOf(image, "image");
  const bool three = image.ndim() == 3;
  U8Array mask_array;
  ImageRef m;
  const bool has_mask = !mask.is_none();
  if (has_mask) {
    mask_array = nb::cast<U8Array>(mask);
    m = RefOf(mask_array, "mask");
  }
  OwnedImage out, out_mask;
  Status s;
  {
    nb::gil_scoped_release release;
    s = sequential
            ? p->ApplySequential(seed, epoch, index, img, has_mask ? &m : nullptr, &out, &out_mask)
            : p->Apply(seed, epoch, index, img, has_mask ? &m : nullptr, &out, &out_mask);
  }
  Raise(s);
  nb::object mo = has_mask ? ToNumpy(std::move(out_mask), false) : nb::none();
  return nb::make_tuple(ToNumpy(std::move(out), three), mo);
}

}  // namespace

void RegisterTransforms(nb::module_& m) {
  // The spec in albumentations' A.to_dict JSON form, every argument filled in.
  m.def(
      "transforms_to_json", [](const std::string& spec) { return Parse(spec)->ToJson(); },
      "spec"_a);
  m.def("transforms_supported", [] {
    std::vector<nb::tuple> rows;
    for (const TransformInfo& t : SupportedTransforms()) {
      rows.push_back(nb::make_tuple(t.name, t.kind, t.mask, t.fused, t.args, t.default_p));
    }
    return rows;
  });
  m.def(
      "transforms_output_size",
      [](const std::string& spec, int h, int w) -> nb::object {
        int oh = 0, ow = 0;
        if (!Parse(spec)->OutputSize(h, w, &oh, &ow)) return nb::none();
        return nb::make_tuple(oh, ow);
      },
      "spec"_a, "height"_a, "width"_a);
  m.def(
      "transforms_apply",
      [](const std::string& spec, U8Array image, nb::object mask, uint64_t seed, uint64_t epoch,
         uint64_t index) { return ApplyImpl(false, spec, image, mask, seed, epoch, index); },
      "spec"_a, "image"_a, "mask"_a.none(), "seed"_a = 0, "epoch"_a = 0, "index"_a = 0);
  // Any sample type, each transform on its own (typed samples, MONAI configs: float32 out).
  m.def(
      "transforms_apply_pixels",
      [](const std::string& spec, AnyArray image, nb::object mask, uint64_t seed, uint64_t epoch,
         uint64_t index) { return ApplyPixelsImpl(spec, image, mask, seed, epoch, index); },
      "spec"_a, "image"_a, "mask"_a.none(), "seed"_a = 0, "epoch"_a = 0, "index"_a = 0);
  m.def(
      "transforms_apply_samples",
      [](const std::string& spec, AnyArray image, nb::object mask, uint64_t seed, uint64_t epoch,
         uint64_t index) { return ApplySamplesImpl(spec, image, mask, seed, epoch, index); },
      "spec"_a, "image"_a, "mask"_a.none(), "seed"_a = 0, "epoch"_a = 0, "index"_a = 0);
  m.def(
      "transforms_samples_per_record",
      [](const std::string& spec) { return Parse(spec)->samples_per_record(); }, "spec"_a);
  m.def(
      "transforms_label_classes",
      [](const std::string& spec) { return Parse(spec)->label_classes(); }, "spec"_a);
  m.def(
      "transforms_float_pixels",
      [](const std::string& spec) { return Parse(spec)->float_pixels(); }, "spec"_a);
  m.def("transforms_supported_monai", [] {
    std::vector<nb::tuple> rows;
    for (const MonaiTransformInfo& t : SupportedMonaiTransforms()) {
      rows.push_back(nb::make_tuple(t.name, t.kind, t.label, t.args));
    }
    return rows;
  });
  m.def(
      "transforms_apply_sequential",
      [](const std::string& spec, U8Array image, nb::object mask, uint64_t seed, uint64_t epoch,
         uint64_t index) { return ApplyImpl(true, spec, image, mask, seed, epoch, index); },
      "spec"_a, "image"_a, "mask"_a.none(), "seed"_a = 0, "epoch"_a = 0, "index"_a = 0);
  m.def(
      "transforms_draws",
      [](const std::string& spec, int h, int w, nb::object mask, uint64_t seed, uint64_t epoch,
         uint64_t index) {
        std::shared_ptr<const TransformPipeline> p = Parse(spec);
        U8Array mask_array;
        ImageRef m;
        if (!mask.is_none()) {
          mask_array = nb::cast<U8Array>(mask);
          m = RefOf(mask_array, "mask");
        }
        std::string out;
        Raise(p->Draws(seed, epoch, index, h, w, mask.is_none() ? nullptr : &m, &out));
        return out;
      },
      "spec"_a, "height"_a, "width"_a, "mask"_a.none(), "seed"_a = 0, "epoch"_a = 0, "index"_a = 0);
}

}  // namespace dspipe
