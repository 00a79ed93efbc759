// SPDX-License-Identifier: Apache-2.0
// MONAI configs through TransformPipeline: parsing (names, arguments, refusals), each
// transform's arithmetic on small images worked out by hand, draws (determinism, MONAI's
// distributions) and the label following the spatial transforms. Equality with MONAI 1.6.1
// itself is tests/python/test_monai_golden.py (golden outputs MONAI made).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <numeric>
#include <set>
#include <sstream>

#include "dspipe/transforms.h"

namespace dspipe {
namespace {

using nlohmann::json;

std::shared_ptr<const TransformPipeline> ParseOk(const json& spec) {
  std::shared_ptr<const TransformPipeline> p;
  const Status s = TransformPipeline::Parse(spec.dump(), &p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return p;
}

Status ParseError(const json& spec) {
  std::shared_ptr<const TransformPipeline> p;
  return TransformPipeline::Parse(spec.dump(), &p);
}

bool Has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// An H x W x C float image from values (row-major HWC).
struct Image {
  int h, w, c;
  std::vector<float> v;
  PixelsRef ref() const { return {v.data(), h, w, c, SampleType::kFloat32}; }
};

std::vector<float> Floats(const OwnedPixels& p) {
  EXPECT_EQ(p.type, SampleType::kFloat32);
  std::vector<float> out(p.bytes.size() / 4);
  std::memcpy(out.data(), p.bytes.data(), p.bytes.size());
  return out;
}

std::vector<float> RunMonai(const json& spec, const Image& img, uint64_t index = 0,
                            OwnedPixels* out_mask = nullptr, const PixelsRef* mask = nullptr) {
  auto p = ParseOk(spec);
  OwnedPixels out, om;
  const Status s = p->ApplyPixels(7, 0, index, img.ref(), mask, &out, out_mask ? out_mask : &om);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return Floats(out);
}

TEST(Monai, ParsesAConfigListOrComposeAndWritesItBack) {
  const json list =
      json::array({{{"_target_", "LoadImaged"}, {"keys", {"image", "label"}}},
                   {{"_target_", "EnsureChannelFirstd"}, {"keys", {"image", "label"}}},
                   {{"_target_", "ScaleIntensityRanged"},
                    {"keys", {"image"}},
                    {"a_min", -175},
                    {"a_max", 250},
                    {"b_min", 0.0},
                    {"b_max", 1.0},
                    {"clip", true}},
                   {{"_target_", "monai.transforms.RandFlipd"},
                    {"keys", {"image", "label"}},
                    {"spatial_axis", 0}}});
  auto p = ParseOk(list);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->float_pixels());
  EXPECT_FALSE(p->has_normalize());
  const json back = json::parse(p->ToJson());
  EXPECT_EQ(back.at("_target_"), "Compose");
  ASSERT_EQ(back.at("transforms").size(), 4u);
  EXPECT_EQ(back["transforms"][3].at("_target_"), "RandFlipd");
  EXPECT_EQ(back["transforms"][3].at("prob"), 0.1);  // MONAI's default for Rand* transforms
  EXPECT_EQ(back["transforms"][2].at("clip"), true);
  // The written form parses to the same form; a Compose object is accepted too.
  EXPECT_EQ(json::parse(ParseOk(back)->ToJson()), back);
  EXPECT_EQ(json::parse(ParseOk({{"_target_", "Compose"}, {"transforms", list}})->ToJson()), back);
  // albumentations specs are not float pipelines.
  auto a = ParseOk(json::array({{{"__class_fullname__", "HorizontalFlip"}}}));
  EXPECT_FALSE(a->float_pixels());
}

TEST(Monai, RefusalsNameTheTransformAndTheFix) {
  Status s = ParseError(json::array({{{"_target_", "RandElasticd"}, {"keys", {"image"}}}}));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_TRUE(Has(s.message(), "transform 1 (RandElasticd)")) << s.ToString();
  EXPECT_TRUE(Has(s.message(), "supported: ")) << s.ToString();
  EXPECT_TRUE(Has(s.message(), "ScaleIntensityRanged")) << s.ToString();
  // An intensity transform on the label would change its ids.
  s = ParseError(json::array({{{"_target_", "ScaleIntensityRanged"},
                               {"keys", {"image", "label"}},
                               {"a_min", 0},
                               {"a_max", 1}}}));
  EXPECT_TRUE(Has(s.message(), "class ids")) << s.ToString();
  // Unknown arguments, keys, bundle references, dtypes.
  s = ParseError(json::array({{{"_target_", "RandFlipd"}, {"keys", "image"}, {"probb", 0.5}}}));
  EXPECT_TRUE(Has(s.message(), "probb")) << s.ToString();
  s = ParseError(json::array({{{"_target_", "RandFlipd"}, {"keys", {"image", "weights"}}}}));
  EXPECT_TRUE(Has(s.message(), "weights")) << s.ToString();
  s = ParseError(json::array({{{"_target_", "RandFlipd"}, {"keys", "@image_key"}}}));
  EXPECT_TRUE(Has(s.message(), "bundle reference")) << s.ToString();
  s = ParseError(json::array(
      {{{"_target_", "NormalizeIntensityd"}, {"keys", "image"}, {"dtype", "float64"}}}));
  EXPECT_TRUE(Has(s.message(), "float32")) << s.ToString();
  s = ParseError(
      json::array({{{"_target_", "ScaleIntensityRanged"}, {"keys", "image"}, {"a_min", 0}}}));
  EXPECT_TRUE(Has(s.message(), "a_max is required")) << s.ToString();
  s = ParseError(
      json::array({{{"_target_", "SpatialPadd"}, {"keys", "image"}, {"spatial_size", {1, 2, 3}}}}));
  EXPECT_TRUE(Has(s.message(), "2-D slice")) << s.ToString();
  // The uint8 entry points send the caller to ApplyPixels.
  auto p = ParseOk(json::array({{{"_target_", "RandFlipd"}, {"keys", "image"}}}));
  std::vector<uint8_t> px(4);
  OwnedImage o;
  s = p->Apply(0, 0, 0, {px.data(), 2, 2, 1}, nullptr, &o, nullptr);
  EXPECT_TRUE(Has(s.message(), "ApplyPixels")) << s.ToString();
  // A spatial transform without the label, applied with a mask.
  std::vector<uint8_t> m(4);
  PixelsRef img{px.data(), 2, 2, 1, SampleType::kUint8},
      mask{m.data(), 2, 2, 1, SampleType::kUint8};
  OwnedPixels oi, om;
  s = p->ApplyPixels(0, 0, 0, img, &mask, &oi, &om);
  EXPECT_TRUE(Has(s.message(), "without its label")) << s.ToString();
}

TEST(Monai, IntensityArithmetic) {
  const Image img{2, 3, 1, {-1000, -175, 0, 37.5f, 250, 900}};
  // Window [-175, 250] to [0, 1], clipped; without b_min / b_max: (x - a_min) / span only.
  std::vector<float> o = RunMonai(json::array({{{"_target_", "ScaleIntensityRanged"},
                                                {"keys", "image"},
                                                {"a_min", -175},
                                                {"a_max", 250},
                                                {"b_min", 0},
                                                {"b_max", 1},
                                                {"clip", true}}}),
                                  img);
  const std::vector<float> want = {0, 0, 175.0f / 425, 212.5f / 425, 1, 1};
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(o[i], want[i], 1e-7) << i;
  o = RunMonai(json::array({{{"_target_", "ScaleIntensityRanged"},
                             {"keys", "image"},
                             {"a_min", -175},
                             {"a_max", 250}}}),
               img);
  EXPECT_NEAR(o[0], -825.0f / 425, 1e-6);
  EXPECT_NEAR(o[5], 1075.0f / 425, 1e-6);
  // Threshold: keep above 0, else -1.
  o = RunMonai(json::array({{{"_target_", "ThresholdIntensityd"},
                             {"keys", "image"},
                             {"threshold", 0},
                             {"cval", -1}}}),
               img);
  EXPECT_EQ(o, (std::vector<float>{-1, -1, -1, 37.5f, 250, 900}));
  // ScaleIntensityd to [0, 1] over the image's min / max; factor only: x * (1 + factor).
  o = RunMonai(json::array({{{"_target_", "ScaleIntensityd"}, {"keys", "image"}}}), img);
  EXPECT_NEAR(o[0], 0, 1e-7);
  EXPECT_NEAR(o[5], 1, 1e-7);
  EXPECT_NEAR(o[2], 1000.0f / 1900, 1e-7);
  o = RunMonai(json::array({{{"_target_", "ScaleIntensityd"},
                             {"keys", "image"},
                             {"minv", nullptr},
                             {"maxv", nullptr},
                             {"factor", 0.5}}}),
               img);
  EXPECT_NEAR(o[5], 1350, 1e-4);
}

TEST(Monai, NormalizeIntensityNonzeroChannelWise) {
  // 2 channels; zeros in each, which nonzero=True leaves alone and keeps out of the statistics.
  Image img{2, 2, 2, {0, 10, 2, 0, 4, 30, 6, 50}};
  std::vector<float> o = RunMonai(json::array({{{"_target_", "NormalizeIntensityd"},
                                                {"keys", "image"},
                                                {"nonzero", true},
                                                {"channel_wise", true}}}),
                                  img);
  // Channel 0 nonzero: 2, 4, 6 (mean 4, population std sqrt(8/3)); channel 1: 10, 30, 50.
  const float s0 = std::sqrt(8.0f / 3), s1 = std::sqrt(800.0f / 3);
  EXPECT_EQ(o[0], 0.0f);
  EXPECT_NEAR(o[2], (2 - 4) / s0, 1e-6);
  EXPECT_NEAR(o[6], (6 - 4) / s0, 1e-6);
  EXPECT_EQ(o[3], 0.0f);
  EXPECT_NEAR(o[1], (10 - 30) / s1, 1e-6);
  // Given subtrahend and divisor; a constant image's std 0 divides by 1.
  o = RunMonai(json::array({{{"_target_", "NormalizeIntensityd"},
                             {"keys", "image"},
                             {"subtrahend", 10},
                             {"divisor", 4}}}),
               img);
  EXPECT_NEAR(o[7], 10, 1e-6);
  Image flat{1, 2, 1, {5, 5}};
  o = RunMonai(json::array({{{"_target_", "NormalizeIntensityd"}, {"keys", "image"}}}), flat);
  EXPECT_EQ(o, (std::vector<float>{0, 0}));
}

TEST(Monai, PercentilesInterpolateAsNumpy) {
  Image img{1, 10, 1, {}};
  for (int i = 1; i <= 10; ++i) img.v.push_back(static_cast<float>(i));
  // np.percentile(1..10, 25) = 3.25, (.., 75) = 7.75.
  std::vector<float> o = RunMonai(json::array({{{"_target_", "ClipIntensityPercentilesd"},
                                                {"keys", "image"},
                                                {"lower", 25},
                                                {"upper", 75}}}),
                                  img);
  EXPECT_NEAR(o[0], 3.25f, 1e-6);
  EXPECT_NEAR(o[4], 5.0f, 1e-6);
  EXPECT_NEAR(o[9], 7.75f, 1e-6);
  o = RunMonai(json::array({{{"_target_", "ScaleIntensityRangePercentilesd"},
                             {"keys", "image"},
                             {"lower", 25},
                             {"upper", 75},
                             {"b_min", 0},
                             {"b_max", 1},
                             {"clip", true}}}),
               img);
  EXPECT_NEAR(o[2], 0, 1e-6);
  EXPECT_NEAR(o[4], (5 - 3.25f) / 4.5f, 1e-6);
  EXPECT_NEAR(o[8], 1, 1e-6);
}

TEST(Monai, SpatialTransformsMoveImageAndLabelTogether) {
  // 2 x 3, values = their index; the label the same ids.
  Image img{2, 3, 1, {0, 1, 2, 3, 4, 5}};
  std::vector<uint8_t> ids = {0, 1, 2, 3, 4, 5};
  const PixelsRef mask{ids.data(), 2, 3, 1, SampleType::kUint8};
  auto both = [](const json& t) {
    json e = t;
    e["keys"] = {"image", "label"};
    e["prob"] = 1.0;
    return json::array({e});
  };
  OwnedPixels om;
  // Flip rows (spatial_axis 0 is H).
  std::vector<float> o =
      RunMonai(both({{"_target_", "RandFlipd"}, {"spatial_axis", 0}}), img, 0, &om, &mask);
  EXPECT_EQ(o, (std::vector<float>{3, 4, 5, 0, 1, 2}));
  EXPECT_EQ(om.bytes, (std::vector<uint8_t>{3, 4, 5, 0, 1, 2}));
  // One quarter turn counter-clockwise (np.rot90): 3 x 2.
  o = RunMonai(both({{"_target_", "RandRotate90d"}, {"max_k", 1}}), img, 0, &om, &mask);
  EXPECT_EQ(o, (std::vector<float>{2, 5, 1, 4, 0, 3}));
  EXPECT_EQ(om.height, 3);
  EXPECT_EQ(om.bytes, (std::vector<uint8_t>{2, 5, 1, 4, 0, 3}));
  // Symmetric pad to 4 x 4: 1 row above, 1 below, 0 columns left, 1 right.
  json pad = both({{"_target_", "SpatialPadd"}, {"spatial_size", {4, 4}}});
  pad[0].erase("prob");
  o = RunMonai(pad, img, 0, &om, &mask);
  ASSERT_EQ(o.size(), 16u);
  EXPECT_EQ(o, (std::vector<float>{0, 0, 0, 0, 0, 1, 2, 0, 3, 4, 5, 0, 0, 0, 0, 0}));
  // A centre crop of 1 x 2 of a 2 x 3: start max(size // 2 - roi // 2, 0) = (1, 0).
  json crop = both({{"_target_", "CenterSpatialCropd"}, {"roi_size", {1, 2}}});
  crop[0].erase("prob");
  o = RunMonai(crop, img, 0, &om, &mask);
  EXPECT_EQ(o, (std::vector<float>{3, 4}));
  EXPECT_EQ(om.bytes, (std::vector<uint8_t>{3, 4}));
  // ResizeWithPadOrCrop to 1 x 5: crop rows, pad columns.
  json rpc = both({{"_target_", "ResizeWithPadOrCropd"}, {"spatial_size", {1, 5}}});
  rpc[0].erase("prob");
  o = RunMonai(rpc, img, 0, &om, &mask);
  EXPECT_EQ(o, (std::vector<float>{0, 3, 4, 5, 0}));
}

TEST(Monai, DrawsAreDeterministicAndFollowMonaisDistributions) {
  const json spec = json::array(
      {{{"_target_", "RandRotate90d"}, {"keys", {"image", "label"}}, {"prob", 0.5}},
       {{"_target_", "RandShiftIntensityd"}, {"keys", "image"}, {"offsets", 10}, {"prob", 1.0}}});
  auto p = ParseOk(spec);
  Image img{2, 2, 1, {0, 0, 0, 0}};
  img.v[0] = 1;  // marks the corner a turn moves
  int counts[4] = {0, 0, 0, 0};
  double shift_sum = 0, shift_lo = 1e9, shift_hi = -1e9;
  const int n = 6000;
  for (int i = 0; i < n; ++i) {
    OwnedPixels a, b, unused;
    ASSERT_TRUE(
        p->ApplyPixels(3, 1, static_cast<uint64_t>(i), img.ref(), nullptr, &a, &unused).ok());
    ASSERT_TRUE(
        p->ApplyPixels(3, 1, static_cast<uint64_t>(i), img.ref(), nullptr, &b, &unused).ok());
    ASSERT_EQ(a.bytes, b.bytes);  // same (seed, epoch, index): same sample
    const std::vector<float> o = Floats(a);
    const float base = *std::min_element(o.begin(), o.end());
    const int corner = static_cast<int>(std::max_element(o.begin(), o.end()) - o.begin());
    // The marked pixel's place after k counter-clockwise turns: 0 -> 2 -> 3 -> 1.
    const int k = corner == 0 ? 0 : corner == 2 ? 1 : corner == 3 ? 2 : 3;
    ++counts[k];
    shift_sum += base;
    shift_lo = std::min<double>(shift_lo, base), shift_hi = std::max<double>(shift_hi, base);
  }
  // prob 0.5 of turning; k uniform in 1..3 (max_k 3): 1/2 and 1/6 each, within 4 sigma.
  auto near = [n](int c, double q) {
    return std::fabs(c - n * q) < 4 * std::sqrt(n * q * (1 - q));
  };
  EXPECT_TRUE(near(counts[0], 0.5)) << counts[0];
  for (int k = 1; k < 4; ++k) EXPECT_TRUE(near(counts[k], 1.0 / 6)) << k << ": " << counts[k];
  // Offsets uniform in [-10, 10]: mean 0 (sd 10/sqrt(3)/sqrt(n)), the range covered.
  EXPECT_LT(std::fabs(shift_sum / n), 4 * 10 / std::sqrt(3.0 * n));
  EXPECT_LT(shift_lo, -9.5);
  EXPECT_GT(shift_hi, 9.5);
  EXPECT_GE(shift_lo, -10);
  EXPECT_LE(shift_hi, 10);
}

TEST(Monai, GaussianNoiseHasTheDrawnStd) {
  auto p = ParseOk(json::array({{{"_target_", "RandGaussianNoised"},
                                 {"keys", "image"},
                                 {"prob", 1.0},
                                 {"mean", 2.0},
                                 {"std", 0.5},
                                 {"sample_std", false}}}));
  Image img{64, 64, 1, std::vector<float>(64 * 64, 0.0f)};
  OwnedPixels o, unused;
  ASSERT_TRUE(p->ApplyPixels(1, 0, 0, img.ref(), nullptr, &o, &unused).ok());
  const std::vector<float> v = Floats(o);
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double ss = 0;
  for (float x : v) ss += (x - mean) * (x - mean);
  const double sd = std::sqrt(ss / v.size());
  EXPECT_NEAR(mean, 2.0, 4 * 0.5 / 64);
  EXPECT_NEAR(sd, 0.5, 0.03);
  // The shape of the distribution over 1M values (the ziggurat's layers, wedges and tail):
  // the share below each of these standard-normal quantiles, within 5 sigma of the binomial.
  auto unit = ParseOk(json::array({{{"_target_", "RandGaussianNoised"},
                                    {"keys", "image"},
                                    {"prob", 1.0},
                                    {"std", 1.0},
                                    {"sample_std", false}}}));
  Image big{1000, 1000, 1, std::vector<float>(1000 * 1000, 0.0f)};
  ASSERT_TRUE(unit->ApplyPixels(2, 0, 0, big.ref(), nullptr, &o, &unused).ok());
  const std::vector<float> z = Floats(o);
  const double n = static_cast<double>(z.size());
  for (const auto& [q, cdf] : std::vector<std::pair<double, double>>{{-3.5, 2.326e-4},
                                                                     {-2.5, 6.210e-3},
                                                                     {-1.0, 0.158655},
                                                                     {0.0, 0.5},
                                                                     {0.3, 0.617911},
                                                                     {1.96, 0.975002},
                                                                     {3.5, 0.9997674}}) {
    const double share =
        static_cast<double>(std::count_if(z.begin(), z.end(), [&](float x) { return x < q; })) / n;
    EXPECT_NEAR(share, cdf, 5 * std::sqrt(cdf * (1 - cdf) / n) + 1e-6) << "below " << q;
  }
}

// One transform's params for sample (seed 11, epoch 0, index i) of a 6 x 5 input.
json DrawnParams(const TransformPipeline& p, uint64_t i) {
  std::string out;
  const Status s = p.Draws(11, 0, i, 6, 5, nullptr, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  const json d = json::parse(out);
  EXPECT_EQ(d.size(), 1u);
  return d.at(0).at("params");
}

json One(const char* name, const json& args) {
  json t = {{"_target_", name}, {"keys", {"image"}}};
  t.update(args);
  return json::array({t});
}

TEST(Monai, IntensityAugmentationRefusals) {
  struct Case {
    const char* name;
    json args;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"RandAdjustContrastd", {{"gamma", 0.5}}, "greater than 0.5"},
      {"RandAdjustContrastd", {{"gamma", {1, 2, 3}}}, "pair of numbers"},
      {"RandAdjustContrastd", {{"gamma", "2"}}, "pair of numbers"},
      {"RandGaussianSmoothd", {{"sigma_x", 1.0}}, "sigma_x must be a pair"},
      {"RandGaussianSmoothd", {{"sigma_z", {1.0}}}, "sigma_z must be a pair"},
      {"RandGaussianSmoothd", {{"approx", "scalespace"}}, "\"scalespace\""},
      {"RandGaussianSmoothd", {{"approx", "box"}}, "approx must be \"erf\" or \"sampled\""},
      {"RandHistogramShiftd", {{"num_control_points", 2}}, "greater than or equal to 3"},
      {"RandHistogramShiftd", {{"num_control_points", {2, 8}}}, "greater than or equal to 3"},
      {"RandHistogramShiftd", {{"num_control_points", 3.5}}, "an int or a pair of ints"},
      {"RandHistogramShiftd", {{"num_control_points", {4}}}, "an int or a pair of ints"},
      {"RandBiasFieldd", {{"degree", 0}}, "no less than 1"},
      {"RandBiasFieldd", {{"degree", 1.5}}, "degree must be an int"},
      {"RandBiasFieldd", {{"coeff_range", 0.1}}, "coeff_range must be a pair"},
      {"RandBiasFieldd", {{"dtype", "float64"}}, "dtype=float64"},
      {"RandBiasFieldd", {{"prob", 1.5}}, "prob"},
  };
  for (const Case& c : cases) {
    const Status s = ParseError(One(c.name, c.args));
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.name << " " << c.args.dump();
    EXPECT_TRUE(Has(s.message(), std::string("transform 1 (") + c.name + ")")) << s.ToString();
    EXPECT_TRUE(Has(s.message(), c.expect)) << s.ToString();
  }
  // The label is never an intensity transform's key.
  json t = One("RandBiasFieldd", json::object());
  t[0]["keys"] = {"image", "label"};
  EXPECT_TRUE(Has(ParseError(t).message(), "class ids"));
  // MONAI's accepted forms: a gamma number is (0.5, gamma); a reversed pair is sorted.
  for (const json& g : {json(3), json({2.5, 0.7})}) {
    auto p = ParseOk(One("RandAdjustContrastd", {{"gamma", g}, {"prob", 1.0}}));
    for (uint64_t i = 0; i < 50; ++i) {
      const double v = DrawnParams(*p, i).at("gamma").get<double>();
      EXPECT_GE(v, g.is_array() ? 0.7 : 0.5);
      EXPECT_LE(v, g.is_array() ? 2.5 : 3.0);
    }
  }
  EXPECT_TRUE(ParseOk(One("RandGaussianSmoothd", {{"approx", "Sampled"}})));
  EXPECT_TRUE(ParseOk(One("RandHistogramShiftd", {{"num_control_points", {9, 3}}})));
}

TEST(Monai, IntensityAugmentationArithmetic) {
  // Gamma 2 on [0, 1, 2, 4]: ((x - 0) / (4 + 1e-7)) ** 2 * 4.
  Image img{1, 4, 1, {0, 1, 2, 4}};
  std::vector<float> o =
      RunMonai(One("RandAdjustContrastd", {{"gamma", {2, 2}}, {"prob", 1.0}}), img);
  const float d = 4.0f + 1e-7f;
  for (int i = 0; i < 4; ++i) {
    const float t = img.v[i] / d;
    EXPECT_FLOAT_EQ(o[i], t * t * 4.0f) << i;
  }
  // invert_image: -(((-x) - (-4)) / 4) ** 2 * 4 + (-4)): 4 - (4 - x)^2 / 4.
  o = RunMonai(
      One("RandAdjustContrastd", {{"gamma", {2, 2}}, {"prob", 1.0}, {"invert_image", true}}), img);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(o[i], 4 - (4 - img.v[i]) * (4 - img.v[i]) / 4, 1e-5);
  // retain_stats keeps the mean and the (unbiased) std.
  o = RunMonai(
      One("RandAdjustContrastd", {{"gamma", {3, 3}}, {"prob", 1.0}, {"retain_stats", true}}), img);
  const double mean = std::accumulate(o.begin(), o.end(), 0.0) / 4;
  double ss = 0;
  for (float x : o) ss += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 7.0 / 4, 1e-5);
  EXPECT_NEAR(std::sqrt(ss / 3), std::sqrt((3.0625 + 0.5625 + 0.0625 + 5.0625) / 3), 1e-5);

  // Gaussian smoothing of an impulse is the outer product of the two erf kernels, zero-padded:
  // sigma 1 along H (tail 4: 9 taps), sigma 0.5 along W (tail 2: 5 taps).
  auto kernel = [](double sigma, int x) {
    const double t = 0.70710678 / sigma;
    return 0.5 * (std::erf(t * (x + 0.5)) - std::erf(t * (x - 0.5)));
  };
  Image dot{11, 7, 2, std::vector<float>(11 * 7 * 2, 0.0f)};
  dot.v[(5 * 7 + 1) * 2 + 1] = 100;  // row 5, column 1, channel 1 (near the left border)
  o = RunMonai(
      One("RandGaussianSmoothd", {{"sigma_x", {1, 1}}, {"sigma_y", {0.5, 0.5}}, {"prob", 1.0}}),
      dot);
  double total = 0;
  for (int y = 0; y < 11; ++y) {
    for (int x = 0; x < 7; ++x) {
      const double want = (std::abs(y - 5) <= 4 && std::abs(x - 1) <= 2)
                              ? 100 * kernel(1, y - 5) * kernel(0.5, x - 1)
                              : 0.0;
      EXPECT_NEAR(o[(y * 7 + x) * 2 + 1], want, 1e-4) << y << " " << x;
      EXPECT_EQ(o[(y * 7 + x) * 2], 0.0f);
      total += o[(y * 7 + x) * 2 + 1];
    }
  }
  // The part of the kernel beyond the left border (x = 1 - 2) is lost: zero padding.
  EXPECT_NEAR(total, 100 * (1 - kernel(0.5, -2)), 1e-3);

  // Bias field, degree 1, every coefficient 0.1: the lower triangle (0,0), (1,0), (1,1), so
  // field = 0.1 + 0.1 y' + 0.1 y' x' with y', x' in {-1, 0, 1}; the image times exp(field).
  Image ones{3, 3, 2, std::vector<float>(18, 2.0f)};
  o = RunMonai(One("RandBiasFieldd", {{"degree", 1}, {"coeff_range", {0.1, 0.1}}, {"prob", 1.0}}),
               ones);
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 3; ++x) {
      const double yy = y - 1, xx = x - 1;
      const float want = static_cast<float>(2.0 * std::exp(0.1 + 0.1 * yy + 0.1 * yy * xx));
      EXPECT_FLOAT_EQ(o[(y * 3 + x) * 2], want) << y << " " << x;
      EXPECT_FLOAT_EQ(o[(y * 3 + x) * 2 + 1], want) << y << " " << x;
    }
  }

  // Histogram shift with 3 points: [0, 1] -> [0, m, 1] scaled to [min, max]: piecewise
  // linear through (min, min), (mid, min + m span), (max, max).
  Image ramp{1, 5, 1, {10, 20, 30, 40, 50}};
  auto hs = ParseOk(One("RandHistogramShiftd", {{"num_control_points", 3}, {"prob", 1.0}}));
  const json params = DrawnParams(*hs, 0);
  const double m = params.at("floating_control_points").at(1).get<double>();
  OwnedPixels out, unused;
  ASSERT_TRUE(hs->ApplyPixels(11, 0, 0, ramp.ref(), nullptr, &out, &unused).ok());
  o = Floats(out);
  const double mid = 10 + 40 * m;
  const std::vector<double> want = {10, 10 + (mid - 10) / 2, mid, mid + (50 - mid) / 2, 50};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(o[i], want[i], 1e-4) << i << " m=" << m;
  // A constant image is returned as it is.
  Image flat{2, 2, 1, {3, 3, 3, 3}};
  EXPECT_EQ(RunMonai(One("RandHistogramShiftd", {{"prob", 1.0}}), flat), flat.v);
}

TEST(Monai, IntensityAugmentationDrawsFollowMonaisDistributions) {
  const int n = 4000;
  auto sd_of_mean = [n](double lo, double hi) { return (hi - lo) / std::sqrt(12.0 * n); };
  // gamma uniform in [0.5, 2].
  auto ac = ParseOk(One("RandAdjustContrastd", {{"gamma", 2.0}, {"prob", 1.0}}));
  double sum = 0, lo = 1e9, hi = -1e9;
  for (int i = 0; i < n; ++i) {
    const double g = DrawnParams(*ac, static_cast<uint64_t>(i)).at("gamma").get<double>();
    sum += g, lo = std::min(lo, g), hi = std::max(hi, g);
  }
  EXPECT_NEAR(sum / n, 1.25, 4 * sd_of_mean(0.5, 2.0));
  EXPECT_GE(lo, 0.5);
  EXPECT_LT(lo, 0.52);
  EXPECT_LE(hi, 2.0);
  EXPECT_GT(hi, 1.98);
  // sigma_x, sigma_y, sigma_z each uniform in their own range.
  auto gs = ParseOk(
      One("RandGaussianSmoothd",
          {{"sigma_x", {0.2, 0.4}}, {"sigma_y", {1.0, 3.0}}, {"sigma_z", {5, 6}}, {"prob", 1.0}}));
  double sx = 0, sy = 0;
  for (int i = 0; i < n; ++i) {
    const json p = DrawnParams(*gs, static_cast<uint64_t>(i));
    const double x = p.at("sigma").at(0).get<double>(), y = p.at("sigma").at(1).get<double>();
    ASSERT_TRUE(x >= 0.2 && x <= 0.4 && y >= 1.0 && y <= 3.0) << p.dump();
    sx += x, sy += y;
  }
  EXPECT_NEAR(sx / n, 0.3, 4 * sd_of_mean(0.2, 0.4));
  EXPECT_NEAR(sy / n, 2.0, 4 * sd_of_mean(1.0, 3.0));
  // Histogram shift: the count uniform in [4, 7]; points sorted in [0, 1] with fixed ends; the
  // first inner point uniform between 0 and the second reference point (2 / (count - 1)).
  auto hs = ParseOk(One("RandHistogramShiftd", {{"num_control_points", {7, 4}}, {"prob", 1.0}}));
  int counts[8] = {};
  double first_sum[8] = {};
  for (int i = 0; i < n; ++i) {
    const json p = DrawnParams(*hs, static_cast<uint64_t>(i));
    const json& f = p.at("floating_control_points");
    const int c = static_cast<int>(f.size());
    ASSERT_TRUE(c >= 4 && c <= 7) << c;
    ASSERT_EQ(p.at("reference_control_points").size(), f.size());
    EXPECT_EQ(f.front().get<double>(), 0.0);
    EXPECT_EQ(f.back().get<double>(), 1.0);
    for (int k = 1; k < c; ++k) {
      ASSERT_LE(f[k - 1].get<double>(), f[k].get<double>()) << p.dump();
      // Each inner point lies between its moved left neighbour and its reference right one.
      if (k < c - 1) {
        ASSERT_LE(f[k].get<double>(), (k + 1.0) / (c - 1)) << p.dump();
      }
    }
    ++counts[c];
    first_sum[c] += f[1].get<double>();
  }
  for (int c = 4; c <= 7; ++c) {
    EXPECT_NEAR(counts[c], n / 4.0, 4 * std::sqrt(n * 0.25 * 0.75)) << c;
    const double top = 2.0 / (c - 1);
    EXPECT_NEAR(first_sum[c] / counts[c], top / 2, 4 * top / std::sqrt(12.0 * counts[c])) << c;
  }
  // Bias field: (degree + 1) (degree + 2) / 2 coefficients, each uniform in coeff_range.
  auto bf =
      ParseOk(One("RandBiasFieldd", {{"degree", 2}, {"coeff_range", {-0.3, 0.1}}, {"prob", 1.0}}));
  double csum = 0;
  int ccount = 0;
  for (int i = 0; i < n / 4; ++i) {
    const json c = DrawnParams(*bf, static_cast<uint64_t>(i)).at("coefficients");
    ASSERT_EQ(c.size(), 6u);
    for (const json& v : c) {
      ASSERT_TRUE(v.get<double>() >= -0.3 && v.get<double>() <= 0.1) << c.dump();
      csum += v.get<double>(), ++ccount;
    }
  }
  EXPECT_NEAR(csum / ccount, -0.1, 4 * 0.4 / std::sqrt(12.0 * ccount));
}

TEST(Monai, TypedInputsAreConvertedToFloatFirst) {
  std::vector<uint16_t> px = {0, 1000, 4095, 65535};
  const PixelsRef img{px.data(), 2, 2, 1, SampleType::kUint16};
  auto p = ParseOk(json::array({{{"_target_", "EnsureTyped"}, {"keys", {"image", "label"}}}}));
  OwnedPixels o, unused;
  ASSERT_TRUE(p->ApplyPixels(0, 0, 0, img, nullptr, &o, &unused).ok());
  EXPECT_EQ(Floats(o), (std::vector<float>{0, 1000, 4095, 65535}));
  std::vector<int16_t> s = {-1024, 0, 3071, 5};
  const PixelsRef simg{s.data(), 2, 2, 1, SampleType::kInt16};
  ASSERT_TRUE(p->ApplyPixels(0, 0, 0, simg, nullptr, &o, &unused).ok());
  EXPECT_EQ(Floats(o), (std::vector<float>{-1024, 0, 3071, 5}));
}

TEST(Monai, SupportedTableListsEveryParser) {
  const auto& t = SupportedMonaiTransforms();
  ASSERT_GE(t.size(), 19u);
  for (const MonaiTransformInfo& i : t) {
    json e = {{"_target_", i.name},
              {"keys", i.kind == "intensity" ? json("image") : json({"image", "label"})}};
    Status s = ParseError(json::array({e}));
    // Parses, or refuses only for a missing required argument (or, resampling, the label's mode).
    EXPECT_TRUE(s.ok() || Has(s.message(), "is required") || Has(s.message(), "must be provided") ||
                Has(s.message(), "give one mode per key"))
        << i.name << ": " << s.ToString();
  }
}

// RandCropByPosNegLabeld: the share of crops centred on the foreground is pos / (pos + neg)
// (within 3 sigma over 10,000 draws), centres are clamped inside the image as MONAI's
// correct_crop_centers clamps them, and the label travels with the image.
TEST(Monai, PosNegCropsFollowTheRatioAndClampAtTheBorders) {
  const int n = 40;
  std::vector<uint8_t> label(n * n, 0);
  for (int y = 10; y < 13; ++y) {
    for (int x = 20; x < 23; ++x) label[y * n + x] = 2;  // a 3 x 3 lesion
  }
  std::vector<uint8_t> px(n * n, 0);
  auto p = ParseOk(json::array({{{"_target_", "RandCropByPosNegLabeld"},
                                 {"keys", {"image", "label"}},
                                 {"label_key", "label"},
                                 {"spatial_size", {8, 8}},
                                 {"pos", 1},
                                 {"neg", 3}}}));
  int fg = 0;
  const int draws = 10000;
  for (int i = 0; i < draws; ++i) {
    std::string out;
    ASSERT_TRUE(p->Draws(5, 0, static_cast<uint64_t>(i), n, n, nullptr, &out).ok());
    // Draws without the label leaves the crop deferred; with it, the centre is chosen.
    const ImageRef m8{label.data(), n, n, 1};
    ASSERT_TRUE(p->Draws(5, 0, static_cast<uint64_t>(i), n, n, &m8, &out).ok());
    const json d = json::parse(out);
    ASSERT_EQ(d.size(), 1u);
    const json& prm = d[0].at("params");
    const bool on_fg = prm.at("foreground").get<bool>();
    fg += on_fg;
    const int cy = prm.at("center")[0], cx = prm.at("center")[1];
    EXPECT_EQ(label[cy * n + cx] != 0, on_fg);
  }
  const double sigma = std::sqrt(draws * 0.25 * 0.75);
  EXPECT_NEAR(fg, draws * 0.25, 3 * sigma);
  // Clamped: a lesion pixel in the corner gives the corner crop; at the far corner of a 20 x 20
  // image the 8 x 8 crop starts at 12 (centre moved to 16 = 20 + 1 - 8 / 2 - 1).
  for (const auto& [y, x, want0] :
       std::vector<std::array<int, 3>>{{0, 0, 0}, {19, 19, 12}, {9, 9, 5}}) {
    std::vector<uint8_t> one(20 * 20, 0);
    one[y * 20 + x] = 1;
    std::vector<float> img(20 * 20);
    for (int i = 0; i < 400; ++i) img[i] = static_cast<float>(i);
    auto only_fg = ParseOk(json::array({{{"_target_", "RandCropByPosNegLabeld"},
                                         {"keys", {"image", "label"}},
                                         {"label_key", "label"},
                                         {"spatial_size", 8},
                                         {"neg", 0}}}));
    OwnedPixels o, om;
    const PixelsRef m{one.data(), 20, 20, 1, SampleType::kUint8};
    ASSERT_TRUE(
        only_fg->ApplyPixels(1, 0, 0, {img.data(), 20, 20, 1, SampleType::kFloat32}, &m, &o, &om)
            .ok());
    ASSERT_EQ(o.height, 8);
    const std::vector<float> v = Floats(o);
    EXPECT_EQ(v[0], static_cast<float>(want0 * 20 + want0)) << y << "," << x;
    EXPECT_EQ(std::count(om.bytes.begin(), om.bytes.end(), 1), 1);  // the label came along
  }
  // allow_smaller: a 6 x 20 image gives 6 x 8 crops; without it, the crop is refused at open.
  auto smaller = ParseOk(json::array({{{"_target_", "RandCropByPosNegLabeld"},
                                       {"keys", {"image", "label"}},
                                       {"label_key", "label"},
                                       {"spatial_size", {8, 8}},
                                       {"allow_smaller", true}}}));
  int oh = 0, ow = 0;
  ASSERT_TRUE(smaller->OutputSize(6, 20, &oh, &ow));
  EXPECT_EQ(oh, 6);
  EXPECT_EQ(ow, 8);
  EXPECT_EQ(p->CheckInputSize(6, 20).code(), Status::Code::kInvalidArgument);
  // No sampling location: a label with no foreground and (image_key) no image above threshold.
  auto bright = ParseOk(json::array({{{"_target_", "RandCropByPosNegLabeld"},
                                      {"keys", {"image", "label"}},
                                      {"label_key", "label"},
                                      {"spatial_size", 4},
                                      {"image_key", "image"},
                                      {"image_threshold", 1000}}}));
  std::vector<uint8_t> zeros(100, 0);
  std::vector<float> dark(100, 5.0f);
  OwnedPixels o, om;
  const PixelsRef zm{zeros.data(), 10, 10, 1, SampleType::kUint8};
  const Status s =
      bright->ApplyPixels(1, 0, 0, {dark.data(), 10, 10, 1, SampleType::kFloat32}, &zm, &o, &om);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Has(s.message(), "no sampling location")) << s.ToString();
}

// RandCropByLabelClassesd: each crop's class is drawn by the ratios (an empty class gets 0),
// its centre is a pixel of that class; max_samples_per_class thins the candidates evenly.
TEST(Monai, LabelClassCropsFollowTheRatios) {
  const int n = 30;
  std::vector<uint8_t> label(n * n, 0);
  for (int i = 0; i < n * n; ++i)
    label[i] = static_cast<uint8_t>(i % 7 == 0 ? 1 : i % 11 == 0 ? 2 : 0);
  auto p = ParseOk(json::array({{{"_target_", "RandCropByLabelClassesd"},
                                 {"keys", {"image", "label"}},
                                 {"label_key", "label"},
                                 {"spatial_size", {6, 6}},
                                 {"num_classes", 4},
                                 {"ratios", {1, 1, 2, 5}},  // class 3 has no pixel: ratio 0
                                 {"num_samples", 2}}}));
  EXPECT_EQ(p->samples_per_record(), 2);
  const ImageRef m8{label.data(), n, n, 1};
  std::vector<double> seen(4, 0);
  const int records = 3000;
  for (int i = 0; i < records; ++i) {
    std::string out;
    ASSERT_TRUE(p->Draws(9, 0, static_cast<uint64_t>(i), n, n, &m8, &out).ok());
    const json draws = json::parse(out);  // a named json: the loop reads into it
    for (const json& e : draws[0].at("params").at("samples")) {
      const int c = e.at("class");
      const int cy = e.at("center")[0], cx = e.at("center")[1];
      EXPECT_EQ(label[cy * n + cx], c);
      ++seen[static_cast<size_t>(c)];
    }
  }
  EXPECT_EQ(seen[3], 0);
  // Expected shares 1/4, 1/4, 2/4: chi-square with 2 degrees of freedom, P(> 13.8) = 0.001.
  const double total = 2.0 * records, want[3] = {0.25, 0.25, 0.5};
  double chi = 0;
  for (int c = 0; c < 3; ++c) chi += std::pow(seen[c] - total * want[c], 2) / (total * want[c]);
  EXPECT_LT(chi, 13.8);
  // No pixel of any class with a ratio: refused for this record.
  auto only3 = ParseOk(json::array({{{"_target_", "RandCropByLabelClassesd"},
                                     {"keys", {"image", "label"}},
                                     {"label_key", "label"},
                                     {"spatial_size", 4},
                                     {"num_classes", 4},
                                     {"ratios", {0, 0, 0, 1}}}}));
  std::string out;
  const Status s = only3->Draws(1, 0, 0, n, n, &m8, &out);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Has(s.message(), "no class")) << s.ToString();
  EXPECT_TRUE(Has(ParseError(json::array({{{"_target_", "RandCropByLabelClassesd"},
                                           {"keys", {"image", "label"}},
                                           {"label_key", "label"},
                                           {"spatial_size", 4}}}))
                      .message(),
                  "num_classes is required"));
}

// num_samples: a record yields that many crops (sample 0 is ApplyPixels' output); the steps
// before the crop run once for all, the steps after it draw for each sample on its own.
TEST(Monai, NumSamplesYieldsSeveralCropsEachWithItsOwnLaterDraws) {
  const json spec = json::array({{{"_target_", "ScaleIntensityd"}, {"keys", "image"}},
                                 {{"_target_", "RandCropByPosNegLabeld"},
                                  {"keys", {"image", "label"}},
                                  {"label_key", "label"},
                                  {"spatial_size", {4, 4}},
                                  {"pos", 1},
                                  {"neg", 1},
                                  {"num_samples", 4}},
                                 {{"_target_", "RandFlipd"},
                                  {"keys", {"image", "label"}},
                                  {"prob", 0.5},
                                  {"spatial_axis", 1}}});
  auto p = ParseOk(spec);
  EXPECT_EQ(p->samples_per_record(), 4);
  const int n = 12;
  std::vector<float> img(n * n);
  std::vector<uint8_t> label(n * n, 0);
  for (int i = 0; i < n * n; ++i) img[i] = static_cast<float>(i);
  for (int y = 2; y < 5; ++y) {
    for (int x = 6; x < 9; ++x) label[y * n + x] = 1;
  }
  const PixelsRef in{img.data(), n, n, 1, SampleType::kFloat32};
  const PixelsRef m{label.data(), n, n, 1, SampleType::kUint8};
  int differ = 0;
  for (uint64_t index = 0; index < 100; ++index) {
    std::vector<OwnedPixels> outs, masks;
    ASSERT_TRUE(p->ApplyPixelsSamples(2, 0, index, in, &m, &outs, &masks).ok());
    ASSERT_EQ(outs.size(), 4u);
    ASSERT_EQ(masks.size(), 4u);
    OwnedPixels one, one_mask;
    ASSERT_TRUE(p->ApplyPixels(2, 0, index, in, &m, &one, &one_mask).ok());
    EXPECT_EQ(one.bytes, outs[0].bytes);
    EXPECT_EQ(one_mask.bytes, masks[0].bytes);
    for (size_t k = 0; k < 4; ++k) {
      ASSERT_EQ(outs[k].height, 4);
      // ScaleIntensityd ran on the whole image before the crops: values in [0, 1], steps of 1/143.
      for (float v : Floats(outs[k])) EXPECT_NEAR(v * 143, std::round(v * 143), 1e-3);
    }
    // Later draws are the sample's own: over 100 records some samples flip where sample 0 does not.
    std::string draws;
    const ImageRef m8{label.data(), n, n, 1};
    ASSERT_TRUE(p->Draws(2, 0, index, n, n, &m8, &draws).ok());
    EXPECT_EQ(json::parse(draws)[1].at("params").at("samples").size(), 4u);  // after the scale
    for (size_t k = 1; k < 4; ++k) {
      std::vector<float> a = Floats(outs[0]), b = Floats(outs[k]);
      // The same crop with a different flip shows as a mirrored first row.
      differ += (a != b);
    }
  }
  EXPECT_GT(differ, 150);  // crops and flips vary between samples
  // Two transforms that split a record are refused.
  json twice = spec;
  twice.push_back(spec[1]);
  twice[3]["spatial_size"] = {2, 2};
  EXPECT_TRUE(Has(ParseError(twice).message(), "already makes several samples"));
}

// The resampling transforms refuse what would change the label's ids or what torch refuses,
// naming the argument and the fix.
TEST(Monai, ResamplingRefusalsNameTheArgument) {
  auto err = [](json t) {
    t["keys"] = t.contains("keys") ? t["keys"] : json{"image", "label"};
    return ParseError(json::array({t})).message();
  };
  std::string m = err({{"_target_", "RandRotated"}, {"range_x", 0.3}, {"mode", "bilinear"}});
  EXPECT_TRUE(Has(m, "transform 1 (RandRotated)") && Has(m, "class ids") &&
              Has(m, "mode=[\"bilinear\", \"nearest\"]"))
      << m;
  m = err({{"_target_", "Resized"}, {"spatial_size", 8}});  // area on the label
  EXPECT_TRUE(Has(m, "class ids")) << m;
  m = err({{"_target_", "Resized"},
           {"spatial_size", 8},
           {"mode", {"area", "nearest"}},
           {"align_corners", true}});
  EXPECT_TRUE(Has(m, "align_corners")) << m;
  m = err({{"_target_", "RandZoomd"}, {"mode", {"area", "nearest", "area"}}});
  EXPECT_TRUE(Has(m, "one per key")) << m;
  m = err({{"_target_", "RandRotated"}, {"range_y", 0.3}, {"mode", {"bilinear", "nearest"}}});
  EXPECT_TRUE(Has(m, "range_y") && Has(m, "2-D slice")) << m;
  m = err({{"_target_", "RandAffined"}, {"mode", {"bicubic", "nearest"}}});
  EXPECT_TRUE(Has(m, "bilinear or nearest")) << m;
  m = err(
      {{"_target_", "RandAffined"}, {"padding_mode", "edge"}, {"mode", {"bilinear", "nearest"}}});
  EXPECT_TRUE(Has(m, "zeros, border or reflection")) << m;
  m = err({{"_target_", "RandAffined"}, {"rotate_range", "x"}});
  EXPECT_TRUE(Has(m, "rotate_range")) << m;
  m = err({{"_target_", "CropForegroundd"},
           {"source_key", "image"},
           {"select_fn", "$lambda x: x > 1"}});
  EXPECT_TRUE(Has(m, "select_fn") && Has(m, "ThresholdIntensityd")) << m;
  m = err({{"_target_", "CropForegroundd"}});
  EXPECT_TRUE(Has(m, "source_key is required")) << m;
  m = err({{"_target_", "CropForegroundd"}, {"source_key", "label"}, {"margin", -1}});
  EXPECT_TRUE(Has(m, "margin")) << m;
}

// Resized / RandZoomd by hand: torch's nearest (floor(d * in / out)), bilinear (half-pixel
// centres, clamped at 0) and area (adaptive average pooling); the zoom crops back about the
// centre.
TEST(Monai, ResizeAndZoomComputeAsTorchInterpolates) {
  Image row{1, 2, 1, {0, 10}};
  std::vector<float> o = RunMonai(json::array({{{"_target_", "Resized"},
                                                {"keys", "image"},
                                                {"spatial_size", {1, 4}},
                                                {"mode", "bilinear"}}}),
                                  row);
  EXPECT_EQ(o, (std::vector<float>{0, 2.5, 7.5, 10}));
  Image sq{4, 4, 1, {}};
  for (int i = 0; i < 16; ++i) sq.v.push_back(static_cast<float>(i));
  o = RunMonai(json::array({{{"_target_", "Resized"}, {"keys", "image"}, {"spatial_size", 2}}}),
               sq);  // area: the mean of each 2 x 2 block
  EXPECT_EQ(o, (std::vector<float>{2.5, 4.5, 10.5, 12.5}));
  // The label: nearest, ids kept (2 x 3 -> 3 x 2: rows floor(d * 2/3), columns floor(d * 3/2)).
  Image img{2, 3, 1, {0, 1, 2, 3, 4, 5}};
  std::vector<uint8_t> ids = {0, 1, 2, 3, 4, 5};
  const PixelsRef mask{ids.data(), 2, 3, 1, SampleType::kUint8};
  OwnedPixels om;
  RunMonai(json::array({{{"_target_", "Resized"},
                         {"keys", {"image", "label"}},
                         {"spatial_size", {3, 2}},
                         {"mode", {"bilinear", "nearest"}}}}),
           img, 0, &om, &mask);
  EXPECT_EQ(om.bytes, (std::vector<uint8_t>{0, 1, 0, 1, 3, 4}));
  // A zoom of 2 (4 x 4 -> 8 x 8, nearest) cropped back to the centre 4 x 4: rows / columns
  // 2..5 of the zoomed image are source rows / columns 1, 1, 2, 2.
  o = RunMonai(json::array({{{"_target_", "RandZoomd"},
                             {"keys", "image"},
                             {"prob", 1.0},
                             {"min_zoom", 2},
                             {"max_zoom", 2},
                             {"mode", "nearest"}}}),
               sq);
  EXPECT_EQ(o, (std::vector<float>{5, 5, 6, 6, 5, 5, 6, 6, 9, 9, 10, 10, 9, 9, 10, 10}));
}

// RandRotated and RandAffined by hand: a quarter turn about the centre (R maps output to input
// indices), a whole-pixel translation with zeros padding; the label moves with the image.
TEST(Monai, RotateAndAffineMapOutputToInputIndices) {
  Image img{3, 3, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
  std::vector<uint8_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const PixelsRef mask{ids.data(), 3, 3, 1, SampleType::kUint8};
  OwnedPixels om;
  const double q = std::numbers::pi / 2;
  std::vector<float> o = RunMonai(json::array({{{"_target_", "RandRotated"},
                                                {"keys", {"image", "label"}},
                                                {"range_x", {q, q}},
                                                {"prob", 1.0},
                                                {"mode", {"bilinear", "nearest"}}}}),
                                  img, 0, &om, &mask);
  const std::vector<float> turned = {6, 3, 0, 7, 4, 1, 8, 5, 2};  // out(r, c) = in(2 - c, r)
  ASSERT_EQ(o.size(), turned.size());
  for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], turned[i], 1e-5) << i;
  EXPECT_EQ(om.bytes, (std::vector<uint8_t>{6, 3, 0, 7, 4, 1, 8, 5, 2}));
  o = RunMonai(json::array({{{"_target_", "RandAffined"},
                             {"keys", {"image", "label"}},
                             {"prob", 1.0},
                             {"translate_range", {{1, 1}, {0, 0}}},
                             {"mode", {"bilinear", "nearest"}},
                             {"padding_mode", "zeros"}}}),
               img, 0, &om, &mask);
  EXPECT_EQ(o, (std::vector<float>{3, 4, 5, 6, 7, 8, 0, 0, 0}));
  EXPECT_EQ(om.bytes, (std::vector<uint8_t>{3, 4, 5, 6, 7, 8, 0, 0, 0}));
}

// Rand2DElasticd: refusals; the draws deterministic; with magnitude 0 it is RandAffined (the
// bicubic upsampling of the affine control grid reproduces the affine map inside the image);
// the label takes the image's grid (an image of ids sampled nearest equals the label);
// the offsets are standard normals and the displacement keeps most of the magnitude.
TEST(Monai, Rand2DElasticDeformsImageAndLabelTogether) {
  auto err = [](json t) {
    t["_target_"] = "Rand2DElasticd";
    t["keys"] = t.contains("keys") ? t["keys"] : json{"image", "label"};
    return ParseError(json::array({t})).message();
  };
  const json ok = {{"spacing", 8}, {"magnitude_range", {1, 2}}, {"mode", {"bilinear", "nearest"}}};
  auto with = [&](const char* key, const json& v) {
    json t = ok;
    if (v.is_null()) {
      t.erase(key);
    } else {
      t[key] = v;
    }
    return t;
  };
  std::string m = err(with("mode", "bilinear"));
  EXPECT_TRUE(Has(m, "transform 1 (Rand2DElasticd)") && Has(m, "class ids")) << m;
  m = err(with("spacing", "x"));
  EXPECT_TRUE(Has(m, "argument spacing")) << m;
  m = err(with("spacing", 0.25));
  EXPECT_TRUE(Has(m, "argument spacing") && Has(m, ">= 0.5")) << m;
  m = err(with("spacing", {8, 8, 8}));
  EXPECT_TRUE(Has(m, "argument spacing")) << m;
  m = err(with("spacing", nullptr));
  EXPECT_TRUE(Has(m, "spacing is required")) << m;
  m = err(with("magnitude_range", 3));
  EXPECT_TRUE(Has(m, "magnitude_range must be a pair")) << m;
  m = err(with("magnitude_range", {1, 2, 3}));
  EXPECT_TRUE(Has(m, "magnitude_range must be a pair")) << m;
  m = err(with("padding_mode", "edge"));
  EXPECT_TRUE(Has(m, "zeros, border or reflection")) << m;
  json one = with("keys", "image");
  one["mode"] = "bilinear";
  one["_target_"] = "Rand2DElasticd";
  EXPECT_TRUE(ParseError(json::array({one})).ok()) << ParseError(json::array({one})).message();

  // A smooth 24 x 21 image; ids 0..3 in bands (the image of ids the same values).
  const int H = 24, W = 21;
  Image img{H, W, 1, {}}, ids_img{H, W, 1, {}};
  std::vector<uint8_t> ids;
  for (int y = 0; y < H; ++y) {
    for (int x = 0; x < W; ++x) {
      img.v.push_back(static_cast<float>(100 * std::sin(0.3 * y) + 3 * x));
      ids.push_back(static_cast<uint8_t>(((x + 2 * y) / 5) % 4));
      ids_img.v.push_back(static_cast<float>(ids.back()));
    }
  }
  const PixelsRef mask{ids.data(), H, W, 1, SampleType::kUint8};
  json elastic = {{"_target_", "Rand2DElasticd"},
                  {"keys", {"image", "label"}},
                  {"spacing", {5, 6}},
                  {"magnitude_range", {1.5, 2.5}},
                  {"prob", 1.0},
                  {"rotate_range", 0.3},
                  {"mode", {"bilinear", "nearest"}}};
  // Deterministic in (seed, epoch, index); another index, another deformation.
  OwnedPixels m1, m2;
  const std::vector<float> a = RunMonai(json::array({elastic}), img, 3, &m1, &mask);
  const std::vector<float> b = RunMonai(json::array({elastic}), img, 3, &m2, &mask);
  EXPECT_EQ(a, b);
  EXPECT_EQ(m1.bytes, m2.bytes);
  EXPECT_NE(a, RunMonai(json::array({elastic}), img, 4, &m2, &mask));

  // The label follows the image: the ids as an image, sampled nearest, are the label.
  json both = elastic;
  both["mode"] = "nearest";
  for (uint64_t i = 0; i < 8; ++i) {
    OwnedPixels om;
    const std::vector<float> o = RunMonai(json::array({both}), ids_img, i, &om, &mask);
    ASSERT_EQ(o.size(), om.bytes.size());
    size_t moved = 0;
    for (size_t k = 0; k < o.size(); ++k) {
      ASSERT_EQ(o[k], static_cast<float>(om.bytes[k])) << i << " " << k;
      moved += om.bytes[k] != ids[k];
    }
    EXPECT_GT(moved, 0u) << i;  // it did deform
  }

  // Magnitude 0 and spacing 1: the affine alone, as RandAffined's (the upsampling keeps the
  // grid: scale 1, the control points on the pixels). A larger spacing does not: torch's
  // bicubic (A = -0.75) does not reproduce a linear grid (MONAI's grid waves by up to ~0.3
  // pixel between its control points, and along an odd size its centre crop sits half a pixel
  // off); the golden cases hold dspipe to that.
  json still = elastic;
  still["magnitude_range"] = {0, 0};
  still["spacing"] = 1;
  still["rotate_range"] = {{0.3, 0.3}};
  still["scale_range"] = {{0.1, 0.1}, {-0.1, -0.1}};
  still["translate_range"] = {{1.5, 1.5}};
  still["spatial_size"] = {20, 22};
  json affine = still;
  affine["_target_"] = "RandAffined";
  affine.erase("spacing");
  affine.erase("magnitude_range");
  OwnedPixels ea, aa;
  const std::vector<float> e0 = RunMonai(json::array({still}), img, 0, &ea, &mask);
  const std::vector<float> a0 = RunMonai(json::array({affine}), img, 0, &aa, &mask);
  auto worst = [](const std::vector<float>& x, const std::vector<float>& y) {
    EXPECT_EQ(x.size(), y.size());
    double w = x.size() == y.size() ? 0 : 1e9;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      w = std::max(w, std::fabs(double{x[k]} - y[k]));
    }
    return w;
  };
  ASSERT_EQ(e0.size(), static_cast<size_t>(20 * 22));
  EXPECT_LT(worst(e0, a0), 1e-3);
  EXPECT_EQ(ea.bytes, aa.bytes);

  // Not drawn: the same size is the input; another size the identity grid about the centres.
  json never = elastic;
  never["prob"] = 0.0;
  EXPECT_EQ(RunMonai(json::array({never}), img), img.v);
  never["spatial_size"] = {22, 21};  // one row off each end
  const std::vector<float> cropped = RunMonai(json::array({never}), img);
  EXPECT_EQ(cropped, std::vector<float>(img.v.begin() + W, img.v.end() - W));

  // The draws: offsets standard normal (2 x the control grid), the magnitude uniform in its
  // range; the displacement, read off a ramp image, has mean 0 and std between 0.7 and 1 of
  // the magnitude (the bicubic upsampling keeps sqrt(sum w^2) of it: 0.72..1 per pixel).
  const int S = 32;
  auto p = ParseOk(json::array({{{"_target_", "Rand2DElasticd"},
                                 {"keys", "image"},
                                 {"spacing", 8},
                                 {"magnitude_range", {1, 3}},
                                 {"prob", 1.0},
                                 {"padding_mode", "border"}}}));
  double sum = 0, sq = 0, mlo = 1e9, mhi = -1e9;
  size_t n = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text;
    ASSERT_TRUE(p->Draws(5, 0, static_cast<uint64_t>(i), S, S, nullptr, &text).ok());
    const json d = json::parse(text)[0]["params"];
    EXPECT_EQ(d["control_grid"], json({8, 8}));  // 32: ceil(31 / 16 + 0.5) * 2 + 2
    ASSERT_EQ(d["offsets"].size(), 2u * 8 * 8);
    for (const json& v : d["offsets"])
      sum += v.get<double>(), sq += v.get<double>() * v.get<double>();
    n += d["offsets"].size();
    mlo = std::min(mlo, d["magnitude"].get<double>());
    mhi = std::max(mhi, d["magnitude"].get<double>());
  }
  EXPECT_LT(std::fabs(sum / n), 4 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(sq / n, 1.0, 4 * std::sqrt(2.0 / n));
  EXPECT_GE(mlo, 1);
  EXPECT_LT(mlo, 1.05);
  EXPECT_LE(mhi, 3);
  EXPECT_GT(mhi, 2.95);
  Image ramp{S, S, 2, {}};
  for (int y = 0; y < S; ++y) {
    for (int x = 0; x < S; ++x) ramp.v.insert(ramp.v.end(), {float(y), float(x)});
  }
  auto fixed = ParseOk(json::array({{{"_target_", "Rand2DElasticd"},
                                     {"keys", "image"},
                                     {"spacing", 8},
                                     {"magnitude_range", {2, 2}},
                                     {"prob", 1.0},
                                     {"padding_mode", "border"}}}));
  double dsum = 0, dsq = 0;
  size_t dn = 0;
  for (int i = 0; i < 60; ++i) {
    OwnedPixels out, unused;
    ASSERT_TRUE(
        fixed->ApplyPixels(9, 0, static_cast<uint64_t>(i), ramp.ref(), nullptr, &out, &unused)
            .ok());
    const std::vector<float> o = Floats(out);
    for (int y = 0; y < S; ++y) {
      for (int x = 0; x < S; ++x) {
        for (int c = 0; c < 2; ++c) {
          const double v = o[static_cast<size_t>((y * S + x) * 2 + c)];
          if (v <= 0 || v >= S - 1) continue;  // clamped at the border
          const double dv = v - (c == 0 ? y : x);
          dsum += dv, dsq += dv * dv, ++dn;
        }
      }
    }
  }
  const double mean = dsum / dn, sd = std::sqrt(dsq / dn - mean * mean);
  EXPECT_LT(std::fabs(mean), 0.1) << mean;
  EXPECT_GT(sd, 0.7 * 2) << sd;
  EXPECT_LT(sd, 1.0 * 2) << sd;
}

// CropForegroundd crops to the box of values > 0 (here of the image); the steps after it draw
// for the size it gives (a random crop inside the box); no foreground is an error naming it.
TEST(Monai, CropForegroundSizesTheStepsAfterIt) {
  Image img{6, 7, 1, std::vector<float>(42, 0.0f)};
  for (int y = 2; y <= 3; ++y) {
    for (int x = 1; x <= 4; ++x) img.v[static_cast<size_t>(y * 7 + x)] = 100.0f + y * 7 + x;
  }
  const json crop = {{"_target_", "CropForegroundd"}, {"keys", "image"}, {"source_key", "image"}};
  std::vector<float> o = RunMonai(json::array({crop}), img);
  EXPECT_EQ(o, (std::vector<float>{115, 116, 117, 118, 122, 123, 124, 125}));
  const json then = json::array(
      {crop, {{"_target_", "RandSpatialCropd"}, {"keys", "image"}, {"roi_size", {1, 2}}}});
  for (uint64_t i = 0; i < 40; ++i) {
    o = RunMonai(then, img, i);
    ASSERT_EQ(o.size(), 2u);
    EXPECT_GE(o[0], 115) << i;  // inside the box, whatever the draw
    EXPECT_EQ(o[1], o[0] + 1) << i;
  }
  auto p = ParseOk(json::array({crop}));
  Image empty{4, 4, 1, std::vector<float>(16, -1.0f)};
  OwnedPixels out, om;
  const Status s = p->ApplyPixels(0, 0, 0, empty.ref(), nullptr, &out, &om);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Has(s.message(), "CropForegroundd") && Has(s.message(), "no foreground"))
      << s.ToString();
}

// The resampling draws follow MONAI's distributions: the angle uniform in range_x, the zoom in
// [min_zoom, max_zoom], RandAffined applied with its prob (it draws its own).
TEST(Monai, ResamplingDrawsFollowMonaisDistributions) {
  auto p = ParseOk(json::array(
      {{{"_target_", "RandRotated"}, {"keys", "image"}, {"range_x", 0.5}, {"prob", 1.0}},
       {{"_target_", "RandZoomd"},
        {"keys", "image"},
        {"prob", 1.0},
        {"min_zoom", 0.8},
        {"max_zoom", 1.25},
        {"mode", "bilinear"}},
       {{"_target_", "RandAffined"}, {"keys", "image"}, {"prob", 0.3}, {"rotate_range", 0.1}}}));
  const int n = 4000;
  double angle_sum = 0, lo = 1e9, hi = -1e9, zlo = 1e9, zhi = -1e9;
  int applied = 0;
  for (int i = 0; i < n; ++i) {
    std::string text;
    ASSERT_TRUE(p->Draws(5, 0, static_cast<uint64_t>(i), 16, 16, nullptr, &text).ok());
    const json d = json::parse(text);
    ASSERT_EQ(d.size(), 3u);
    const double a = d[0]["params"]["angle"].get<double>();
    angle_sum += a, lo = std::min(lo, a), hi = std::max(hi, a);
    const double z = d[1]["params"]["zoom"][0].get<double>();
    EXPECT_EQ(z, d[1]["params"]["zoom"][1].get<double>());  // one factor for both axes
    zlo = std::min(zlo, z), zhi = std::max(zhi, z);
    applied += d[2]["params"]["applied"].get<bool>() ? 1 : 0;
  }
  EXPECT_LT(std::fabs(angle_sum / n), 4 * 0.5 / std::sqrt(3.0 * n));
  EXPECT_GE(lo, -0.5);
  EXPECT_LT(lo, -0.49);
  EXPECT_LE(hi, 0.5);
  EXPECT_GT(hi, 0.49);
  EXPECT_GE(zlo, 0.8);
  EXPECT_LT(zlo, 0.81);
  EXPECT_LE(zhi, 1.25);
  EXPECT_GT(zhi, 1.24);
  EXPECT_LT(std::fabs(applied - 0.3 * n), 4 * std::sqrt(n * 0.3 * 0.7)) << applied;
}

// AsDiscreted: the label's one-hot classes (the ids checked), the image thresholded or rounded;
// what would change ids or the channel count is refused, and so is a spatial transform after
// the one-hot.
TEST(Monai, AsDiscretedOneHotsTheLabelAndThresholdsTheImage) {
  auto p = ParseOk(json::array({{{"_target_", "AsDiscreted"},
                                 {"keys", {"image", "label"}},
                                 {"to_onehot", {nullptr, 4}},
                                 {"threshold", {2.5, nullptr}}}}));
  EXPECT_EQ(p->label_classes(), 4);
  Image img{1, 4, 1, {1, 2.5, 3, -7}};
  std::vector<uint8_t> ids = {0, 3, 1, 2};
  const PixelsRef mask{ids.data(), 1, 4, 1, SampleType::kUint8};
  OwnedPixels om;
  EXPECT_EQ(RunMonai(json::parse(p->ToJson())["transforms"], img, 0, &om, &mask),
            (std::vector<float>{0, 1, 1, 0}));
  EXPECT_EQ(om.bytes, ids);  // ids through ApplyPixels; one-hot where the batch leaves
  ids[2] = 4;                // not below to_onehot: the record fails, naming it
  OwnedPixels out;
  Status s = p->ApplyPixels(0, 0, 0, img.ref(), &mask, &out, &om);
  EXPECT_EQ(s.code(), Status::Code::kBadInput) << s.ToString();
  EXPECT_TRUE(Has(s.message(), "id 4") && Has(s.message(), "to_onehot=4")) << s.ToString();
  EXPECT_EQ(
      RunMonai(
          json::array(
              {{{"_target_", "AsDiscreted"}, {"keys", "image"}, {"rounding", "torchrounding"}}}),
          Image{1, 4, 1, {0.5, 1.5, 2.5, -0.5}}),
      (std::vector<float>{0, 2, 2, -0}));  // half to even
  EXPECT_EQ(
      ParseOk(json::array({{{"_target_", "AsDiscreted"}, {"keys", "image"}}}))->label_classes(), 0);
  auto err = [](const json& t) { return ParseError(json::array({t})).message(); };
  std::string m = err({{"_target_", "AsDiscreted"}, {"keys", "label"}, {"argmax", true}});
  EXPECT_TRUE(Has(m, "argmax")) << m;
  m = err({{"_target_", "AsDiscreted"}, {"keys", {"image", "label"}}, {"to_onehot", 3}});
  EXPECT_TRUE(Has(m, "to_onehot applies to the label")) << m;
  m = err({{"_target_", "AsDiscreted"}, {"keys", "label"}, {"threshold", 0.5}});
  EXPECT_TRUE(Has(m, "class ids")) << m;
  m = err({{"_target_", "AsDiscreted"}, {"keys", "label"}, {"to_onehot", 0}});
  EXPECT_TRUE(Has(m, "number of classes")) << m;
  const Status later =
      ParseError(json::array({{{"_target_", "AsDiscreted"}, {"keys", "label"}, {"to_onehot", 2}},
                              {{"_target_", "RandFlipd"}, {"keys", {"image", "label"}}}}));
  EXPECT_TRUE(Has(later.message(), "transform 2 (RandFlipd)") &&
              Has(later.message(), "after the spatial transforms"))
      << later.ToString();
}

// RandWeightedCropd: centres drawn in proportion to the weight map among MONAI's valid centres
// (a pixel with 3x another's weight is chosen 3x as often), negative weights shifted, all-zero
// weights uniform; num_samples crops of each record; the crop is cut at the image.
TEST(Monai, WeightedCropsDrawCentresByWeight) {
  std::vector<uint8_t> ids(100, 0);
  ids[5 * 10 + 5] = 3;
  ids[2 * 10 + 7] = 1;
  const ImageRef mask{ids.data(), 10, 10, 1};
  auto p = ParseOk(json::array({{{"_target_", "RandWeightedCropd"},
                                 {"keys", {"image", "label"}},
                                 {"w_key", "label"},
                                 {"spatial_size", {3, 3}},
                                 {"num_samples", 2}}}));
  EXPECT_EQ(p->samples_per_record(), 2);
  int at_five = 0, at_two = 0;
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    std::string text;
    ASSERT_TRUE(p->Draws(1, 0, static_cast<uint64_t>(i), 10, 10, &mask, &text).ok());
    const json d = json::parse(text)[0]["params"];
    ASSERT_EQ(d["samples"].size(), 2u);
    for (const json& e : d["samples"]) {
      const int cy = e["center"][0].get<int>(), cx = e["center"][1].get<int>();
      ASSERT_TRUE((cy == 5 && cx == 5) || (cy == 2 && cx == 7)) << e.dump();
      (cy == 5 ? at_five : at_two) += 1;
      EXPECT_EQ(e["crop"], json({cx - 1, cy - 1, 3, 3}));
    }
  }
  const double q = 0.75, m = 2.0 * n;
  EXPECT_LT(std::fabs(at_five - m * q), 4 * std::sqrt(m * q * (1 - q))) << at_five << " " << at_two;
  // The image as the map: -1 everywhere but one pixel of 0 (shifted: only it weighs); a crop
  // taller than the image is cut at it (rows: the centre n // 2).
  Image img{6, 8, 1, std::vector<float>(48, -1.0f)};
  img.v[3 * 8 + 5] = 0.0f;  // row 3: the only valid centre row (6 // 2)
  for (uint64_t i = 0; i < 20; ++i) {
    std::vector<float> o = RunMonai(json::array({{{"_target_", "RandWeightedCropd"},
                                                  {"keys", "image"},
                                                  {"w_key", "image"},
                                                  {"spatial_size", {9, 3}}}}),
                                    img, i);
    ASSERT_EQ(o.size(), 18u);            // 6 x 3
    EXPECT_EQ(o[3 * 3 + 1], 0.0f) << i;  // column 5 is the crop's middle one
  }
  const Status s = ParseError(
      json::array({{{"_target_", "RandWeightedCropd"}, {"keys", "image"}, {"spatial_size", 4}}}));
  EXPECT_TRUE(Has(s.message(), "w_key is required")) << s.ToString();
}

// docs/MONAI.md's table has one row per supported MONAI transform, and names no other.
TEST(Monai, DocsTableListsExactlyTheSupportedTransforms) {
  std::ifstream f(std::string(DSPIPE_SOURCE_DIR) + "/docs/MONAI.md");
  ASSERT_TRUE(f) << "docs/MONAI.md";
  std::set<std::string> rows;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    rows.insert(line.substr(3, line.find('`', 3) - 3));
  }
  for (const MonaiTransformInfo& t : SupportedMonaiTransforms()) {
    EXPECT_EQ(rows.count(t.name), 1u) << t.name << " has no row in docs/MONAI.md";
    rows.erase(t.name);
  }
  EXPECT_TRUE(rows.empty()) << "rows for unsupported transforms: " << *rows.begin();
}

}  // namespace
}  // namespace dspipe
