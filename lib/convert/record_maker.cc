// SPDX-License-Identifier: Apache-2.0
#include "convert/record_maker.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <opencv2/imgproc.hpp>

#include "codec/image.h"
#include "codec/jpeg_restart.h"
#include "codec/limits_check.h"
#include "codec/tiff.h"
#include "convert/volume_slices.h"

namespace dspipe::convert {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void Resize(const cv::Mat& in, int w, int h, bool nearest, cv::Mat* out) {
  // Masks: NEAREST_EXACT samples at pixel centres as the image's LINEAR/AREA resize does (plain
  // INTER_NEAREST is shifted by up to half a pixel), so image and mask stay aligned.
  int interp = cv::INTER_NEAREST_EXACT;
  if (!nearest) interp = (w < in.cols || h < in.rows) ? cv::INTER_AREA : cv::INTER_LINEAR;
  cv::resize(in, *out, cv::Size(w, h), 0, 0, interp);
}

// Integer samples (uint8, uint16, int16) in one pass: each channel's count of every value, from
// which the exact sums, sums of squares, min, max and the record's counts from min to max
// (MadeRecord::hist, the percentiles' input) follow.
template <typename T>
void AddIntegerStats(const cv::Mat& img, MadeRecord* r) {
  constexpr int64_t kLowest = std::numeric_limits<T>::min();
  constexpr size_t kValues =
      static_cast<size_t>(int64_t{std::numeric_limits<T>::max()} - kLowest + 1);
  const int c = img.channels();
  thread_local std::vector<uint32_t>
      counts;  // channel k's count of value v: [k * kValues + v - kLowest]
  counts.assign(static_cast<size_t>(c) * kValues, 0);
  for (int y = 0; y < img.rows; ++y) {
    const T* p = img.ptr<T>(y);
    for (int x = 0; x < img.cols * c; x += c) {
      for (int k = 0; k < c; ++k) {
        ++counts[static_cast<size_t>(k) * kValues + static_cast<size_t>(p[x + k] - kLowest)];
      }
    }
  }
  for (int k = 0; k < c; ++k) {
    const uint32_t* n = counts.data() + static_cast<size_t>(k) * kValues;
    size_t first = 0, last = kValues - 1;
    while (first < last && n[first] == 0) ++first;
    while (last > first && n[last] == 0) --last;
    int64_t sum = 0;
    uint64_t sumsq = 0;
    for (size_t i = first; i <= last; ++i) {
      const int64_t v = static_cast<int64_t>(i) + kLowest;
      sum += v * n[i];
      sumsq += static_cast<uint64_t>(v * v) * n[i];
    }
    r->sum[k] = static_cast<double>(sum);
    r->sumsq[k] = static_cast<double>(sumsq);
    r->min[k] = static_cast<double>(static_cast<int64_t>(first) + kLowest);
    r->max[k] = static_cast<double>(static_cast<int64_t>(last) + kLowest);
    r->hist[k].assign(n + first, n + last + 1);
  }
}

// Float samples: sums, sums of squares, min and max, and each channel's values in bins
// (MadeRecord::fbins, the percentiles' input).
void AddFloatStats(const cv::Mat& img, MadeRecord* r) {
  const int c = img.channels();
  for (int k = 0; k < c; ++k) {
    r->min[k] = std::numeric_limits<double>::infinity();
    r->max[k] = -std::numeric_limits<double>::infinity();
  }
  for (int y = 0; y < img.rows; ++y) {
    const float* p = img.ptr<float>(y);
    for (int x = 0; x < img.cols * c; x += c) {
      for (int k = 0; k < c; ++k) {
        const double v = static_cast<double>(p[x + k]);
        r->sum[k] += v;
        r->sumsq[k] += v * v;
        r->min[k] = std::min(r->min[k], v);
        r->max[k] = std::max(r->max[k], v);
      }
    }
  }
  // One channel at a time through a dense count per bin (4 MiB per thread, reused), listing the
  // bins it touches so that emptying it costs what filling it did.
  constexpr size_t kBins = size_t{1} << kFloatBinBits;
  thread_local std::vector<uint32_t> counts(kBins, 0);
  thread_local std::vector<float> lo(kBins), hi(kBins);
  thread_local std::vector<uint32_t> touched;
  for (int k = 0; k < c; ++k) {
    touched.clear();
    for (int y = 0; y < img.rows; ++y) {
      const float* p = img.ptr<float>(y);
      for (int x = k; x < img.cols * c; x += c) {
        const float v = p[x];
        if (std::isnan(v)) continue;
        const uint32_t b = FloatBinOf(v);
        if (counts[b]++ == 0) {
          touched.push_back(b);
          lo[b] = hi[b] = v;
        } else {
          lo[b] = std::min(lo[b], v);
          hi[b] = std::max(hi[b], v);
        }
      }
    }
    std::sort(touched.begin(), touched.end());
    std::vector<FloatBin>& out = r->fbins[k];
    out.resize(touched.size());
    for (size_t i = 0; i < touched.size(); ++i) {
      const uint32_t b = touched[i];
      out[i] = {b, counts[b], lo[b], hi[b]};
      counts[b] = 0;
    }
  }
}

// Per-channel sums, sums of squares, min and max in the stored samples' units, and the value
// counts of integer samples.
void AddStats(const cv::Mat& img, MadeRecord* r) {
  switch (img.depth()) {
    case CV_8U:
      AddIntegerStats<uint8_t>(img, r);
      break;
    case CV_16U:
      AddIntegerStats<uint16_t>(img, r);
      break;
    case CV_16S:
      AddIntegerStats<int16_t>(img, r);
      break;
    default:
      AddFloatStats(img, r);
      break;
  }
  r->pixels = static_cast<uint64_t>(img.rows) * img.cols;
  r->has_stats = true;
}

// The failure of one source file, about `file` (Status::path(): Python's CorruptRecord.path).
Status Reject(const std::string& file, const Status& s) {
  if (s.code() == Status::Code::kIOError) return s.WithPath(file);  // already names the file
  // WithContext keeps the option markers, so a front end names its own flag or keyword.
  if (s.code() == Status::Code::kBadInput) return s.WithContext(file).WithPath(file);
  return Status::BadInput(file + ": " + s.message()).WithPath(file);
}

// An image deeper than 8 bits is kept as it is (a typed dataset, SampleType) unless
// BuildOptions::depth = 8 asks for its high byte: integer samples only.
Status CheckImageDepth(const codec::ImageProbe& p, SampleType type, const BuildOptions& o) {
  if (type == SampleType::kUint8 || o.depth != 8) return Status::OK();
  if (type == SampleType::kFloat32) {
    return Status::BadInput(
        "a 32-bit float image (" + std::to_string(p.channels) +
        (p.channels == 1 ? " channel" : " channels") + "): " + Opt("BuildOptions::depth", "8") +
        " keeps the high byte of integer samples, and no reduction of float samples is right "
        "without knowing their range; drop it to keep the float32 values");
  }
  return Status::OK();
}

// Why a typed image cannot take an option that needs 8-bit samples, and what to pass instead.
Status TypedRefusal(SampleType type, const std::string& option, const std::string& why) {
  return Status::BadInput(std::string("a ") + SampleTypeName(type) + " image and " + option + ": " +
                          why + "; drop it, or pass " + Opt("BuildOptions::depth", "8") +
                          " to store 8-bit samples knowingly");
}

}  // namespace

Status ParseMaskMap(const std::string& text, uint8_t lut[256]) {
  for (int i = 0; i < 256; ++i) lut[i] = static_cast<uint8_t>(i);
  bool seen[256] = {};
  size_t at = 0;
  while (at <= text.size()) {  // "1:2," has an empty last pair: refused
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string pair = text.substr(at, comma - at);
    int from = -1, to = -1;
    char tail = 0;
    if (std::sscanf(pair.c_str(), " %d : %d %c", &from, &to, &tail) != 2 || from < 0 ||
        from > 255 || to < 0 || to > 255) {
      return Status::InvalidArgument(Opt("BuildOptions::mask_map") + ": '" + pair +
                                     "' is not FROM:TO with ids 0..255 (e.g. \"255:1\")");
    }
    if (seen[from]) {
      return Status::InvalidArgument(Opt("BuildOptions::mask_map") + ": id " +
                                     std::to_string(from) + " is mapped twice");
    }
    seen[from] = true;
    lut[from] = static_cast<uint8_t>(to);
    at = comma + 1;
  }
  return Status::OK();
}

namespace {

// The mask's largest id, and (8-bit masks) which ids it holds.
void NoteMaskIds(const cv::Mat& mask, MadeRecord* out) {
  double mx = 0;
  cv::minMaxLoc(mask, nullptr, &mx);
  out->mask_max = static_cast<int>(mx);
  if (mask.depth() == CV_8U) {
    bool seen[256] = {};
    const cv::Mat m = mask.isContinuous() ? mask : mask.clone();
    const uint8_t* p = m.data;
    const size_t n = m.total() * static_cast<size_t>(m.channels());  // hoisted: a call per pixel
    for (size_t i = 0; i < n; ++i) seen[p[i]] = true;
    for (int id = 0; id < 256; ++id) {
      if (seen[id]) out->mask_ids[id / 64] |= uint64_t{1} << (id % 64);
    }
  }
}

// NoteMaskIds from a label's pixel counts per id (MaskHistogram): the same max and id set.
void NoteMaskIds(const std::vector<uint32_t>& counts, MadeRecord* out) {
  int max = 0;
  for (size_t id = 0; id < counts.size(); ++id) {
    if (counts[id] == 0) continue;
    max = static_cast<int>(id);
    if (counts.size() == 256) out->mask_ids[id / 64] |= uint64_t{1} << (id % 64);
  }
  out->mask_max = max;
}

// Pixels stored as raw samples (zstd-compressed unless compression is none).
Status RawPayload(const cv::Mat& m, const BuildOptions& o, Codec* codec, std::string* out) {
  const cv::Mat c = m.isContinuous() ? m : m.clone();
  const size_t n = c.total() * c.elemSize();
  if (o.compression == Compression::kZstd) {
    *codec = Codec::kRawZstd;
    return codec::CompressZstd({c.data, n}, o.zstd_level, out);
  }
  *codec = Codec::kRaw;
  out->assign(reinterpret_cast<const char*>(c.data), n);
  return Status::OK();
}

// BuildOptions::mask_map applied to a mask: ids 0..255 mapped, larger ids (uint16) kept.
Status ApplyMaskMap(const std::string& map, cv::Mat* mask) {
  uint8_t lut[256];
  DSPIPE_RETURN_IF_ERROR(ParseMaskMap(map, lut));  // checked up front already
  if (!mask->isContinuous()) *mask = mask->clone();
  if (mask->depth() == CV_8U) {
    for (size_t i = 0; i < mask->total(); ++i) mask->data[i] = lut[mask->data[i]];
  } else {
    uint16_t* p = mask->ptr<uint16_t>();
    for (size_t i = 0; i < mask->total(); ++i) p[i] = p[i] < 256 ? lut[p[i]] : p[i];
  }
  return Status::OK();
}

// The record from its header and payloads, each at most 4 GiB (else kBadInput naming `path`,
// as "PATH: WHAT larger than 4 GiB"; `what` may be empty).
Status FinishRecord(const std::string& path, const std::string& what, RecordHeader h,
                    const std::string& img_payload, const std::string& mask_payload,
                    MadeRecord* out) {
  if (img_payload.size() > UINT32_MAX || mask_payload.size() > UINT32_MAX) {
    return Status::BadInput(path + ": " + (what.empty() ? "" : what + " ") + "larger than 4 GiB")
        .WithPath(path);
  }
  h.image_size = static_cast<uint32_t>(img_payload.size());
  h.mask_size = static_cast<uint32_t>(mask_payload.size());
  out->header = h;
  out->value.reserve(kRecordHeaderSize + img_payload.size() + mask_payload.size());
  EncodeRecord(h, Bytes(img_payload), Bytes(mask_payload), &out->value);
  return Status::OK();
}

// A slice of a NIfTI volume (and of its label volume) as a record: typed samples as the volume
// holds them, HxWxC (C: the 4th dimension; with BuildOptions::context K, (2K+1)*C: the
// neighbouring slices too, StackSlices). Stored raw with store = kRaw; else losslessly encoded:
// one channel of uint8 / uint16 as PNG; int16 and float32 (which PNG cannot hold) and several
// channels (modalities or slices, not colours) as zstd samples.
// Masks likewise (PNG, or raw): the slice's own label, with its class counts (ClassCounts).
Status MakeSliceRecord(const SourceItem& item, const BuildOptions& o, bool want_stats,
                       volume::VolumeCache* volumes, MadeRecord* out) {
  if (volumes == nullptr) return Status::Internal(item.image + ": no volume reader");
  volume::SliceAxis axis = volume::SliceAxis::kAxial;
  DSPIPE_RETURN_IF_ERROR(volume::ParseSliceAxis(o.slice_axis, &axis));
  std::shared_ptr<const volume::Volume> v;
  Status s = volumes->Get(item.image, false, &v);
  if (!s.ok()) return s.WithPath(item.image);  // ReadNifti's messages name the file
  cv::Mat img;
  // Checked when the build was planned; the volume may have changed since (resume).
  DSPIPE_RETURN_IF_ERROR(CheckContextChannels(item.image, o.context, v->info.channels));
  s = StackSlices(*v, axis, item.slice, o.context, &img);
  if (!s.ok()) return s.WithPath(item.image);
  // --spacing: resampled in plane (bilinear: float32), the label below likewise (nearest).
  const bool resample = o.spacing_rows > 0;
  const std::array<double, 2> own = volume::SliceSpacing(v->info, axis);
  const std::array<double, 2> target = {o.spacing_rows, o.spacing_cols};
  if (resample) volume::ResampleSlice(img, own, target, /*nearest=*/false, &img);
  // --slice-size: padded or cropped about the centre, the label below likewise.
  const bool sized = o.slice_height > 0;
  if (sized) volume::PadCropSlice(img, o.slice_height, o.slice_width, &img);
  const SampleType image_type = resample ? SampleType::kFloat32 : v->type;
  const bool raw = o.store == StoreMode::kRaw;
  if (want_stats) AddStats(img, out);
  RecordHeader h;
  h.channels = static_cast<uint8_t>(img.channels());
  h.image_type = image_type;
  h.width = static_cast<uint32_t>(img.cols);
  h.height = static_cast<uint32_t>(img.rows);
  h.label = -1;
  std::string img_payload, mask_payload;
  const bool png = !raw && img.channels() == 1 &&
                   (image_type == SampleType::kUint8 || image_type == SampleType::kUint16);
  if (png) {
    h.image_codec = Codec::kPng;
    DSPIPE_RETURN_IF_ERROR(image_type == SampleType::kUint8
                               ? codec::EncodePng(img, 1, &img_payload)
                               : codec::EncodeTypedPng(img, &img_payload));
  } else {
    DSPIPE_RETURN_IF_ERROR(RawPayload(img, o, &h.image_codec, &img_payload));
  }
  if (!item.mask.empty()) {
    std::shared_ptr<const volume::Volume> lv;
    s = volumes->Get(item.mask, true, &lv);
    if (!s.ok()) return s.WithPath(item.mask);
    cv::Mat mask;
    s = volume::ExtractSlice(*lv, axis, item.slice, &mask);
    if (!s.ok()) return s.WithPath(item.mask);
    if (resample) volume::ResampleSlice(mask, own, target, /*nearest=*/true, &mask);
    if (sized) volume::PadCropSlice(mask, o.slice_height, o.slice_width, &mask);
    if (!o.mask_map.empty()) DSPIPE_RETURN_IF_ERROR(ApplyMaskMap(o.mask_map, &mask));
    // One pass over the label: its class counts give the ids NoteMaskIds would find too.
    const std::vector<uint32_t> counts = MaskHistogram(mask);
    NoteMaskIds(counts, out);
    out->class_counts = ClassCountsOf(counts);
    out->has_class_counts = true;
    h.mask_type = lv->type;
    if (raw) {
      DSPIPE_RETURN_IF_ERROR(RawPayload(mask, o, &h.mask_codec, &mask_payload));
    } else {
      h.mask_codec = Codec::kPng;
      DSPIPE_RETURN_IF_ERROR(lv->type == SampleType::kUint8
                                 ? codec::EncodePng(mask, 1, &mask_payload)
                                 : codec::EncodeTypedPng(mask, &mask_payload));
    }
  }
  return FinishRecord(item.image, "a slice", h, img_payload, mask_payload, out);
}

// The item's image and mask bytes, from where the item says: handed over (`given`: an archive
// member read by the pipeline), a plain LMDB (which may give the label too), or files.
Status ReadSourceBytes(const SourceItem& item, const BuildOptions& o, const Dataset* plain,
                       SourceBytes* given, std::string* img_bytes, std::string* mask_bytes,
                       int* label, MadeRecord* out) {
  if (given != nullptr) {
    *img_bytes = std::move(given->image);
    *mask_bytes = std::move(given->mask);
    out->bytes_read += img_bytes->size() + mask_bytes->size();
  } else if (item.plain_index >= 0) {
    if (plain == nullptr) return Status::Internal(item.image + ": plain LMDB source not open");
    DSPIPE_RETURN_IF_ERROR(ReadPlainItem(*plain, item, img_bytes, mask_bytes, label));
    out->bytes_read += img_bytes->size() + mask_bytes->size();
  } else {
    Env* env = o.env != nullptr ? o.env : Env::Default();
    DSPIPE_RETURN_IF_ERROR(env->ReadFile(item.image, img_bytes));
    out->bytes_read += img_bytes->size();
    if (!item.mask.empty()) {
      DSPIPE_RETURN_IF_ERROR(env->ReadFile(item.mask, mask_bytes));
      out->bytes_read += mask_bytes->size();
    }
  }
  return Status::OK();
}

// The image's header: the file's (codec::Probe), or with BuildOptions::pages_as_channels and a
// multi-page TIFF, its pages decoded into *stacked as channels (codec/tiff.h; *pages true) and
// their header: such a file is stored as decoded pixels (the loader would read its bytes as one
// page). Errors are about the file, not yet Reject'ed.
Status ProbeSourceImage(const BuildOptions& o, const std::string& bytes, codec::ImageProbe* probe,
                        cv::Mat* stacked, bool* pages) {
  *pages = false;
  if (o.pages_as_channels && codec::SniffImageFormat(Bytes(bytes)) == codec::ImageFormat::kTiff) {
    codec::TiffInfo info;
    DSPIPE_RETURN_IF_ERROR(codec::ReadTiffInfo(Bytes(bytes), &info));
    if (info.pages > 1) {
      int n = 0;
      DSPIPE_RETURN_IF_ERROR(codec::DecodeTiffPages(Bytes(bytes), stacked, &n));
      // 8-bit pages of up to 4 channels in all would be stored as gray or RGB (IsTyped).
      const bool narrow8 = stacked->depth() == CV_8U && stacked->channels() <= 4;
      if (narrow8 || o.depth == 8) {
        return Status::BadInput(
            "a TIFF of " + std::to_string(n) + " pages of " +
            (narrow8 ? std::to_string(stacked->channels()) + " 8-bit channels in all"
                     : "samples, and " + Opt("BuildOptions::depth", "8")) +
            ": " + Opt("BuildOptions::pages_as_channels") +
            " stacks 16-bit and float32 pages, and 8-bit pages of more than 4 channels in all, "
            "as they are (8-bit images of up to 4 channels are stored gray or RGB)");
      }
      *pages = true;
      probe->codec = Codec::kEncoded;
      probe->width = stacked->cols;
      probe->height = stacked->rows;
      probe->channels = stacked->channels();
      probe->bit_depth = static_cast<int>(stacked->elemSize1()) * 8;
      probe->floating = stacked->depth() == CV_32F;
      probe->is_signed = stacked->depth() == CV_16S;
      return Status::OK();
    }
  }
  return codec::Probe(Bytes(bytes), probe);
}

// The stored size: BuildOptions' resize, or max_side shrinking the longer side (aspect kept).
// True when the image is resampled (always with a resize, even to its own size).
bool OutputSize(const BuildOptions& o, int src_w, int src_h, int* out_w, int* out_h) {
  *out_w = src_w;
  *out_h = src_h;
  if (o.resize_width > 0 && o.resize_height > 0) {
    *out_w = o.resize_width;
    *out_h = o.resize_height;
    return true;
  }
  if (o.max_side > 0 && std::max(src_w, src_h) > o.max_side) {
    const double f = static_cast<double>(o.max_side) / std::max(src_w, src_h);
    *out_w = std::clamp(static_cast<int>(std::lround(src_w * f)), 1, o.max_side);
    *out_h = std::clamp(static_cast<int>(std::lround(src_h * f)), 1, o.max_side);
  }
  return *out_w != src_w || *out_h != src_h;
}

// Options an image of this type and channel count cannot take (typed: kept as its own
// SampleType; reduce: reduced to 8 bits as asked). Errors are about the file.
Status CheckImageOptions(const BuildOptions& o, const codec::ImageProbe& probe, SampleType type,
                         bool typed, bool reduce) {
  // An 8-bit image of more than 4 channels is typed for its channels, not its depth.
  const bool wide = type == SampleType::kUint8 && probe.channels > 4;
  auto refuse = [&](const std::string& option, const std::string& why) {
    if (!wide) return TypedRefusal(type, option, why);
    return Status::BadInput("a " + std::to_string(probe.channels) + "-channel 8-bit image and " +
                            option +
                            ": JPEG holds 1 or 3 channels, and dspipe keeps every "
                            "channel; drop it");
  };
  if (typed && o.jpeg_quality > 0) {
    return refuse(Opt("BuildOptions::jpeg_quality"), "JPEG holds 8-bit samples");
  }
  // Reduced to 8 bits, an image is stored gray or RGB: more than 4 channels do not fit.
  if (reduce && probe.channels > 4) {
    return Status::BadInput(
        "a " + std::to_string(probe.channels) + "-channel image reduced to 8 bits (" +
        Opt("BuildOptions::depth", "8") +
        "): reduced images are stored as gray or RGB, which would lose channels; drop the depth "
        "option to keep every channel with its own samples");
  }
  if (typed && o.jpeg_restarts) {
    return refuse(Opt("BuildOptions::jpeg_restarts"),
                  "it re-writes JPEG files, which hold 8-bit samples");
  }
  return Status::OK();
}

// The stored image: the original bytes (moved out of img_bytes) when nothing changes them, else
// the decoded pixels `img` raw, re-encoded losslessly, or as a JPEG when asked for; sets
// h->image_codec. A JPEG file that cannot take restart markers is rejected naming `path`.
Status ImagePayload(const std::string& path, const BuildOptions& o, const codec::ImageProbe& probe,
                    SampleType type, bool typed, bool changed, bool reduce, bool pages, cv::Mat img,
                    std::string* img_bytes, RecordHeader* h, std::string* payload) {
  if (o.store == StoreMode::kRaw) return RawPayload(img, o, &h->image_codec, payload);
  if (typed && (changed || pages || (o.gray && probe.channels > 1))) {
    // Changed here (resized, pages stacked, or reduced to gray as asked): re-encoded
    // losslessly, a uint16 image of 1, 3 or 4 channels as a 16-bit PNG, the rest (int16 and
    // float32, which PNG cannot hold, and other channel counts) as zstd pixels.
    if (!img.isContinuous()) img = img.clone();
    const int c = img.channels();
    if (type == SampleType::kUint16 && (c == 1 || c == 3 || c == 4)) {
      h->image_codec = Codec::kPng;
      return codec::EncodeTypedPng(img, payload);
    }
    h->image_codec = Codec::kRawZstd;
    return codec::CompressZstd({img.data, img.total() * img.elemSize()}, o.zstd_level, payload);
  }
  if (o.jpeg_quality > 0) {
    h->image_codec = Codec::kJpeg;  // --jpeg-quality: every image re-encoded at that quality
    return codec::EncodeJpeg(img, o.jpeg_quality, payload, o.jpeg_restarts);
  }
  if (changed || reduce) {
    h->image_codec = Codec::kPng;  // re-encoded losslessly after resizing or reducing to 8 bits
    return codec::EncodePng(img, 1, payload);
  }
  if (o.jpeg_restarts && probe.codec == Codec::kJpeg) {
    h->image_codec = Codec::kJpeg;  // the same coefficients, a restart marker after every MCU
    const Status s = codec::AddJpegRestarts(Bytes(*img_bytes), payload);
    return s.ok() ? s : Reject(path, s);
  }
  h->image_codec = probe.codec;  // the original bytes; the loader decodes them
  *payload = std::move(*img_bytes);
  return Status::OK();
}

// The stored mask of an image src_w x src_h (resized to out_w x out_h with the image when
// `resize`), and its ids in `out`: a plain 8-bit gray PNG is kept as it is, any other is decoded
// and stored raw or re-encoded; sets h->mask_type and h->mask_codec. Every mask is decoded
// either way: num_classes (users size their model's output from it) counts the classes over
// all masks, never a sample, and mask decodes are cheap.
Status MaskPayload(const SourceItem& item, const BuildOptions& o, std::string* mask_bytes,
                   int src_w, int src_h, bool resize, int out_w, int out_h, RecordHeader* h,
                   std::string* payload, MadeRecord* out) {
  const bool raw = o.store == StoreMode::kRaw;
  const bool keep =
      !raw && !resize && o.mask_map.empty() && codec::IsPlainGray8Png(Bytes(*mask_bytes));
  out->mask_jpeg = codec::SniffCodec(Bytes(*mask_bytes)) == Codec::kJpeg;
  codec::ImageProbe mp;  // completeness first: "truncated PNG" beats a decoder's complaint
  if (codec::SniffCodec(Bytes(*mask_bytes)) != Codec::kEncoded) {
    Status s = codec::Probe(Bytes(*mask_bytes), &mp);
    if (!s.ok()) return Reject(item.mask, s);
  }
  // 16-bit masks are kept wide: ids above 255 (instance maps) make a uint16 mask.
  cv::Mat mask;
  Status s = codec::DecodeMask(Bytes(*mask_bytes), &mask, /*wide=*/true);
  if (!s.ok()) return Reject(item.mask, s);
  if (mask.depth() == CV_16U) {
    double mx = 0;
    cv::minMaxLoc(mask, nullptr, &mx);
    if (mx <= 255) mask.convertTo(mask, CV_8U);  // every id fits: an 8-bit mask, exact
  }
  if (mask.cols != src_w || mask.rows != src_h) {
    return Status::BadInput(item.mask + ": mask is " + std::to_string(mask.cols) + "x" +
                            std::to_string(mask.rows) + " but its image " + item.image + " is " +
                            std::to_string(src_w) + "x" + std::to_string(src_h))
        .WithPath(item.mask);
  }
  if (resize) Resize(mask, out_w, out_h, /*nearest=*/true, &mask);
  if (!o.mask_map.empty()) DSPIPE_RETURN_IF_ERROR(ApplyMaskMap(o.mask_map, &mask));
  NoteMaskIds(mask, out);
  h->mask_type = mask.depth() == CV_16U ? SampleType::kUint16 : SampleType::kUint8;
  if (keep) {
    h->mask_codec = Codec::kPng;
    *payload = std::move(*mask_bytes);
    return Status::OK();
  }
  if (raw) return RawPayload(mask, o, &h->mask_codec, payload);
  h->mask_codec = Codec::kPng;
  return mask.depth() == CV_16U ? codec::EncodeTypedPng(mask, payload)
                                : codec::EncodePng(mask, 1, payload);
}

}  // namespace

Status MakeRecord(const SourceItem& item, const BuildOptions& o, bool want_stats, MadeRecord* out,
                  const Dataset* plain, SourceBytes* given, volume::VolumeCache* volumes) {
  *out = MadeRecord{};
  if (!item.error.empty()) return Reject(item.image, Status::BadInput(item.error));
  if (item.slice >= 0) return MakeSliceRecord(item, o, want_stats, volumes, out);
  const int channels = o.gray ? 1 : 3;
  std::string img_bytes, mask_bytes;
  int label = item.label;
  DSPIPE_RETURN_IF_ERROR(
      ReadSourceBytes(item, o, plain, given, &img_bytes, &mask_bytes, &label, out));

  // ---- image
  codec::ImageProbe probe;
  cv::Mat stacked;  // a multi-page TIFF's pages as channels (pages)
  bool pages = false;
  Status s = ProbeSourceImage(o, img_bytes, &probe, &stacked, &pages);
  if (!s.ok()) return Reject(item.image, s);
  SampleType type = SampleType::kUint8;
  s = codec::SampleTypeOf(probe, &type);
  if (s.ok()) s = CheckImageDepth(probe, type, o);
  if (!s.ok()) return Reject(item.image, s);
  // Reduced to 8 bits (BuildOptions::depth = 8): decoded, stored re-encoded like a resize.
  const bool reduce = type != SampleType::kUint8 && o.depth == 8;
  // Kept as it is (SampleType): decoded with its own type and channels, stored typed. So is an
  // 8-bit image of more than 4 channels (IsTyped): 8-bit gray or RGB would lose channels.
  const bool typed = reduce ? false : IsTyped(type, probe.channels);
  if (!typed) type = SampleType::kUint8;
  // 8-bit samples are stored RGB or gray: the alpha channel is not kept. An opaque one holds
  // nothing, so it goes; a transparent pixel is data, dropped only when asked for. Checked in
  // the decode below when there is one (one decode of a PNG instead of two), else here.
  const bool check_alpha = !typed && (probe.channels == 2 || probe.channels == 4) && !o.drop_alpha;
  bool opaque = true;
  int alpha_row = 0, alpha_col = 0;
  const auto transparent = [&] {
    return Reject(
        item.image,
        Status::BadInput("an alpha channel with transparent pixels (the first at row " +
                         std::to_string(alpha_row) + ", column " + std::to_string(alpha_col) +
                         "), and 8-bit images are stored as RGB or gray, without alpha; pass " +
                         Opt("BuildOptions::drop_alpha", "true") +
                         " to store the colour channels and drop the alpha knowingly"));
  };
  out->image_gray = !typed && !o.gray && probe.channels <= 2;
  const int src_w = probe.width, src_h = probe.height;
  int out_w = 0, out_h = 0;
  const bool resize = OutputSize(o, src_w, src_h, &out_w, &out_h);
  s = CheckImageOptions(o, probe, type, typed, reduce);
  if (!s.ok()) return Reject(item.image, s);
  // Typed images are always decoded: their channel count is what the decode gives.
  const bool decode = o.store == StoreMode::kRaw || resize || reduce || o.jpeg_quality > 0 ||
                      typed || want_stats || o.check == CheckLevel::kDecode;
  if (check_alpha && !decode) {
    s = codec::FindTransparency(Bytes(img_bytes), &opaque, &alpha_row, &alpha_col);
    if (!s.ok()) return Reject(item.image, s);
    if (!opaque) return transparent();
  }
  cv::Mat img;
  if (decode) {
    if (pages) {
      img = stacked;
    } else {
      if (typed) {
        s = codec::DecodeTyped(Bytes(img_bytes), type, false, &img);
      } else if (check_alpha) {
        s = codec::DecodeImageFindingTransparency(Bytes(img_bytes), channels, &img, &opaque,
                                                  &alpha_row, &alpha_col);
      } else {
        s = codec::DecodeImage(Bytes(img_bytes), channels, &img);
      }
      if (!s.ok()) return Reject(item.image, s);
      if (!opaque) return transparent();
    }
    if (typed && o.gray && img.channels() != 1 && img.channels() != 3 && img.channels() != 4) {
      return Reject(item.image,
                    Status::BadInput("a " + std::to_string(img.channels()) + "-channel " +
                                     SampleTypeName(type) + " image and " +
                                     Opt("BuildOptions::gray", "true") +
                                     ": gray is the luminance of RGB (or RGBA), and would lose "
                                     "channels here; drop it to keep every channel"));
    }
    if (typed && o.gray && img.channels() > 1) {  // asked for: one luminance channel
      cv::cvtColor(img, img, img.channels() == 3 ? cv::COLOR_RGB2GRAY : cv::COLOR_RGBA2GRAY);
    }
    if (img.cols != probe.width || img.rows != probe.height) {
      return Status::BadInput(item.image + ": decoded size differs from its header")
          .WithPath(item.image);
    }
  }
  if (resize) Resize(img, out_w, out_h, /*nearest=*/false, &img);
  if (want_stats) AddStats(img, out);

  RecordHeader h;
  h.channels = static_cast<uint8_t>(typed ? img.channels() : channels);
  h.image_type = type;
  h.width = static_cast<uint32_t>(out_w);
  h.height = static_cast<uint32_t>(out_h);
  h.label = label;
  std::string img_payload;
  DSPIPE_RETURN_IF_ERROR(ImagePayload(item.image, o, probe, type, typed, resize, reduce, pages, img,
                                      &img_bytes, &h, &img_payload));

  // ---- mask
  std::string mask_payload;
  if (!item.mask.empty()) {
    DSPIPE_RETURN_IF_ERROR(MaskPayload(item, o, &mask_bytes, src_w, src_h, resize, out_w, out_h, &h,
                                       &mask_payload, out));
  }
  return FinishRecord(item.image, "", h, img_payload, mask_payload, out);
}

}  // namespace dspipe::convert
