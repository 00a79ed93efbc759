// SPDX-License-Identifier: Apache-2.0
// One sample's plan and its execution: the leaves that run, their draws, how they are grouped
// (consecutive geometric steps fused into one resampling pass; LUT steps into one table), the
// source region the first group needs (the ROI-decode contract), and the executor that runs the
// groups from the decoded record into the batch slot. Internal to dspipe::transforms; the
// loader (loader/sample.cc) and TransformPipeline::Apply both come through here.
//
// Fusion rules (docs/TRANSFORMS.md "Fusion"): a geometric step joins the current group unless
//   - it needs the mask to draw (CropNonEmptyMaskIfExists: it starts a group),
//   - it may show pixels from outside its input (pad, rotate, affine: Frame::kBorder) and the
//     group already holds another such step or one that is not axis-aligned - so its input
//     frame is a rectangle of the group's source, where warp.cc applies its border mode exactly
//     where the sequential step would,
//   - it or the group is standalone (resizes with an image interpolation cv::warpAffine lacks,
//     INTER_AREA / *_EXACT, run as cv::resize alone; the distortion maps),
//   - it resamples with another interpolation than the group's resampling steps.
// A group of one step runs that leaf's own code (albumentations' cv2 call, bit-exact); a group
// of exact steps (flips, transposes, rot90, crops, integer pads/shifts) is one copy; a resize
// (or crop + resize) followed by flips / transposes / rot90 only is that resize's own code and
// one copy (sequential: bit-exact); any other group is one cv::warpAffine of the composed map
// (border: the group's border step, else replicate, which is what cv::resize does at the
// edges). A mask whose interpolation warpAffine lacks (NEAREST_EXACT) runs such a group step by
// step.
#pragma once

#include <cstdint>
#include <opencv2/core.hpp>
#include <vector>

#include "dspipe/stats.h"
#include "dspipe/status.h"
#include "transforms/ops.h"
#include "transforms/spec.h"

namespace dspipe::transforms {

struct Group {
  Kind kind = Kind::kGeometric;
  int begin = 0, end = 0;  // steps [begin, end)
  int segment = 0;         // stage-table row
};

// Where the decoded source pixels come from: decoded pixel (i, j) is source pixel
// (x0 + (j + 0.5) * scale - 0.5, y0 + (i + 0.5) * scale - 0.5), i.e. decoded pixel edges
// d map to source edges x0 + d * scale. The full decode is {0, 0, 1}.
struct Region {
  double x0 = 0, y0 = 0;
  double scale = 1;  // source pixels per decoded pixel: 1, or 8 / n after an n/8 DCT decode
  bool full() const { return x0 == 0 && y0 == 0 && scale == 1; }
  // Full resolution at a whole-pixel offset (a region decode at 8/8): resampled exactly as the
  // whole decode is (same maps, same pixels read), so the output is bit-identical to it.
  bool shifted() const {
    return scale == 1 && x0 == static_cast<int>(x0) && y0 == static_cast<int>(y0);
  }
};

struct Plan {
  Size in;  // the record's size
  int channels = 3;
  std::vector<Step> steps;
  std::vector<Group> groups;
  Size out;  // after every step (deferred crops included: their size is known)
  // The ROI-decode contract, for the first group when it is geometric: the part of the source
  // it reads (x, y, w, h; the whole image when it reads outside or needs the mask), the size
  // it resamples that part to, and how many source pixels one output pixel spans at least (a
  // decoder may decode at 1/s for s <= this, s a power of two).
  cv::Rect source_rect;
  Size first_output;
  double source_per_output = 1.0;
  bool has_geometry = false;
};

// Draws a plan for sample (seed, epoch, index) of an in-size input with `channels` channels.
// Errors: BadInput when a step cannot take its input (a crop larger than the image).
// sample > 0: sample `sample` of a record that yields several (a step with samples() > 1):
// the steps up to that one are sample 0's, the steps after it draw from the sample's streams.
Status MakePlan(const Node& root, uint64_t seed, uint64_t epoch, uint64_t index, Size in,
                int channels, Plan* plan, int sample = 0);

// What Execute may leave undone for the caller to fuse: the trailing per-pixel steps (LUT
// ops, GaussNoise: Leaf::Rows), returned in order instead of applied, for the caller to run row
// by row inside its normalize pass.
struct Fold {
  bool allowed = false;                      // in: the caller runs `rows` + normalize per row
  std::vector<std::unique_ptr<RowOp>> rows;  // out: in order; empty = nothing left undone
  // Runs the ops on one row (the caller's pass), in order.
  void Row(uint8_t* p, int width, int channels) const {
    for (const auto& op : rows) op->Row(p, width, channels);
  }
};

// Per-segment timing: spans of the loader's transform rows (StageStats::RecordTransform).
struct Timing {
  StageStats* stats = nullptr;
  uint64_t id = 0;
};

// Runs the plan: image / mask are the decoded record (image_region says which part of the
// source the image holds; the mask is always whole), dst_image / dst_mask the outputs, already
// allocated at plan.out (the batch slot). Deferred draws happen here. mask / dst_mask may be
// empty (no masks). `scratch` holds reusable intermediates (per thread).
struct Scratch {
  cv::Mat a, b, ma, mb;
};
Status Execute(Plan* plan, const cv::Mat& image, const Region& image_region, const cv::Mat& mask,
               cv::Mat* dst_image, cv::Mat* dst_mask, Scratch* scratch, Fold* fold,
               const Timing& timing);

// Each step on its own, in order, with the plan's draws (albumentations' sequential
// semantics): the reference the fused path is compared with.
// scratch_image: image is the caller's scratch, which the steps may change (not copied first).
Status ExecuteSequential(Plan* plan, const cv::Mat& image, const cv::Mat& mask, cv::Mat* out_image,
                         cv::Mat* out_mask, bool scratch_image = false);

// The position of the leaf that yields several samples per record (samples() > 1), or 2^30.
int SplitPosition(const Node& root);

// A record's samples, each step on its own: ExecuteSequential when no step yields several;
// else the steps before that step run once, it draws every sample's crop (holes: x0, y0, w, h
// each), and each sample runs the steps after it with its own draws (MakePlan's sample).
// `plan` is sample 0's. One output per sample.
Status ExecuteSamples(const Node& root, uint64_t seed, uint64_t epoch, uint64_t index, Plan* plan,
                      const cv::Mat& image, const cv::Mat& mask, std::vector<cv::Mat>* out_images,
                      std::vector<cv::Mat>* out_masks, bool scratch_image = false);

// Loader helpers. The number of HorizontalFlip steps that run is odd (Batch::hflip).
bool OddHorizontalFlips(const Plan& plan);
// Removes the last HorizontalFlip step when every later step commutes with a horizontal flip
// (VerticalFlip, per-pixel ops that do not depend on the position): the consumer mirrors
// instead (LoaderOptions::defer_hflip). True when one was removed.
bool DeferLastHorizontalFlip(Plan* plan);
// The plan is HorizontalFlips and row-wise steps (Leaf::Rows: LUT ops, GaussNoise) only: true
// and *mirror (an odd count of flips).
bool FlipsAndRowOpsOnly(const Plan& plan, bool* mirror);
// The row-wise form of every step that is not a HorizontalFlip, in order, each with a fresh
// state (two calls give two runs of the same noise).
std::vector<std::unique_ptr<RowOp>> RowOpsOf(const Plan& plan);

// One geometric group [first, last) of drawn steps: src -> dst (allocated at the group's
// output size). warp.cc.
void RunGeometricGroup(const Step* first, const Step* last, const cv::Mat& src,
                       const Region& region, cv::Mat* dst, bool is_mask);

}  // namespace dspipe::transforms
