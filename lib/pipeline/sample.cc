#include "pipeline/sample.h"

#include <atomic>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <string>

#include "codec/image.h"
#include "dspipe/augment.h"
#include "kernels/normalize_row.h"

namespace dspipe::pipeline {
namespace {

// Per-thread decode targets for samples that are resized or cropped afterwards. They grow to
// the largest record a thread has seen and are reused (no allocation per sample).
struct Scratch {
  cv::Mat image;
  cv::Mat converted;
  cv::Mat mask;
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

bool IsRaw(Codec c) { return c == Codec::kRaw || c == Codec::kRawZstd; }

ImageRef Ref(cv::Mat& m) { return {m.data, m.rows, m.cols, m.channels()}; }

// Decodes a payload into *out: straight to the stated size when the header knows it, else
// whatever size the bytes say (plain LMDBs).
Status DecodeToMat(Codec codec, std::span<const uint8_t> payload, int channels, int h, int w,
                   bool is_mask, cv::Mat* out) {
  if (h > 0 && w > 0) {
    // The record header sizes the allocation: hold it to the decode limits first.
    const Status fits = codec::CheckImageSize("record header", static_cast<uint64_t>(w),
                                              static_cast<uint64_t>(h));
    if (!fits.ok()) return Status::Corruption(fits.message());
    out->create(h, w, CV_8UC(channels));
    return codec::DecodePayloadInto(codec, payload, channels, h, w, out->data);
  }
  return is_mask ? codec::DecodeMask(payload, out) : codec::DecodeImage(payload, channels, out);
}

std::atomic<bool>& FusedFlag() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

// Normalizes each row the PNG fast path finishes into the sample's float32 NCHW slot.
class NormalizeRows final : public codec::PngRowSink {
 public:
  NormalizeRows(const NormalizeParams& p, float* dst, int h, int w)
      : norm_(p), dst_(dst), width_(w), plane_(static_cast<size_t>(h) * static_cast<size_t>(w)) {}

  void Row(uint32_t y, const uint8_t* row) override {
    norm_.Row(row, width_, dst_ + size_t{y} * static_cast<size_t>(width_), plane_);
  }

 private:
  const kernels::RowNormalizerF32 norm_;
  float* const dst_;
  const int width_;
  const size_t plane_;
};

class SampleJob {
 public:
  SampleJob(const SampleContext& ctx, uint64_t seed, uint64_t epoch, uint64_t index,
            const SampleSlot& slot)
      : ctx_(ctx), seed_(seed), epoch_(epoch), index_(index), slot_(slot) {}

  Status Run(const RecordView& rec) {
    const BatchShape& shape = ctx_.shape;
    const RecordHeader& h = rec.header;
    *slot_.label = h.label;
    const bool has_mask = h.mask_codec != Codec::kNone && !rec.mask.empty();
    if (shape.masks && !has_mask) return Bad("the record has no mask but the dataset has masks");
    const int src_h = static_cast<int>(h.height), src_w = static_cast<int>(h.width);
    const int decode_c = IsRaw(h.image_codec) ? h.channels : shape.channels;
    const AugmentOptions& aug = ctx_.options->augment;
    ImageRef dst{slot_.image, shape.height, shape.width, shape.channels};
    ImageRef dst_mask{slot_.mask, shape.height, shape.width, 1};

    if (src_h == shape.height && src_w == shape.width && decode_c == shape.channels &&
        !aug.crops()) {
      // Fast path: decode straight into the batch. PNGs the fast decoder takes are decoded
      // mirrored when the sample is flipped, and their rows normalized as they come out of the
      // unfilter (fused); everything else is flipped in place afterwards (and normalized by
      // LoadSample).
      const AugmentParams p = Draw(src_h, src_w);
      const bool try_fused = FusedDecodeEnabled() && !p.vflip;
      bool image_fused = false, mask_fused = false;
      {
        ScopedStageTimer t(ctx_.stats, Stage::kDecode, index_);
        Status s;
        if (try_fused) {
          std::optional<NormalizeRows> rows;
          if (shape.normalized) rows.emplace(ctx_.normalize, slot_.normalized, src_h, src_w);
          s = codec::DecodePayloadFused(h.image_codec, rec.image, shape.channels, src_h, src_w,
                                        p.hflip, rows ? &*rows : nullptr, slot_.image,
                                        &image_fused);
          if (!s.ok()) return Context(s, "image");
        }
        if (!image_fused) {
          s = codec::DecodePayloadInto(h.image_codec, rec.image, shape.channels, src_h, src_w,
                                       slot_.image);
          if (!s.ok()) return Context(s, "image");
        }
        if (shape.masks) {
          if (try_fused) {
            s = codec::DecodePayloadFused(h.mask_codec, rec.mask, 1, src_h, src_w, p.hflip,
                                          nullptr, slot_.mask, &mask_fused);
            if (!s.ok()) return Context(s, "mask");
          }
          if (!mask_fused) {
            s = codec::DecodePayloadInto(h.mask_codec, rec.mask, 1, src_h, src_w, slot_.mask);
            if (!s.ok()) return Context(s, "mask");
          }
        }
      }
      normalized_ = image_fused && shape.normalized;
      if (image_fused && (!shape.masks || mask_fused)) return Status::OK();
      ScopedStageTimer t(ctx_.stats, Stage::kAugment, index_);
      if (!image_fused) FlipInPlace(p, dst);
      if (shape.masks && !mask_fused) FlipInPlace(p, dst_mask);
      return Status::OK();
    }

    // General path: decode into per-thread scratch, then crop / resize / flip into the batch.
    Scratch& scratch = ThreadScratch();
    cv::Mat* image = &scratch.image;
    {
      ScopedStageTimer t(ctx_.stats, Stage::kDecode, index_);
      Status s = DecodeToMat(h.image_codec, rec.image, decode_c, src_h, src_w, false, image);
      if (!s.ok()) return Context(s, "image");
      if (image->channels() != shape.channels) {
        cv::cvtColor(*image, scratch.converted,
                     shape.channels == 3 ? cv::COLOR_GRAY2RGB : cv::COLOR_RGB2GRAY);
        image = &scratch.converted;
      }
      if (shape.masks) {
        s = DecodeToMat(h.mask_codec, rec.mask, 1, src_h, src_w, true, &scratch.mask);
        if (!s.ok()) return Context(s, "mask");
        if (scratch.mask.size() != image->size()) {
          return Bad("mask size differs from the image size");
        }
      }
    }
    ScopedStageTimer t(ctx_.stats, Stage::kAugment, index_);
    const AugmentParams p = Draw(image->rows, image->cols);
    Status s = ApplyAugment(p, aug.image_interpolation, Ref(*image), dst);
    if (s.ok() && shape.masks)
      s = ApplyAugment(p, Interpolation::kNearest, Ref(scratch.mask), dst_mask);
    return s.ok() ? s : Context(s, "augment");
  }

  // True when Run already wrote the sample's float32 slot (fused into the PNG decode).
  bool normalized() const { return normalized_; }

 private:
  AugmentParams Draw(int src_h, int src_w) {
    AugmentParams p = DrawAugment(ctx_.options->augment, seed_, epoch_, index_, src_h, src_w);
    *slot_.hflip = p.hflip ? 1 : 0;
    if (ctx_.options->defer_hflip) p.hflip = false;
    return p;
  }
  std::string Where() const {
    return "key " + ctx_.dataset->KeyName(index_) + " in " + ctx_.dataset->info().path;
  }
  Status Context(const Status& s, const char* what) const {
    return s.WithContext(Where() + ": " + what);
  }
  Status Bad(const std::string& why) const { return Status::Corruption(Where() + ": " + why); }

  const SampleContext& ctx_;
  const uint64_t seed_, epoch_, index_;
  const SampleSlot& slot_;
  bool normalized_ = false;
};

}  // namespace

void SetFusedDecodeEnabled(bool enabled) { FusedFlag().store(enabled); }
bool FusedDecodeEnabled() { return FusedFlag().load(std::memory_order_relaxed); }

bool IsCorruptRecord(const Status& s) {
  return s.code() == Status::Code::kCorruption || s.code() == Status::Code::kBadInput;
}

Status LoadSample(const SampleContext& ctx, uint64_t seed, uint64_t epoch, uint64_t index,
                  const SampleSlot& slot, uint64_t* normalize_ns) {
  *normalize_ns = 0;
  SampleJob job(ctx, seed, epoch, index, slot);
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
  s = NormalizeNhwcToNchwF32(slot.image, 1, ctx.shape.height, ctx.shape.width, ctx.normalize,
                             slot.normalized);
  *normalize_ns = NowNs() - t0;
  return s;
}

}  // namespace dspipe::pipeline
