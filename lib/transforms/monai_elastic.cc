// SPDX-License-Identifier: Apache-2.0
// MONAI 1.6.1's Rand2DElasticd (monai_leaf.h): RandDeformGrid's control points (every
// `spacing` pixels, two more beyond each edge, centred on the image) moved by normal offsets
// times a magnitude drawn in magnitude_range, then RandAffineGrid's affine applied to them
// (AffineGrid's R Sh T S, monai_grid.h), the coarse grid upsampled as torch's bicubic
// interpolate (align_corners=False, scale_factor = spacing, recompute_scale_factor=True),
// cropped about its centre to spatial_size and resampled as grid_sample (Resample:
// coordinates relative to the input's centre). Not drawn: an output of the input's size is the
// input itself (the identity grid samples every pixel exactly), another size samples the
// identity grid about the centres. The label follows the same grid with nearest sampling.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "transforms/monai_grid.h"

namespace dspipe::transforms::monai {
namespace {

// torch.linspace(start, end, n) in float64: the first half from start, the second from end.
double TorchLinspace(double start, double end, int n, int i) {
  if (n == 1) return start;
  const double step = (end - start) / (n - 1);
  return i < n / 2 ? start + step * i : end - step * (n - 1 - i);
}

// create_control_grid's size along an axis of d pixels (torch backend: float32 arithmetic).
int ControlPoints(int d, double spacing) {
  const float x = (static_cast<float>(d) - 1.0f) / static_cast<float>(2.0 * spacing);
  return d % 2 == 0 ? static_cast<int>(std::ceil(x + 0.5f)) * 2 + 2
                    : static_cast<int>(std::ceil(x)) * 2 + 3;
}

// Resample's input index of a grid value g (relative to the centre) along an axis of d input
// pixels: normalized by 2 / max(2, d), then grid_sample's unnormalization (align_corners=False).
double InputIndex(double g, int d) { return ((g * (2.0 / std::max(2, d)) + 1.0) * d - 1.0) / 2.0; }

// Box-Muller standard normals from the step's stream (both values of a pair used).
void Normals(Rng& rng, size_t n, std::vector<float>* out) {
  out->resize(n);
  for (size_t i = 0; i < n; i += 2) {
    double u1 = rng.Uniform();
    if (u1 <= 0.0) u1 = 0x1.0p-54;
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * std::numbers::pi * rng.Uniform();
    (*out)[i] = static_cast<float>(r * std::cos(t));
    if (i + 1 < n) (*out)[i + 1] = static_cast<float>(r * std::sin(t));
  }
}

// v[0..7]: the affine draws (as RandAffined's), v[8]: the magnitude; iv[0]: drawn, iv[1], iv[2]:
// the control grid's rows and columns; data: the standard normal offsets, (2, rows, columns)
// (row offsets first), as RandDeformGrid's random_offset.
class Rand2DElastic final : public Spatial, public GridModes {
 public:
  double p = 0.1;
  double spacing[2] = {1, 1};
  double mag_lo = 0, mag_hi = 0;
  AffineRanges ranges;
  std::array<int, 2> size = {-1, -1};

  std::optional<Size> StaticOutput(Size in) const override { return SizeOrInput(size, in); }

  Status Draw(Rng& rng, int, const cv::Mat*, Step* s) const override {
    s->out = *StaticOutput(s->in);
    s->geo.exact = false;
    s->geo.frame = Frame::kBorder;
    s->geo.standalone = true;  // a dense map, never fused
    s->geo.map = true;
    const bool apply = rng.Uniform() < p;
    s->iv[0] = apply ? 1 : 0;
    s->iv[1] = ControlPoints(s->out.h, spacing[0]);
    s->iv[2] = ControlPoints(s->out.w, spacing[1]);
    double draws[4][2] = {{0, 0}, {0, 0}, {0, 0}, {1, 1}};
    s->data.clear();
    s->v[8] = 0;
    if (apply) {  // RandDeformGrid, then RandAffineGrid, as Rand2DElastic.randomize
      Normals(rng, 2 * static_cast<size_t>(s->iv[1]) * static_cast<size_t>(s->iv[2]), &s->data);
      s->v[8] = Uniform(rng, mag_lo, mag_hi);
      ranges.Draw(rng, draws);
    }
    for (int k = 0; k < 4; ++k) s->v[2 * k] = draws[k][0], s->v[2 * k + 1] = draws[k][1];
    return Status::OK();
  }

  void Warp(const Step& s, const cv::Mat& src, cv::Mat* dst, bool is_mask) const override {
    if (s.iv[0] == 0 && s.out == s.in) {  // not drawn, same size: the input itself
      src.copyTo(*dst);
      return;
    }
    const cv::Mat map = Map(s);
    const int i = is_mask ? 1 : 0;
    GridSampleMap(src, map, dst, nearest[i], pad[i], align[i]);
  }

  json Params(const Step& s) const override {
    return {{"applied", s.iv[0] == 1},
            {"magnitude", s.v[8]},
            {"control_grid", {s.iv[1], s.iv[2]}},
            {"offsets", s.data},
            {"rotate", s.v[0]},
            {"shear", {s.v[2], s.v[3]}},
            {"translate", {s.v[4], s.v[5]}},
            {"scale", {s.v[6], s.v[7]}}};
  }

 private:
  // Each output pixel's input (row, column), CV_64FC2 of s.out.
  cv::Mat Map(const Step& s) const {
    const Size out = s.out, in = s.in;
    cv::Mat map(out.h, out.w, CV_64FC2);
    if (s.iv[0] == 0) {  // create_grid(spatial_size): float32 linspace about the centre
      for (int r = 0; r < out.h; ++r) {
        const float gy = static_cast<float>(r) - static_cast<float>(out.h - 1) / 2.0f;
        double* m = map.ptr<double>(r);
        for (int c = 0; c < out.w; ++c) {
          const float gx = static_cast<float>(c) - static_cast<float>(out.w - 1) / 2.0f;
          m[2 * c] = InputIndex(gy, in.h);
          m[2 * c + 1] = InputIndex(gx, in.w);
        }
      }
      return map;
    }
    const int gh = s.iv[1], gw = s.iv[2];
    // The control points (float64 linspace of float32 ends), moved by magnitude * offset
    // (float32), the affine applied in float32 (AffineGrid's dtype).
    const float mag = static_cast<float>(s.v[8]);
    double draws[4][2];
    for (int k = 0; k < 4; ++k) draws[k][0] = s.v[2 * k], draws[k][1] = s.v[2 * k + 1];
    const cv::Matx33d A = AffineMatrix(draws);
    float a[6];
    for (int k = 0; k < 6; ++k) a[k] = static_cast<float>(A(k / 3, k % 3));
    const float ey = (static_cast<float>(gh) - 1.0f) / 2.0f * static_cast<float>(spacing[0]);
    const float ex = (static_cast<float>(gw) - 1.0f) / 2.0f * static_cast<float>(spacing[1]);
    cv::Mat coarse(gh, gw, CV_32FC2);
    const size_t plane = static_cast<size_t>(gh) * static_cast<size_t>(gw);
    for (int r = 0; r < gh; ++r) {
      float* q = coarse.ptr<float>(r);
      for (int c = 0; c < gw; ++c) {
        const size_t k = static_cast<size_t>(r) * static_cast<size_t>(gw) + static_cast<size_t>(c);
        const float y = static_cast<float>(TorchLinspace(-ey, ey, gh, r) +
                                           static_cast<double>(mag * s.data[k]));
        const float x = static_cast<float>(TorchLinspace(-ex, ex, gw, c) +
                                           static_cast<double>(mag * s.data[plane + k]));
        q[2 * c] = a[0] * y + a[1] * x + a[2];
        q[2 * c + 1] = a[3] * y + a[4] * x + a[5];
      }
    }
    // torch's interpolate: the output size floor(n * spacing), bicubic, then the centre crop.
    cv::Mat fine(static_cast<int>(std::floor(gh * spacing[0])),
                 static_cast<int>(std::floor(gw * spacing[1])), CV_32FC2);
    Interpolate(coarse, &fine, Interp::kBicubic, false);
    const int r0 = std::max(fine.rows / 2 - out.h / 2, 0);
    const int c0 = std::max(fine.cols / 2 - out.w / 2, 0);
    for (int r = 0; r < out.h; ++r) {
      const float* f = fine.ptr<float>(r0 + r) + 2 * static_cast<size_t>(c0);
      double* m = map.ptr<double>(r);
      for (int c = 0; c < out.w; ++c) {
        m[2 * c] = InputIndex(f[2 * c], in.h);
        m[2 * c + 1] = InputIndex(f[2 * c + 1], in.w);
      }
    }
    return map;
  }
};

}  // namespace

Status MakeRand2DElastic(ArgReader& r, std::unique_ptr<MonaiLeaf>* out) {
  auto l = std::make_unique<Rand2DElastic>();
  const Keys k = ReadKeys(r, Role::kSpatial);
  // spacing: a number for both axes or [rows, columns]; a non-positive entry is 1 (MONAI's
  // fall_back_tuple). Below 0.5 the upsampled grid would not cover the image.
  const json* sp = r.Raw("spacing");
  {
    const json list = sp == nullptr ? json() : sp->is_array() ? *sp : json::array({*sp});
    const bool ok = sp != nullptr && (list.size() == 1 || list.size() == 2) &&
                    std::all_of(list.begin(), list.end(), [](const json& e) {
                      return e.is_number() && !e.is_boolean() &&
                             (e.get<double>() <= 0 || e.get<double>() >= 0.5) &&
                             e.get<double>() < 1e6;
                    });
    if (sp == nullptr) {
      r.Fail(r.where() + ": argument spacing is required (the control points' distance)");
    } else if (!ok) {
      r.Fail(r.where() +
             ": argument spacing (the control points' distance in pixels) must be a number "
             ">= 0.5 or a pair [rows, columns] of them, got " +
             sp->dump());
    } else {
      for (int d = 0; d < 2; ++d) {
        const double v = list[list.size() == 1 ? 0 : d].get<double>();
        l->spacing[d] = v > 0 ? v : 1.0;
      }
      r.Put("spacing", *sp);
    }
  }
  const json* mr = r.Raw("magnitude_range");
  if (mr == nullptr) {
    r.Fail(r.where() + ": argument magnitude_range is required (a pair [min, max])");
  } else if (!mr->is_array() || mr->size() != 2 || !(*mr)[0].is_number() || !(*mr)[1].is_number() ||
             (*mr)[0].is_boolean() || (*mr)[1].is_boolean()) {
    r.Fail(r.where() + ": argument magnitude_range must be a pair [min, max] of numbers, got " +
           mr->dump());
  } else {
    l->mag_lo = (*mr)[0].get<double>();
    l->mag_hi = (*mr)[1].get<double>();
    r.Put("magnitude_range", *mr);
  }
  ReadRandGridArgs(r, k, &l->size, &l->p, &l->ranges, l.get());
  KeepIgnored(r, {"device"});
  // Its own prob: the plan always runs it (an output of another size is resampled either way).
  return Done(r, std::move(l), k, 1.0,
              {"spacing", "magnitude_range", "spatial_size", "prob", "rotate_range", "shear_range",
               "translate_range", "scale_range", "mode", "padding_mode", "device", "lazy"},
              out);
}

}  // namespace dspipe::transforms::monai
