// SPDX-License-Identifier: Apache-2.0
// ArgReader: albumentations 2.0.8's argument rules (to_tuple widening, range checks) on JSON.
#include "transforms/args.h"

#include <algorithm>
#include <cmath>

namespace dspipe::transforms {
namespace {

using nlohmann::json;

std::string Show(const json& v) { return v.dump(); }

bool IsNumber(const json& v) { return v.is_number() && !v.is_boolean(); }

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// JSON equality with 1 == 1.0 and [1, 2] == [1.0, 2.0] (albumentations emits either).
bool SameValue(const json& a, const json& b) {
  if (IsNumber(a) && IsNumber(b)) return a.get<double>() == b.get<double>();
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!SameValue(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key()) || !SameValue(it.value(), b.at(it.key()))) return false;
    }
    return true;
  }
  return a == b;
}

std::string Num(double v) {
  json j = v;
  return j.dump();
}

}  // namespace

std::string Where(int position, const std::string& name) {
  return "transform " + std::to_string(position) + " (" + name + ")";
}

ArgReader::ArgReader(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

void ArgReader::Fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

const json* ArgReader::Get(const char* key) {
  read_.insert(key);
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

const json* ArgReader::Raw(const char* key) { return Get(key); }

double ArgReader::Prob(double class_default, bool missing_is_class_default) {
  class_default_p_ = class_default;
  return Number("p", missing_is_class_default ? class_default : 0.5, 0.0, 1.0);
}

double ArgReader::Number(const char* key, double def, double lo, double hi) {
  const json* v = Get(key);
  double x = def;
  if (v != nullptr) {
    if (!IsNumber(*v)) {
      Fail(Arg(key) + " must be a number, got " + Show(*v));
    } else {
      x = v->get<double>();
    }
  }
  if (!(x >= lo && x <= hi)) {
    Fail(Arg(key) + "=" + Num(x) + " is outside [" + Num(lo) + ", " + Num(hi) + "]");
  }
  out_[key] = x;
  return x;
}

bool ArgReader::ToInt(const char* key, const json& v, int* out) {
  if (!IsNumber(v)) {
    Fail(Arg(key) + " must be an integer, got " + Show(v));
    return false;
  }
  const double d = v.get<double>();
  if (!std::isfinite(d) || d != std::floor(d)) {
    Fail(Arg(key) + " must be an integer, got " + Show(v) +
         " (albumentations refuses a fractional part too; write a whole number)");
    return false;
  }
  if (d > static_cast<double>(INT32_MAX) || d < static_cast<double>(INT32_MIN)) {
    Fail(Arg(key) + "=" + Show(v) + " is outside what an int holds [" + std::to_string(INT32_MIN) +
         ", " + std::to_string(INT32_MAX) + "]");
    return false;
  }
  *out = static_cast<int>(d);
  return true;
}

int ArgReader::Int(const char* key, int def, int lo, int hi) {
  const json* v = Get(key);
  int x = def;
  if (v != nullptr && !ToInt(key, *v, &x)) {
    out_[key] = x;
    return x;
  }
  if (x < lo || x > hi) {
    Fail(Arg(key) + "=" + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
         std::to_string(hi) + "]");
  }
  out_[key] = x;
  return x;
}

bool ArgReader::OptionalInt(const char* key, bool default_null, int def, int lo, int* value) {
  const json* v = Get(key);
  if (v == nullptr && (default_null || obj_.contains(key))) {
    out_[key] = nullptr;
    return false;
  }
  *value = def;
  if (v != nullptr && !ToInt(key, *v, value)) {
    out_[key] = nullptr;
    return false;
  }
  if (*value < lo)
    Fail(Arg(key) + "=" + std::to_string(*value) + " must be >= " + std::to_string(lo));
  out_[key] = *value;
  return true;
}

bool ArgReader::Bool(const char* key, bool def) {
  const json* v = Get(key);
  bool x = def;
  if (v != nullptr) {
    if (!v->is_boolean()) {
      Fail(Arg(key) + " must be true or false, got " + Show(*v));
    } else {
      x = v->get<bool>();
    }
  }
  out_[key] = x;
  return x;
}

std::string ArgReader::Choice(const char* key, const std::string& def,
                              const std::vector<std::string>& ok) {
  const json* v = Get(key);
  std::string x = def;
  if (v != nullptr) {
    if (!v->is_string()) {
      Fail(Arg(key) + " must be a string, got " + Show(*v));
    } else {
      x = v->get<std::string>();
    }
  }
  if (std::find(ok.begin(), ok.end(), x) == ok.end()) {
    Fail(Arg(key) + "=\"" + x + "\" is not supported (supported: " + Join(ok) + ")");
  }
  out_[key] = x;
  return x;
}

Range ArgReader::RangeArg(const char* key, Range def, Widen widen, double lo, double hi,
                          Ints integers) {
  const json* v = Get(key);
  Range r = def;
  if (v != nullptr) {
    if (IsNumber(*v) && widen != Widen::kPairOnly) {
      const double x = v->get<double>();
      switch (widen) {
        case Widen::kSymmetric:
          r = {-x, x};
          break;
        case Widen::kZeroPlus:
          r = {std::min(0.0, x), std::max(0.0, x)};
          break;
        case Widen::kOnePlus:
          r = {std::min(1.0, x), std::max(1.0, x)};
          break;
        default:
          r = {x, x};
          break;
      }
      if (r.lo > r.hi) std::swap(r.lo, r.hi);
    } else if (v->is_array() && v->size() == 2 && IsNumber((*v)[0]) && IsNumber((*v)[1])) {
      r = {(*v)[0].get<double>(), (*v)[1].get<double>()};
      if (r.lo > r.hi) {
        if (widen == Widen::kPairOnly) {
          Fail(Arg(key) + "=" + Show(*v) + ": the first value must not exceed the second");
        }
        std::swap(r.lo, r.hi);
      }
    } else {
      Fail(Arg(key) + " must be a number or a pair of numbers, got " + Show(*v));
    }
  }
  if (!(r.lo >= lo && r.hi <= hi)) {
    Fail(Arg(key) + "=[" + Num(r.lo) + ", " + Num(r.hi) + "] is outside [" + Num(lo) + ", " +
         Num(hi) + "]");
  }
  if (integers == kIntegers && v != nullptr) {
    const json ends = v->is_array() ? *v : json::array({*v});
    int unused = 0;
    for (const json& e : ends) {
      if (IsNumber(e) && !ToInt(key, e, &unused)) break;
    }
  }
  if (integers != kFloats) {
    r.lo = std::trunc(r.lo);
    r.hi = std::trunc(r.hi);
    out_[key] = json::array({static_cast<int64_t>(r.lo), static_cast<int64_t>(r.hi)});
  } else {
    out_[key] = json::array({r.lo, r.hi});
  }
  return r;
}

std::pair<int, int> ArgReader::IntPair(const char* key, std::pair<int, int> def, int lo) {
  const json* v = Get(key);
  std::pair<int, int> x = def;
  if (v != nullptr) {
    if (v->is_array() && v->size() == 2 && IsNumber((*v)[0]) && IsNumber((*v)[1])) {
      if (ToInt(key, (*v)[0], &x.first)) ToInt(key, (*v)[1], &x.second);
    } else {
      Fail(Arg(key) + " must be a pair of integers, got " + Show(*v));
    }
  }
  if (x.first < lo || x.second < lo) {
    Fail(Arg(key) + " values must be >= " + std::to_string(lo));
  }
  out_[key] = json::array({x.first, x.second});
  return x;
}

int ArgReader::Interpolation(const char* key, int def, const std::vector<int>& ok) {
  const int x = Int(key, def);
  if (std::find(ok.begin(), ok.end(), x) == ok.end()) {
    std::vector<std::string> names;
    for (int c : ok) names.push_back(std::to_string(c));
    Fail(Arg(key) + "=" + std::to_string(x) + " is not supported (cv2 codes: " + Join(names) + ")");
  }
  return x;
}

int ArgReader::BorderMode(const char* key, int def) {
  const int x = Int(key, def);
  if (x < 0 || x > 4) {
    Fail(Arg(key) + "=" + std::to_string(x) +
         " is not supported (cv2 codes: 0 CONSTANT, 1 REPLICATE, 2 REFLECT, 3 WRAP, 4 "
         "REFLECT_101)");
  }
  return x;
}

Fill ArgReader::FillArg(const char* key, double def) {
  const json* v = Get(key);
  Fill f;
  f.values = {def};
  if (v != nullptr) {
    if (IsNumber(*v)) {
      f.values = {v->get<double>()};
    } else if (v->is_array() && !v->empty() && v->size() <= 4 &&
               std::all_of(v->begin(), v->end(), [](const json& e) { return IsNumber(e); })) {
      f.values.clear();
      for (const json& e : *v) f.values.push_back(e.get<double>());
    } else {
      Fail(Arg(key) + " must be a number or a list of 1-4 numbers, got " + Show(*v));
    }
  }
  if (f.values.size() == 1) {
    out_[key] = f.values[0];
  } else {
    out_[key] = f.values;
  }
  return f;
}

void ArgReader::OnlyDefault(const char* key, const json& def, const std::string& why) {
  const json* v = Get(key);
  if (v != nullptr && !SameValue(*v, def)) {
    Fail(Arg(key) + "=" + Show(*v) + " is not supported: " + why);
  }
  out_[key] = def;
}

void ArgReader::Ignored(const char* key, const json& def) {
  const json* v = Get(key);
  out_[key] = v != nullptr ? *v : def;
}

Status ArgReader::Finish(const std::vector<std::string>& supported) const {
  if (!error_.empty()) return Status::InvalidArgument(error_);
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    const std::string& k = it.key();
    if (k == "__class_fullname__" || read_.count(k) != 0) continue;
    return Status::InvalidArgument(where_ + ": unknown argument " + k +
                                   " (arguments: " + Join(supported) + ")");
  }
  return Status::OK();
}

}  // namespace dspipe::transforms
