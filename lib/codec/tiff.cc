// SPDX-License-Identifier: Apache-2.0
#include "codec/tiff.h"

#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "codec/image.h"
#include "dspipe/limits.h"

namespace dspipe::codec {
namespace {

// libtiff over the bytes in memory (read-only; no mapping).
struct TiffMemory {
  std::span<const uint8_t> bytes;
  uint64_t pos = 0;
  std::string error;  // libtiff's first error message
};

tmsize_t TiffRead(thandle_t h, void* buf, tmsize_t n) {
  auto* m = static_cast<TiffMemory*>(h);
  if (n < 0 || m->pos >= m->bytes.size()) return 0;
  const uint64_t k = std::min<uint64_t>(static_cast<uint64_t>(n), m->bytes.size() - m->pos);
  std::memcpy(buf, m->bytes.data() + m->pos, k);
  m->pos += k;
  return static_cast<tmsize_t>(k);
}
tmsize_t TiffWrite(thandle_t, void*, tmsize_t) { return -1; }
toff_t TiffSeek(thandle_t h, toff_t off, int whence) {
  auto* m = static_cast<TiffMemory*>(h);
  uint64_t base = 0;
  if (whence == SEEK_CUR) base = m->pos;
  if (whence == SEEK_END) base = m->bytes.size();
  m->pos = base + off;
  return m->pos;
}
int TiffClose(thandle_t) { return 0; }
toff_t TiffSize(thandle_t h) { return static_cast<TiffMemory*>(h)->bytes.size(); }
int TiffMap(thandle_t, void**, toff_t*) { return 0; }
void TiffUnmap(thandle_t, void*, toff_t) {}

int TiffError(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* m = static_cast<TiffMemory*>(user);
  if (m->error.empty()) {
    char buf[256];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    m->error = std::string(module ? module : "libtiff") + ": " + buf;
  }
  return 1;  // handled: nothing on stderr
}
int TiffWarning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

// An open TIFF over bytes in memory. max_alloc bounds each of libtiff's own allocations.
class TiffFile {
 public:
  ~TiffFile() {
    if (tif_ != nullptr) TIFFClose(tif_);
  }
  Status Open(std::span<const uint8_t> bytes, uint64_t max_alloc) {
    mem_.bytes = bytes;
    std::unique_ptr<TIFFOpenOptions, void (*)(TIFFOpenOptions*)> opts(TIFFOpenOptionsAlloc(),
                                                                      TIFFOpenOptionsFree);
    if (!opts) return Status::Internal("TIFFOpenOptionsAlloc failed");
    TIFFOpenOptionsSetErrorHandlerExtR(opts.get(), TiffError, &mem_);
    TIFFOpenOptionsSetWarningHandlerExtR(opts.get(), TiffWarning, &mem_);
    TIFFOpenOptionsSetMaxSingleMemAlloc(
        opts.get(), static_cast<tmsize_t>(std::min<uint64_t>(max_alloc, INT64_MAX / 2)));
    tif_ = TIFFClientOpenExt("TIFF", "rm", &mem_, TiffRead, TiffWrite, TiffSeek, TiffClose,
                             TiffSize, TiffMap, TiffUnmap, opts.get());
    if (tif_ == nullptr) return Error("TIFF header", "unreadable");
    return Status::OK();
  }
  TIFF* get() const { return tif_; }
  bool failed() const { return !mem_.error.empty(); }
  void ClearError() { mem_.error.clear(); }
  // BadInput "<what>: <libtiff's first error, or fallback>".
  Status Error(const std::string& what, const char* fallback) const {
    return Status::BadInput(what + ": " + (mem_.error.empty() ? fallback : mem_.error));
  }

 private:
  TiffMemory mem_;
  TIFF* tif_ = nullptr;
};

// Reading a directory allocates what its tag counts say: no more than the file could hold.
uint64_t HeaderAlloc(std::span<const uint8_t> bytes) {
  return std::max<uint64_t>(bytes.size() + (1u << 20), 16u << 20);
}

uint64_t Field32(TIFF* t, uint32_t tag, uint32_t def) {
  uint32_t v = def;
  TIFFGetField(t, tag, &v);
  return v;
}
int Field16(TIFF* t, uint32_t tag) {
  uint16_t v = 0;
  TIFFGetFieldDefaulted(t, tag, &v);
  return v;
}

// The current directory's fields (not the page count).
Status ReadDirectory(TiffFile& f, TiffInfo* out) {
  TIFF* t = f.get();
  uint32_t w = 0, h = 0;
  if (TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w) != 1 ||
      TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h) != 1) {
    return Status::BadInput("TIFF header: no image width or length");
  }
  out->width = w;
  out->height = h;
  out->samples = Field16(t, TIFFTAG_SAMPLESPERPIXEL);
  out->bits = Field16(t, TIFFTAG_BITSPERSAMPLE);
  out->sample_format = Field16(t, TIFFTAG_SAMPLEFORMAT);
  out->compression = Field16(t, TIFFTAG_COMPRESSION);
  out->planar = Field16(t, TIFFTAG_PLANARCONFIG) == PLANARCONFIG_SEPARATE;
  out->tiled = TIFFIsTiled(t) != 0;
  uint16_t photometric = 0;
  out->photometric = TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &photometric) == 1 ? photometric : -1;

  const int b = out->bits, fmt = out->sample_format;
  bool type_ok = true;
  if (fmt == SAMPLEFORMAT_UINT && b == 8) {
    out->type = SampleType::kUint8;
  } else if (fmt == SAMPLEFORMAT_UINT && b == 16) {
    out->type = SampleType::kUint16;
  } else if (fmt == SAMPLEFORMAT_INT && b == 16) {
    out->type = SampleType::kInt16;
  } else if (fmt == SAMPLEFORMAT_IEEEFP && b == 32) {
    out->type = SampleType::kFloat32;
  } else {
    type_ok = false;
  }
  const int n = out->samples;
  const bool photo_ok = (out->photometric == PHOTOMETRIC_MINISBLACK && n >= 1) ||
                        (out->photometric == PHOTOMETRIC_RGB && n >= 3);
  out->ours = type_ok && photo_ok && n <= kMaxChannels && out->compression != COMPRESSION_OJPEG;
  return Status::OK();
}

// Counts the pages after the current (first) directory, then goes back to the first. A broken
// link further down the chain ends the count where it is (the first page is what is decoded;
// its own reading stays strict).
void CountPages(TiffFile& f, TiffInfo* out) {
  TIFF* t = f.get();
  int pages = 1;
  for (int dirs = 1; dirs < 4096 && TIFFReadDirectory(t) == 1; ++dirs) {
    uint32_t subfile = 0;
    TIFFGetField(t, TIFFTAG_SUBFILETYPE, &subfile);
    if ((subfile & FILETYPE_REDUCEDIMAGE) == 0) ++pages;
  }
  out->pages = pages;
  f.ClearError();
}

Status CheckTiffSize(const TiffInfo& info, uint64_t* bytes) {
  DSPIPE_RETURN_IF_ERROR(CheckImageSize("TIFF header", info.width, info.height));
  const uint64_t sample_bytes = SampleTypeSize(info.type);
  *bytes = uint64_t{info.width} * info.height * static_cast<uint64_t>(info.samples) * sample_bytes;
  const uint64_t max_bytes = GetDecodeLimits().max_pixels * 4;
  if (*bytes > max_bytes) {
    return Status::BadInput(
        "TIFF header declares " + std::to_string(info.width) + "x" + std::to_string(info.height) +
        " pixels of " + std::to_string(info.samples) + " x " + std::to_string(sample_bytes) +
        "-byte samples (" + std::to_string(*bytes) + " bytes); the limit is " +
        std::to_string(max_bytes) +
        " bytes (4 bytes per pixel of --max-image-pixels; raise it with --max-image-pixels, or "
        "DecodeLimits::max_pixels)");
  }
  return Status::OK();
}

// One strip or tile of `plane` (0 for contiguous files) decoded into buf, exactly `expect` bytes.
Status ReadChunk(TiffFile& f, bool tiled, uint32_t index, uint8_t* buf, tmsize_t expect) {
  const tmsize_t n = tiled ? TIFFReadEncodedTile(f.get(), index, buf, expect)
                           : TIFFReadEncodedStrip(f.get(), index, buf, expect);
  const char* what = tiled ? "tile " : "strip ";
  if (n < 0 || f.failed()) {
    return f.Error("TIFF " + std::string(what) + std::to_string(index), "decode failed");
  }
  if (n != expect) {
    return Status::BadInput("TIFF " + std::string(what) + std::to_string(index) + " decoded to " +
                            std::to_string(n) + " bytes, expected " + std::to_string(expect) +
                            " (truncated or corrupt)");
  }
  return Status::OK();
}

// Plane `plane` of a planar file (or the whole contiguous image, plane 0, spp samples per
// pixel) into dst: rows of w * spp samples, `row_bytes` apart.
Status ReadPlane(TiffFile& f, const TiffInfo& info, int plane, int spp, uint8_t* dst,
                 size_t row_bytes) {
  TIFF* t = f.get();
  const uint32_t w = info.width, h = info.height;
  const size_t px = static_cast<size_t>(spp) * SampleTypeSize(info.type);
  if (!info.tiled) {
    uint32_t rps = static_cast<uint32_t>(Field32(t, TIFFTAG_ROWSPERSTRIP, h));
    if (rps == 0 || rps > h) rps = h;
    for (uint32_t y = 0; y < h; y += rps) {
      const uint32_t rows = std::min(rps, h - y);
      const uint32_t strip = TIFFComputeStrip(t, y, static_cast<uint16_t>(plane));
      DSPIPE_RETURN_IF_ERROR(ReadChunk(f, false, strip, dst + y * row_bytes,
                                       static_cast<tmsize_t>(size_t{rows} * w * px)));
    }
    return Status::OK();
  }
  const uint32_t tw = static_cast<uint32_t>(Field32(t, TIFFTAG_TILEWIDTH, 0));
  const uint32_t th = static_cast<uint32_t>(Field32(t, TIFFTAG_TILELENGTH, 0));
  if (tw == 0 || th == 0) return Status::BadInput("TIFF header: tiles of no width or length");
  const uint64_t tile_bytes = uint64_t{tw} * th * px;
  // A tile is at most the image rounded up to whole 16-pixel tiles, as any writer makes them.
  const uint64_t max_tile = uint64_t{(w + 15) / 16 * 16} * ((h + 15) / 16 * 16) * px;
  if (tile_bytes > std::max<uint64_t>(max_tile, 1u << 20)) {
    return Status::BadInput("TIFF header: tiles of " + std::to_string(tw) + "x" +
                            std::to_string(th) + " pixels for a " + std::to_string(w) + "x" +
                            std::to_string(h) + " image");
  }
  if (static_cast<uint64_t>(TIFFTileSize64(t)) != tile_bytes) {
    return f.Error("TIFF tile size", "does not match the tile's pixels");
  }
  std::vector<uint8_t> tile(tile_bytes);
  for (uint32_t ty = 0; ty < h; ty += th) {
    for (uint32_t tx = 0; tx < w; tx += tw) {
      const uint32_t index = TIFFComputeTile(t, tx, ty, 0, static_cast<uint16_t>(plane));
      DSPIPE_RETURN_IF_ERROR(
          ReadChunk(f, true, index, tile.data(), static_cast<tmsize_t>(tile_bytes)));
      const uint32_t rows = std::min(th, h - ty), cols = std::min(tw, w - tx);
      for (uint32_t r = 0; r < rows; ++r) {
        std::memcpy(dst + (ty + r) * row_bytes + tx * px, tile.data() + size_t{r} * tw * px,
                    cols * px);
      }
    }
  }
  return Status::OK();
}

// Interleaves a plane of `bytes`-sized samples into channel k of out.
void Interleave(const std::vector<uint8_t>& plane, int k, size_t bytes, cv::Mat* out) {
  const size_t c = static_cast<size_t>(out->channels());
  const size_t n = out->total();
  uint8_t* d = out->data + k * bytes;
  const uint8_t* s = plane.data();
  for (size_t i = 0; i < n; ++i, d += c * bytes, s += bytes) std::memcpy(d, s, bytes);
}

// The current directory's pixels into *out (reused when it has the size and type).
Status ReadPixels(TiffFile& f, const TiffInfo& info, cv::Mat* out) {
  // What libtiff said about the directory (it read it) is not held against the pixels: from
  // here, any error it reports fails the strip or tile that raised it.
  f.ClearError();
  const int h = static_cast<int>(info.height), w = static_cast<int>(info.width);
  const int type = CV_MAKETYPE(CvDepth(info.type), info.samples);
  if (!(out->rows == h && out->cols == w && out->type() == type && out->isContinuous())) {
    out->create(h, w, type);
  }
  const size_t sample_bytes = SampleTypeSize(info.type);
  if (!info.planar || info.samples == 1) {
    return ReadPlane(f, info, 0, info.samples, out->data, out->step[0]);
  }
  std::vector<uint8_t> plane(size_t{info.width} * info.height * sample_bytes);
  for (int k = 0; k < info.samples; ++k) {
    DSPIPE_RETURN_IF_ERROR(ReadPlane(f, info, k, 1, plane.data(), info.width * sample_bytes));
    Interleave(plane, k, sample_bytes, out);
  }
  return Status::OK();
}

}  // namespace

Status ReadTiffInfo(std::span<const uint8_t> bytes, TiffInfo* out) {
  *out = TiffInfo{};
  TiffFile f;
  DSPIPE_RETURN_IF_ERROR(f.Open(bytes, HeaderAlloc(bytes)));
  DSPIPE_RETURN_IF_ERROR(ReadDirectory(f, out));
  CountPages(f, out);
  return Status::OK();
}

Status CheckTiffLayout(const TiffInfo& info) {
  if (info.samples > kMaxChannels) {
    return Status::BadInput("a TIFF of " + std::to_string(info.samples) +
                            " samples per pixel; dspipe reads at most " +
                            std::to_string(kMaxChannels) + " channels");
  }
  if (info.pages <= 1) return Status::OK();
  return Status::BadInput("a multi-page TIFF (" + std::to_string(info.pages) +
                          " pages); dspipe reads one page per image and does not take the "
                          "first one silently: split the pages into files of their own");
}

Status CheckTiffHeader(std::span<const uint8_t> bytes) {
  TiffFile f;
  DSPIPE_RETURN_IF_ERROR(f.Open(bytes, HeaderAlloc(bytes)));
  TiffInfo info;
  DSPIPE_RETURN_IF_ERROR(ReadDirectory(f, &info));
  return CheckImageSize("TIFF header", info.width, info.height);
}

Status DecodeTiff(std::span<const uint8_t> bytes, cv::Mat* out) {
  TiffInfo info;
  DSPIPE_RETURN_IF_ERROR(TryDecodeTiff(bytes, out, &info));
  if (!info.ours) {
    return Status::BadInput("TIFF of " + std::to_string(info.samples) + " x " +
                            std::to_string(info.bits) + "-bit samples (format " +
                            std::to_string(info.sample_format) + ", photometric " +
                            std::to_string(info.photometric) + ") is not one DecodeTiff reads");
  }
  return Status::OK();
}

Status TryDecodeTiff(std::span<const uint8_t> bytes, cv::Mat* out, TiffInfo* out_info) {
  TiffInfo& info = *out_info;
  info = TiffInfo{};
  uint64_t image_bytes = 0;
  {
    // First the header alone, with libtiff's allocations bounded by the file's size: the
    // limits before anything the header's sizes ask for is allocated.
    TiffFile f;
    DSPIPE_RETURN_IF_ERROR(f.Open(bytes, HeaderAlloc(bytes)));
    DSPIPE_RETURN_IF_ERROR(ReadDirectory(f, &info));
    CountPages(f, &info);
    DSPIPE_RETURN_IF_ERROR(CheckTiffLayout(info));  // whoever decodes it: never the first silently
    if (!info.ours) return Status::OK();
    DSPIPE_RETURN_IF_ERROR(CheckTiffSize(info, &image_bytes));
    if (!TIFFIsCODECConfigured(static_cast<uint16_t>(info.compression))) {
      return Status::BadInput("TIFF compression " + std::to_string(info.compression) +
                              " is not one this libtiff decodes");
    }
  }
  // Then the pixels: a codec may allocate as much as one decoded strip or tile (the floating
  // point predictor does), which is at most the image checked above.
  TiffFile f;
  DSPIPE_RETURN_IF_ERROR(f.Open(bytes, std::max(HeaderAlloc(bytes), image_bytes + (1u << 20))));
  TiffInfo again;
  DSPIPE_RETURN_IF_ERROR(ReadDirectory(f, &again));
  if (again.width != info.width || again.height != info.height || again.samples != info.samples ||
      again.type != info.type || !again.ours) {
    return Status::Internal("TIFF directory read twice differs");
  }
  return ReadPixels(f, info, out);
}

Status DecodeTiffPages(std::span<const uint8_t> bytes, cv::Mat* out, int* pages) {
  *pages = 0;
  std::vector<TiffInfo> infos;  // the pages, in order (reduced-resolution copies left out)
  std::vector<tdir_t> dirs;
  uint64_t total_bytes = 0, max_page_bytes = 0;
  int channels = 0;
  {
    TiffFile f;
    DSPIPE_RETURN_IF_ERROR(f.Open(bytes, HeaderAlloc(bytes)));
    TIFF* t = f.get();
    for (tdir_t d = 0;; ++d) {
      uint32_t subfile = 0;
      TIFFGetField(t, TIFFTAG_SUBFILETYPE, &subfile);
      if ((subfile & FILETYPE_REDUCEDIMAGE) == 0) {
        const std::string page = "TIFF page " + std::to_string(infos.size() + 1);
        TiffInfo info;
        Status s = ReadDirectory(f, &info);
        if (!s.ok()) return Status::BadInput(page + ": " + s.message());
        if (!info.ours) {
          return Status::BadInput(page + ": " + std::to_string(info.samples) + " x " +
                                  std::to_string(info.bits) + "-bit samples (format " +
                                  std::to_string(info.sample_format) + ", photometric " +
                                  std::to_string(info.photometric) +
                                  "), which are not stacked as channels: pages of 8/16-bit "
                                  "integer or float32 gray or RGB samples are");
        }
        if (!infos.empty() && (info.width != infos[0].width || info.height != infos[0].height ||
                               info.type != infos[0].type)) {
          return Status::BadInput(
              page + " is " + std::to_string(info.width) + "x" + std::to_string(info.height) + " " +
              SampleTypeName(info.type) + ", page 1 " + std::to_string(infos[0].width) + "x" +
              std::to_string(infos[0].height) + " " + SampleTypeName(infos[0].type) +
              ": pages stacked as channels must all have one size and sample type");
        }
        channels += info.samples;
        if (channels > kMaxChannels) {
          return Status::BadInput(page + " brings the channels to " + std::to_string(channels) +
                                  "; a record holds at most " + std::to_string(kMaxChannels));
        }
        if (!TIFFIsCODECConfigured(static_cast<uint16_t>(info.compression))) {
          return Status::BadInput(page + ": compression " + std::to_string(info.compression) +
                                  " is not one this libtiff decodes");
        }
        uint64_t page_bytes = 0;
        DSPIPE_RETURN_IF_ERROR(CheckTiffSize(info, &page_bytes));
        total_bytes += page_bytes;
        max_page_bytes = std::max(max_page_bytes, page_bytes);
        infos.push_back(info);
        dirs.push_back(d);
      }
      if (d >= 4096) return Status::BadInput("TIFF of more than 4096 directories");
      if (TIFFReadDirectory(t) != 1) break;
    }
    if (f.failed()) {
      return f.Error("TIFF page " + std::to_string(infos.size() + 1), "unreadable directory");
    }
    TiffInfo all = infos[0];
    all.samples = channels;
    DSPIPE_RETURN_IF_ERROR(CheckTiffSize(all, &total_bytes));  // the stack, against the limits
  }
  TiffFile f;
  DSPIPE_RETURN_IF_ERROR(f.Open(bytes, std::max(HeaderAlloc(bytes), max_page_bytes + (1u << 20))));
  std::vector<cv::Mat> planes(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    const std::string page = "TIFF page " + std::to_string(i + 1);
    if (TIFFSetDirectory(f.get(), dirs[i]) != 1) return f.Error(page, "unreadable directory");
    TiffInfo again;
    DSPIPE_RETURN_IF_ERROR(ReadDirectory(f, &again));
    if (again.width != infos[i].width || again.height != infos[i].height ||
        again.samples != infos[i].samples || again.type != infos[i].type || !again.ours) {
      return Status::Internal("TIFF directory read twice differs");
    }
    Status s = ReadPixels(f, infos[i], &planes[i]);
    if (!s.ok()) return Status::BadInput(page + ": " + s.message());
  }
  if (planes.size() == 1) {
    *out = planes[0];
  } else {
    cv::merge(planes, *out);
  }
  *pages = static_cast<int>(planes.size());
  return Status::OK();
}

}  // namespace dspipe::codec
