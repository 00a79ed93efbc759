#include "pipeline/sample.h"

#include <atomic>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <string>

#include "codec/image.h"
#include "codec/region.h"
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
    rec_header_ = &h;
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
      bool image_fused = false, mask_fused = false;  // decoded mirrored (and normalized)
      {
        const uint64_t t0 = NowNs();
        std::optional<NormalizeRows> rows;
        if (try_fused && shape.normalized) {
          rows.emplace(ctx_.normalize, slot_.normalized, src_h, src_w);
        }
        codec::DecodeRequest q = Request(h.image_codec, rec.image, shape.channels, false);
        q.dst = slot_.image;
        q.fuse = try_fused;
        q.mirror = p.hflip;
        q.sink = rows ? &*rows : nullptr;
        codec::DecodedImage img;
        Status s = codec::DecodePayload(q, &ThreadScratch().image, &img);
        if (!s.ok()) return Context(s, "image");
        image_fused = img.path == DecodePath::kFused;
        if (shape.masks) {
          q = Request(h.mask_codec, rec.mask, 1, true);
          q.dst = slot_.mask;
          q.fuse = try_fused;
          q.mirror = p.hflip;
          codec::DecodedImage m;
          s = codec::DecodePayload(q, &ThreadScratch().mask, &m);
          if (!s.ok()) return Context(s, "mask");
          mask_fused = m.path == DecodePath::kFused;
        }
        RecordDecode(img.path, t0);
      }
      normalized_ = image_fused && shape.normalized;
      if (image_fused && (!shape.masks || mask_fused)) return Status::OK();
      ScopedStageTimer t(ctx_.stats, Stage::kAugment, index_);
      if (!image_fused) FlipInPlace(p, dst);
      if (shape.masks && !mask_fused) FlipInPlace(p, dst_mask);
      return Status::OK();
    }

    // General path: draw the sample's crop first (the record header knows the source size; for
    // plain LMDBs the image header), decode only what it keeps (codec::DecodePayload: a JPEG's
    // MCUs covering the crop, at a DCT scale when the output is smaller), then resample that
    // region into the batch with the flips.
    Scratch& scratch = ThreadScratch();
    int size_h = src_h, size_w = src_w;
    if (size_h <= 0 || size_w <= 0) {
      if (!codec::PeekImageSize(rec.image, &size_h, &size_w)) size_h = size_w = 0;
    }
    const bool drawn = size_h > 0 && size_w > 0;
    AugmentParams p;
    if (drawn) p = Draw(size_h, size_w);
    codec::DecodedImage img, mask;
    {
      const uint64_t t0 = NowNs();
      codec::DecodeRequest q = Request(h.image_codec, rec.image, decode_c, false);
      if (drawn) Crop(p, &q);
      Status s = codec::DecodePayload(q, &scratch.image, &img);
      if (!s.ok()) return Context(s, "image");
      if (img.image.channels() != shape.channels) {
        cv::cvtColor(img.image, scratch.converted,
                     shape.channels == 3 ? cv::COLOR_GRAY2RGB : cv::COLOR_RGB2GRAY);
        img.image = scratch.converted;
      }
      if (shape.masks) {
        q = Request(h.mask_codec, rec.mask, 1, true);
        if (drawn) Crop(p, &q);
        q.out_height = q.out_width = 0;  // masks are never DCT-scaled
        s = codec::DecodePayload(q, &scratch.mask, &mask);
        if (!s.ok()) return Context(s, "mask");
        if (mask.source_height != img.source_height || mask.source_width != img.source_width) {
          return Bad("mask size differs from the image size");
        }
      }
      RecordDecode(img.path, t0);
    }
    ScopedStageTimer t(ctx_.stats, Stage::kAugment, index_);
    if (!drawn) {  // decoded whole at full size: draw now, the crop is the drawn rectangle
      p = Draw(img.source_height, img.source_width);
      img.crop = mask.crop =
          codec::RectF{static_cast<double>(p.crop_x), static_cast<double>(p.crop_y),
                       static_cast<double>(p.crop_w), static_cast<double>(p.crop_h)};
    }
    Status s =
        codec::ResampleRegion(img.image, img.crop, aug.image_interpolation, p.hflip, p.vflip, dst);
    if (s.ok() && shape.masks) {
      s = codec::ResampleRegion(mask.image, mask.crop, Interpolation::kNearest, p.hflip, p.vflip,
                                dst_mask);
    }
    return s.ok() ? s : Context(s, "augment");
  }

  // True when Run already wrote the sample's float32 slot (fused into the PNG decode).
  bool normalized() const { return normalized_; }

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
  // The drawn crop and the output size it is resized to.
  void Crop(const AugmentParams& p, codec::DecodeRequest* q) const {
    q->crop_x = p.crop_x;
    q->crop_y = p.crop_y;
    q->crop_w = p.crop_w;
    q->crop_h = p.crop_h;
    q->out_height = ctx_.shape.height;
    q->out_width = ctx_.shape.width;
  }
  // The decode span and which path the image took (the stage table's decode paths).
  void RecordDecode(DecodePath path, uint64_t t0) const {
    const uint64_t t1 = NowNs();
    ctx_.stats->RecordSpan(Stage::kDecode, t0, t1, index_);
    ctx_.stats->RecordDecodePath(path, t1 > t0 ? t1 - t0 : 0);
  }
  AugmentParams Draw(int src_h, int src_w) {
    AugmentParams p = DrawAugment(ctx_.options->augment, seed_, epoch_, index_, src_h, src_w,
                                  ctx_.shape.height, ctx_.shape.width);
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
  const RecordHeader* rec_header_ = nullptr;
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
