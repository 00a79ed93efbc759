// SPDX-License-Identifier: Apache-2.0
// libjpeg-turbo region + DCT-scaled decoding (jpeg_decode.h).
//
// libjpeg reports errors through a callback that must not return: it longjmps back into the
// phase that called libjpeg. Each phase is a function that holds no object with a destructor
// (only the decompressor, owned by the caller, and raw pointers), so the jump skips nothing.
#include "codec/jpeg_decode.h"

#include <libexif/exif-data.h>

// jpeglib.h needs FILE and size_t declared first; jerror.h comes after it.
// clang-format off
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "codec/image.h"
#include "codec/jpeg_error.h"
#include "codec/jpeg_restart.h"

namespace dspipe::codec {
namespace {

// One decompressor over a byte span. Create() must succeed before anything else is called.
class Decompressor {
 public:
  Decompressor() { cinfo_.err = JpegErrors(&err_); }
  ~Decompressor() {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  jpeg_decompress_struct* cinfo() { return &cinfo_; }
  JpegErrorMgr* err() { return &err_; }
  void set_created() { created_ = true; }
  Status Error(const char* what) const {
    return Status::BadInput(std::string("JPEG ") + what + ": " + err_.message);
  }

 private:
  jpeg_decompress_struct cinfo_{};
  JpegErrorMgr err_{};
  bool created_ = false;
};

// Runs fn with libjpeg errors turned into a false return. fn must not hold objects with
// destructors across libjpeg calls (the error longjmps out of it).
template <typename Fn>
bool Protected(Decompressor* d, Fn&& fn) {
  if (setjmp(d->err()->jump) != 0) return false;
  fn();
  return true;
}

int ExifOrientation(jpeg_decompress_struct* cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next) {
    if (m->marker != JPEG_APP0 + 1 || m->data_length < 6 ||
        std::memcmp(m->data, "Exif\0\0", 6) != 0) {
      continue;
    }
    int orientation = 1;
    if (ExifData* exif = exif_data_new_from_data(m->data, m->data_length)) {
      if (ExifEntry* e = exif_data_get_entry(exif, EXIF_TAG_ORIENTATION);
          e != nullptr && e->format == EXIF_FORMAT_SHORT && e->components >= 1) {
        orientation = exif_get_short(e->data, exif_data_get_byte_order(exif));
      }
      exif_data_unref(exif);
    }
    return orientation >= 1 && orientation <= 8 ? orientation : 1;
  }
  return 1;
}

// Creates the decompressor over bytes and reads the header, and with `orientation` the APP1
// markers for the EXIF orientation (else info->orientation stays 1).
Status OpenJpeg(std::span<const uint8_t> bytes, Decompressor* d, JpegInfo* info,
                bool orientation = true) {
  if (bytes.empty()) return Status::BadInput("empty file (0 bytes)");
  jpeg_decompress_struct* c = d->cinfo();
  const bool ok = Protected(d, [&] {
    jpeg_create_decompress(c);
    d->set_created();
    jpeg_mem_src(c, bytes.data(), static_cast<unsigned long>(bytes.size()));
    if (orientation) jpeg_save_markers(c, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(c, TRUE);
  });
  if (!ok) return d->Error("header");
  *info = JpegInfo{};
  info->width = static_cast<int>(c->image_width);
  info->height = static_cast<int>(c->image_height);
  info->components = c->num_components;
  info->progressive = c->progressive_mode != 0;
  if (info->width <= 0 || info->height <= 0) {
    return Status::BadInput("JPEG dimensions " + std::to_string(c->image_width) + "x" +
                            std::to_string(c->image_height) + " out of range");
  }
  DSPIPE_RETURN_IF_ERROR(CheckImageSize("JPEG header", c->image_width, c->image_height));
  if (orientation) info->orientation = ExifOrientation(c);
  return Status::OK();
}

// Oriented pixel (ox, oy) -> stored pixel, for a stored w x h image (OpenCV's ExifTransform).
void ToStored(int orientation, int w, int h, int ox, int oy, int* sx, int* sy) {
  switch (orientation) {
    case 2:
      *sx = w - 1 - ox;
      *sy = oy;
      return;
    case 3:
      *sx = w - 1 - ox;
      *sy = h - 1 - oy;
      return;
    case 4:
      *sx = ox;
      *sy = h - 1 - oy;
      return;
    case 5:
      *sx = oy;
      *sy = ox;
      return;
    case 6:
      *sx = oy;
      *sy = h - 1 - ox;
      return;
    case 7:
      *sx = w - 1 - oy;
      *sy = h - 1 - ox;
      return;
    case 8:
      *sx = w - 1 - oy;
      *sy = ox;
      return;
    default:
      *sx = ox;
      *sy = oy;
      return;
  }
}

// Applies orientation to img (stored -> oriented) as OpenCV's ExifTransform does, moving *r
// (a rectangle of img) along with it.
void Orient(int orientation, const cv::Mat& img, cv::Mat* out, RectF* r) {
  const bool transpose = orientation >= 5;
  int flip = 2;  // none
  switch (orientation) {
    case 2:
    case 6:
      flip = 1;
      break;
    case 3:
    case 7:
      flip = -1;
      break;
    case 4:
    case 8:
      flip = 0;
      break;
    default:
      break;
  }
  double w = img.cols, h = img.rows;
  if (transpose) {
    cv::transpose(img, *out);
    *r = RectF{r->y, r->x, r->h, r->w};
    std::swap(w, h);
  }
  const cv::Mat& src = transpose ? *out : img;
  if (flip != 2) cv::flip(src, *out, flip);
  if (flip == 1 || flip == -1) r->x = w - r->x - r->w;
  if (flip == 0 || flip == -1) r->y = h - r->y - r->h;
  if (!transpose && flip == 2) img.copyTo(*out);
}

// OpenCV's CMYK -> BGR formula (imgcodecs utils.cpp), written as RGB.
void CmykRowToRgb(const uint8_t* cmyk, int n, uint8_t* rgb) {
  for (int i = 0; i < n; ++i, cmyk += 4, rgb += 3) {
    const int k = cmyk[3];
    rgb[0] = static_cast<uint8_t>(k - (((255 - cmyk[0]) * k) >> 8));
    rgb[1] = static_cast<uint8_t>(k - (((255 - cmyk[1]) * k) >> 8));
    rgb[2] = static_cast<uint8_t>(k - (((255 - cmyk[2]) * k) >> 8));
  }
}

// Reads `rows` scanlines into dst (row stride `step`); CMYK rows pass through tmp first.
bool ReadRows(Decompressor* d, int rows, uint8_t* dst, size_t step, bool cmyk, uint8_t* tmp,
              int cols) {
  jpeg_decompress_struct* c = d->cinfo();
  return Protected(d, [&] {
    JSAMPROW ptrs[16];
    int done = 0;
    while (done < rows) {
      const int n = std::min(rows - done, 16);
      for (int i = 0; i < n; ++i) {
        ptrs[i] = cmyk ? tmp + static_cast<size_t>(i) * cols * 4
                       : dst + static_cast<size_t>(done + i) * step;
      }
      const JDIMENSION got = jpeg_read_scanlines(c, ptrs, static_cast<JDIMENSION>(n));
      if (got == 0) ERREXIT(c, JERR_INPUT_EMPTY);  // libjpeg's own "empty input" error
      if (cmyk) {
        for (JDIMENSION i = 0; i < got; ++i) {
          CmykRowToRgb(ptrs[i], cols, dst + static_cast<size_t>(done + i) * step);
        }
      }
      done += static_cast<int>(got);
    }
  });
}

// jpeg_crop_scanline moves the region's left edge down to an iMCU boundary, then gives each
// component the cropped width; a component that had at least 2 samples per row and would get
// fewer makes libjpeg-turbo re-initialise its upsampler without fancy upsampling (jdapistd.c),
// and the region's pixels then differ from the whole-image decode's (by tens of levels in
// 4:2:0 files cropped to 1-2 pixel columns: at the left edge, or in a last iMCU column 1-2
// pixels wide). Widens [*rx0, *rx1) to the right, or where the image ends there one iMCU to
// the left, until every such component keeps at least 2 samples.
void KeepFancyUpsampling(jpeg_decompress_struct* c, int full_w, int* rx0, int* rx1) {
  const bool single = c->comps_in_scan == 1 && c->num_components == 1;
  const int align = c->min_DCT_scaled_size * (single ? 1 : c->max_h_samp_factor);
  if (align <= 0) return;
  const int maxh = c->max_h_samp_factor;
  auto keeps_fancy = [&](int x0, int x1) {
    const long width = x1 - x0 / align * align;
    for (int ci = 0; ci < c->num_components; ++ci) {
      const jpeg_component_info& comp = c->comp_info[ci];
      const long cropped = (width * comp.h_samp_factor + maxh - 1) / maxh;
      if (comp.downsampled_width >= 2 && cropped < 2) return false;
    }
    return true;
  };
  // 2 samples of the sparsest component span at most 2 * max_h_samp_factor pixels.
  while (!keeps_fancy(*rx0, *rx1) && *rx1 < full_w) *rx1 = std::min(full_w, *rx1 + maxh);
  while (!keeps_fancy(*rx0, *rx1) && *rx0 > 0) *rx0 = std::max(0, *rx0 / align * align - align);
}

// The restart path (jpeg_restart.h). For a file with a restart marker after every MCU:
// assembles the MCUs that cover the scaled pixels [rx0, rx1) x [y0, y1) that are read, with one
// more on each side that is not the image's edge when those come within a pixel of it (fancy
// upsampling reads the chroma sample beside a pixel's own: a pixel in an MCU's first or last
// column or row needs the neighbouring MCU), into *bytes; starts *mini on them with c's
// output settings; and sets (*ox, *oy), the scaled image's pixel that is mini's first. False,
// with nothing started, when the file is not such a file or the assembled one does not start
// at the size it must have: the caller then takes the usual path.
bool StartRestartRegion(std::span<const uint8_t> file, jpeg_decompress_struct* c, int n, int full_w,
                        int full_h, int rx0, int rx1, int y0, int y1, std::vector<uint8_t>* bytes,
                        Decompressor* mini, int* ox, int* oy) {
  if (c->restart_interval != 1) return false;
  JpegScanHeader h;
  h.width = static_cast<int>(c->image_width);
  h.height = static_cast<int>(c->image_height);
  h.restart_interval = static_cast<int>(c->restart_interval);
  h.progressive = c->progressive_mode != 0;
  h.num_components = c->num_components;
  h.comps_in_scan = c->comps_in_scan;
  h.max_h_samp = c->max_h_samp_factor;
  h.max_v_samp = c->max_v_samp_factor;
  h.entropy_begin = file.size() - c->src->bytes_in_buffer;
  if (h.width <= 0 || h.height <= 0 || h.num_components < 1) return false;
  thread_local RestartIndex index;
  SetRestartGrid(h, &index);
  const int mw = index.mcu_width * n / 8, mh = index.mcu_height * n / 8;
  if (mw <= 0 || mh <= 0) return false;
  const int mcus_per_row = index.mcus_per_row, mcu_rows = index.mcu_rows;
  int col0 = rx0 > 0 ? (rx0 - 1) / mw : 0;
  int col1 = rx1 < full_w ? std::min(mcus_per_row - 1, rx1 / mw) : mcus_per_row - 1;
  const int row0 = y0 > 0 ? (y0 - 1) / mh : 0;
  const int row1 = y1 < full_h ? std::min(mcu_rows - 1, y1 / mh) : mcu_rows - 1;
  // libjpeg upsamples a component fancily only when it is more than 2 samples wide: a region
  // one MCU wide (at most 1-2 chroma samples in the last column) takes its neighbour too.
  if (col0 == col1 && mcus_per_row > 1) {
    if (col1 + 1 < mcus_per_row) {
      ++col1;
    } else {
      --col0;
    }
  }
  // Only the MCUs up to the region's last are indexed: the bytes after it are not read.
  const size_t last = static_cast<size_t>(row1) * static_cast<size_t>(mcus_per_row) + col1;
  if (!IndexRestarts(file, h, last + 1, &index)) return false;
  AssembleRestartRegion(file, index, col0, col1, row0, row1, bytes);
  JpegInfo info;  // the file's orientation is applied to mini's rows: no need to read it again
  if (!OpenJpeg(*bytes, mini, &info, /*orientation=*/false).ok()) return false;
  jpeg_decompress_struct* m = mini->cinfo();
  if (!Protected(mini, [&] {
        m->out_color_space = c->out_color_space;
        m->scale_num = c->scale_num;
        m->scale_denom = c->scale_denom;
        jpeg_start_decompress(m);
      })) {
    return false;
  }
  *ox = col0 * mw;
  *oy = row0 * mh;
  const int want_w = col1 + 1 == mcus_per_row ? full_w - *ox : (col1 - col0 + 1) * mw;
  const int want_h = row1 + 1 == mcu_rows ? full_h - *oy : (row1 - row0 + 1) * mh;
  return static_cast<int>(m->output_width) == want_w &&
         static_cast<int>(m->output_height) == want_h;
}

std::atomic<int>& ScalesSetting() {
  static std::atomic<int> s{[] {
    const char* env = std::getenv("DSPIPE_JPEG_SCALES");
    if (env != nullptr && std::strcmp(env, "none") == 0) return static_cast<int>(JpegScales::kNone);
    if (env != nullptr && std::strcmp(env, "all") == 0) return static_cast<int>(JpegScales::kAll);
    return static_cast<int>(JpegScales::kSimd);
  }()};
  return s;
}

}  // namespace

Status ReadJpegInfo(std::span<const uint8_t> bytes, JpegInfo* out) {
  Decompressor d;
  return OpenJpeg(bytes, &d, out);
}

int ChooseJpegScale(int crop_w, int crop_h, int out_w, int out_h, JpegScales allowed) {
  if (allowed == JpegScales::kNone || out_w <= 0 || out_h <= 0 || crop_w <= 0 || crop_h <= 0) {
    return 8;
  }
  for (int n = 1; n < 8; ++n) {
    if (allowed == JpegScales::kSimd && n != 1 && n != 2 && n != 4) continue;
    // libjpeg's scaled size is ceil(size * n / 8); the region's is its exact scaled extent.
    if (static_cast<int64_t>(crop_w) * n >= static_cast<int64_t>(out_w) * 8 &&
        static_cast<int64_t>(crop_h) * n >= static_cast<int64_t>(out_h) * 8) {
      return n;
    }
  }
  return 8;
}

void SetJpegScales(JpegScales scales) { ScalesSetting().store(static_cast<int>(scales)); }
JpegScales GetJpegScales() {
  return static_cast<JpegScales>(ScalesSetting().load(std::memory_order_relaxed));
}

cv::Mat ViewOver(cv::Mat* buffer, int rows, int cols, int type) {
  const size_t need = static_cast<size_t>(rows) * static_cast<size_t>(cols) * CV_ELEM_SIZE(type);
  if (!buffer->isContinuous() || buffer->total() * buffer->elemSize() < need) {
    constexpr int kRow = 1 << 16;  // 2-D, so sizes past INT_MAX bytes stay representable
    buffer->create(static_cast<int>((need + kRow - 1) / kRow), kRow, CV_8UC1);
  }
  return cv::Mat(rows, cols, type, buffer->data);
}

Status DecodeJpeg(std::span<const uint8_t> bytes, const JpegDecodeOptions& o, cv::Mat* out,
                  JpegDecodeResult* result, cv::Mat* buffer) {
  if (o.channels != 1 && o.channels != 3) return Status::InvalidArgument("channels must be 1 or 3");
  Decompressor d;
  JpegInfo info;
  DSPIPE_RETURN_IF_ERROR(OpenJpeg(bytes, &d, &info));
  jpeg_decompress_struct* c = d.cinfo();
  *result = JpegDecodeResult{};
  result->progressive = info.progressive;

  // The crop in oriented pixels, clamped, then in stored pixels.
  const int ow = info.oriented_width(), oh = info.oriented_height();
  int cx = 0, cy = 0, cw = ow, ch = oh;
  if (o.crop_w > 0 && o.crop_h > 0) {
    cx = std::clamp(o.crop_x, 0, ow - 1);
    cy = std::clamp(o.crop_y, 0, oh - 1);
    cw = std::clamp(o.crop_w, 1, ow - cx);
    ch = std::clamp(o.crop_h, 1, oh - cy);
  }
  int ax = 0, ay = 0, bx = 0, by = 0;
  ToStored(info.orientation, info.width, info.height, cx, cy, &ax, &ay);
  ToStored(info.orientation, info.width, info.height, cx + cw - 1, cy + ch - 1, &bx, &by);
  const int sx = std::min(ax, bx), sy = std::min(ay, by);
  const int sw = std::abs(bx - ax) + 1, sh = std::abs(by - ay) + 1;

  const int n = o.scale_num > 0 ? std::min(o.scale_num, 8)
                                : ChooseJpegScale(cw, ch, o.out_width, o.out_height, o.scales);
  result->source_width = ow;
  result->source_height = oh;
  const bool cmyk = info.components == 4;
  const bool gray_out = o.channels == 1 && c->jpeg_color_space == JCS_GRAYSCALE;
  const bool region = o.region && (!info.progressive || o.region_progressive);
  if (!Protected(&d, [&] {
        c->out_color_space = cmyk ? JCS_CMYK : (gray_out ? JCS_GRAYSCALE : JCS_RGB);
        c->scale_num = static_cast<unsigned>(n);
        c->scale_denom = 8;
        jpeg_calc_output_dimensions(c);
      })) {
    return d.Error("decode");
  }
  const int full_w = static_cast<int>(c->output_width), full_h = static_cast<int>(c->output_height);
  // The scaled region, with a margin for the resampler's filter taps at fractional scales.
  // Margins. Full scale: fancy upsampling of subsampled chroma reads the chroma sample beside a
  // pixel's own, which a crop starting or ending on an iMCU boundary would cut off (the edge
  // column then differs from a whole-image decode by up to ~40 levels): one more column on each
  // side makes jpeg_crop_scanline take the neighbouring iMCU. Rows need none (skipping keeps the
  // upsampler's context). Scaled: two pixels for the resampler's filter taps.
  const int margin = n == 8 ? 1 : 2;
  const int margin_y = n == 8 ? 0 : 2;
  auto lo = [&](int v, int size) {
    return std::clamp(static_cast<int>(std::floor(v * n / 8.0)) - margin, 0, size);
  };
  auto hi = [&](int v, int size) {
    return std::clamp(static_cast<int>(std::ceil(v * n / 8.0)) + margin, 0, size);
  };
  int rx0 = 0, rx1 = full_w, y0 = 0, y1 = full_h;
  if (region) {
    rx0 = lo(sx, full_w);
    rx1 = std::max(hi(sx + sw, full_w), rx0 + 1);
    y0 = std::clamp(static_cast<int>(std::floor(sy * n / 8.0)) - margin_y, 0, full_h);
    y1 = std::clamp(static_cast<int>(std::ceil((sy + sh) * n / 8.0)) + margin_y, y0 + 1, full_h);
  }
  // Where the rows come from: d over the file, or mini over the MCUs of the region (the
  // restart path), whose first pixel is the scaled image's (x0, y0).
  Decompressor mini;
  thread_local std::vector<uint8_t> mini_bytes;
  Decompressor* src = &d;
  JDIMENSION x0 = 0, cols = 0;
  int rows = 0;
  int ox = 0, oy = 0;
  // The pixels read from the region: at full scale the crop itself (rx0/rx1's margin is for
  // jpeg_crop_scanline, and the restart path takes the neighbouring MCUs it needs itself).
  const int nx0 = n == 8 ? sx : rx0, nx1 = n == 8 ? std::min(sx + sw, full_w) : rx1;
  if (region && (rx1 - rx0 < full_w || y1 - y0 < full_h) &&
      StartRestartRegion(bytes, c, n, full_w, full_h, nx0, nx1, y0, y1, &mini_bytes, &mini, &ox,
                         &oy)) {
    src = &mini;
    result->restarts = true;
    x0 = static_cast<JDIMENSION>(ox);
    y0 = oy;
    cols = mini.cinfo()->output_width;
    rows = static_cast<int>(mini.cinfo()->output_height);
  } else {
    if (!Protected(&d, [&] { jpeg_start_decompress(c); })) return d.Error("decode");
    if (region && rx1 - rx0 < full_w) KeepFancyUpsampling(c, full_w, &rx0, &rx1);
    x0 = static_cast<JDIMENSION>(rx0);
    cols = static_cast<JDIMENSION>(rx1 - rx0);
    if (cols < c->output_width) {
      if (!Protected(&d, [&] { jpeg_crop_scanline(c, &x0, &cols); })) return d.Error("crop");
    }
    if (y0 > 0) {
      JDIMENSION skipped = 0;
      if (!Protected(&d, [&] { skipped = jpeg_skip_scanlines(c, static_cast<JDIMENSION>(y0)); })) {
        return d.Error("skip");
      }
      if (skipped != static_cast<JDIMENSION>(y0)) {
        return Status::BadInput("JPEG decode: skipped " + std::to_string(skipped) + " of " +
                                std::to_string(y0) + " rows");
      }
    }
    rows = y1 - y0;
  }
  const int ncols = static_cast<int>(cols);
  result->region = rows < full_h || ncols < full_w;
  result->scale_num = n;
  // Where the rows go: *out directly when nothing follows (no orientation, no gray conversion).
  const int decoded_c = gray_out ? 1 : 3;
  const bool direct = info.orientation == 1 && decoded_c == o.channels;
  thread_local cv::Mat stage_buffer;  // rows before orientation / gray conversion
  const int type = CV_8UC(decoded_c);
  cv::Mat stage;
  cv::Mat* target = direct ? out : &stage;
  if (!(target->rows == rows && target->cols == ncols && target->type() == type &&
        target->isContinuous())) {
    if (!direct) {
      stage = ViewOver(&stage_buffer, rows, ncols, type);
    } else if (buffer != nullptr) {
      *out = ViewOver(buffer, rows, ncols, type);
    } else {
      out->create(rows, ncols, type);
    }
  }
  std::vector<uint8_t> tmp(cmyk ? static_cast<size_t>(ncols) * 4 * 16 : 0);
  if (!ReadRows(src, rows, target->data, target->step[0], cmyk, tmp.data(), ncols)) {
    return src->Error("decode");
  }
  Protected(src, [&] { jpeg_abort_decompress(src->cinfo()); });

  // The crop within the decoded rows, in stored orientation, then oriented with the pixels.
  const double f = n / 8.0;
  result->crop = RectF{sx * f - static_cast<double>(x0), sy * f - y0, sw * f, sh * f};
  if (direct) return Status::OK();
  // The final size: the stage's, transposed by orientations 5-8.
  const bool t = info.transposed();
  const int fr = t ? ncols : rows, fc = t ? rows : ncols, ftype = CV_8UC(o.channels);
  if (!(out->rows == fr && out->cols == fc && out->type() == ftype && out->isContinuous())) {
    if (buffer != nullptr) {
      *out = ViewOver(buffer, fr, fc, ftype);
    } else {
      out->create(fr, fc, ftype);
    }
  }
  if (decoded_c != o.channels) {  // color -> gray as cv::cvtColor does (the old decoder's way)
    cv::Mat gray = info.orientation == 1 ? *out : cv::Mat();
    cv::cvtColor(*target, gray, cv::COLOR_RGB2GRAY);
    if (info.orientation == 1) return Status::OK();
    Orient(info.orientation, gray, out, &result->crop);
    return Status::OK();
  }
  Orient(info.orientation, *target, out, &result->crop);
  return Status::OK();
}

}  // namespace dspipe::codec
