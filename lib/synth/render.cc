// SPDX-License-Identifier: Apache-2.0
#include "synth/render.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <opencv2/imgproc.hpp>
#include <vector>

#include "core/rng.h"

namespace dspipe::synth {

using core::Rng;

namespace {

constexpr double kTwoPi = 6.283185307179586;

// Rounds half up and saturates (std::lround is a libm call; this stays inline).
uint8_t Sat(float v) { return static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f) + 0.5f); }

// HSV (h in degrees, s and v in [0,1]) to RGB in [0,255].
cv::Vec3f HsvToRgb(double h, double s, double v) {
  h = std::fmod(std::fmod(h, 360.0) + 360.0, 360.0) / 60.0;
  const int sector = static_cast<int>(h);
  const double f = h - sector, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  double r = v, g = t, b = p;
  switch (sector) {
    case 1:
      r = q, g = v, b = p;
      break;
    case 2:
      r = p, g = v, b = t;
      break;
    case 3:
      r = p, g = q, b = v;
      break;
    case 4:
      r = t, g = p, b = v;
      break;
    case 5:
      r = v, g = p, b = q;
      break;
    default:
      break;
  }
  return cv::Vec3f(static_cast<float>(r * 255), static_cast<float>(g * 255),
                   static_cast<float>(b * 255));
}

// Catmull-Rom taps mapping `out` output coordinates onto a `grid`-point lattice that spans them.
struct Taps {
  std::array<int, 4> i;
  std::array<float, 4> w;
};
std::vector<Taps> MakeTaps(int out, int grid) {
  std::vector<Taps> taps(out);
  for (int x = 0; x < out; ++x) {
    const double p = out > 1 ? x * static_cast<double>(grid - 1) / (out - 1) : 0.0;
    const int i0 = static_cast<int>(p);
    const double f = p - i0, f2 = f * f, f3 = f2 * f;
    const double w[4] = {0.5 * (-f3 + 2 * f2 - f), 0.5 * (3 * f3 - 5 * f2 + 2),
                         0.5 * (-3 * f3 + 4 * f2 + f), 0.5 * (f3 - f2)};
    for (int k = 0; k < 4; ++k) {
      taps[x].i[k] = std::clamp(i0 - 1 + k, 0, grid - 1);
      taps[x].w[k] = static_cast<float>(w[k]);
    }
  }
  return taps;
}

// Smoothly upsamples a gh x gw x ch grid (row-major) to out_h x out_w, calling
// row_sink(y, const float* row) with out_w*ch values per output row.
template <typename Sink>
void Upsample(const std::vector<float>& grid, int gh, int gw, int ch, int out_h, int out_w,
              Sink&& row_sink) {
  const std::vector<Taps> tx = MakeTaps(out_w, gw), ty = MakeTaps(out_h, gh);
  const size_t stride = static_cast<size_t>(out_w) * ch;
  std::vector<float> rows(gh * stride), out(stride);
  for (int gy = 0; gy < gh; ++gy) {
    for (int x = 0; x < out_w; ++x) {
      for (int c = 0; c < ch; ++c) {
        float v = 0;
        for (int k = 0; k < 4; ++k) v += tx[x].w[k] * grid[(gy * gw + tx[x].i[k]) * ch + c];
        rows[gy * stride + x * ch + c] = v;
      }
    }
  }
  for (int y = 0; y < out_h; ++y) {
    const Taps& t = ty[y];
    const float* r[4];
    for (int k = 0; k < 4; ++k) r[k] = &rows[t.i[k] * stride];
    for (size_t j = 0; j < stride; ++j) {
      out[j] = t.w[0] * r[0][j] + t.w[1] * r[1][j] + t.w[2] * r[2][j] + t.w[3] * r[3][j];
    }
    row_sink(y, out.data());
  }
}

// Low-frequency background: a desaturated base colour with a coarse colour field and a finer
// luminance field on top.
void RenderBackground(Rng& rng, cv::Mat& rgb) {
  const int gh = rng.Int(3, 5), gw = rng.Int(3, 5), dg = rng.Int(8, 16);
  const cv::Vec3f base = HsvToRgb(rng.Uniform(0, 360), rng.Uniform(0, 0.3), rng.Uniform(0.3, 0.8));
  const float lum_amp = static_cast<float>(rng.Uniform(15, 45));
  std::vector<float> coarse(gh * gw * 3), fine(dg * dg);
  for (int i = 0; i < gh * gw; ++i) {
    const float lum = lum_amp * static_cast<float>(rng.Uniform(-1, 1));
    for (int c = 0; c < 3; ++c) {
      coarse[i * 3 + c] = base[c] + lum + 12.0f * static_cast<float>(rng.Uniform(-1, 1));
    }
  }
  for (float& v : fine) v = 7.0f * static_cast<float>(rng.Uniform(-1, 1));
  std::vector<float> fine_img(static_cast<size_t>(rgb.rows) * rgb.cols);
  Upsample(fine, dg, dg, 1, rgb.rows, rgb.cols, [&](int y, const float* row) {
    std::copy(row, row + rgb.cols, &fine_img[static_cast<size_t>(y) * rgb.cols]);
  });
  Upsample(coarse, gh, gw, 3, rgb.rows, rgb.cols, [&](int y, const float* row) {
    uint8_t* dst = rgb.ptr<uint8_t>(y);
    const float* f = &fine_img[static_cast<size_t>(y) * rgb.cols];
    for (int x = 0; x < rgb.cols; ++x) {
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = Sat(row[x * 3 + c] + f[x]);
    }
  });
}

// The outline of one object as a polygon around (cx, cy) with size ~r.
std::vector<cv::Point> MakeOutline(Rng& rng, double cx, double cy, double r) {
  std::vector<cv::Point> pts;
  auto add = [&](double x, double y) { pts.emplace_back(std::lround(x), std::lround(y)); };
  const double rot = rng.Uniform(0, kTwoPi);
  switch (rng.Int(0, 2)) {
    case 0: {  // ellipse
      const double b = r * rng.Uniform(0.35, 1.0);
      for (int k = 0; k < 72; ++k) {
        const double t = kTwoPi * k / 72, x = r * std::cos(t), y = b * std::sin(t);
        add(cx + x * std::cos(rot) - y * std::sin(rot), cy + x * std::sin(rot) + y * std::cos(rot));
      }
      break;
    }
    case 1: {  // polygon with jittered vertex angles and radii (star-shaped, often convex)
      const int n = rng.Int(3, 8);
      for (int k = 0; k < n; ++k) {
        const double t = rot + kTwoPi * (k + rng.Uniform(-0.3, 0.3)) / n;
        const double rr = r * rng.Uniform(0.6, 1.0);
        add(cx + rr * std::cos(t), cy + rr * std::sin(t));
      }
      break;
    }
    default: {  // blob: radius modulated by a few low harmonics
      double amp[4], phase[4];
      for (int h = 0; h < 4; ++h)
        amp[h] = rng.Uniform(0, 0.2 / (h + 1)), phase[h] = rng.Uniform(0, kTwoPi);
      for (int k = 0; k < 96; ++k) {
        const double t = kTwoPi * k / 96;
        double rr = 1;
        for (int h = 0; h < 4; ++h) rr += amp[h] * std::sin((h + 2) * t + phase[h]);
        add(cx + r * rr * std::cos(t + rot), cy + r * rr * std::sin(t + rot));
      }
      break;
    }
  }
  return pts;
}

// Class colours: hues spread evenly over the classes (rotated per dataset), saturated, so each
// class is recognisable and differs from the desaturated background.
cv::Vec3f ClassColor(uint64_t seed, int cls, int classes) {
  Rng r = Rng::ForItem(seed ^ 0xC1A55C01042ULL, static_cast<uint64_t>(cls));
  const double hue_offset = Rng::ForItem(seed, ~0ULL).Uniform(0, 360);
  const double spacing = 360.0 / (classes - 1);
  const double hue = hue_offset + spacing * (cls - 1 + r.Uniform(-0.25, 0.25));
  return HsvToRgb(hue, r.Uniform(0.55, 0.95), r.Uniform(0.45, 0.95));
}

// Fills the pixels of one object: class colour with per-object jitter, a linear and a radial
// shading term and one of four textures. Writes the class id into the mask at the same pixels.
void PaintObject(Rng& rng, const SampleSpec& spec, int cls, const std::vector<cv::Point>& pts,
                 double cx, double cy, double r, cv::Mat& rgb, cv::Mat& mask) {
  cv::Vec3f color = ClassColor(spec.seed, cls, spec.classes);
  for (int c = 0; c < 3; ++c) color[c] += static_cast<float>(rng.Uniform(-12, 12));
  const double ga = rng.Uniform(10, 45) / r, gt = rng.Uniform(0, kTwoPi);
  const float gx = static_cast<float>(ga * std::cos(gt)),
              gy = static_cast<float>(ga * std::sin(gt));
  const float radial = static_cast<float>(rng.Uniform(0, 35) / (r * r));
  const int texture = rng.Int(0, 3);
  const float tex_amp = static_cast<float>(rng.Uniform(8, 25));
  const double st = rng.Uniform(0, kTwoPi), period = rng.Uniform(5, 20);
  const float sx = static_cast<float>(std::cos(st) / period);
  const float sy = static_cast<float>(std::sin(st) / period);
  const int cell = rng.Int(4, 14);
  const int grid = rng.Int(3, 7);
  std::vector<float> mottle_grid(grid * grid);
  for (float& v : mottle_grid) v = tex_amp * 1.5f * static_cast<float>(rng.Uniform(-1, 1));

  const cv::Rect box = cv::boundingRect(pts) & cv::Rect(0, 0, rgb.cols, rgb.rows);
  if (box.empty()) return;
  cv::Mat inside(box.size(), CV_8UC1, cv::Scalar(0));
  cv::fillPoly(inside, std::vector<std::vector<cv::Point>>{pts}, cv::Scalar(255), cv::LINE_8, 0,
               -box.tl());
  std::vector<float> mottle;
  if (texture == 3) {
    mottle.resize(static_cast<size_t>(box.area()));
    Upsample(mottle_grid, grid, grid, 1, box.height, box.width, [&](int y, const float* row) {
      std::copy(row, row + box.width, &mottle[static_cast<size_t>(y) * box.width]);
    });
  }
  const uint8_t id = static_cast<uint8_t>(cls);
  for (int y = 0; y < box.height; ++y) {
    const uint8_t* in = inside.ptr<uint8_t>(y);
    uint8_t* px = rgb.ptr<uint8_t>(box.y + y) + box.x * 3;
    uint8_t* m = mask.ptr<uint8_t>(box.y + y) + box.x;
    const float dy = static_cast<float>(box.y + y - cy);
    for (int x = 0; x < box.width; ++x) {
      if (!in[x]) continue;
      const float dx = static_cast<float>(box.x + x - cx);
      float shade = gx * dx + gy * dy - radial * (dx * dx + dy * dy);
      if (texture == 1) {
        const float u = sx * static_cast<float>(box.x + x) + sy * static_cast<float>(box.y + y);
        shade += tex_amp * (4.0f * std::fabs(u - std::floor(u) - 0.5f) - 1.0f);
      } else if (texture == 2) {
        shade += (((box.x + x) / cell + (box.y + y) / cell) & 1) ? tex_amp : -tex_amp;
      } else if (texture == 3) {
        shade += mottle[static_cast<size_t>(y) * box.width + x];
      }
      for (int c = 0; c < 3; ++c) px[x * 3 + c] = Sat(color[c] + shade);
      m[x] = id;
    }
  }
}

// Mild, approximately gaussian noise: the sum of four uniform bytes (Irwin-Hall), scaled.
void AddNoise(Rng& rng, cv::Mat& rgb) {
  const double sigma = rng.Uniform(1.5, 4.0);
  const int scale = static_cast<int>(std::lround(sigma / 147.80 * 65536));  // 147.8 = sd of sum
  for (int y = 0; y < rgb.rows; ++y) {
    uint8_t* p = rgb.ptr<uint8_t>(y);
    const int n = rgb.cols * 3;
    for (int i = 0; i < n; i += 2) {
      const uint64_t bits = rng.Next();
      for (int h = 0; h < 2 && i + h < n; ++h) {
        const uint64_t b = bits >> (32 * h);
        const int sum =
            static_cast<int>((b & 255) + ((b >> 8) & 255) + ((b >> 16) & 255) + ((b >> 24) & 255)) -
            510;
        const int v = p[i + h] + ((sum * scale + 32768) >> 16);
        p[i + h] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
}

}  // namespace

void RenderSample(const SampleSpec& spec, cv::Mat* rgb, cv::Mat* mask) {
  rgb->create(spec.height, spec.width, CV_8UC3);
  mask->create(spec.height, spec.width, CV_8UC1);
  mask->setTo(cv::Scalar(0));
  Rng rng = Rng::ForItem(spec.seed, static_cast<uint64_t>(spec.index));
  RenderBackground(rng, *rgb);

  // Objects largest first, so small ones end up on top and rarely vanish entirely. The first
  // object's class cycles with the index, so every class appears within `classes-1` samples.
  const double min_dim = std::min(spec.width, spec.height);
  std::array<double, 8> radius;
  const int n = rng.Int(3, 8);
  for (int j = 0; j < n; ++j) radius[j] = min_dim * rng.Uniform(0.05, 0.28);
  std::sort(radius.begin(), radius.begin() + n, std::greater<>());
  for (int j = 0; j < n; ++j) {
    const int cls = j == 0 ? 1 + static_cast<int>(spec.index % (spec.classes - 1))
                           : rng.Int(1, spec.classes - 1);
    const double cx = rng.Uniform(0.1, 0.9) * spec.width, cy = rng.Uniform(0.1, 0.9) * spec.height;
    const std::vector<cv::Point> pts = MakeOutline(rng, cx, cy, radius[j]);
    PaintObject(rng, spec, cls, pts, cx, cy, radius[j], *rgb, *mask);
  }
  AddNoise(rng, *rgb);
}

}  // namespace dspipe::synth
