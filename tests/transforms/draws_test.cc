// SPDX-License-Identifier: Apache-2.0
// Random draws: they depend only on (seed, epoch, index, transform position), and over 10^4
// draws (fixed seed, so the statistics cannot flake) each parameter's empirical distribution
// matches albumentations' documented one: KS distance for continuous parameters (0.02 >
// the 0.1% critical value 1.95 / sqrt(10^4)), chi-square for discrete ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dspipe/transforms.h"
#include "must_parse.h"

namespace dspipe {
namespace {

using nlohmann::json;
constexpr int kN = 10000;

using testing::MustParse;

json DrawsOf(const TransformPipeline& p, uint64_t seed, uint64_t epoch, uint64_t index, int h,
             int w) {
  std::string text;
  const Status s = p.Draws(seed, epoch, index, h, w, nullptr, &text);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return json::parse(text);
}

// The named transform's params in each of kN samples: absent when it did not run, null when it
// drew a no-op (the plan leaves those out: RandomRotate90's factor 0, SquareSymmetry's "e").
std::vector<json> Params(const std::string& spec, const std::string& name, int h = 100, int w = 120,
                         int n = kN, bool noops = false) {
  auto p = MustParse(spec);
  std::vector<json> out;
  for (int i = 0; i < n; ++i) {
    bool seen = false;
    for (const json& d : DrawsOf(*p, 7, 0, static_cast<uint64_t>(i), h, w)) {
      if (d["name"] == name) out.push_back(d["params"]), seen = true;
    }
    if (!seen && noops) out.push_back(nullptr);
  }
  return out;
}

double KsUniform(std::vector<double> v, double lo, double hi) {
  std::sort(v.begin(), v.end());
  double d = 0;
  const double n = static_cast<double>(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double f = std::clamp((v[i] - lo) / (hi - lo), 0.0, 1.0);
    d = std::max({d, std::fabs(f - i / n), std::fabs(f - (i + 1) / n)});
  }
  return d;
}

// Pearson's statistic against equal (or given) bin probabilities; the bound is df + 6 sqrt(2 df).
void ExpectBins(const std::vector<int>& values, int bins, const std::vector<double>& probs = {}) {
  std::vector<double> count(static_cast<size_t>(bins), 0);
  for (int v : values) {
    ASSERT_GE(v, 0);
    ASSERT_LT(v, bins);
    count[static_cast<size_t>(v)] += 1;
  }
  double chi2 = 0;
  for (int b = 0; b < bins; ++b) {
    const double p = probs.empty() ? 1.0 / bins : probs[static_cast<size_t>(b)];
    const double e = p * static_cast<double>(values.size());
    chi2 += (count[static_cast<size_t>(b)] - e) * (count[static_cast<size_t>(b)] - e) / e;
  }
  const double df = bins - 1;
  EXPECT_LT(chi2, df + 6 * std::sqrt(2 * df)) << bins << " bins";
}

TEST(TransformDraws, DependOnlyOnSeedEpochIndexAndPosition) {
  const std::string a = R"([{"__class_fullname__": "Rotate", "p": 1},
                            {"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 40}])";
  // Another transform inserted after, and a different p before one of them, leave the draws of
  // the others as they were.
  const std::string b = R"([{"__class_fullname__": "Rotate", "p": 1},
                            {"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 40},
                            {"__class_fullname__": "GaussNoise", "p": 1}])";
  auto pa = MustParse(a), pb = MustParse(b);
  const std::string c = R"([{"__class_fullname__": "HorizontalFlip", "p": 0.1},
                            {"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 40}])";
  const std::string d = R"([{"__class_fullname__": "HorizontalFlip", "p": 0.9},
                            {"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 40}])";
  auto pc = MustParse(c), pd = MustParse(d);
  int differ_index = 0, differ_epoch = 0, differ_seed = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const json base = DrawsOf(*pa, 3, 1, i, 100, 120);
    EXPECT_EQ(base, DrawsOf(*pa, 3, 1, i, 100, 120));
    json longer = DrawsOf(*pb, 3, 1, i, 100, 120);
    longer.erase(longer.size() - 1);
    EXPECT_EQ(base, longer) << i;
    differ_index += base != DrawsOf(*pa, 3, 1, i + 1, 100, 120);
    differ_epoch += base != DrawsOf(*pa, 3, 2, i, 100, 120);
    differ_seed += base != DrawsOf(*pa, 4, 1, i, 100, 120);
    EXPECT_EQ(DrawsOf(*pc, 3, 1, i, 100, 120).back(), DrawsOf(*pd, 3, 1, i, 100, 120).back());
  }
  EXPECT_GT(differ_index, 195);
  EXPECT_GT(differ_epoch, 195);
  EXPECT_GT(differ_seed, 195);
}

TEST(TransformDraws, ProbabilitiesAndContainers) {
  // p: HorizontalFlip(p=0.3) runs in 30% of samples (5 sigma = 230 of 10^4).
  EXPECT_NEAR(
      Params(R"([{"__class_fullname__": "HorizontalFlip", "p": 0.3}])", "HorizontalFlip").size(),
      3000, 230);
  // OneOf: the children's p are weights (1 : 3), the chosen one always runs.
  auto p = MustParse(R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [
      {"__class_fullname__": "HorizontalFlip", "p": 0.1},
      {"__class_fullname__": "VerticalFlip", "p": 0.3}]}])");
  std::vector<int> picks;
  for (int i = 0; i < kN; ++i) {
    const json d = DrawsOf(*p, 7, 0, static_cast<uint64_t>(i), 50, 50);
    ASSERT_EQ(d.size(), 1u);
    picks.push_back(d[0]["name"] == "HorizontalFlip" ? 0 : 1);
  }
  ExpectBins(picks, 2, {0.25, 0.75});
  // SomeOf(n=2) of four p=1 transforms: each of the 6 pairs equally likely, in spec order.
  p = MustParse(R"([{"__class_fullname__": "SomeOf", "p": 1, "n": 2, "transforms": [
      {"__class_fullname__": "HorizontalFlip", "p": 1}, {"__class_fullname__": "VerticalFlip", "p": 1},
      {"__class_fullname__": "Transpose", "p": 1}, {"__class_fullname__": "RandomGamma", "p": 1}]}])");
  const std::vector<std::string> order = {"HorizontalFlip", "VerticalFlip", "Transpose",
                                          "RandomGamma"};
  std::map<std::pair<int, int>, int> pair_index;
  for (int a = 0, k = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) pair_index[{a, b}] = k++;
  }
  std::vector<int> pairs;
  for (int i = 0; i < kN; ++i) {
    const json d = DrawsOf(*p, 7, 0, static_cast<uint64_t>(i), 50, 50);
    ASSERT_EQ(d.size(), 2u);
    const int a =
        static_cast<int>(std::find(order.begin(), order.end(), d[0]["name"]) - order.begin());
    const int b =
        static_cast<int>(std::find(order.begin(), order.end(), d[1]["name"]) - order.begin());
    ASSERT_LT(a, b);
    pairs.push_back(pair_index[{a, b}]);
  }
  ExpectBins(pairs, 6);
  // Sequential(p=0.4): all or nothing.
  const auto seq = Params(R"([{"__class_fullname__": "Sequential", "p": 0.4, "transforms": [
      {"__class_fullname__": "HorizontalFlip", "p": 1}]}])",
                          "HorizontalFlip");
  EXPECT_NEAR(seq.size(), 4000, 245);
}

// Issue 39 item 8 (a): a SomeOf picked by a OneOf still checks its own p (albumentations
// 2.0.8's SomeOf ignores force_apply); a Compose / Sequential / leaf picked by it is forced.
TEST(TransformDraws, SomeOfInsideOneOfKeepsItsOwnP) {
  const auto some = Params(R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [
      {"__class_fullname__": "SomeOf", "p": 0.3, "n": 1, "transforms": [
        {"__class_fullname__": "HorizontalFlip", "p": 1}]}]}])",
                           "HorizontalFlip");
  EXPECT_NEAR(some.size(), 3000, 230);
  const auto seq = Params(R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [
      {"__class_fullname__": "Sequential", "p": 0.3, "transforms": [
        {"__class_fullname__": "HorizontalFlip", "p": 1}]}]}])",
                          "HorizontalFlip");
  EXPECT_EQ(seq.size(), static_cast<size_t>(kN));
}

// Issue 39 item 8 (b): a OneOf whose children all have p=0 has nothing to pick (albumentations:
// ZeroDivisionError); it used to run its last child always. A p=0 child is never picked.
TEST(TransformDraws, OneOfNeverPicksAP0Child) {
  std::shared_ptr<const TransformPipeline> p;
  const Status s = TransformPipeline::Parse(R"([{"__class_fullname__": "OneOf", "p": 1,
      "transforms": [{"__class_fullname__": "HorizontalFlip", "p": 0},
                     {"__class_fullname__": "VerticalFlip", "p": 0}]}])",
                                            &p);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("transform 1 (OneOf)"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("p=0"), std::string::npos) << s.ToString();
  // An empty OneOf is fine (albumentations: it does nothing).
  EXPECT_TRUE(
      TransformPipeline::Parse(R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": []}])", &p)
          .ok());
  for (const char* spec : {R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [
      {"__class_fullname__": "HorizontalFlip", "p": 0}, {"__class_fullname__": "VerticalFlip", "p": 0.2},
      {"__class_fullname__": "Transpose", "p": 0}]}])"}) {
    EXPECT_EQ(Params(spec, "HorizontalFlip").size(), 0u);
    EXPECT_EQ(Params(spec, "Transpose").size(), 0u);
    EXPECT_EQ(Params(spec, "VerticalFlip").size(), static_cast<size_t>(kN));
  }
}

// Issue 40 item 23: OneOrOther runs one of its two children, forced: the first with probability
// p, else the second; a forced p=0 transform still does not run (should_apply), a container
// does; anything but two children is refused.
TEST(TransformDraws, OneOrOtherRunsTheFirstWithProbabilityP) {
  const char* spec = R"([{"__class_fullname__": "OneOrOther", "p": 0.3, "transforms": [
      {"__class_fullname__": "HorizontalFlip", "p": 0.01},
      {"__class_fullname__": "VerticalFlip", "p": 0.01}]}])";
  const size_t h = Params(spec, "HorizontalFlip").size(), v = Params(spec, "VerticalFlip").size();
  EXPECT_EQ(h + v, static_cast<size_t>(kN)) << "always one, forced past its own p";
  const double share = static_cast<double>(h) / kN;
  EXPECT_NEAR(share, 0.3, 4 * std::sqrt(0.3 * 0.7 / kN)) << share;
  const char* p0 = R"([{"__class_fullname__": "OneOrOther", "p": 1, "transforms": [
      {"__class_fullname__": "HorizontalFlip", "p": 0},
      {"__class_fullname__": "VerticalFlip", "p": 1}]}])";
  EXPECT_EQ(Params(p0, "HorizontalFlip").size(), 0u);
  EXPECT_EQ(Params(p0, "VerticalFlip").size(), 0u);
  std::shared_ptr<const TransformPipeline> p;
  const Status s = TransformPipeline::Parse(R"([{"__class_fullname__": "OneOrOther",
      "transforms": [{"__class_fullname__": "HorizontalFlip"}]}])", &p);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("OneOrOther needs exactly two transforms, got 1"), std::string::npos)
      << s.ToString();
}

TEST(TransformDraws, GeometricParametersFollowTheirRanges) {
  std::vector<int> factors, elements, xs, ys;
  for (const json& q : Params(R"([{"__class_fullname__": "RandomRotate90", "p": 1}])",
                              "RandomRotate90", 100, 120, kN, true)) {
    factors.push_back(q.is_null() ? 0 : q["factor"].get<int>());
  }
  ExpectBins(factors, 4);
  const char* names[] = {"e", "r90", "r180", "r270", "v", "hvt", "h", "t"};
  for (const json& q : Params(R"([{"__class_fullname__": "SquareSymmetry", "p": 1}])",
                              "SquareSymmetry", 100, 120, kN, true)) {
    elements.push_back(
        q.is_null() ? 0
                    : static_cast<int>(std::find(names, names + 8, q["group_element"]) - names));
  }
  ExpectBins(elements, 8);
  // RandomCrop 40x30 of 100x120: x_min uniform on 0..90, y_min on 0..60.
  for (const json& q :
       Params(R"([{"__class_fullname__": "RandomCrop", "p": 1, "height": 40, "width": 30}])",
              "RandomCrop")) {
    xs.push_back(q["crop_coords"][0]);
    ys.push_back(q["crop_coords"][1]);
  }
  ExpectBins(xs, 91);
  ExpectBins(ys, 61);
  // Rotate: the angle (from the matrix) uniform on the limit.
  std::vector<double> angles;
  for (const json& q :
       Params(R"([{"__class_fullname__": "Rotate", "limit": 30, "p": 1}])", "Rotate")) {
    const double a = std::atan2(q["matrix"][0][1].get<double>(), q["matrix"][0][0].get<double>());
    angles.push_back(a * 180 / M_PI);
  }
  EXPECT_LT(KsUniform(angles, -30, 30), 0.02);
  // Affine: rotate, scale x / y, shear uniform on their ranges; translate_percent * size,
  // truncated toward zero.
  std::vector<double> rot, sx, sy, shear, tx;
  for (const json& q : Params(R"([{"__class_fullname__": "Affine", "p": 1, "rotate": [-20, 20],
      "scale": [0.5, 1.5], "shear": {"x": [-10, 10], "y": 0}, "translate_percent": [-0.2, 0.2]}])",
                              "Affine")) {
    rot.push_back(q["rotate"]);
    sx.push_back(q["scale"]["x"]);
    sy.push_back(q["scale"]["y"]);
    shear.push_back(q["shear"]["x"]);
    tx.push_back(q["translate"]["x"]);
    ASSERT_EQ(std::trunc(tx.back()), tx.back());
  }
  EXPECT_LT(KsUniform(rot, -20, 20), 0.02);
  EXPECT_LT(KsUniform(sx, 0.5, 1.5), 0.02);
  EXPECT_LT(KsUniform(sy, 0.5, 1.5), 0.02);
  EXPECT_LT(KsUniform(shear, -10, 10), 0.02);  // drawn negated, as albumentations does
  std::vector<int> tbins;
  for (double t : tx) tbins.push_back(static_cast<int>(t) + 23);  // int(U(-0.2, 0.2) * 120)
  std::vector<double> want(47, 0);
  for (int k = -23; k <= 23; ++k) {  // P(trunc(24 u) = k), u ~ U(-1, 1)... in units of 1/120
    const double lo = k > 0 ? k : k < 0 ? k - 1 : -1, hi = k > 0 ? k + 1 : k < 0 ? k : 1;
    want[static_cast<size_t>(k + 23)] = (std::min(hi, 24.0) - std::max(lo, -24.0)) / 48.0;
  }
  ExpectBins(tbins, 47, want);
  // RandomResizedCrop on a 1000 x 1000 image takes the first try: area ~ U(scale), log ratio
  // ~ U(log ratio range), up to rounding the crop size to whole pixels.
  std::vector<double> area, log_ratio;
  for (const json& q :
       Params(R"([{"__class_fullname__": "RandomResizedCrop", "p": 1, "size": [64, 64],
      "scale": [0.2, 0.5]}])",
              "RandomResizedCrop", 1000, 1000)) {
    const double w = q["crop_coords"][2].get<int>() - q["crop_coords"][0].get<int>();
    const double h = q["crop_coords"][3].get<int>() - q["crop_coords"][1].get<int>();
    area.push_back(w * h / 1e6);
    log_ratio.push_back(std::log(w / h));
  }
  EXPECT_LT(KsUniform(area, 0.2, 0.5), 0.02);
  EXPECT_LT(KsUniform(log_ratio, std::log(0.75), std::log(4.0 / 3)), 0.02);
}

TEST(TransformDraws, PhotometricParametersFollowTheirRanges) {
  std::vector<double> alpha, beta, gamma, hue, sigma, bright;
  std::vector<int> holes, orders;
  for (const json& q : Params(R"([{"__class_fullname__": "RandomBrightnessContrast", "p": 1}])",
                              "RandomBrightnessContrast")) {
    alpha.push_back(q["alpha"]);
    beta.push_back(q["beta_fraction"]);
  }
  EXPECT_LT(KsUniform(alpha, 0.8, 1.2), 0.02);
  EXPECT_LT(KsUniform(beta, -0.2, 0.2), 0.02);
  for (const json& q :
       Params(R"([{"__class_fullname__": "RandomGamma", "p": 1}])", "RandomGamma")) {
    gamma.push_back(q["gamma"]);
  }
  EXPECT_LT(KsUniform(gamma, 0.8, 1.2), 0.02);
  // Issue 40 item 23: RGBShift, each channel's shift uniform in its limit (pixel units), a
  // limit within [-1, 1] a fraction of 255.
  std::vector<double> rs, gs, bs;
  for (const json& q : Params(R"([{"__class_fullname__": "RGBShift", "r_shift_limit": 30,
                                   "g_shift_limit": [-10, 0], "b_shift_limit": 0.5, "p": 1}])",
                              "RGBShift")) {
    rs.push_back(q["shift"][0]);
    gs.push_back(q["shift"][1]);
    bs.push_back(q["shift"][2]);
  }
  EXPECT_LT(KsUniform(rs, -30, 30), 0.02);
  EXPECT_LT(KsUniform(gs, -10, 0), 0.02);
  EXPECT_LT(KsUniform(bs, -127.5, 127.5), 0.02);
  for (const json& q :
       Params(R"([{"__class_fullname__": "HueSaturationValue", "p": 1}])", "HueSaturationValue")) {
    hue.push_back(q["hue_shift"]);
  }
  EXPECT_LT(KsUniform(hue, -20, 20), 0.02);
  for (const json& q : Params(R"([{"__class_fullname__": "GaussNoise", "p": 1}])", "GaussNoise")) {
    sigma.push_back(q["sigma"]);
  }
  EXPECT_LT(KsUniform(sigma, 0.2, 0.44), 0.02);
  for (const json& q :
       Params(R"([{"__class_fullname__": "ColorJitter", "p": 1}])", "ColorJitter")) {
    bright.push_back(q["brightness"]);
    const auto& o = q["order"];
    orders.push_back(o[0].get<int>() * 64 + o[1].get<int>() * 16 + o[2].get<int>() * 4 +
                     o[3].get<int>());
  }
  EXPECT_LT(KsUniform(bright, 0.8, 1.2), 0.02);
  std::map<int, int> perm;  // the 24 orders equally likely
  for (int o : orders) perm.emplace(o, static_cast<int>(perm.size()));
  ASSERT_EQ(perm.size(), 24u);
  std::vector<int> perm_bins;
  for (int o : orders) perm_bins.push_back(perm[o]);
  ExpectBins(perm_bins, 24);
  for (const json& q : Params(R"([{"__class_fullname__": "CoarseDropout", "p": 1,
      "num_holes_range": [1, 4]}])",
                              "CoarseDropout")) {
    holes.push_back(static_cast<int>(q["holes"].size()) - 1);
  }
  ExpectBins(holes, 4);
}

// Issue 40 items 10 and 23: MedianBlur's and MotionBlur's kernel size is uniform over the odd
// sizes of blur_limit (sample_odd_from_range); MotionBlur's angle and direction uniform in their
// ranges, and with allow_shifted the line's shift uniform in +-(k // 2) / 2 on each axis.
TEST(TransformDraws, BlurKernelSizesAnglesAndShiftsFollowTheirRanges) {
  std::vector<int> median;
  for (const json& q : Params(R"([{"__class_fullname__": "MedianBlur", "p": 1,
      "blur_limit": [3, 9]}])",
                              "MedianBlur")) {
    const int k = q["kernel"].get<int>();
    ASSERT_EQ(k % 2, 1) << k;
    median.push_back((k - 3) / 2);
  }
  ExpectBins(median, 4);
  std::vector<int> sizes;
  std::vector<double> angles, directions;
  for (const json& q : Params(R"([{"__class_fullname__": "MotionBlur", "p": 1,
      "blur_limit": [4, 7], "angle_range": [10, 100], "direction_range": [-0.5, 1]}])",
                              "MotionBlur")) {
    sizes.push_back((q["ksize"].get<int>() - 5) / 2);  // (4, 7) is (5, 7)
    angles.push_back(q["angle"]);
    directions.push_back(q["direction"]);
    EXPECT_EQ(q["kernel"].size(), q["ksize"].get<size_t>());
  }
  ExpectBins(sizes, 2);
  EXPECT_LT(KsUniform(angles, 10, 100), 0.02);
  EXPECT_LT(KsUniform(directions, -0.5, 1), 0.02);
  std::vector<double> sx, sy;
  for (const json& q : Params(R"([{"__class_fullname__": "MotionBlur", "p": 1,
      "blur_limit": [9, 9]}])",
                              "MotionBlur")) {
    sx.push_back(q["shift"][0]);
    sy.push_back(q["shift"][1]);
  }
  EXPECT_LT(KsUniform(sx, -2, 2), 0.02);  // uniform(-1, 1) * (9 // 2) / 2
  EXPECT_LT(KsUniform(sy, -2, 2), 0.02);
  for (const json& q : Params(R"([{"__class_fullname__": "MotionBlur", "p": 1,
      "allow_shifted": false}])",
                              "MotionBlur", 100, 120, 200)) {
    EXPECT_EQ(q["shift"], json({0.0, 0.0}));
  }
}

// GaussNoise's noise: trunc(N(mean, sigma)) * 255 added to each value (albucore truncates).
// Issue 40 item 22: CoarseDropout holes larger than the image made an OpenCV ROI assertion
// when the sample was drawn. albumentations 2.0.8 raises ValueError (low >= high) there; dspipe
// refuses where the size is known (CheckInputSize, at open) and in the draw (BadInput), and
// refuses a fraction height range with a pixel width range when parsing.
TEST(TransformDraws, CoarseDropoutHolesLargerThanTheImageAreRefusedWithTheReason) {
  auto p = MustParse(R"([{"__class_fullname__": "CoarseDropout", "p": 1,
      "hole_height_range": [300, 400], "hole_width_range": [300, 400]}])");
  ASSERT_TRUE(p);
  const Status open = p->CheckInputSize(100, 120);
  EXPECT_EQ(open.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(open.message(),
            "transform 1 (CoarseDropout): argument hole_height_range=(300.0, 400.0) asks for "
            "holes at least 300 px high, larger than the 100x120 image it gets (albumentations "
            "2.0.8 raises ValueError: low >= high): give sizes up to 100 px, or fractions of the "
            "image such as (0.1, 0.2)");
  EXPECT_TRUE(p->CheckInputSize(0, 0).ok());  // unknown: the draw refuses it
  EXPECT_TRUE(p->CheckInputSize(300, 300).ok());
  std::string text;
  const Status draw = p->Draws(7, 0, 0, 100, 120, nullptr, &text);
  EXPECT_EQ(draw.code(), Status::Code::kBadInput) << draw.ToString();
  EXPECT_NE(draw.message().find("at least 300 px high, larger than the 100x120 image"),
            std::string::npos)
      << draw.ToString();
  // The width alone, and after a Resize (the size CoarseDropout gets is the Resize's).
  auto w = MustParse(R"([{"__class_fullname__": "Resize", "p": 1, "height": 64, "width": 32},
      {"__class_fullname__": "CoarseDropout", "p": 0.5, "hole_height_range": [8, 16],
       "hole_width_range": [40, 50]}])");
  ASSERT_TRUE(w);
  EXPECT_NE(w->CheckInputSize(0, 0).message().find(
                "transform 2 (CoarseDropout): argument hole_width_range=(40.0, 50.0) asks for "
                "holes at least 40 px wide, larger than the 64x32 image"),
            std::string::npos)
      << w->CheckInputSize(0, 0).ToString();
  // Holes that fit, including a maximum past the image (albumentations clamps it): drawn.
  auto ok = MustParse(R"([{"__class_fullname__": "CoarseDropout", "p": 1,
      "hole_height_range": [50, 400], "hole_width_range": [50, 400]}])");
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->CheckInputSize(100, 120).ok());
  for (const json& q : Params(R"([{"__class_fullname__": "CoarseDropout", "p": 1,
      "hole_height_range": [50, 400], "hole_width_range": [50, 400]}])",
                              "CoarseDropout", 100, 120, 200)) {
    for (const json& hole : q["holes"]) {
      EXPECT_GE(hole[0].get<int>(), 0);
      EXPECT_LE(hole[2].get<int>(), 120);
      EXPECT_LE(hole[3].get<int>(), 100);
      EXPECT_GE(hole[3].get<int>() - hole[1].get<int>(), 50);
    }
  }
  // A fraction height range with a pixel width range: albumentations reads both as fractions.
  std::shared_ptr<const TransformPipeline> mixed;
  const Status m = TransformPipeline::Parse(
      R"([{"__class_fullname__": "CoarseDropout", "hole_height_range": [0.1, 0.2],
          "hole_width_range": [10, 20]}])",
      &mixed);
  EXPECT_EQ(m.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(m.message().find("hole_width_range=(10.0, 20.0) is larger than 1 while "
                             "hole_height_range=(0.1, 0.2) is a fraction"),
            std::string::npos)
      << m.ToString();
}

TEST(TransformDraws, GaussNoiseIsTruncatedNormal) {
  auto p = MustParse(R"([{"__class_fullname__": "GaussNoise", "p": 1, "std_range": [0.1, 0.1]}])");
  ASSERT_TRUE(p);
  std::vector<uint8_t> gray(100 * 100, 128);
  const ImageRef in{gray.data(), 100, 100, 1};
  OwnedImage out;
  ASSERT_TRUE(p->Apply(1, 0, 0, in, nullptr, &out, nullptr).ok());
  const double sigma = 0.1 * 255;
  std::map<int, int> hist;
  for (uint8_t v : out.pixels) ++hist[static_cast<int>(v) - 128];
  auto phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  double ks = 0, cum = 0;
  for (int k = -127; k <= 127; ++k) {
    cum += hist.count(k) ? hist[k] : 0;
    const double want = k >= 0 ? phi((k + 1) / sigma) : phi(k / sigma);  // P(trunc(X) <= k)
    ks = std::max(ks, std::fabs(cum / 1e4 - want));
  }
  EXPECT_LT(ks, 0.02);
  // per_channel=false: one noise value per pixel, the same in every channel.
  p = MustParse(R"([{"__class_fullname__": "GaussNoise", "p": 1, "per_channel": false}])");
  std::vector<uint8_t> rgb(40 * 40 * 3, 100);
  const ImageRef in3{rgb.data(), 40, 40, 3};
  ASSERT_TRUE(p->Apply(1, 0, 0, in3, nullptr, &out, nullptr).ok());
  int varied = 0;
  for (size_t i = 0; i < out.pixels.size(); i += 3) {
    ASSERT_EQ(out.pixels[i], out.pixels[i + 1]);
    ASSERT_EQ(out.pixels[i], out.pixels[i + 2]);
    varied += out.pixels[i] != 100;
  }
  EXPECT_GT(varied, 1500);
}

// Found by fuzz_transform_spec: a step after a CropNonEmptyMaskIfExists (whose position waits
// for the mask) was planned for the uncropped size, so Resize cut a region outside the crop
// (cv::Exception in ResizeLeaf::Warp) and the fused path warped with the wrong map. The crop's
// size is known before the mask: what follows is planned for it.
TEST(TransformDraws, StepsAfterCropNonEmptyMaskIfExistsSeeItsSize) {
  for (const char* spec : {
           R"([{"__class_fullname__": "CropNonEmptyMaskIfExists", "p": 1, "height": 8, "width": 6},
               {"__class_fullname__": "Resize", "p": 1, "height": 12, "width": 10}])",
           R"([{"__class_fullname__": "OneOf", "p": 1, "transforms": [
               {"__class_fullname__": "CropNonEmptyMaskIfExists", "p": 1, "height": 8, "width": 6}]},
               {"__class_fullname__": "Resize", "p": 1, "height": 12, "width": 10}])",
           R"([{"__class_fullname__": "CropNonEmptyMaskIfExists", "p": 1, "height": 8, "width": 6},
               {"__class_fullname__": "RandomCrop", "p": 1, "height": 5, "width": 5}])"}) {
    auto p = MustParse(spec);
    ASSERT_TRUE(p);
    int oh = 0, ow = 0;
    ASSERT_TRUE(p->OutputSize(20, 15, &oh, &ow));
    std::vector<uint8_t> mask(20 * 15, 0), image(20 * 15 * 3);
    for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>(i * 37 + 11);
    for (int y = 10; y < 13; ++y) {
      for (int x = 9; x < 12; ++x) mask[static_cast<size_t>(y) * 15 + x] = 2;
    }
    const ImageRef m{mask.data(), 20, 15, 1}, img{image.data(), 20, 15, 3};
    for (uint64_t i = 0; i < 20; ++i) {
      OwnedImage fused, fused_mask, seq, seq_mask;
      ASSERT_TRUE(p->Apply(1, 0, i, img, &m, &fused, &fused_mask).ok()) << spec;
      ASSERT_TRUE(p->ApplySequential(1, 0, i, img, &m, &seq, &seq_mask).ok()) << spec;
      EXPECT_EQ(fused.height, oh);
      EXPECT_EQ(fused.width, ow);
      EXPECT_EQ(seq.height, oh);
      EXPECT_EQ(seq.width, ow);
      // The fused warp is one map, the sequential one crops then resizes: along the edges of
      // the mask's blob a nearest-neighbour pick may differ, nowhere else.
      ASSERT_EQ(fused_mask.pixels.size(), seq_mask.pixels.size());
      size_t same = 0;
      for (size_t k = 0; k < seq_mask.pixels.size(); ++k) {
        same += fused_mask.pixels[k] == seq_mask.pixels[k];
      }
      EXPECT_GE(same * 10, seq_mask.pixels.size() * 9) << spec << " sample " << i;
      std::string draws;
      ASSERT_TRUE(p->Draws(1, 0, i, 20, 15, &m, &draws).ok());
      const json d = json::parse(draws);
      EXPECT_EQ(d[0]["out"], json({8, 6})) << draws;
      EXPECT_EQ(d[1]["in"], json({8, 6})) << draws;
    }
  }
}

TEST(TransformDraws, CropNonEmptyMaskIfExistsCropsAroundTheMask) {
  auto p = MustParse(
      R"([{"__class_fullname__": "CropNonEmptyMaskIfExists", "p": 1, "height": 10, "width": 12}])");
  ASSERT_TRUE(p);
  std::vector<uint8_t> mask(80 * 90, 0), image(80 * 90 * 3, 7);
  for (int y = 50; y < 54; ++y) {
    for (int x = 20; x < 23; ++x) mask[static_cast<size_t>(y) * 90 + x] = 3;
  }
  const ImageRef m{mask.data(), 80, 90, 1}, img{image.data(), 80, 90, 3};
  for (uint64_t i = 0; i < 300; ++i) {
    OwnedImage out, out_mask;
    ASSERT_TRUE(p->Apply(5, 0, i, img, &m, &out, &out_mask).ok());
    ASSERT_EQ(out_mask.height, 10);
    ASSERT_EQ(out_mask.width, 12);
    EXPECT_TRUE(std::any_of(out_mask.pixels.begin(), out_mask.pixels.end(), [](uint8_t v) {
      return v == 3;
    })) << i;
  }
  OwnedImage out;
  EXPECT_EQ(p->Apply(5, 0, 0, img, nullptr, &out, nullptr).code(), Status::Code::kBadInput);
}

}  // namespace
}  // namespace dspipe
