// SPDX-License-Identifier: Apache-2.0
// The serialized form: albumentations 2.0.8's A.to_dict JSON is read, normalized and written
// back as albumentations writes it; scalars widen the albumentations way; what dspipe does not
// implement is refused naming it; the docs table lists exactly the supported transforms.
#include "transforms/spec.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "dspipe/transforms.h"
#include "must_parse.h"

namespace dspipe {
namespace {

using nlohmann::json;

using testing::MustParse;

// The one transform of a parsed single-transform pipeline, as A.to_dict writes it.
json Normalized(const std::string& transform) {
  auto p = MustParse(transform);
  if (!p) return json();
  return json::parse(p->ToJson())["transform"]["transforms"][0];
}

Status ParseError(const std::string& text) {
  std::shared_ptr<const TransformPipeline> p;
  return TransformPipeline::Parse(text, &p);
}

// json equality with 1 == 1.0 (albumentations writes either).
bool Same(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  if (a.type() != b.type() || a.size() != b.size()) return false;
  if (a.is_array()) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!Same(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key()) || !Same(it.value(), b.at(it.key()))) return false;
    }
    return true;
  }
  return a == b;
}

// Printed by albumentations 2.0.8: json.dumps(A.to_dict(A.Compose([T()]))["transform"]
// ["transforms"][0]) for each transform with its defaults (required arguments as noted).
const char* const kAlbumentationsDefaults[] = {
    R"({"__class_fullname__": "HorizontalFlip", "p": 0.5})",
    R"({"__class_fullname__": "RandomRotate90", "p": 1.0})",
    R"({"__class_fullname__": "SquareSymmetry", "p": 1.0})",
    R"({"__class_fullname__": "Rotate", "p": 0.5, "border_mode": 0, "crop_border": false, "fill": 0.0, "fill_mask": 0.0, "interpolation": 1, "limit": [-90.0, 90.0], "mask_interpolation": 0, "rotate_method": "largest_box"})",
    R"({"__class_fullname__": "Affine", "p": 0.5, "balanced_scale": false, "border_mode": 0, "fill": 0.0, "fill_mask": 0.0, "fit_output": false, "interpolation": 1, "keep_ratio": false, "mask_interpolation": 0, "rotate": [0.0, 0.0], "rotate_method": "largest_box", "scale": {"x": [1.0, 1.0], "y": [1.0, 1.0]}, "shear": {"x": [0.0, 0.0], "y": [0.0, 0.0]}, "translate_percent": null, "translate_px": {"x": [0, 0], "y": [0, 0]}})",
    R"({"__class_fullname__": "ShiftScaleRotate", "p": 0.5, "shift_limit_x": [-0.0625, 0.0625], "shift_limit_y": [-0.0625, 0.0625], "scale_limit": [-0.09999999999999998, 0.10000000000000009], "rotate_limit": [-45.0, 45.0], "interpolation": 1, "border_mode": 0, "fill": 0.0, "fill_mask": 0.0, "rotate_method": "largest_box", "mask_interpolation": 0})",
    // A.RandomCrop(10, 20)
    R"({"__class_fullname__": "RandomCrop", "p": 1.0, "border_mode": 0, "fill": 0.0, "fill_mask": 0.0, "height": 10, "pad_if_needed": false, "pad_position": "center", "width": 20})",
    R"({"__class_fullname__": "PadIfNeeded", "p": 1.0, "border_mode": 0, "fill": 0.0, "fill_mask": 0.0, "min_height": 1024, "min_width": 1024, "pad_height_divisor": null, "pad_width_divisor": null, "padding": 0, "position": "center"})",
    // A.RandomResizedCrop((10, 20))
    R"({"__class_fullname__": "RandomResizedCrop", "p": 1.0, "area_for_downscale": null, "interpolation": 1, "mask_interpolation": 0, "ratio": [0.75, 1.3333333333333333], "scale": [0.08, 1.0], "size": [10, 20]})",
    // A.SmallestMaxSize(5)
    R"({"__class_fullname__": "SmallestMaxSize", "p": 1.0, "area_for_downscale": null, "interpolation": 1, "mask_interpolation": 0, "max_size": 5, "max_size_hw": null})",
    // A.CropNonEmptyMaskIfExists(10, 20)
    R"({"__class_fullname__": "CropNonEmptyMaskIfExists", "p": 1.0, "height": 10, "ignore_channels": null, "ignore_values": null, "width": 20})",
    R"({"__class_fullname__": "RandomBrightnessContrast", "p": 0.5, "brightness_by_max": true, "brightness_limit": [-0.2, 0.2], "contrast_limit": [-0.2, 0.2], "ensure_safe_range": false})",
    R"({"__class_fullname__": "RandomGamma", "p": 0.5, "gamma_limit": [80.0, 120.0]})",
    R"({"__class_fullname__": "HueSaturationValue", "p": 0.5, "hue_shift_limit": [-20.0, 20.0], "sat_shift_limit": [-30.0, 30.0], "val_shift_limit": [-20.0, 20.0]})",
    R"({"__class_fullname__": "ColorJitter", "p": 0.5, "brightness": [0.8, 1.2], "contrast": [0.8, 1.2], "hue": [-0.5, 0.5], "saturation": [0.8, 1.2]})",
    R"({"__class_fullname__": "GaussNoise", "p": 0.5, "mean_range": [0.0, 0.0], "noise_scale_factor": 1.0, "per_channel": true, "std_range": [0.2, 0.44]})",
    R"({"__class_fullname__": "GaussianBlur", "p": 0.5, "blur_limit": [0, 0], "sigma_limit": [0.5, 3.0]})",
    R"({"__class_fullname__": "MedianBlur", "p": 0.5, "blur_limit": [3, 7]})",
    R"({"__class_fullname__": "MotionBlur", "p": 0.5, "allow_shifted": true, "angle_range": [0.0, 360.0], "blur_limit": [3, 7], "direction_range": [-1.0, 1.0]})",
    R"({"__class_fullname__": "CLAHE", "p": 0.5, "clip_limit": [1.0, 4.0], "tile_grid_size": [8, 8]})",
    R"({"__class_fullname__": "CoarseDropout", "p": 0.5, "fill": 0.0, "fill_mask": null, "hole_height_range": [0.1, 0.2], "hole_width_range": [0.1, 0.2], "num_holes_range": [1, 2]})",
    R"({"__class_fullname__": "ToGray", "p": 0.5, "method": "weighted_average", "num_output_channels": 3})",
    R"({"__class_fullname__": "Normalize", "p": 1.0, "max_pixel_value": 255.0, "mean": [0.485, 0.456, 0.406], "normalization": "standard", "std": [0.229, 0.224, 0.225]})",
    R"({"__class_fullname__": "ToFloat", "p": 1.0, "max_value": null})",
    // albumentations.pytorch.ToTensorV2()
    R"({"__class_fullname__": "ToTensorV2", "p": 1.0, "transpose_mask": false})",
};

TEST(TransformSpec, DefaultsAreFilledInAsAToDictWritesThem) {
  for (const char* want_text : kAlbumentationsDefaults) {
    const json want = json::parse(want_text);
    json minimal = {{"__class_fullname__", want["__class_fullname__"]}, {"p", want["p"]}};
    for (const char* required : {"height", "width", "size"}) {
      if (want.contains(required) && want["__class_fullname__"] != "PadIfNeeded") {
        minimal[required] = want[required];
      }
    }
    if (want["__class_fullname__"] == "SmallestMaxSize") minimal["max_size"] = 5;
    const json got = Normalized(minimal.dump());
    EXPECT_TRUE(Same(got, want)) << "\n got: " << got.dump() << "\nwant: " << want.dump();
    // And the full dict reads back to itself.
    EXPECT_TRUE(Same(Normalized(want.dump()), want)) << want.dump();
  }
}

// albumentations' from_dict reads a transform without "p" as p=0.5 (it warns), Compose and
// Sequential with their class defaults; dspipe reads it the same way and writes p.
TEST(TransformSpec, AMissingPIsWhatFromDictMakesOfIt) {
  EXPECT_EQ(Normalized(R"({"__class_fullname__": "RandomCrop", "height": 4, "width": 4})")["p"],
            0.5);
  EXPECT_EQ(Normalized(R"({"__class_fullname__": "SomeOf", "transforms": []})")["p"], 0.5);
  EXPECT_EQ(Normalized(R"({"__class_fullname__": "Sequential", "transforms": []})")["p"], 0.5);
  auto p = MustParse(R"({"__class_fullname__": "Compose", "transforms": []})");
  EXPECT_EQ(json::parse(p->ToJson())["transform"]["p"], 1.0);
  const Status s = ParseError(R"([{"__class_fullname__": "Normalize"}])");
  EXPECT_NE(s.message().find("without \"p\" has p=0.5"), std::string::npos) << s.ToString();
  // The constructors' defaults, for dspipe.transforms' classes.
  for (const TransformInfo& t : SupportedTransforms()) {
    const bool one = t.name == "RandomCrop" || t.name == "Normalize" || t.name == "Compose" ||
                     t.name == "SquareSymmetry" || t.name == "Resize";
    if (one || t.name == "HorizontalFlip" || t.name == "OneOf") {
      EXPECT_EQ(t.default_p, one ? 1.0 : 0.5) << t.name;
    }
  }
}

// A spec holding OneOrOther writes itself back as albumentations does (json.dumps(A.to_dict(
// A.Compose([A.OneOrOther(A.HorizontalFlip(), A.VerticalFlip(), p=1)])))): ToJson named
// containers from a table that lacked OneOrOther and read past it (fuzz_transform_spec).
TEST(TransformSpec, OneOrOtherRoundTrips) {
  const std::string doc =
      R"({"__version__": "2.0.8", "transform": {"__class_fullname__": "Compose", "p": 1.0, "transforms": [{"__class_fullname__": "OneOrOther", "p": 1, "transforms": [{"__class_fullname__": "HorizontalFlip", "p": 0.5}, {"__class_fullname__": "VerticalFlip", "p": 0.5}]}], "bbox_params": null, "keypoint_params": null, "additional_targets": {}, "is_check_shapes": true}})";
  auto p = MustParse(doc);
  ASSERT_TRUE(p);
  EXPECT_TRUE(Same(json::parse(p->ToJson()), json::parse(doc))) << p->ToJson(1);
  auto again = MustParse(p->ToJson());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->ToJson(), p->ToJson());
}

TEST(TransformSpec, AToDictDocumentRoundTrips) {
  // json.dumps(A.to_dict(A.Compose([A.SmallestMaxSize(512), A.RandomCrop(512, 512),
  //   A.OneOf([A.HorizontalFlip(), A.Rotate()], p=0.3), A.SomeOf([A.VerticalFlip(),
  //   A.Transpose()], n=1), A.Normalize()])))
  const std::string doc =
      R"({"__version__": "2.0.8", "transform": {"__class_fullname__": "Compose", "p": 1.0, "transforms": [{"__class_fullname__": "SmallestMaxSize", "p": 1.0, "area_for_downscale": null, "interpolation": 1, "mask_interpolation": 0, "max_size": 512, "max_size_hw": null}, {"__class_fullname__": "RandomCrop", "p": 1.0, "border_mode": 0, "fill": 0.0, "fill_mask": 0.0, "height": 512, "pad_if_needed": false, "pad_position": "center", "width": 512}, {"__class_fullname__": "OneOf", "p": 0.3, "transforms": [{"__class_fullname__": "HorizontalFlip", "p": 0.5}, {"__class_fullname__": "Rotate", "p": 0.5, "border_mode": 0, "crop_border": false, "fill": 0.0, "fill_mask": 0.0, "interpolation": 1, "limit": [-90.0, 90.0], "mask_interpolation": 0, "rotate_method": "largest_box"}]}, {"__class_fullname__": "SomeOf", "p": 1, "transforms": [{"__class_fullname__": "VerticalFlip", "p": 0.5}, {"__class_fullname__": "Transpose", "p": 0.5}], "n": 1, "replace": false}, {"__class_fullname__": "Normalize", "p": 1.0, "max_pixel_value": 255.0, "mean": [0.485, 0.456, 0.406], "normalization": "standard", "std": [0.229, 0.224, 0.225]}], "bbox_params": null, "keypoint_params": null, "additional_targets": {}, "is_check_shapes": true}})";
  auto p = MustParse(doc);
  ASSERT_TRUE(p);
  EXPECT_TRUE(Same(json::parse(p->ToJson()), json::parse(doc))) << p->ToJson(1);
  EXPECT_TRUE(p->has_normalize());
  ASSERT_EQ(p->normalize_mean().size(), 3u);
  // albumentations' float32(mean) * 255.
  EXPECT_EQ(p->normalize_mean()[0], static_cast<double>(0.485f * 255.0f));
  EXPECT_EQ(p->normalize_std()[2], static_cast<double>(0.225f * 255.0f));
  // A bare list, a bare transform and albumentations 1.x's qualified names parse too.
  MustParse(R"([{"__class_fullname__": "HorizontalFlip"}])");
  MustParse(R"({"__class_fullname__": "VerticalFlip", "p": 1})");
  MustParse(R"({"__class_fullname__": "albumentations.augmentations.geometric.flip.Transpose"})");
}

TEST(TransformSpec, ScalarsWidenTheAlbumentationsWay) {
  auto arg = [](const std::string& t, const char* key) { return Normalized(t)[key]; };
  EXPECT_EQ(arg(R"({"__class_fullname__": "Rotate", "limit": 30})", "limit"), json({-30, 30}));
  // Affine: a number is a fixed angle / shift, a pair a range.
  EXPECT_EQ(arg(R"({"__class_fullname__": "Affine", "rotate": 15})", "rotate"), json({15, 15}));
  EXPECT_EQ(arg(R"({"__class_fullname__": "Affine", "rotate": [15, -15]})", "rotate"),
            json({-15, 15}));
  EXPECT_TRUE(Same(
      arg(R"({"__class_fullname__": "Affine", "translate_percent": 0.05})", "translate_percent"),
      json::parse(R"({"x": [0.05, 0.05], "y": [0.05, 0.05]})")));
  EXPECT_TRUE(Same(arg(R"({"__class_fullname__": "Affine", "scale": {"x": [0.5, 2]}})", "scale"),
                   json::parse(R"({"x": [0.5, 2.0], "y": [1.0, 1.0]})")));
  EXPECT_TRUE(
      Same(arg(R"({"__class_fullname__": "RandomGamma", "gamma_limit": 150})", "gamma_limit"),
           json({1, 150})));
  EXPECT_TRUE(
      Same(arg(R"({"__class_fullname__": "GaussianBlur", "sigma_limit": 2})", "sigma_limit"),
           json({0, 2})));
  EXPECT_TRUE(Same(arg(R"({"__class_fullname__": "ColorJitter", "brightness": 0.3})", "brightness"),
                   json({0.7, 1.3})));
  EXPECT_TRUE(Same(
      arg(R"({"__class_fullname__": "ShiftScaleRotate", "shift_limit": 0.1})", "shift_limit_y"),
      json({-0.1, 0.1})));
}

// Issue 40 items 10 and 23: MedianBlur's and MotionBlur's blur_limit as albumentations 2.0.8's
// process_blur_limit(min_value=3) reads it (printed by A.to_dict for each): an int n is (3, n),
// each end at least 3 and odd (an even end goes up by one), a reversed pair is (second,
// second); MotionBlur's angle_range / direction_range are nondecreasing pairs in [0, 360] /
// [-1, 1], as its schema checks.
TEST(TransformSpec, BlurLimitIsReadAsAlbumentationsProcessesIt) {
  const auto limit = [](const std::string& name, const std::string& value) {
    return Normalized(R"({"__class_fullname__": ")" + name + R"(", "blur_limit": )" + value +
                      "}")["blur_limit"];
  };
  for (const char* name : {"MedianBlur", "MotionBlur"}) {
    EXPECT_EQ(limit(name, "9"), json({3, 9})) << name;
    EXPECT_EQ(limit(name, "10"), json({3, 11})) << name;  // A.MotionBlur(blur_limit=10)
    EXPECT_EQ(limit(name, "[4, 2]"), json({3, 3})) << name;
    EXPECT_EQ(limit(name, "[9, 5]"), json({5, 5})) << name;
    EXPECT_EQ(limit(name, "[1, 2]"), json({3, 3})) << name;
    EXPECT_EQ(limit(name, "-1"), json({3, 3})) << name;
    EXPECT_EQ(limit(name, "[3.0, 5.0]"), json({3, 5})) << name;
    for (const char* bad : {"3.5", "[3, 5, 7]", "\"5\"", "[3, 4.5]"}) {
      const Status s = ParseError(std::string(R"([{"__class_fullname__": ")") + name +
                                  R"(", "blur_limit": )" + bad + "}]");
      EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << name << " " << bad;
      EXPECT_NE(s.message().find("argument blur_limit must be an integer or a pair of integers"),
                std::string::npos)
          << s.ToString();
    }
  }
  for (const char* bad : {R"("angle_range": [20, 10])", R"("angle_range": [-1, 10])",
                          R"("angle_range": 30)", R"("direction_range": [0.5, 2])"}) {
    const Status s =
        ParseError(std::string(R"([{"__class_fullname__": "MotionBlur", )") + bad + "}]");
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(std::string(bad).substr(1, 10)), std::string::npos) << s.ToString();
  }
  const json m = Normalized(R"({"__class_fullname__": "MotionBlur", "p": 1, "blur_limit": [5, 9],
      "angle_range": [10, 20], "direction_range": [0, 0.5], "allow_shifted": false})");
  EXPECT_TRUE(Same(m, json::parse(R"({"__class_fullname__": "MotionBlur", "p": 1.0,
      "allow_shifted": false, "angle_range": [10.0, 20.0], "blur_limit": [5, 9],
      "direction_range": [0.0, 0.5]})")))
      << m.dump();
  // A.ToGray(method="pca")
  const json pca = Normalized(R"({"__class_fullname__": "ToGray", "method": "pca"})");
  EXPECT_TRUE(Same(pca, json::parse(R"({"__class_fullname__": "ToGray", "p": 0.5,
      "method": "pca", "num_output_channels": 3})")))
      << pca.dump();
}

TEST(TransformSpec, RefusesWhatItDoesNotImplementNamingIt) {
  struct Case {
    const char* spec;
    const char* must_name;
  };
  const Case cases[] = {
      {R"([{"__class_fullname__": "ZoomBlur"}])", "ZoomBlur"},
      {R"([{"__class_fullname__": "HorizontalFlip", "prob": 1}])", "prob"},
      {R"([{"__class_fullname__": "CoarseDropout", "fill": "inpaint_telea"}])", "inpaint_telea"},
      {R"([{"__class_fullname__": "ToGray", "num_output_channels": 1}])", "num_output_channels"},
      {R"([{"__class_fullname__": "MedianBlur", "blur_limit": 2001}])", "dspipe takes up to 1023"},
      {R"([{"__class_fullname__": "Normalize", "p": 1, "normalization": "image"}])",
       "normalization"},
      {R"([{"__class_fullname__": "Rotate", "border_mode": 5}])", "border_mode"},
      {R"([{"__class_fullname__": "Rotate", "interpolation": 9}])", "interpolation"},
      {R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 0, "width": 4}])", "height"},
      {R"({"__class_fullname__": "Compose", "transforms": [], "bbox_params": {"format": "coco"}})",
       "bbox_params"},
      {R"([{"__class_fullname__": "Normalize", "p": 1}, {"__class_fullname__": "HorizontalFlip"}])",
       "Normalize must be the last"},
      {R"({"__class_fullname__": "Compose", "p": 0.5, "transforms": [{"__class_fullname__": "Normalize", "p": 1}]})",
       "skip Normalize"},
      {R"({"no": "class"})", "__class_fullname__"},
      {R"(not json)", "not valid JSON"},
  };
  for (const Case& c : cases) {
    const Status s = ParseError(c.spec);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.spec << " -> " << s.ToString();
    EXPECT_NE(s.message().find(c.must_name), std::string::npos) << s.ToString();
  }
  // An unknown transform lists what is supported; an unknown argument lists the arguments.
  const Status t = ParseError(R"([{"__class_fullname__": "ZoomBlur"}])");
  EXPECT_NE(t.message().find("RandomResizedCrop"), std::string::npos) << t.ToString();
  EXPECT_NE(t.message().find("transform 1"), std::string::npos) << t.ToString();
  const Status a = ParseError(
      R"([{"__class_fullname__": "Resize", "p": 1, "height": 4, "width": 4, "size": 3}])");
  EXPECT_NE(a.message().find("interpolation"), std::string::npos) << a.ToString();
}

// Issue 40 item 10: tutorial pipelines end in Normalize (or ToFloat) and ToTensorV2. ToFloat is
// the normalize stage with mean 0, std max_value (255 when null: uint8 pixels); ToTensorV2 is the
// layout the batches already have. Anything after ToTensorV2, or two scaling steps, is refused.
TEST(TransformSpec, TutorialTailsToFloatAndToTensorV2) {
  auto p = MustParse(R"([{"__class_fullname__": "HorizontalFlip"},
      {"__class_fullname__": "Normalize", "p": 1}, {"__class_fullname__": "ToTensorV2", "p": 1}])");
  ASSERT_TRUE(p);
  ASSERT_TRUE(p->has_normalize());
  EXPECT_EQ(p->normalize_mean()[0], static_cast<double>(0.485f * 255.0f));
  auto f = MustParse(R"([{"__class_fullname__": "HorizontalFlip"},
      {"__class_fullname__": "ToFloat", "p": 1},
      {"__class_fullname__": "ToTensorV2", "p": 1, "transpose_mask": true}])");
  ASSERT_TRUE(f);
  ASSERT_TRUE(f->has_normalize());
  EXPECT_EQ(f->normalize_mean(), std::vector<double>{0.0});
  EXPECT_EQ(f->normalize_std(), std::vector<double>{255.0});
  EXPECT_EQ(f->segment_labels(), std::vector<std::string>{"geometric: HorizontalFlip"});
  auto m = MustParse(R"([{"__class_fullname__": "ToFloat", "p": 1, "max_value": 4095}])");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->normalize_std(), std::vector<double>{4095.0});
  EXPECT_EQ(json::parse(m->ToJson())["transform"]["transforms"][0]["max_value"], 4095.0);
  auto t = MustParse(R"([{"__class_fullname__": "ToTensorV2", "p": 1}])");
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->has_normalize());
  struct Case {
    const char* spec;
    const char* must_name;
  };
  const Case cases[] = {
      {R"([{"__class_fullname__": "ToTensorV2", "p": 1}, {"__class_fullname__": "HorizontalFlip"}])",
       "transform 1 (ToTensorV2): ToTensorV2 must be the last transform"},
      {R"([{"__class_fullname__": "Normalize", "p": 1}, {"__class_fullname__": "ToTensorV2", "p": 1},
           {"__class_fullname__": "ToTensorV2", "p": 1}])",
       "transform 2 (ToTensorV2): ToTensorV2 must be the last"},
      {R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [{"__class_fullname__": "ToTensorV2", "p": 1}]}])",
       "ToTensorV2 must be the last transform of the top-level Compose"},
      {R"([{"__class_fullname__": "ToFloat", "p": 1}, {"__class_fullname__": "Normalize", "p": 1}])",
       "transform 2 (Normalize): the pipeline already scales the pixels with transform 1 "
       "(ToFloat); keep one of them"},
      {R"([{"__class_fullname__": "ToFloat", "p": 1}, {"__class_fullname__": "HorizontalFlip"}])",
       "ToFloat must be the last transform of the top-level Compose, or be followed only by "
       "ToTensorV2"},
      {R"([{"__class_fullname__": "ToFloat", "p": 1, "max_value": 0}])", "max_value must be"},
      {R"([{"__class_fullname__": "ToFloat"}])", "ToFloat needs p=1"},
      {R"([{"__class_fullname__": "ToTensorV2", "p": 0.5}])", "ToTensorV2 needs p=1"},
      {R"([{"__class_fullname__": "ToTensorV2", "p": 1, "transpose_mask": 1}])",
       "transpose_mask must be true or false"},
  };
  for (const Case& c : cases) {
    const Status s = ParseError(c.spec);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.spec << " -> " << s.ToString();
    EXPECT_NE(s.message().find(c.must_name), std::string::npos) << s.ToString();
  }
}

// `levels` Composes, one inside the other, the innermost holding a HorizontalFlip.
std::string NestedComposes(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i)
    s += R"({"__class_fullname__": "Compose", "p": 1, "transforms": [)";
  s += R"({"__class_fullname__": "HorizontalFlip", "p": 1})";
  for (int i = 0; i < levels; ++i) s += "]}";
  return s;
}

// Issue 39 item 7: 20,000 nested Composes (or 200,000 '[') killed the process with SIGSEGV.
TEST(TransformSpec, DeepNestingIsRefusedNamingTheLimitWithoutRecursing) {
  const std::string limit = std::to_string(transforms::kMaxSpecDepth);
  // At the limit: parses, and runs (the flip is applied through every level).
  auto p = MustParse(NestedComposes(transforms::kMaxSpecDepth));
  ASSERT_TRUE(p);
  uint8_t px[2] = {1, 2};
  ImageRef img{px, 1, 2, 1};
  OwnedImage out, out_mask;
  ASSERT_TRUE(p->Apply(0, 0, 0, img, nullptr, &out, &out_mask).ok());
  EXPECT_EQ(out.pixels[0], 2);
  // One more container: refused, naming the limit and the JSON path of the too-deep one.
  const Status one = ParseError(NestedComposes(transforms::kMaxSpecDepth + 1));
  EXPECT_EQ(one.code(), Status::Code::kInvalidArgument) << one.ToString();
  EXPECT_NE(one.message().find("limit of " + limit), std::string::npos) << one.ToString();
  std::string path;
  for (int i = 0; i < transforms::kMaxSpecDepth; ++i) path += "/transforms/0";
  EXPECT_NE(one.message().find("JSON path " + path + ":"), std::string::npos) << one.ToString();
  // A bare list of containers is wrapped in a Compose, which counts as a level.
  const Status listed = ParseError("[" + NestedComposes(transforms::kMaxSpecDepth) + "]");
  EXPECT_NE(listed.message().find("limit of " + limit), std::string::npos) << listed.ToString();
  // 20,000 Composes and 200,000 '[' (valid and invalid JSON): refused before parsing.
  for (const std::string& text : {NestedComposes(20000), std::string(200000, '['),
                                  std::string(200000, '[') + std::string(200000, ']')}) {
    const Status s = ParseError(text);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("deeper than " + std::to_string(transforms::kMaxSpecJsonDepth)),
              std::string::npos)
        << s.ToString();
    EXPECT_NE(s.message().find(limit + " levels (kMaxSpecDepth)"), std::string::npos)
        << s.ToString();
  }
  // Brackets inside strings are not nesting: a deep-looking string value is only an unknown
  // argument.
  const Status str = ParseError(R"([{"__class_fullname__": "HorizontalFlip", "note": ")" +
                                std::string(100000, '[') + R"(\"["}])");
  EXPECT_NE(str.message().find("unknown argument note"), std::string::npos) << str.ToString();
}

// Issue 39 item 8 (c): integer arguments were truncated (size [32.9, 32.2] -> 32) and values
// above INT_MAX were undefined behaviour. albumentations 2.0.8's pydantic refuses a fractional
// part (int_from_float) except RandomSizedCrop's min_max_height, which it truncates.
TEST(TransformSpec, IntegerArgumentsRefuseFractionsAndValuesPastInt) {
  struct Case {
    const char* spec;
    const char* must_name;
  };
  const Case cases[] = {
      {R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [32.9, 32.2]}])",
       "transform 1 (RandomResizedCrop): argument size must be an integer, got 32.9"},
      {R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [2147483648, 32]}])",
       "transform 1 (RandomResizedCrop): argument size=2147483648 is outside what an int holds"},
      {R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [32, 1e300]}])",
       "argument size=1e+300 is outside"},
      {R"([{"__class_fullname__": "Resize", "p": 1, "height": 10.5, "width": 8}])",
       "transform 1 (Resize): argument height must be an integer, got 10.5"},
      {R"([{"__class_fullname__": "Resize", "p": 1, "height": 10000000000, "width": 8}])",
       "argument height=10000000000 is outside"},
      {R"([{"__class_fullname__": "PadIfNeeded", "min_height": 10000000000, "min_width": 8}])",
       "transform 1 (PadIfNeeded): argument min_height=10000000000 is outside"},
      {R"([{"__class_fullname__": "PadIfNeeded", "min_height": 10.5, "min_width": 8}])",
       "argument min_height must be an integer, got 10.5"},
      {R"([{"__class_fullname__": "GaussianBlur", "blur_limit": [3.5, 5]}])",
       "transform 1 (GaussianBlur): argument blur_limit must be an integer, got 3.5"},
      {R"([{"__class_fullname__": "CoarseDropout", "num_holes_range": [1, 2.5]}])",
       "argument num_holes_range must be an integer, got 2.5"},
      {R"([{"__class_fullname__": "CLAHE", "tile_grid_size": [8.5, 8]}])",
       "transform 1 (CLAHE): argument tile_grid_size must be an integer, got 8.5"},
  };
  for (const Case& c : cases) {
    const Status s = ParseError(c.spec);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.spec << " -> " << s.ToString();
    EXPECT_NE(s.message().find(c.must_name), std::string::npos) << s.ToString();
  }
  // Whole numbers written as floats are integers; min_max_height truncates as albumentations.
  EXPECT_TRUE(
      Same(Normalized(R"({"__class_fullname__": "RandomResizedCrop", "size": [32.0, 16]})")["size"],
           json({32, 16})));
  EXPECT_TRUE(Same(Normalized(R"({"__class_fullname__": "RandomSizedCrop", "size": [8, 8],
                                 "min_max_height": [10.5, 20]})")["min_max_height"],
                   json({10, 20})));
}

TEST(TransformSpec, OutputSizeIsFixedOnlyWhenEverySampleGetsIt) {
  struct Case {
    const char* spec;
    int in_h, in_w;
    bool fixed;
    int h, w;
  };
  const Case cases[] = {
      {R"([{"__class_fullname__": "HorizontalFlip"}])", 50, 60, true, 50, 60},
      {R"([{"__class_fullname__": "HorizontalFlip"}])", 0, 0, false, 0, 0},
      {R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 30}])", 60, 90, true, 30,
       45},
      {R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 30}])", 0, 0, false, 0, 0},
      {R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 30}, {"__class_fullname__": "RandomCrop", "p": 1, "height": 30, "width": 30}])",
       0, 0, true, 30, 30},
      {R"([{"__class_fullname__": "RandomRotate90", "p": 1}])", 40, 50, false, 0, 0},
      {R"([{"__class_fullname__": "RandomRotate90", "p": 1}])", 40, 40, true, 40, 40},
      {R"([{"__class_fullname__": "RandomCrop", "height": 10, "width": 10, "p": 0.5}])", 40, 40,
       false, 0, 0},
      {R"([{"__class_fullname__": "OneOf", "transforms": [{"__class_fullname__": "Resize", "p": 1, "height": 8, "width": 8}, {"__class_fullname__": "CenterCrop", "p": 1, "height": 8, "width": 8}]}, {"__class_fullname__": "VerticalFlip"}])",
       0, 0, false, 0, 0},
      {R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [{"__class_fullname__": "Resize", "p": 1, "height": 8, "width": 8}, {"__class_fullname__": "CenterCrop", "p": 1, "height": 8, "width": 8}]}])",
       0, 0, true, 8, 8},
      {R"([{"__class_fullname__": "Rotate", "crop_border": true, "p": 1}])", 40, 40, false, 0, 0},
      {R"([{"__class_fullname__": "PadIfNeeded", "p": 1, "min_height": 64, "min_width": 32}])", 40,
       40, true, 64, 40},
  };
  for (const Case& c : cases) {
    auto p = MustParse(c.spec);
    ASSERT_TRUE(p);
    int h = 0, w = 0;
    EXPECT_EQ(p->OutputSize(c.in_h, c.in_w, &h, &w), c.fixed) << c.spec;
    if (c.fixed) {
      EXPECT_EQ(h, c.h) << c.spec;
      EXPECT_EQ(w, c.w) << c.spec;
    } else {
      EXPECT_FALSE(p->OutputSizeReason(c.in_h, c.in_w).empty()) << c.spec;
    }
  }
}

TEST(TransformSpec, SegmentsAreTheStageTableRows) {
  auto p = MustParse(R"([{"__class_fullname__": "SmallestMaxSize", "p": 1, "max_size": 64},
    {"__class_fullname__": "RandomCrop", "p": 1, "height": 64, "width": 64},
    {"__class_fullname__": "HorizontalFlip"}, {"__class_fullname__": "RandomBrightnessContrast"},
    {"__class_fullname__": "RandomGamma"}, {"__class_fullname__": "GaussNoise"},
    {"__class_fullname__": "Normalize", "p": 1}])");
  ASSERT_TRUE(p);
  const std::vector<std::string> want = {"geometric: SmallestMaxSize > RandomCrop > HorizontalFlip",
                                         "lut: RandomBrightnessContrast > RandomGamma",
                                         "GaussNoise"};
  EXPECT_EQ(p->segment_labels(), want);
}

// docs/TRANSFORMS.md's table has one row per supported transform, and names no other.
TEST(TransformSpec, DocsTableListsExactlyTheSupportedTransforms) {
  std::ifstream f(std::string(DSPIPE_SOURCE_DIR) + "/docs/TRANSFORMS.md");
  ASSERT_TRUE(f) << "docs/TRANSFORMS.md";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  std::set<std::string> rows;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    rows.insert(line.substr(3, end - 3));
  }
  for (const TransformInfo& t : SupportedTransforms()) {
    EXPECT_EQ(rows.count(t.name), 1u) << t.name << " has no row in docs/TRANSFORMS.md";
    rows.erase(t.name);
  }
  for (const char* extra : {"ElasticTransform", "GridDistortion"}) rows.erase(extra);
  EXPECT_TRUE(rows.empty()) << "rows for unsupported transforms: " << *rows.begin();
}

}  // namespace
}  // namespace dspipe
