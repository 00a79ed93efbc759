// SPDX-License-Identifier: Apache-2.0
// Reading one transform's albumentations arguments: typed getters that accept what
// albumentations 2.0.8's pydantic schemas accept (a scalar where a range is expected is widened
// the same way), write the normalized value (A.to_dict's form) into normalized(), and remember
// the first error. Finish() refuses keys nobody read. Internal to dspipe::transforms.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "dspipe/status.h"

namespace dspipe::transforms {

struct Range {
  double lo = 0, hi = 0;
};

// How a scalar widens into a range (albumentations' to_tuple rules).
enum class Widen {
  kSymmetric,  // x -> (-x, x)            SymmetricRangeType
  kZeroPlus,   // x -> (0, x) or (x, 0)    NonNegative / ZeroOne / convert_to_0plus_range
  kOnePlus,    // x -> (1, x) or (x, 1)    OnePlusFloatRangeType
  kRepeat,     // x -> (x, x)
  kPairOnly,   // a pair is required
};

// A fill value: one number for every channel, or one per channel.
struct Fill {
  std::vector<double> values{0.0};
  double channel(int c) const { return values.size() == 1 ? values[0] : values[c]; }
};

class ArgReader {
 public:
  // obj: the transform's JSON object; where: "transform 3 (Affine)" for messages.
  ArgReader(const nlohmann::json& obj, std::string where);

  // "p" in [0, 1]. Missing: 0.5, as albumentations' from_dict reads a serialized transform
  // without one (Compose / Sequential: their class default, as from_dict does); class_default
  // is the constructor's default, remembered for class_default_p() (dspipe.transforms' classes).
  double Prob(double class_default, bool missing_is_class_default = false);
  double class_default_p() const { return class_default_p_; }
  double Number(const char* key, double def, double lo = -1e300, double hi = 1e300);
  int Int(const char* key, int def, int lo = INT32_MIN, int hi = INT32_MAX);
  // An int or null (returns def_null = true when null / absent with a null default).
  bool OptionalInt(const char* key, bool default_null, int def, int lo, int* value);
  bool Bool(const char* key, bool def);
  std::string Choice(const char* key, const std::string& def, const std::vector<std::string>& ok);
  // A range; with `integers` both ends must be integers (albumentations' tuple[int, int]
  // refuses a fractional part) and ints are written in normalized(); kTruncate drops a
  // fractional part instead, where albumentations does (RandomSizedCrop's min_max_height).
  enum Ints { kFloats, kIntegers, kTruncate };
  Range RangeArg(const char* key, Range def, Widen widen, double lo, double hi,
                 Ints integers = kFloats);
  // An int pair such as size=(h, w) or tile_grid_size.
  std::pair<int, int> IntPair(const char* key, std::pair<int, int> def, int lo);
  // An interpolation code (cv::INTER_*) among `ok`; a border mode among albumentations' five.
  int Interpolation(const char* key, int def, const std::vector<int>& ok);
  int BorderMode(const char* key, int def);
  Fill FillArg(const char* key, double def);
  // Accepts only `def` (a feature dspipe does not implement); anything else is refused naming it.
  void OnlyDefault(const char* key, const nlohmann::json& def, const std::string& why);
  // Accepts any value, keeps it in normalized() and ignores it (bbox-only arguments).
  void Ignored(const char* key, const nlohmann::json& def);
  // Raw access for arguments with their own rules (Affine's dicts); marks the key read.
  const nlohmann::json* Raw(const char* key);
  void Put(const char* key, nlohmann::json value) { out_[key] = std::move(value); }
  void Erase(const char* key) { out_.erase(key); }
  bool Has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  // Given as null (None), which some arguments tell from absent (MONAI's minv=None).
  bool IsNull(const char* key) const { return obj_.contains(key) && obj_.at(key).is_null(); }
  void Fail(const std::string& message);

  // OK, or the first error; also InvalidArgument for an argument nobody read.
  Status Finish(const std::vector<std::string>& supported) const;
  const nlohmann::json& normalized() const { return out_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json* Get(const char* key);
  std::string Arg(const char* key) const { return where_ + ": argument " + key; }
  // v as an int: a number without a fractional part within int's range; else Fail naming key.
  bool ToInt(const char* key, const nlohmann::json& v, int* out);

  const nlohmann::json& obj_;
  const std::string where_;
  std::set<std::string> read_;
  nlohmann::json out_ = nlohmann::json::object();
  std::string error_;
  double class_default_p_ = 0.5;
};

// "transform 3 (Affine)"-style prefix used in messages.
std::string Where(int position, const std::string& name);

}  // namespace dspipe::transforms
