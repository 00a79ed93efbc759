// SPDX-License-Identifier: Apache-2.0
// Internal to the MONAI front end (monai.h): the leaf bases, the argument readers every MONAI
// transform shares and the float32 pixel helpers. monai.cc reads them and lists the transforms;
// monai_intensity.cc and monai_spatial.cc hold the leaves and the factories that read their
// arguments.
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dspipe/status.h"
#include "transforms/args.h"
#include "transforms/ops.h"

namespace dspipe::transforms::monai {

using nlohmann::json;

// ---- reading MONAI arguments ----------------------------------------------------------------

// What the keys name: the image, and whether the label is among them.
struct Keys {
  bool image = false;
  bool label = false;
  json names = json::array();
};

enum class Role { kIntensity, kSpatial, kNoOp };

// keys / allow_missing_keys / lazy, as every dictionary transform has them.
Keys ReadKeys(ArgReader& r, Role role);
// dtype: MONAI's float32 default (any spelling of it) or None; dspipe computes in float32.
void ReadFloatDtype(ArgReader& r);
// A number or None.
std::optional<double> OptNumber(ArgReader& r, const char* key);
double Required(ArgReader& r, const char* key);
double Prob(ArgReader& r, double def);
// A (lo, hi) range from a number x (-|x|, |x|) or a pair (min, max), as MONAI's Rand*Intensity.
std::pair<double, double> SymmetricRange(ArgReader& r, const char* key);
// A 2-D spatial size: an int for both axes or [h, w]; a non-positive entry keeps the input's.
std::array<int, 2> SpatialSize(ArgReader& r, const char* key);
// Arguments about Python objects and metadata: read, kept as given, no effect on the pixels.
void KeepIgnored(ArgReader& r, const std::vector<std::string>& keys);

// An int for both axes or [h, w], each >= lo (def when absent).
std::array<int, 2> IntPair(ArgReader& r, const char* key, int def, int lo);
// A per-key argument (MONAI's `mode=["bilinear", "nearest"]`): one value for every key, or a
// list of one per key in keys' order. {the image's, the label's} (def for a key not named).
std::array<json, 2> PerKey(ArgReader& r, const Keys& k, const char* key, const json& def);

// MONAI's pad modes (numpy.pad's and torch's names) and the cv::BORDER_* each one is.
inline const std::vector<std::string>& PadModes() {
  static const std::vector<std::string> m = {"constant",  "edge", "replicate", "reflect",
                                             "symmetric", "wrap", "circular"};
  return m;
}
inline int PadBorder(const std::string& m) {
  return m == "constant"                   ? cv::BORDER_CONSTANT
         : m == "edge" || m == "replicate" ? cv::BORDER_REPLICATE
         : m == "reflect"                  ? cv::BORDER_REFLECT_101
         : m == "symmetric"                ? cv::BORDER_REFLECT
                                           : cv::BORDER_WRAP;
}

// A per-key pad mode (PadModes' names): border[0] the image's, border[1] the label's
// cv::BORDER_*.
void ReadPadModes(ArgReader& r, const Keys& k, const char* key, const char* def, int border[2]);

inline int FallBack(int want, int have) { return want > 0 ? want : have; }

// The output of a spatial_size (a non-positive entry keeps the input's) for an input of `in`;
// unknown input (0 x 0): known only when both entries are given.
inline Size SizeOrInput(const std::array<int, 2>& size, Size in) {
  if (!in.known()) return size[0] > 0 && size[1] > 0 ? Size{size[0], size[1]} : Size{};
  return {FallBack(size[0], in.h), FallBack(size[1], in.w)};
}

// ---- float32 pixel helpers -------------------------------------------------------------------

Status NeedFloat(const cv::Mat& m, const std::string& name);

// Calls f(value&) for every sample of channel c (c < 0: every channel).
template <typename F>
void ForChannel(cv::Mat* m, int c, F f) {
  const int ch = m->channels();
  for (int y = 0; y < m->rows; ++y) {
    float* p = m->ptr<float>(y);
    for (int x = 0; x < m->cols; ++x) {
      if (c < 0) {
        for (int k = 0; k < ch; ++k) f(p[x * ch + k]);
      } else {
        f(p[x * ch + c]);
      }
    }
  }
}

// Every sample of channel c (c < 0: every channel), row-major.
std::vector<float> Values(const cv::Mat& m, int c);
// numpy.percentile / torch.quantile with linear interpolation (q in [0, 100]).
float Percentile(std::vector<float> v, double q);

// ---- leaves ----------------------------------------------------------------------------------

class MonaiLeaf : public Leaf {
 public:
  Keys keys;
  json Params(const Step& s) const override {
    json p = json::object();
    for (int i = 0; i < 4; ++i) p["v" + std::to_string(i)] = s.v[i];
    return p;
  }
};

class Intensity : public MonaiLeaf {
 public:
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng& rng, int channels, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    DrawValues(rng, channels, s);
    return Status::OK();
  }
  Status Apply(const Step& s, cv::Mat* image, cv::Mat*) const override {
    DSPIPE_RETURN_IF_ERROR(NeedFloat(*image, name));
    Run(s, image);
    return Status::OK();
  }
  virtual void DrawValues(Rng&, int, Step*) const {}
  virtual void Run(const Step& s, cv::Mat* m) const = 0;
};

class Spatial : public MonaiLeaf {
 public:
  Kind kind() const override { return Kind::kGeometric; }
};

// ---- factories -------------------------------------------------------------------------------

using MonaiFactory = Status (*)(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);

// Checks that every argument was read, then hands the leaf out.
template <typename T>
Status Done(ArgReader& r, std::unique_ptr<T> leaf, const Keys& keys, double prob,
            const std::vector<std::string>& args, std::unique_ptr<MonaiLeaf>* out) {
  std::vector<std::string> all = {"keys", "allow_missing_keys"};
  all.insert(all.end(), args.begin(), args.end());
  DSPIPE_RETURN_IF_ERROR(r.Finish(all));
  leaf->keys = keys;
  leaf->prob = prob;
  *out = std::move(leaf);
  return Status::OK();
}

// monai_intensity.cc
Status MakeScaleIntensityRange(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeScaleIntensityRangePercentiles(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeScaleIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeNormalizeIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeThresholdIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeClipIntensityPercentiles(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandGaussianNoise(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandScaleIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandShiftIntensity(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandAdjustContrast(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandGaussianSmooth(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandHistogramShift(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandBiasField(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);

// monai_spatial.cc
Status MakeRandFlip(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandRotate90(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeSpatialPad(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeResizeWithPadOrCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeCenterSpatialCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandSpatialCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandCropByPosNegLabel(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandCropByLabelClasses(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeCropForeground(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandWeightedCrop(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);

// monai_resize.cc
Status MakeResize(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandZoom(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandRotate(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);
Status MakeRandAffine(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);

// monai_elastic.cc
Status MakeRand2DElastic(ArgReader& r, std::unique_ptr<MonaiLeaf>* out);

}  // namespace dspipe::transforms::monai
