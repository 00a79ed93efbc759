// SPDX-License-Identifier: Apache-2.0
// MONAI 1.6.1's dictionary transforms as plan leaves (monai.h): the argument readers and pixel
// helpers every transform shares (monai_leaf.h), the table of supported transforms, and the
// parser that turns a bundle config into a Compose of leaves. The leaves are in
// monai_intensity.cc and monai_spatial.cc.
#include "transforms/monai.h"

#include <algorithm>
#include <cmath>

#include "transforms/monai_leaf.h"

namespace dspipe::transforms {
namespace monai {
namespace {

constexpr const char* kImageKeys[] = {"image", "img"};
constexpr const char* kLabelKeys[] = {"label", "seg", "mask"};

bool IsOneOf(const std::string& s, const auto& names) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return s == n; });
}

}  // namespace

// ---- reading MONAI arguments ----------------------------------------------------------------

// keys / allow_missing_keys / dtype / lazy, as every dictionary transform has them.
Keys ReadKeys(ArgReader& r, Role role) {
  Keys k;
  const json* v = r.Raw("keys");
  if (v == nullptr) {
    r.Fail(r.where() + ": argument keys is required (e.g. [\"image\", \"label\"])");
    return k;
  }
  const json list = v->is_string() ? json::array({*v}) : *v;
  if (!list.is_array() || list.empty()) {
    r.Fail(r.where() + ": argument keys must be a key or a list of keys, got " + v->dump());
    return k;
  }
  for (const json& e : list) {
    const std::string s = e.is_string() ? e.get<std::string>() : e.dump();
    if (e.is_string() && !s.empty() && (s[0] == '@' || s[0] == '$' || s[0] == '%')) {
      r.Fail(r.where() + ": argument keys holds the bundle reference " + s +
             ", which dspipe does not evaluate: resolve the config first "
             "(monai.bundle.ConfigParser(...).get_parsed_content) or write the keys out");
      return k;
    }
    if (e.is_string() && IsOneOf(s, kImageKeys)) {
      k.image = true;
    } else if (e.is_string() && IsOneOf(s, kLabelKeys)) {
      k.label = true;
    } else {
      r.Fail(r.where() + ": argument keys names " + s +
             "; a dspipe sample has an image (key \"image\") and a label (key \"label\"; \"seg\" "
             "and \"mask\" are read as it)");
      return k;
    }
  }
  k.names = list;
  r.Put("keys", list);
  if (role == Role::kIntensity && k.label) {
    r.Fail(r.where() +
           ": an intensity transform on the label would change its class ids; "
           "keep only the image in keys");
  }
  if (role != Role::kNoOp && !k.image && !k.label) {
    r.Fail(r.where() + ": argument keys names neither the image nor the label");
  }
  (void)r.Bool("allow_missing_keys", false);
  (void)r.Bool("lazy", false);
  return k;
}

// dtype: MONAI's float32 default (any spelling of it) or None; dspipe computes in float32.
void ReadFloatDtype(ArgReader& r) {
  const json* v = r.Raw("dtype");
  if (v == nullptr) return;
  const std::string s = v->is_string() ? v->get<std::string>() : v->dump();
  const bool f32 = s.size() >= 7 && s.compare(s.size() - 7, 7, "float32") == 0;
  if (!f32) {
    r.Fail(r.where() + ": argument dtype=" + s +
           " is not supported: dspipe computes MONAI's transforms in float32 (its default)");
  }
  r.Put("dtype", "float32");
}

// A number or None.
std::optional<double> OptNumber(ArgReader& r, const char* key) {
  const json* v = r.Raw(key);
  if (v == nullptr) {
    r.Put(key, nullptr);
    return std::nullopt;
  }
  if (!v->is_number() || v->is_boolean()) {
    r.Fail(r.where() + ": argument " + key + " must be a number or null, got " + v->dump());
    return std::nullopt;
  }
  r.Put(key, *v);
  return v->get<double>();
}

double Required(ArgReader& r, const char* key) {
  if (!r.Has(key)) r.Fail(r.where() + ": argument " + key + " is required");
  return r.Number(key, 0.0);
}

double Prob(ArgReader& r, double def) { return r.Number("prob", def, 0.0, 1.0); }

// A (lo, hi) range from a number x (-|x|, |x|) or a pair (min, max), as MONAI's Rand*Intensity.
std::pair<double, double> SymmetricRange(ArgReader& r, const char* key) {
  const json* v = r.Raw(key);
  if (v == nullptr) {
    r.Fail(r.where() + ": argument " + key + " is required");
    return {0, 0};
  }
  if (v->is_number() && !v->is_boolean()) {
    const double x = v->get<double>();
    r.Put(key, json::array({std::min(-x, x), std::max(-x, x)}));
    return {std::min(-x, x), std::max(-x, x)};
  }
  if (v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number()) {
    const double a = (*v)[0].get<double>(), b = (*v)[1].get<double>();
    r.Put(key, json::array({std::min(a, b), std::max(a, b)}));
    return {std::min(a, b), std::max(a, b)};
  }
  r.Fail(r.where() + ": argument " + key + " must be a number or a pair of numbers, got " +
         v->dump());
  return {0, 0};
}

// A 2-D spatial size: an int for both axes or [h, w]; a non-positive entry keeps the input's.
std::array<int, 2> SpatialSize(ArgReader& r, const char* key) {
  const json* v = r.Raw(key);
  std::array<int, 2> s = {-1, -1};
  auto as_int = [&](const json& e, int* out) {
    if (!e.is_number() || e.is_boolean() || e.get<double>() != std::floor(e.get<double>()) ||
        std::fabs(e.get<double>()) > 1e8) {
      return false;
    }
    *out = static_cast<int>(e.get<double>());
    return true;
  };
  if (v == nullptr) {
    r.Fail(r.where() + ": argument " + key + " is required (an int, or [height, width])");
    return s;
  }
  bool ok = true;
  if (v->is_array()) {
    ok = v->size() == 2 && as_int((*v)[0], &s[0]) && as_int((*v)[1], &s[1]);
  } else {
    ok = as_int(*v, &s[0]);
    s[1] = s[0];
  }
  if (!ok) {
    r.Fail(r.where() + ": argument " + key +
           " must be an int or a pair [height, width] of ints (a 2-D slice; a non-positive "
           "entry keeps the input's size), got " +
           v->dump());
  }
  r.Put(key, json::array({s[0], s[1]}));
  return s;
}

// An int for both axes or [h, w], each >= lo.
std::array<int, 2> IntPair(ArgReader& r, const char* key, int def, int lo) {
  const json* v = r.Raw(key);
  std::array<int, 2> out = {def, def};
  if (v == nullptr) {
    r.Put(key, def);
    return out;
  }
  const json list = v->is_array() ? *v : json::array({*v, *v});
  const bool ok =
      list.size() == 2 && std::all_of(list.begin(), list.end(), [&](const json& e) {
        return e.is_number_integer() && e.get<int64_t>() >= lo && e.get<int64_t>() < (1 << 20);
      });
  if (!ok) {
    r.Fail(r.where() + ": argument " + key + " must be an int >= " + std::to_string(lo) +
           " or a pair [height, width] of them, got " + v->dump());
    return out;
  }
  out = {list[0].get<int>(), list[1].get<int>()};
  r.Put(key, *v);
  return out;
}

std::array<json, 2> PerKey(ArgReader& r, const Keys& k, const char* key, const json& def) {
  const json* v = r.Raw(key);
  if (v == nullptr) {
    r.Put(key, def);
    return {def, def};
  }
  r.Put(key, *v);
  if (!v->is_array()) return {*v, *v};
  if (v->size() != k.names.size()) {
    r.Fail(r.where() + ": argument " + key + " has " + std::to_string(v->size()) + " values for " +
           std::to_string(k.names.size()) + " keys: give one value, or one per key in keys' order");
    return {def, def};
  }
  std::array<json, 2> out = {def, def};
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string name = k.names[i].get<std::string>();
    out[IsOneOf(name, kLabelKeys) ? 1 : 0] = (*v)[i];
  }
  return out;
}

void ReadPadModes(ArgReader& r, const Keys& k, const char* key, const char* def, int border[2]) {
  const std::array<json, 2> modes = PerKey(r, k, key, def);
  const std::vector<std::string>& ok = PadModes();
  for (int i = 0; i < 2; ++i) {
    if (!modes[i].is_string() ||
        std::find(ok.begin(), ok.end(), modes[i].get<std::string>()) == ok.end()) {
      r.Fail(r.where() + ": argument " + key +
             " must be a pad mode (constant, edge, replicate, reflect, symmetric, wrap, "
             "circular) or one per key, got " +
             modes[i].dump());
      return;
    }
    border[i] = PadBorder(modes[i].get<std::string>());
  }
}

// Arguments about Python objects and metadata: read, kept as given, no effect on the pixels.
void KeepIgnored(ArgReader& r, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (const json* v = r.Raw(key.c_str()); v != nullptr) r.Put(key.c_str(), *v);
  }
}

// ---- float32 pixel helpers -------------------------------------------------------------------

Status NeedFloat(const cv::Mat& m, const std::string& name) {
  if (m.depth() != CV_32F) {
    return Status::Internal(name +
                            ": MONAI transforms run on float32 pixels (ApplyPixels, the "
                            "loader convert them first)");
  }
  return Status::OK();
}

std::vector<float> Values(const cv::Mat& m, int c) {
  std::vector<float> v;
  v.reserve(m.total() * static_cast<size_t>(c < 0 ? m.channels() : 1));
  ForChannel(const_cast<cv::Mat*>(&m), c, [&](float& x) { v.push_back(x); });
  return v;
}

// numpy.percentile / torch.quantile with linear interpolation (q in [0, 100]).
float Percentile(std::vector<float> v, double q) {
  if (v.empty()) return 0.0f;
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const float a = v[lo];
  float b = a;
  if (hi != lo) b = *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end());
  const float frac = static_cast<float>(pos - static_cast<double>(lo));
  return a + (b - a) * frac;  // torch.lerp's form
}

}  // namespace monai

namespace {

using nlohmann::json;
using namespace monai;  // NOLINT(google-build-using-namespace): this file is the front end

std::string ShortTarget(const std::string& t) {
  const size_t dot = t.rfind('.');
  return dot == std::string::npos ? t : t.substr(dot + 1);
}

class NoOp final : public MonaiLeaf {
 public:
  Kind kind() const override { return Kind::kNormalize; }
  Status Draw(Rng&, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    return Status::OK();
  }
  json Params(const Step&) const override { return json::object(); }
};

// AsDiscreted: the label one-hot (to_onehot=N; the ids are checked < N here, the one-hot
// float32 channels are made where the batch leaves the loader: DeviceLoader,
// dspipe.transforms.apply), the image thresholded (x >= threshold: 1, else 0) or rounded
// (torch.round: half to even).
class AsDiscrete final : public MonaiLeaf {
 public:
  int classes = 0;
  std::optional<double> threshold;
  bool rounding = false;
  Kind kind() const override { return Kind::kPixel; }
  Status Draw(Rng&, int, const cv::Mat*, Step* s) const override {
    s->out = s->in;
    return Status::OK();
  }
  Status Apply(const Step&, cv::Mat* image, cv::Mat* mask) const override {
    if (threshold || rounding) {
      DSPIPE_RETURN_IF_ERROR(NeedFloat(*image, name));
      const float t = threshold ? static_cast<float>(*threshold) : 0.0f;
      ForChannel(image, -1, [&](float& x) {
        if (threshold) x = x >= t ? 1.0f : 0.0f;
        if (rounding) x = std::nearbyint(x);
      });
    }
    if (classes > 0 && mask != nullptr) {
      double lo = 0, hi = 0;
      cv::minMaxLoc(*mask, &lo, &hi);
      if (hi >= classes) {
        return Status::BadInput("the label holds id " + std::to_string(static_cast<int64_t>(hi)) +
                                ", not below to_onehot=" + std::to_string(classes) +
                                " (MONAI's one_hot fails the same; raise to_onehot to the number "
                                "of classes)");
      }
    }
    return Status::OK();
  }
  json Params(const Step&) const override { return json::object(); }
};

Status MakeAsDiscrete(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<AsDiscrete>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  const std::array<json, 2> argmax = PerKey(r, k, "argmax", false);
  const std::array<json, 2> onehot = PerKey(r, k, "to_onehot", nullptr);
  const std::array<json, 2> threshold = PerKey(r, k, "threshold", nullptr);
  const std::array<json, 2> rounding = PerKey(r, k, "rounding", nullptr);
  for (int i = 0; i < 2; ++i) {
    if (!(i == 0 ? k.image : k.label)) continue;
    const char* what = i == 0 ? "the image" : "the label";
    if (!argmax[i].is_boolean() || argmax[i].get<bool>()) {
      r.Fail(r.where() + ": argmax=" + argmax[i].dump() + " on " + what +
             " is not supported: it reduces a prediction's channels, a training sample has "
             "none to reduce");
      break;
    }
    if (i == 0 && !onehot[0].is_null()) {
      r.Fail(r.where() +
             ": to_onehot applies to the label (class ids), not the image; give it "
             "per key, e.g. to_onehot=[null, 3] for keys [\"image\", \"label\"]");
      break;
    }
    if (i == 1 && !onehot[1].is_null()) {
      if (!onehot[1].is_number_integer() || onehot[1].get<int64_t>() < 1 ||
          onehot[1].get<int64_t>() > 65536) {
        r.Fail(r.where() + ": argument to_onehot must be the number of classes (1..65536) or " +
               "null, got " + onehot[1].dump());
        break;
      }
      l->classes = onehot[1].get<int>();
    }
    if (i == 1 && (!threshold[1].is_null() || !rounding[1].is_null())) {
      r.Fail(r.where() +
             ": threshold / rounding on the label would change its class ids; give "
             "them per key with null for the label");
      break;
    }
    if (i == 0 && !threshold[0].is_null()) {
      if (!threshold[0].is_number() || threshold[0].is_boolean()) {
        r.Fail(r.where() + ": argument threshold must be a number or null, got " +
               threshold[0].dump());
        break;
      }
      l->threshold = threshold[0].get<double>();
    }
    if (i == 0 && !rounding[0].is_null()) {
      if (rounding[0] != "torchrounding") {
        r.Fail(r.where() + ": argument rounding must be \"torchrounding\" or null, got " +
               rounding[0].dump());
        break;
      }
      l->rounding = true;
    }
  }
  // AsDiscrete's keyword arguments at MONAI's defaults: one-hot along the channel dimension,
  // float32.
  r.OnlyDefault("dim", 0, "the one-hot channels are the first dimension, as MONAI's default");
  r.OnlyDefault("keepdim", true, "the channel dimension is kept, as MONAI's default");
  ReadFloatDtype(r);
  return Done(r, std::move(l), k, 1.0,
              {"argmax", "to_onehot", "threshold", "rounding", "dim", "keepdim", "dtype", "lazy"},
              out);
}

struct Entry {
  MonaiType type;
  MonaiFactory make;
};

Status MakeNoOp(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<NoOp>();
  const Keys k = ReadKeys(r, Role::kNoOp);
  // LoadImaged / EnsureTyped arguments that keep their meaning only at their defaults.
  if (r.Has("dtype")) ReadFloatDtype(r);
  if (r.Has("data_type")) {
    const std::string t = r.Choice("data_type", "tensor", {"tensor", "numpy"});
    (void)t;
  }
  // Arguments about Python objects and metadata: read, kept, no effect on the pixels.
  const std::vector<std::string> ignored = {
      "image_only",       "ensure_channel_first", "track_meta",     "device",
      "wrap_sequence",    "channel_dim",          "strict_check",   "reader",
      "simple_keys",      "prune_meta_pattern",   "prune_meta_sep", "meta_keys",
      "meta_key_postfix", "overwriting",          "expanduser"};
  KeepIgnored(r, ignored);
  std::vector<std::string> args = {"dtype", "data_type"};
  args.insert(args.end(), ignored.begin(), ignored.end());
  args.push_back("lazy");
  return Done(r, std::move(l), k, 1.0, args, out);
}

const std::vector<Entry>& Entries() {
  static const std::vector<Entry> e = {
      {{"LoadImaged", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"EnsureChannelFirstd", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"EnsureTyped", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"ToTensord", "no-op", "-", {"keys"}}, MakeNoOp},
      {{"ScaleIntensityRanged",
        "intensity",
        "unchanged",
        {"keys", "a_min", "a_max", "b_min", "b_max", "clip"}},
       MakeScaleIntensityRange},
      {{"ScaleIntensityRangePercentilesd",
        "intensity",
        "unchanged",
        {"keys", "lower", "upper", "b_min", "b_max", "clip", "relative", "channel_wise"}},
       MakeScaleIntensityRangePercentiles},
      {{"ScaleIntensityd",
        "intensity",
        "unchanged",
        {"keys", "minv", "maxv", "factor", "channel_wise"}},
       MakeScaleIntensity},
      {{"NormalizeIntensityd",
        "intensity",
        "unchanged",
        {"keys", "subtrahend", "divisor", "nonzero", "channel_wise"}},
       MakeNormalizeIntensity},
      {{"ThresholdIntensityd", "intensity", "unchanged", {"keys", "threshold", "above", "cval"}},
       MakeThresholdIntensity},
      {{"ClipIntensityPercentilesd",
        "intensity",
        "unchanged",
        {"keys", "lower", "upper", "sharpness_factor", "channel_wise"}},
       MakeClipIntensityPercentiles},
      {{"RandScaleIntensityd",
        "intensity",
        "unchanged",
        {"keys", "factors", "prob", "channel_wise"}},
       MakeRandScaleIntensity},
      {{"RandShiftIntensityd",
        "intensity",
        "unchanged",
        {"keys", "offsets", "prob", "channel_wise"}},
       MakeRandShiftIntensity},
      {{"RandGaussianNoised",
        "intensity",
        "unchanged",
        {"keys", "prob", "mean", "std", "sample_std"}},
       MakeRandGaussianNoise},
      {{"RandAdjustContrastd",
        "intensity",
        "unchanged",
        {"keys", "prob", "gamma", "invert_image", "retain_stats"}},
       MakeRandAdjustContrast},
      {{"RandGaussianSmoothd",
        "intensity",
        "unchanged",
        {"keys", "sigma_x", "sigma_y", "sigma_z", "approx", "prob"}},
       MakeRandGaussianSmooth},
      {{"RandHistogramShiftd", "intensity", "unchanged", {"keys", "num_control_points", "prob"}},
       MakeRandHistogramShift},
      {{"RandBiasFieldd",
        "intensity",
        "unchanged",
        {"keys", "degree", "coeff_range", "dtype", "prob"}},
       MakeRandBiasField},
      {{"RandFlipd", "spatial", "same flip", {"keys", "prob", "spatial_axis"}}, MakeRandFlip},
      {{"RandRotate90d", "spatial", "same rotation", {"keys", "prob", "max_k", "spatial_axes"}},
       MakeRandRotate90},
      {{"SpatialPadd",
        "spatial",
        "same padding (the pad value)",
        {"keys", "spatial_size", "method", "mode", "value"}},
       MakeSpatialPad},
      {{"CenterSpatialCropd", "spatial", "same crop", {"keys", "roi_size"}}, MakeCenterSpatialCrop},
      {{"RandSpatialCropd",
        "spatial",
        "same crop",
        {"keys", "roi_size", "max_roi_size", "random_center", "random_size"}},
       MakeRandSpatialCrop},
      {{"RandCropByPosNegLabeld",
        "spatial",
        "same crop (chosen from it)",
        {"keys", "label_key", "spatial_size", "pos", "neg", "num_samples", "image_key",
         "image_threshold", "allow_smaller"}},
       MakeRandCropByPosNegLabel},
      {{"RandCropByLabelClassesd",
        "spatial",
        "same crop (chosen from it)",
        {"keys", "label_key", "spatial_size", "ratios", "num_classes", "num_samples", "image_key",
         "image_threshold", "allow_smaller", "max_samples_per_class"}},
       MakeRandCropByLabelClasses},
      {{"RandWeightedCropd",
        "spatial",
        "same crop (or the crop drawn from it)",
        {"keys", "w_key", "spatial_size", "num_samples"}},
       MakeRandWeightedCrop},
      {{"CropForegroundd",
        "spatial",
        "same crop (or the crop found in it)",
        {"keys", "source_key", "select_fn", "channel_indices", "margin", "allow_smaller",
         "k_divisible", "mode", "start_coord_key", "end_coord_key", "value"}},
       MakeCropForeground},
      {{"Resized",
        "spatial",
        "same resize (nearest)",
        {"keys", "spatial_size", "size_mode", "mode", "align_corners", "anti_aliasing",
         "anti_aliasing_sigma", "dtype"}},
       MakeResize},
      {{"RandZoomd",
        "spatial",
        "same zoom (nearest)",
        {"keys", "prob", "min_zoom", "max_zoom", "mode", "padding_mode", "align_corners", "dtype",
         "keep_size"}},
       MakeRandZoom},
      {{"RandRotated",
        "spatial",
        "same rotation (nearest)",
        {"keys", "range_x", "range_y", "range_z", "prob", "keep_size", "mode", "padding_mode",
         "align_corners", "dtype"}},
       MakeRandRotate},
      {{"RandAffined",
        "spatial",
        "same affine map (nearest)",
        {"keys", "spatial_size", "prob", "rotate_range", "shear_range", "translate_range",
         "scale_range", "mode", "padding_mode", "cache_grid", "device"}},
       MakeRandAffine},
      {{"Rand2DElasticd",
        "spatial",
        "same deformation (nearest)",
        {"keys", "spacing", "magnitude_range", "spatial_size", "prob", "rotate_range",
         "shear_range", "translate_range", "scale_range", "mode", "padding_mode", "device"}},
       MakeRand2DElastic},
      {{"AsDiscreted",
        "label output",
        "one-hot float32 (to_onehot)",
        {"keys", "argmax", "to_onehot", "threshold", "rounding"}},
       MakeAsDiscrete},
      {{"ResizeWithPadOrCropd",
        "spatial",
        "same crop and padding",
        {"keys", "spatial_size", "method", "mode", "value"}},
       MakeResizeWithPadOrCrop},
  };
  return e;
}

std::string SupportedList() {
  std::string s;
  for (const Entry& e : Entries()) s += (s.empty() ? "" : ", ") + std::string(e.type.name);
  return s;
}

}  // namespace

bool IsMonaiSpec(const json& j) {
  if (j.is_object()) return j.contains("_target_");
  return j.is_array() && !j.empty() && j[0].is_object() && j[0].contains("_target_");
}

const std::vector<MonaiType>& MonaiTypes() {
  static const std::vector<MonaiType> t = [] {
    std::vector<MonaiType> v;
    for (const Entry& e : Entries()) v.push_back(e.type);
    return v;
  }();
  return t;
}

Status ParseMonaiSpec(const json& j, std::unique_ptr<Node>* root, int* node_count) {
  const json* list = &j;
  auto node = std::make_unique<Node>();
  node->type = Node::kCompose;
  node->position = 0;
  node->extra = json{{"__monai__", true}};
  if (j.is_object()) {
    const json& t = j.at("_target_");
    if (!t.is_string() || ShortTarget(t.get<std::string>()) != "Compose") {
      return Status::InvalidArgument(
          "transforms: a MONAI config is a list of transforms or a Compose with \"transforms\", "
          "got \"_target_\": " +
          t.dump());
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() != "_target_" && it.key() != "transforms" && it.key() != "map_items" &&
          it.key() != "unpack_items" && it.key() != "lazy" && it.key() != "log_stats") {
        return Status::InvalidArgument("transforms: Compose argument " + it.key() +
                                       " is not supported (supported: transforms)");
      }
    }
    if (!j.contains("transforms") || !j.at("transforms").is_array()) {
      return Status::InvalidArgument("transforms: the MONAI Compose needs a \"transforms\" list");
    }
    list = &j.at("transforms");
  }
  int position = 1;
  for (const json& e : *list) {
    const int pos = position++;
    if (!e.is_object() || !e.contains("_target_") || !e.at("_target_").is_string()) {
      return Status::InvalidArgument("transform " + std::to_string(pos) +
                                     ": expected a {\"_target_\": ...} object, got " +
                                     e.dump().substr(0, 80));
    }
    const std::string name = ShortTarget(e.at("_target_").get<std::string>());
    const std::string where = Where(pos, name);
    const auto& entries = Entries();
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const Entry& en) { return name == en.type.name; });
    if (it == entries.end()) {
      return Status::InvalidArgument(where + ": MONAI transform " + name +
                                     " is not supported (supported: " + SupportedList() + ")");
    }
    json args = e;
    args.erase("_target_");
    ArgReader r(args, where);
    std::unique_ptr<MonaiLeaf> leaf;
    DSPIPE_RETURN_IF_ERROR(it->make(r, &leaf));
    leaf->name = name;
    leaf->args = r.normalized();
    auto child = std::make_unique<Node>();
    child->type = Node::kLeaf;
    child->position = pos;
    child->p = leaf->prob;
    child->leaf = std::move(leaf);
    node->children.push_back(std::move(child));
  }
  *node_count = position;
  *root = std::move(node);
  return Status::OK();
}

json MonaiJson(const Node& root) {
  json list = json::array();
  for (const auto& c : root.children) {
    json e = {{"_target_", c->leaf->name}};
    e.update(c->leaf->args);
    list.push_back(e);
  }
  return {{"_target_", "Compose"}, {"transforms", list}};
}

Status MonaiLabelClasses(const Node& root, int* classes) {
  *classes = 0;
  const Node* onehot = nullptr;
  for (const auto& c : root.children) {
    if (c->leaf == nullptr) continue;
    const auto* a = dynamic_cast<const AsDiscrete*>(c->leaf.get());
    if (a != nullptr && a->classes > 0) {
      if (onehot != nullptr) {
        return Status::InvalidArgument(Where(c->position, c->leaf->name) +
                                       ": the label is one-hot already (" +
                                       Where(onehot->position, onehot->leaf->name) + ")");
      }
      onehot = c.get();
      *classes = a->classes;
    } else if (onehot != nullptr && c->leaf->kind() == Kind::kGeometric) {
      return Status::InvalidArgument(
          Where(c->position, c->leaf->name) + ": a spatial transform after " +
          Where(onehot->position, onehot->leaf->name) +
          " would move a one-hot label (its padding would be all-zero channels, not class 0): "
          "put AsDiscreted(to_onehot=...) after the spatial transforms");
    }
  }
  return Status::OK();
}

const Node* MonaiSpatialWithoutLabel(const Node& root) {
  for (const auto& c : root.children) {
    if (c->leaf == nullptr || c->leaf->kind() != Kind::kGeometric) continue;
    const auto* m = dynamic_cast<const MonaiLeaf*>(c->leaf.get());
    if (m != nullptr && !m->keys.label) return c.get();
  }
  return nullptr;
}

}  // namespace dspipe::transforms