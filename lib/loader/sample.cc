// SPDX-License-Identifier: Apache-2.0
#include "loader/sample.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <string>
#include <type_traits>

#include "codec/image.h"
#include "codec/jpeg_decode.h"
#include "dspipe/augment.h"
#include "normalize/normalize_row.h"
#include "transforms/impl.h"
#include "transforms/monai.h"
#include "transforms/simd.h"

namespace dspipe::loader {
namespace {

using transforms::Plan;

// Per-thread decode targets, the plan and the transforms' intermediates. They grow to the
// largest record a thread has seen and are reused (no allocation per sample).
struct Scratch {
  cv::Mat image;
  cv::Mat converted;
  cv::Mat floats;  // a MONAI config's float32 input
  cv::Mat mask;
  cv::Mat converted_mask;
  Plan plan;
  transforms::Scratch warp;
  std::vector<uint8_t> row;
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

bool IsRaw(Codec c) { return c == Codec::kRaw || c == Codec::kRawZstd; }

std::atomic<bool>& FusedFlag() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

using RowOps = std::vector<std::unique_ptr<transforms::RowOp>>;

// The row ops (trailing LUT / noise steps) and the float32 normalize of one row, from L1.
void RowsAndNormalize(const RowOps& ops, const normalize::RowNormalizerF32& norm, uint8_t* row,
                      int width, int channels, float* dst, size_t plane) {
  for (const auto& op : ops) op->Row(row, width, channels);
  norm.Row(row, width, dst, plane);
}

// Normalizes each row the PNG fast path finishes into the sample's float32 NCHW slot, after
// the plan's row ops on a copy of the row (the decoder's row stays as decoded: the next row is
// unfiltered against it; the uint8 slot gets the same ops afterwards, from a fresh state).
class NormalizeRows final : public codec::PngRowSink {
 public:
  NormalizeRows(const NormalizeParams& p, float* dst, int h, int w, int channels, RowOps ops,
                std::vector<uint8_t>* row)
      : norm_(p),
        dst_(dst),
        width_(w),
        channels_(channels),
        plane_(static_cast<size_t>(h) * static_cast<size_t>(w)),
        ops_(std::move(ops)),
        row_(row) {
    if (!ops_.empty()) row_->resize(static_cast<size_t>(w) * static_cast<size_t>(channels));
  }

  void Row(uint32_t y, const uint8_t* row) override {
    float* out = dst_ + size_t{y} * static_cast<size_t>(width_);
    if (ops_.empty()) {
      norm_.Row(row, width_, out, plane_);
      return;
    }
    std::memcpy(row_->data(), row, row_->size());
    RowsAndNormalize(ops_, norm_, row_->data(), width_, channels_, out, plane_);
  }

 private:
  const normalize::RowNormalizerF32 norm_;
  float* const dst_;
  const int width_, channels_;
  const size_t plane_;
  const RowOps ops_;
  std::vector<uint8_t>* row_;
};

// The float32 normalize of each 16-bit row (gray, RGB or RGBA) the PNG fast path finishes into
// the planar slot (typed samples, NormalizeTyped's formula: bit-identical to it).
class NormalizeRows16 final : public codec::PngRowSink {
 public:
  NormalizeRows16(const NormalizeParams& p, float* dst, int h, int w)
      : norm_(p), dst_(dst), width_(w), plane_(static_cast<size_t>(h) * static_cast<size_t>(w)) {}
  void Row(uint32_t y, const uint8_t* row) override {
    norm_.Row(reinterpret_cast<const uint16_t*>(row), width_,
              dst_ + size_t{y} * static_cast<size_t>(width_), plane_);
  }

 private:
  const normalize::RowNormalizerF32 norm_;
  float* const dst_;
  const int width_;
  const size_t plane_;
};

// The row ops on every row of the uint8 image, in order.
void RunRowOps(const RowOps& ops, uint8_t* image, int h, int w, int channels) {
  const size_t row = static_cast<size_t>(w) * static_cast<size_t>(channels);
  for (int y = 0; y < h; ++y) {
    for (const auto& op : ops) op->Row(image + static_cast<size_t>(y) * row, w, channels);
  }
}

// The trailing row ops and the float32 normalize in one pass: each row's ops run once (written
// back to the uint8 slot) and the row is normalized from L1.
void RowOpsNormalize(const NormalizeParams& p, const RowOps& ops, uint8_t* image, int h, int w,
                     float* dst) {
  const normalize::RowNormalizerF32 norm(p);
  const size_t plane = static_cast<size_t>(h) * static_cast<size_t>(w);
  const size_t row_bytes = static_cast<size_t>(w) * static_cast<size_t>(p.channels);
  for (int y = 0; y < h; ++y) {
    RowsAndNormalize(ops, norm, image + static_cast<size_t>(y) * row_bytes, w, p.channels,
                     dst + static_cast<size_t>(y) * static_cast<size_t>(w), plane);
  }
}

template <typename T>
void NormalizeTypedOf(const T* src, size_t plane, int channels, const NormalizeParams& p,
                      float* dst) {
  for (int k = 0; k < channels; ++k) {
    const float mean = p.mean[k], inv = 1.0f / p.std[k];
    float* out = dst + static_cast<size_t>(k) * plane;
    const T* in = src + k;
    if (channels == 1) {  // contiguous: a copy for float32 with the identity, else one pass
      if (std::is_same_v<T, float> && mean == 0.0f && inv == 1.0f) {  // (x - 0) * 1 == x
        std::memcpy(out, in, plane * sizeof(float));
        continue;
      }
      for (size_t i = 0; i < plane; ++i) out[i] = (static_cast<float>(in[i]) - mean) * inv;
      continue;
    }
    for (size_t i = 0; i < plane; ++i) {
      out[i] = (static_cast<float>(in[i * static_cast<size_t>(channels)]) - mean) * inv;
    }
  }
}

// A typed image (NHWC samples of shape.image_type) to float32 NCHW, (x - mean) * (1 / std) per
// channel as the 8-bit kernels compute it (within an ulp of numpy's float32 (x - mean) / std):
// its own values exactly with the identity (mean 0, std 1).
void NormalizeTyped(const BatchShape& shape, const NormalizeParams& p, const uint8_t* image,
                    float* dst) {
  const size_t plane = shape.pixels();
  switch (shape.image_type) {
    case SampleType::kUint16:
      NormalizeTypedOf(reinterpret_cast<const uint16_t*>(image), plane, shape.channels, p, dst);
      break;
    case SampleType::kInt16:
      NormalizeTypedOf(reinterpret_cast<const int16_t*>(image), plane, shape.channels, p, dst);
      break;
    case SampleType::kFloat32:
      NormalizeTypedOf(reinterpret_cast<const float*>(image), plane, shape.channels, p, dst);
      break;
    case SampleType::kUint8:
      NormalizeTypedOf(image, plane, shape.channels, p, dst);
      break;
  }
}

class SampleJob {
 public:
  SampleJob(const SampleContext& ctx, uint64_t seed, uint64_t epoch, uint64_t index,
            const SampleSlot* slots)
      : ctx_(ctx), seed_(seed), epoch_(epoch), index_(index), slots_(slots), slot_(slots[0]) {}

  Status Run(const RecordView& rec) {
    const BatchShape& shape = ctx_.shape;
    const RecordHeader& h = rec.header;
    rec_header_ = &h;
    for (int k = 0; k < ctx_.samples; ++k) *slots_[k].label = h.label;
    const bool has_mask = h.mask_codec != Codec::kNone && !rec.mask.empty();
    if (shape.masks && !has_mask) return Bad("the record has no mask but the dataset has masks");
    if (IsTyped(shape.image_type, shape.channels) || shape.mask_type != SampleType::kUint8 ||
        IsTyped(h.image_type, h.channels) || h.mask_type != SampleType::kUint8 ||
        ctx_.pipeline->float_pixels()) {
      return RunTyped(rec);
    }
    const int src_h = static_cast<int>(h.height), src_w = static_cast<int>(h.width);
    const int decode_c = IsRaw(h.image_codec) ? h.channels : shape.channels;
    Scratch& scratch = ThreadScratch();
    Plan& plan = scratch.plan;
    const bool sized = src_h > 0 && src_w > 0;
    // The plan is drawn before decoding: the record header knows the source size, for plain
    // LMDBs the image header (else the size is known after decoding).
    int size_h = src_h, size_w = src_w;
    if (!sized && !codec::PeekImageSize(rec.image, &size_h, &size_w)) size_h = size_w = 0;
    const bool planned = size_h > 0 && size_w > 0;
    if (planned) DSPIPE_RETURN_IF_ERROR(MakePlan(size_h, size_w, &plan));

    if (sized && src_h == shape.height && src_w == shape.width && decode_c == shape.channels &&
        FusedDecodeEnabled()) {
      bool mirror = false;
      if (transforms::FlipsAndRowOpsOnly(plan, &mirror)) return RunFlipsAndRows(rec, mirror);
    }

    // General path.
    const bool geometry = !planned || plan.has_geometry;
    cv::Mat dst(shape.height, shape.width, CV_8UC(shape.channels), slot_.image);
    cv::Mat dst_mask;
    if (shape.masks) dst_mask = cv::Mat(shape.height, shape.width, CV_8UC1, slot_.mask);
    const bool into_slot =
        !geometry && decode_c == shape.channels && src_h == shape.height && src_w == shape.width;
    codec::DecodedImage img, mask;
    transforms::Region region;
    {
      const uint64_t t0 = NowNs();
      // THE decode call site (codec::DecodePayload, the decode router: docs/DECODE.md). The
      // contract: before decoding, plan.source_rect is the part of the source the first fused
      // geometric group reads (the whole image when it reads outside the image - reflect / wrap
      // borders -, needs the mask to draw, resizes the whole image, or there is no geometry),
      // plan.first_output the size that part is resampled to, and plan.source_per_output the
      // fewest source pixels one output pixel spans. The router decodes at least that part
      // (a JPEG: its MCUs), at an n/8 DCT scale only when asked for an output size, which is
      // set so that 8/n <= source_per_output; it reports where the part lies in what it
      // decoded (img.crop), which gives the transforms::Region Execute composes the first
      // group's map with. At 8/8 that is a whole-pixel offset and the output is the whole
      // decode's, bit for bit; a scaled region is resampled through the composed warp. The
      // mask is decoded whole (never scaled).
      codec::DecodeRequest q = Request(h.image_codec, rec.image, decode_c, false);
      if (into_slot) q.dst = slot_.image;  // photometric only: decoded straight into the slot
      if (planned && plan.has_geometry) Crop(plan, &q);
      Status s = codec::DecodePayload(q, &scratch.image, &img);
      if (!s.ok()) return Context(s, "image");
      if (img.image.channels() != shape.channels) {
        cv::cvtColor(img.image, scratch.converted,
                     shape.channels == 3 ? cv::COLOR_GRAY2RGB : cv::COLOR_RGB2GRAY);
        img.image = scratch.converted;
      }
      // Where the image's decoded part lies (before q is the mask's request).
      if (q.crop_w > 0 || q.out_width > 0) region = RegionOf(q, img);
      if (shape.masks) {
        q = Request(h.mask_codec, rec.mask, 1, true);
        if (into_slot) q.dst = slot_.mask;
        s = codec::DecodePayload(q, &scratch.mask, &mask);
        if (!s.ok()) return Context(s, "mask");
        if (mask.source_height != img.source_height || mask.source_width != img.source_width) {
          return Bad("the mask is " + std::to_string(mask.source_height) + "x" +
                     std::to_string(mask.source_width) + " (height x width) but the image is " +
                     std::to_string(img.source_height) + "x" + std::to_string(img.source_width) +
                     ": a mask must be the size of its image");
        }
      }
      RecordDecode(img.path, t0);
    }
    if (!planned) {
      DSPIPE_RETURN_IF_ERROR(MakePlan(img.source_height, img.source_width, &plan));
    } else if (img.source_height != size_h || img.source_width != size_w) {
      return Bad("the image header says " + std::to_string(size_h) + "x" + std::to_string(size_w) +
                 ", the decoded image is " + std::to_string(img.source_height) + "x" +
                 std::to_string(img.source_width));
    }
    ScopedStageTimer t(ctx_.stats, Stage::kTransform, index_);
    transforms::Fold fold;
    fold.allowed = shape.normalized;
    Status s = transforms::Execute(&plan, img.image, region, shape.masks ? mask.image : cv::Mat(),
                                   &dst, shape.masks ? &dst_mask : nullptr, &scratch.warp, &fold,
                                   {ctx_.stats, index_});
    if (!s.ok())
      return s.code() == Status::Code::kBadInput ? Bad(s.message()) : Context(s, "transform");
    pending_ = std::move(fold.rows);  // run with the normalize (LoadSample)
    return Status::OK();
  }

  // Typed samples (uint16 / int16 / float32 images, uint16 masks): decoded whole with their
  // own type (codec::DecodePayload with DecodeRequest::type), the plan run step by step
  // (transforms::ExecuteSequential: each geometric step is OpenCV's call, which takes every
  // type; CheckTypedPipeline refused the rest at open) and written to the slot. LoadSample then
  // converts typed images to float32 (NormalizeTyped).
  //
  // MONAI configs (float_pixels) take this path for every dataset: the decoded image is
  // converted to float32 first, and the slot's images are float32.
  Status RunTyped(const RecordView& rec) {
    const BatchShape& shape = ctx_.shape;
    const RecordHeader& h = rec.header;
    const int src_h = static_cast<int>(h.height), src_w = static_cast<int>(h.width);
    const bool floats = ctx_.pipeline->float_pixels();
    const SampleType stored = floats ? ctx_.dataset->info().sample_type : shape.image_type;
    const bool typed_image = IsTyped(stored, shape.channels) || floats;
    if (h.image_type != stored || (typed_image && h.channels != shape.channels) ||
        (shape.masks && shape.mask_type == SampleType::kUint8 &&
         h.mask_type != SampleType::kUint8)) {
      auto what = [](int c, SampleType t, SampleType m) {
        return std::to_string(c) + " channel(s) of " + SampleTypeName(t) + " with " +
               SampleTypeName(m) + " masks";
      };
      return Bad("the record holds " + what(h.channels, h.image_type, h.mask_type) +
                 ", the dataset's manifest says " + what(shape.channels, stored, shape.mask_type));
    }
    if (src_h <= 0 || src_w <= 0) return Bad("a typed record without a size");
    Scratch& scratch = ThreadScratch();
    Plan& plan = scratch.plan;
    DSPIPE_RETURN_IF_ERROR(MakePlan(src_h, src_w, &plan));
    // Horizontal flips only (augment's hflip, the common case).
    bool mirror = false, flips_only = transforms::FlipsAndRowOpsOnly(plan, &mirror);
    for (const transforms::Step& st : plan.steps) flips_only &= st.leaf->name == "HorizontalFlip";
    // A 16-bit gray, RGB or RGBA PNG at the batch size: decoded mirrored straight into the
    // slot, each row normalized as it is finished (as the 8-bit fused path does):
    // DecodePath::kFused.
    if (flips_only && shape.image_type == SampleType::kUint16 &&
        (shape.channels == 1 || shape.channels == 3 || shape.channels == 4) &&
        src_h == shape.height && src_w == shape.width && h.image_codec == Codec::kPng &&
        FusedDecodeEnabled()) {
      if (const codec::PngRoute route = codec::ChoosePng16Decoder(rec.image);
          route.decoder == codec::PngDecoder::kFast && route.header.height == h.height &&
          route.header.width == h.width && route.header.channels == shape.channels &&
          (!shape.normalized || ctx_.normalize.channels == shape.channels)) {
        const uint64_t t0 = NowNs();
        std::optional<NormalizeRows16> rows;
        if (shape.normalized) rows.emplace(ctx_.normalize, slot_.normalized, src_h, src_w);
        codec::PngFastOptions po;
        po.mirror = mirror;
        po.sink = rows ? &*rows : nullptr;
        Status s = codec::DecodePngFast(rec.image, route.header, shape.channels, slot_.image, po);
        if (!s.ok()) return Context(Status::Corruption(s.message()), "image");
        if (shape.masks) {
          cv::Mat ids;
          DSPIPE_RETURN_IF_ERROR(DecodeTypedMask(rec, &scratch, &ids));
          cv::Mat dst_mask(shape.height, shape.width, codec::CvDepth(shape.mask_type), slot_.mask);
          if (mirror) {
            cv::flip(ids, dst_mask, 1);
          } else {
            ids.copyTo(dst_mask);
          }
        }
        RecordDecode(DecodePath::kFused, t0);
        normalized_ = shape.normalized;
        return Status::OK();
      }
    }
    codec::DecodedImage img;
    cv::Mat mask_in;
    bool converted = false;
    {
      const uint64_t t0 = NowNs();
      const int decode_c = typed_image || IsRaw(h.image_codec) ? h.channels : shape.channels;
      codec::DecodeRequest q = Request(h.image_codec, rec.image, decode_c, false);
      q.type = h.image_type;
      Status s = codec::DecodePayload(q, &scratch.image, &img);
      if (!s.ok()) return Context(s, "image");
      if (img.image.channels() != shape.channels) {  // uint8 images: as the general path
        cv::cvtColor(img.image, scratch.converted,
                     shape.channels == 3 ? cv::COLOR_GRAY2RGB : cv::COLOR_RGB2GRAY);
        img.image = scratch.converted;
      }
      if (floats && img.image.depth() != CV_32F) {  // MONAI: LoadImaged's float32
        img.image.convertTo(scratch.floats, CV_32F);
        img.image = scratch.floats;
        converted = true;  // the thread's scratch: the transforms may work in it
      }
      if (shape.masks) DSPIPE_RETURN_IF_ERROR(DecodeTypedMask(rec, &scratch, &mask_in));
      RecordDecode(img.path, t0);
    }
    ScopedStageTimer t(ctx_.stats, Stage::kTransform, index_);
    cv::Mat dst(shape.height, shape.width,
                CV_MAKETYPE(codec::CvDepth(shape.image_type), shape.channels), slot_.image);
    cv::Mat dst_mask;
    if (shape.masks) {
      dst_mask = cv::Mat(shape.height, shape.width, codec::CvDepth(shape.mask_type), slot_.mask);
    }
    if (ctx_.samples > 1) return RunSamples(&plan, img.image, mask_in, converted);
    // Horizontal flips only: one pass into the slot.
    if (flips_only && img.image.size() == dst.size() && img.image.type() == dst.type() &&
        (!shape.masks ||
         (mask_in.size() == dst_mask.size() && mask_in.type() == dst_mask.type()))) {
      if (mirror) {
        cv::flip(img.image, dst, 1);
        if (shape.masks) cv::flip(mask_in, dst_mask, 1);
      } else {
        img.image.copyTo(dst);
        if (shape.masks) mask_in.copyTo(dst_mask);
      }
      return Status::OK();
    }
    cv::Mat out_image, out_mask;
    Status s =
        transforms::ExecuteSequential(&plan, img.image, mask_in, &out_image, &out_mask, converted);
    if (!s.ok()) {
      return s.code() == Status::Code::kBadInput ? Bad(s.message()) : Context(s, "transform");
    }
    if (out_image.size() != dst.size() || out_image.type() != dst.type()) {
      return Status::Internal(Where() + ": the typed transforms made another size or type");
    }
    if (WritesNormalizedDirectly()) {
      ToPlanes(out_image, slot_.normalized);
      normalized_ = true;
    } else {
      out_image.copyTo(dst);
    }
    if (shape.masks) {
      if (out_mask.size() != dst_mask.size() || out_mask.type() != dst_mask.type()) {
        return Status::Internal(Where() + ": the typed transforms made another mask size or type");
      }
      out_mask.copyTo(dst_mask);
    }
    return Status::OK();
  }

  // A record that yields several samples (MONAI's num_samples): the steps before the split
  // run once, each sample's output goes to its slot.
  Status RunSamples(Plan* plan, const cv::Mat& image, const cv::Mat& mask, bool scratch_image) {
    const BatchShape& shape = ctx_.shape;
    std::vector<cv::Mat> images, masks;
    Status s = transforms::ExecuteSamples(*ctx_.pipeline->impl().root, seed_, epoch_, index_, plan,
                                          image, mask, &images, &masks, scratch_image);
    if (!s.ok()) {
      return s.code() == Status::Code::kBadInput ? Bad(s.message()) : Context(s, "transform");
    }
    if (static_cast<int>(images.size()) != ctx_.samples) {
      return Status::Internal(Where() + ": the transforms made " + std::to_string(images.size()) +
                              " samples, the batch has room for " + std::to_string(ctx_.samples));
    }
    const bool direct = WritesNormalizedDirectly();
    for (int k = 0; k < ctx_.samples; ++k) {
      cv::Mat dst(shape.height, shape.width,
                  CV_MAKETYPE(codec::CvDepth(shape.image_type), shape.channels), slots_[k].image);
      if (images[k].size() != dst.size() || images[k].type() != dst.type()) {
        return Status::Internal(Where() + ": the typed transforms made another size or type");
      }
      if (direct) {
        ToPlanes(images[k], slots_[k].normalized);
      } else {
        images[k].copyTo(dst);
      }
      if (shape.masks) {
        cv::Mat dst_mask(shape.height, shape.width, codec::CvDepth(shape.mask_type),
                         slots_[k].mask);
        if (masks[k].size() != dst_mask.size() || masks[k].type() != dst_mask.type()) {
          return Status::Internal(Where() +
                                  ": the typed transforms made another mask size or type");
        }
        masks[k].copyTo(dst_mask);
      }
    }
    normalized_ = direct;
    return Status::OK();
  }

  // True when the batch's images are normalized float32 from float32 transform output (a MONAI
  // config's): LoadSample's normalize pass then runs here, from the output straight into the
  // normalized slot (ToPlanes), instead of after a copy of it into the float32 HWC slot.
  bool WritesNormalizedDirectly() const {
    return ctx_.shape.normalized && ctx_.shape.image_type == SampleType::kFloat32;
  }

  // LoadSample's typed normalize (NormalizeTypedOf) of a float32 HWC image into the NCHW
  // float32 slot `dst`: with the identity, one copy for one channel, else one plane a channel.
  void ToPlanes(cv::Mat image, float* dst) const {
    if (!image.isContinuous()) image = image.clone();
    NormalizeTypedOf(image.ptr<float>(), ctx_.shape.pixels(), ctx_.shape.channels, ctx_.normalize,
                     dst);
  }

  // The record's mask decoded whole with its own type (the router checks it has the record's
  // size) and widened to the batch's (8-bit ids in a uint16 batch), in the thread's scratch.
  Status DecodeTypedMask(const RecordView& rec, Scratch* scratch, cv::Mat* ids) const {
    codec::DecodeRequest q = Request(rec.header.mask_codec, rec.mask, 1, true);
    q.type = rec.header.mask_type;
    codec::DecodedImage m;
    const Status s = codec::DecodePayload(q, &scratch->mask, &m);
    if (!s.ok()) return Context(s, "mask");
    *ids = m.image;
    const int depth = codec::CvDepth(ctx_.shape.mask_type);
    if (ids->depth() != depth) {
      ids->convertTo(scratch->converted_mask, depth);
      *ids = scratch->converted_mask;
    }
    return Status::OK();
  }

  // True when Run already wrote the sample's float32 slot (fused into the PNG decode).
  bool normalized() const { return normalized_; }
  // Trailing row ops left for the normalize pass (LoadSample runs RowOpsNormalize).
  const RowOps& pending() const { return pending_; }

 private:
  codec::DecodeRequest Request(Codec codec, std::span<const uint8_t> payload, int channels,
                               bool is_mask) const {
    codec::DecodeRequest q;
    q.codec = codec;
    q.payload = payload;
    q.channels = channels;
    q.is_mask = is_mask;
    q.height = static_cast<int>(rec_header_->height);
    q.width = static_cast<int>(rec_header_->width);
    return q;
  }
  // The part of the source the plan's first group reads, and (when one output pixel spans at
  // least 2 source pixels) an output size that lets the router pick a DCT scale of at most
  // source_per_output.
  static void Crop(const Plan& plan, codec::DecodeRequest* q) {
    const cv::Rect& r = plan.source_rect;
    if (r.area() < plan.in.h * plan.in.w) {
      q->crop_x = r.x, q->crop_y = r.y, q->crop_w = r.width, q->crop_h = r.height;
    }
    const double s = plan.source_per_output;
    if (s >= 2.0) {
      q->out_width = std::max(1, static_cast<int>(std::ceil(r.width / s - 1e-9)));
      q->out_height = std::max(1, static_cast<int>(std::ceil(r.height / s - 1e-9)));
    }
  }
  // Where the decoded pixels lie in the source: the requested part R (source pixels) is
  // img.crop in the decoded image, so decoded edge d is source edge R.x + (d - crop.x) * k.
  static transforms::Region RegionOf(const codec::DecodeRequest& q, const codec::DecodedImage& d) {
    const bool part = q.crop_w > 0 && q.crop_h > 0;
    const double rx = part ? q.crop_x : 0, ry = part ? q.crop_y : 0;
    const double rw = part ? q.crop_w : d.source_width;
    const double k = rw / d.crop.w;
    transforms::Region r;
    r.scale = std::abs(k - std::round(k)) < 1e-9 ? std::round(k) : k;
    r.x0 = rx - d.crop.x * r.scale;
    r.y0 = ry - d.crop.y * r.scale;
    if (std::abs(r.x0 - std::round(r.x0)) < 1e-9) r.x0 = std::round(r.x0);
    if (std::abs(r.y0 - std::round(r.y0)) < 1e-9) r.y0 = std::round(r.y0);
    return r;
  }
  // The decode span and which path the image took (the stage table's decode paths).
  void RecordDecode(DecodePath path, uint64_t t0) const {
    const uint64_t t1 = NowNs();
    ctx_.stats->RecordSpan(Stage::kDecode, t0, t1, index_);
    ctx_.stats->RecordDecodePath(path, t1 > t0 ? t1 - t0 : 0);
  }

  Status MakePlan(int src_h, int src_w, Plan* plan) {
    if (ctx_.input_h > 0 && (src_h != ctx_.input_h || src_w != ctx_.input_w)) {
      // A configuration error, not a bad record: the batch size was taken from record 0.
      return Status::InvalidArgument(
          "loader: " + Where() + " is " + std::to_string(src_h) + "x" + std::to_string(src_w) +
          ", record 0 (key " + ctx_.dataset->KeyName(0) + ") is " + std::to_string(ctx_.input_h) +
          "x" + std::to_string(ctx_.input_w) +
          ": the images differ in size and nothing fixes the batch size; set the output size (" +
          Opt("LoaderOptions::height") +
          ": every sample is resized to it) or end the transform pipeline in a fixed size (e.g. "
          "Resize(height=H, width=W), RandomResizedCrop(size=(H, W)))");
    }
    Status s = transforms::MakePlan(*ctx_.pipeline->impl().root, seed_, epoch_, index_,
                                    {src_h, src_w}, ctx_.shape.channels, plan);
    if (!s.ok()) return Bad(s.message());
    *slot_.hflip = transforms::OddHorizontalFlips(*plan) ? 1 : 0;
    if (ctx_.options->defer_hflip && *slot_.hflip != 0) {
      // Only a flip every later step commutes with can be left to the consumer.
      if (!transforms::DeferLastHorizontalFlip(plan)) *slot_.hflip = 0;
    }
    if (plan->out.h != ctx_.shape.height || plan->out.w != ctx_.shape.width) {
      return Bad("the transforms made " + std::to_string(plan->out.h) + "x" +
                 std::to_string(plan->out.w) + " from " + std::to_string(src_h) + "x" +
                 std::to_string(src_w) + ", the batch is " + std::to_string(ctx_.shape.height) +
                 "x" + std::to_string(ctx_.shape.width));
    }
    return Status::OK();
  }

  // The fused PNG path (see sample.h), or the same work unfused when the payload is not a PNG
  // the fast decoder takes.
  Status RunFlipsAndRows(const RecordView& rec, bool mirror) {
    const BatchShape& shape = ctx_.shape;
    const RecordHeader& h = rec.header;
    const int src_h = shape.height, src_w = shape.width;
    Scratch& scratch = ThreadScratch();
    const Plan& plan = scratch.plan;
    bool has_ops = false;  // anything but the flips
    for (const transforms::Step& st : plan.steps) has_ops |= st.leaf->name != "HorizontalFlip";
    bool image_fused = false, mask_fused = false;  // decoded mirrored (and normalized)
    {
      const uint64_t t0 = NowNs();
      std::optional<NormalizeRows> rows;
      if (shape.normalized) {
        rows.emplace(ctx_.normalize, slot_.normalized, src_h, src_w, shape.channels,
                     transforms::RowOpsOf(plan), &scratch.row);
      }
      codec::DecodeRequest q = Request(h.image_codec, rec.image, shape.channels, false);
      q.dst = slot_.image;
      q.fuse = true;
      q.mirror = mirror;
      q.sink = rows ? &*rows : nullptr;
      codec::DecodedImage img;
      Status s = codec::DecodePayload(q, &scratch.image, &img);
      if (!s.ok()) return Context(s, "image");
      image_fused = img.path == DecodePath::kFused;
      if (shape.masks) {
        q = Request(h.mask_codec, rec.mask, 1, true);
        q.dst = slot_.mask;
        q.fuse = true;
        q.mirror = mirror;
        codec::DecodedImage m;
        s = codec::DecodePayload(q, &scratch.mask, &m);
        if (!s.ok()) return Context(s, "mask");
        mask_fused = m.path == DecodePath::kFused;
      }
      // The sink normalized the rows after the ops; now the same ops on the uint8 slot.
      if (image_fused && has_ops) {
        RunRowOps(transforms::RowOpsOf(plan), slot_.image, src_h, src_w, shape.channels);
      }
      RecordDecode(img.path, t0);
    }
    // These steps run inside the decode (fused), the normalize pass or one augment span, never
    // per segment: each segment counts the decoded sample as folded (its time is in that stage).
    if (ctx_.stats != nullptr) {
      int last = -1;
      for (const transforms::Step& st : plan.steps) {
        if (st.segment != last) ctx_.stats->CountFoldedTransform(st.segment);
        last = st.segment;
      }
    }
    normalized_ = image_fused && shape.normalized;
    if (image_fused && (!shape.masks || mask_fused)) return Status::OK();
    ScopedStageTimer t(ctx_.stats, Stage::kTransform, index_);
    if (!image_fused) {
      cv::Mat img(src_h, src_w, CV_8UC(shape.channels), slot_.image);
      if (mirror) cv::flip(img, img, 1);  // in place: cv::flip
      if (shape.normalized) {
        pending_ = transforms::RowOpsOf(plan);  // run with the normalize (LoadSample)
      } else {
        RunRowOps(transforms::RowOpsOf(plan), slot_.image, src_h, src_w, shape.channels);
      }
    }
    if (shape.masks && !mask_fused && mirror) {
      cv::Mat m(src_h, src_w, CV_8UC1, slot_.mask);
      cv::flip(m, m, 1);
    }
    return Status::OK();
  }

  // "record 167 (key 00000000000000a7) in PATH": the index is batch["index"]'s number, the key
  // the record's name in the LMDB (a plain LMDB's own key).
  std::string Where() const {
    return "record " + std::to_string(index_) + " (key " + ctx_.dataset->KeyName(index_) + ") in " +
           ctx_.dataset->info().path;
  }
  Status Context(const Status& s, const char* what) const {
    return s.WithContext(Where() + ": " + what);
  }
  Status Bad(const std::string& why) const { return Status::Corruption(Where() + ": " + why); }

  const SampleContext& ctx_;
  const uint64_t seed_, epoch_, index_;
  const SampleSlot* slots_;  // ctx_.samples of them
  const SampleSlot& slot_;   // slots_[0]
  bool normalized_ = false;
  RowOps pending_;
  const RecordHeader* rec_header_ = nullptr;
};

}  // namespace

void SetFusedDecodeEnabled(bool enabled) { FusedFlag().store(enabled); }
bool FusedDecodeEnabled() { return FusedFlag().load(std::memory_order_relaxed); }

bool IsCorruptRecord(const Status& s) {
  return s.code() == Status::Code::kCorruption || s.code() == Status::Code::kBadInput;
}

Status LoadSample(const SampleContext& ctx, uint64_t seed, uint64_t epoch, uint64_t index,
                  const SampleSlot* slots, uint64_t* normalize_ns) {
  *normalize_ns = 0;
  const SampleSlot& slot = slots[0];
  SampleJob job(ctx, seed, epoch, index, slots);
  const uint64_t start = NowNs();
  bool entered = false;
  // The read stage is the time until the record's bytes are in hand (transaction, get and
  // header/CRC check); decoding then runs on the mapped bytes inside the transaction.
  Status s = ctx.dataset->Read(index, [&](const RecordView& rec) {
    entered = true;
    ctx.stats->RecordSpan(Stage::kRead, start, NowNs(), index);
    return job.Run(rec);
  });
  if (!entered) ctx.stats->RecordSpan(Stage::kRead, start, NowNs(), index);
  if (!s.ok() || !ctx.shape.normalized || job.normalized()) return s;
  const uint64_t t0 = NowNs();
  if (IsTyped(ctx.shape.image_type, ctx.shape.channels)) {
    for (int k = 0; k < ctx.samples; ++k) {
      NormalizeTyped(ctx.shape, ctx.normalize, slots[k].image, slots[k].normalized);
    }
  } else if (!job.pending().empty()) {
    RowOpsNormalize(ctx.normalize, job.pending(), slot.image, ctx.shape.height, ctx.shape.width,
                    slot.normalized);
  } else {
    s = NormalizeNhwcToNchwF32(slot.image, 1, ctx.shape.height, ctx.shape.width, ctx.normalize,
                               slot.normalized);
  }
  *normalize_ns = NowNs() - t0;
  return s;
}

namespace {
const transforms::Node* FirstUntyped(const transforms::Node& n) {
  if (n.type == transforms::Node::kLeaf) {
    const transforms::Kind k = n.leaf->kind();
    const bool ok = k == transforms::Kind::kGeometric ||
                    (k == transforms::Kind::kNormalize && n.leaf->name != "ToFloat");
    return ok ? nullptr : &n;
  }
  for (const auto& c : n.children) {
    if (const transforms::Node* bad = FirstUntyped(*c)) return bad;
  }
  return nullptr;
}
}  // namespace

Status CheckTypedPipeline(const TransformPipeline& pipeline, const DatasetInfo& info) {
  // MONAI configs compute on float32 whatever the stored type.
  if (!IsTyped(info.sample_type, info.channels) || pipeline.float_pixels()) return Status::OK();
  const transforms::Node* bad = FirstUntyped(*pipeline.impl().root);
  if (bad == nullptr) return Status::OK();
  const bool wide = info.sample_type == SampleType::kUint8;  // uint8 of more than 4 channels
  return Status::InvalidArgument(
      "loader: the images of " + info.path + " are " +
      (wide ? std::to_string(info.channels) + " channels of uint8"
            : std::string(SampleTypeName(info.sample_type))) +
      ", and the transform pipeline's " + bad->leaf->name +
      (wide ? " computes on gray or RGB pixels"
       : bad->leaf->name == "ToFloat"
           ? " divides by 255 where albumentations divides by the type's maximum"
           : " computes on uint8 pixels (its arithmetic and clipping are 0-255)") +
      "; typed images take the geometric transforms (flips, crops, resizes, rotations, affine, "
      "distortions), Normalize(mean, std, max_pixel_value) and ToTensorV2 for now: drop it" +
      (wide ? std::string()
            : ", or build the dataset with " + Opt("BuildOptions::depth", "8") +
                  " for 8-bit pixels"));
}

Status ResolvePipeline(const LoaderOptions& options, const DatasetInfo& info,
                       Status (*probe)(const Dataset&, int*, int*), const Dataset& dataset,
                       int* height, int* width, std::shared_ptr<const TransformPipeline>* out,
                       int* input_h, int* input_w) {
  auto invalid = [](const std::string& m) { return Status::InvalidArgument("loader: " + m); };
  const AugmentOptions& aug = options.augment;
  *input_h = *input_w = 0;
  if (!options.transform) {  // augment's sugar: the batch size is the requested / stored one
    if (*height == 0) {
      *height = info.height;
      *width = info.width;
      if (*height <= 0 || *width <= 0) {
        if (info.kind != DatasetKind::kPlain) {  // the manifest says the sizes vary
          return invalid("the images of " + info.path +
                         " differ in size (the manifest fixes none) and batches need one: set "
                         "the output size (" +
                         Opt("LoaderOptions::height") +
                         ": every sample is resized to it) or a transform pipeline that ends in "
                         "a fixed size (e.g. Resize(height=H, width=W), RandomResizedCrop(size=(H, "
                         "W)))");
        }
        DSPIPE_RETURN_IF_ERROR(probe(dataset, height, width));
        *input_h = *height, *input_w = *width;  // plain LMDB: checked per record
      }
    }
    return TransformPipeline::Parse(AugmentPipelineJson(aug, *height, *width), out);
  }
  const bool interpolation = aug.image_interpolation != AugmentOptions{}.image_interpolation;
  if (aug.hflip > 0 || aug.vflip > 0 || aug.crops() || interpolation) {
    std::string set;  // the augment options given, as every front end names them
    auto add = [&set](bool given, const char* field) {
      if (given) set += (set.empty() ? "" : ", ") + Opt(field);
    };
    add(aug.hflip > 0, "AugmentOptions::hflip");
    add(aug.vflip > 0, "AugmentOptions::vflip");
    add(aug.crop_scale_min < 1.0, "AugmentOptions::crop_scale_min");
    add(aug.resize_shorter > 0, "AugmentOptions::resize_shorter");
    add(interpolation, "AugmentOptions::image_interpolation");
    return invalid(Opt("LoaderOptions::transform") + " with " + set +
                   ": set augment or transform, not both (put the flips, crops and "
                   "interpolation in the pipeline: HorizontalFlip, VerticalFlip, "
                   "RandomResizedCrop, SmallestMaxSize + CenterCrop, each resize's "
                   "interpolation argument)");
  }
  std::shared_ptr<const TransformPipeline> p = options.transform;
  if (p->float_pixels() && info.has_masks) {
    if (const transforms::Node* n = transforms::MonaiSpatialWithoutLabel(*p->impl().root)) {
      return invalid(transforms::Where(n->position, n->leaf->name) +
                     " moves the image without its label (its keys have no \"label\"), and " +
                     info.path + " has masks: add \"label\" to its keys");
    }
  }
  if (p->impl().needs_mask && !info.has_masks) {
    std::vector<transforms::Node*> leaves;
    transforms::AllLeaves(*p->impl().root, &leaves);
    std::string name = "a transform";
    for (const transforms::Node* n : leaves) {
      if (n->leaf->draw_needs_mask()) {
        name = transforms::Where(n->position, n->leaf->name);
        break;
      }
    }
    return invalid("the pipeline's " + name +
                   " needs masks (it chooses its crop from the mask), and " + info.path +
                   " has none");
  }
  // A configuration error, not a corrupt record per sample: the manifest knows the size (a crop
  // larger than every image), or a transform's arguments cannot fit the size it gets after a
  // fixed-size step (CoarseDropout holes larger than the image).
  if (Status s = p->CheckInputSize(info.height, info.width); !s.ok()) {
    if (info.height <= 0 || info.width <= 0) return invalid(info.path + ": " + s.message());
    return invalid("every record of " + info.path + " is " + std::to_string(info.height) + "x" +
                   std::to_string(info.width) + ", and " + s.message() +
                   " (or resize before it, e.g. SmallestMaxSize)");
  }
  int ph = 0, pw = 0;
  if (p->OutputSize(info.height, info.width, &ph, &pw)) {
    if (*height > 0 && (ph != *height || pw != *width)) {
      return invalid("the transform pipeline ends in " + std::to_string(ph) + "x" +
                     std::to_string(pw) + " but the output size (" + Opt("LoaderOptions::height") +
                     ") asks for " + std::to_string(*height) + "x" + std::to_string(*width) +
                     ": drop it or change the pipeline");
    }
    *height = ph, *width = pw;
    *out = p;
    return Status::OK();
  }
  if (p->float_pixels()) {  // no final Resize in MONAI's terms: the config fixes the size
    const std::string why = p->OutputSizeReason(info.height, info.width);
    return invalid(
        "batches need one size, and " +
        (info.height > 0 ? why : "the records of " + info.path + " differ in size (" + why + ")") +
        ": end the MONAI config in a fixed size, e.g. {\"_target_\": "
        "\"ResizeWithPadOrCropd\", \"keys\": [\"image\", \"label\"], "
        "\"spatial_size\": [H, W]}" +
        (*height > 0 ? " (" + Opt("LoaderOptions::height") +
                           " resizes only albumentations pipelines' output)"
                     : std::string()));
  }
  if (*height == 0) {
    const std::string why = p->OutputSizeReason(info.height, info.width);
    const std::string fix =
        ": end the pipeline in a fixed size (e.g. Resize(height=H, width=W), CenterCrop or "
        "RandomCrop(H, W), RandomResizedCrop(size=(H, W))) or set the output size (" +
        Opt("LoaderOptions::height") + ": every sample is then resized to it)";
    if (info.height > 0 || info.store != "plain") {
      return invalid("batches need one size, and " +
                     (info.height > 0
                          ? why
                          : "the records of " + info.path + " differ in size (" + why + ")") +
                     fix);
    }
    int h0 = 0, w0 = 0;  // plain LMDB: record 0's size, as without a pipeline
    DSPIPE_RETURN_IF_ERROR(probe(dataset, &h0, &w0));
    if (!p->OutputSize(h0, w0, height, width)) {
      return invalid("batches need one size, and " + p->OutputSizeReason(h0, w0) + fix);
    }
    *input_h = h0, *input_w = w0;  // every record must be record 0's size: checked per record
  }
  // A final Resize (before the Normalize / ToFloat / ToTensorV2 tail) to the batch size: a
  // no-op for samples already that size.
  nlohmann::json j = nlohmann::json::parse(p->ToJson());
  nlohmann::json& list = j["transform"]["transforms"];
  auto at = list.end();
  while (at != list.begin()) {
    const nlohmann::json& name = (at - 1)->value("__class_fullname__", nlohmann::json());
    if (name != "Normalize" && name != "ToFloat" && name != "ToTensorV2") break;
    --at;
  }
  const nlohmann::json resize = {
      {"__class_fullname__", "Resize"}, {"height", *height}, {"width", *width}, {"p", 1.0}};
  list.insert(at, resize);
  return TransformPipeline::Parse(j.dump(), out);
}

}  // namespace dspipe::loader
