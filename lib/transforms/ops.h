// SPDX-License-Identifier: Apache-2.0
// The pieces every transform is built from: a leaf transform (Leaf) parses its albumentations
// arguments once, draws one sample's parameters into a Step, and either describes its geometry
// (an affine map + output size, for fusion) or changes pixels in place. Internal to
// dspipe::transforms; see docs/TRANSFORMS.md for the rules these types encode.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "dspipe/status.h"
#include "transforms/args.h"

namespace dspipe::transforms {

using core::Mix64;
using core::Rng;

struct Size {
  int h = 0, w = 0;
  bool known() const { return h > 0 && w > 0; }
  bool operator==(const Size&) const = default;
};

// A forward affine map from input to output pixel coordinates (OpenCV's convention: pixel
// centres at integer coordinates): x' = a x + b y + c, y' = d x + e y + f.
struct Affine {
  double a = 1, b = 0, c = 0, d = 0, e = 1, f = 0;

  static Affine Translate(double tx, double ty) { return {1, 0, tx, 0, 1, ty}; }
  // What cv::resize does to coordinates: x' = (x + 0.5) * sx - 0.5.
  static Affine Resize(Size from, Size to);
  // `next` applied after this one.
  Affine Then(const Affine& next) const;
  Affine Inverse() const;
  // Linear part a permutation of (+-1, 0) and an integer translation (tolerance 1e-9): the map
  // sends pixel centres to pixel centres, so resampling is a copy.
  bool IsExact() const;
  bool IsIdentity() const;  // np.allclose(m, eye(3)) as albumentations' is_identity_matrix
};

enum class Kind : uint8_t {
  kGeometric,  // joint image + mask geometry (fusable)
  kLut,        // per-pixel, per-channel uint8 -> uint8 table (foldable into normalize)
  kPixel,      // other image-only pixel op (CoarseDropout also fills the mask)
  kNormalize,  // maps onto the loader's normalize stage
};

// What a geometric step does to the image frame; it decides what may be fused (plan.cc).
enum class Frame : uint8_t {
  kFull,    // the whole input onto the whole output (flips, rot90, resizing the full image)
  kCrop,    // the output is a part of the input, nothing read outside it
  kBorder,  // the output may show pixels from outside the input (pad, rotate, affine)
};

struct Border {
  int mode = 0;  // cv::BORDER_CONSTANT (0), REPLICATE, REFLECT, WRAP, REFLECT_101 (4)
  Fill fill;     // image fill (per channel or one for all)
  double fill_mask = 0;
};

struct Geo {
  Affine fwd;
  Frame frame = Frame::kFull;
  bool exact = true;        // a copy (fwd.IsExact()) whose result is exactly albumentations'
  int interp = 1;           // cv::INTER_* for the image, when !exact
  int mask_interp = 0;      // for the mask
  Border border;            // used when frame == kBorder
  bool standalone = false;  // the image interpolation is one the warp cannot do (INTER_AREA,
                            // *_EXACT): not fused, its own Warp
  // The mask interpolation is one the warp cannot do (NEAREST_EXACT): fused for the image, but
  // in a group of several steps the mask runs step by step (each step's own Warp).
  bool mask_steps = false;
  bool map = false;  // not an affine map (the distortions): its own Warp only, on the whole image
  // The part of the input a resampling step reads, replicated beyond its edges (x, y, w, h;
  // w <= 0: all of it): RandomResizedCrop resizes its crop, as cv::resize of the ROI does.
  int reads[4] = {0, 0, 0, 0};
  // cv::resize's INTER_NEAREST takes source floor(x * in / out) (no half-pixel centring): a
  // resize step with a nearest mask gives mask_fwd (x' = x * out / in after its crop) and
  // mask_floor, and a fused group of such steps and exact ones gathers the mask with floor.
  bool mask_floor = false;
  Affine mask_fwd;
};

// cv::warpAffine takes the interpolation (NEAREST, LINEAR, CUBIC, LANCZOS4): a resampling step
// with it may be fused into a composed warp.
inline bool Warpable(int interp) {
  return interp == 0 || interp == 1 || interp == 2 || interp == 4;
}

class Leaf;

// One transform applied to one sample: what was drawn. Leaves interpret v/iv their own way.
struct Step {
  const Leaf* leaf = nullptr;
  int position = 0;  // pre-order index in the spec (its random stream)
  int segment = 0;   // static segment (stage-table row), see plan.h
  Size in, out;
  Geo geo;
  double v[16] = {};
  int iv[8] = {};
  std::vector<int> holes;   // CoarseDropout: x_min, y_min, x_max, y_max per hole; a step of
                            // several samples: x0, y0, w, h of each one's crop
  std::vector<float> data;  // GridDistortion's grid, ElasticTransform's displacement fields
  uint64_t seed = 0;        // per-step seed for per-pixel randomness (noise, random fills)
  bool deferred = false;    // Draw waits for the mask (draw_needs_mask)
  // The image as it is at this step, for a deferred draw that reads it too (MONAI's
  // RandCropByPosNegLabeld with image_key); set by ExecuteSequential, null elsewhere.
  const cv::Mat* image = nullptr;
  Rng rng{0};               // the step's stream after its draws (a deferred draw resumes it)
};

// The per-(sample, position) random stream every draw comes from. `sample` > 0: the stream of
// that sample of a record that yields several (MONAI's num_samples), for the transforms after
// the one that splits it; sample 0 is the record's own stream.
Rng StepRng(uint64_t seed, uint64_t epoch, uint64_t index, int position, int sample = 0);

// Python's random API on an Rng, as albumentations calls it.
inline double Uniform(Rng& r, double a, double b) { return a + (b - a) * r.Uniform(); }
// The standard normal quantile at p in (0, 1): Acklam's rational approximation (relative error
// < 1.2e-9); GaussNoise's table and the distortions' displacement noise (ops_pixel.cc).
double NormalQuantile(double p);
inline int RandInt(Rng& r, int a, int b) {  // inclusive, a <= b
  return a + static_cast<int>(r.Below(static_cast<uint64_t>(static_cast<int64_t>(b) - a + 1)));
}

// A per-pixel step run one row at a time, top to bottom (its randomness drawn in row-major
// order, so running it row by row inside another pass gives what Apply gives).
class RowOp {
 public:
  virtual ~RowOp() = default;
  virtual void Row(uint8_t* p, int width, int channels) = 0;
};

class Leaf {
 public:
  virtual ~Leaf() = default;
  virtual Kind kind() const = 0;
  // Draws the step's parameters for an input of step->in (and step->out, step->geo for
  // geometric leaves). mask: the current mask, given only when draw_needs_mask(). Errors: the
  // input cannot take this transform (e.g. a crop larger than the image) - BadInput.
  virtual Status Draw(Rng& rng, int channels, const cv::Mat* mask, Step* step) const = 0;
  virtual bool draw_needs_mask() const { return false; }
  // The output size depends on the pixels (MONAI's CropForegroundd): the plan assumes the input
  // size, and each later step draws again for the size it gets (plan.cc RunStep).
  virtual bool sized_by_pixels() const { return false; }
  // How many samples the step makes of its input (MONAI's num_samples: several crops); the
  // steps after it run once per sample, each with that sample's draws.
  virtual int samples() const { return 1; }
  // kLut: the table depends on the pixels (e.g. brightness_by_max=false reads the mean).
  virtual bool lut_reads_image() const { return false; }
  // Applying it before or after a horizontal flip gives the same pixels (a deferred flip,
  // LoaderOptions::defer_hflip, may move past it).
  virtual bool commutes_with_hflip() const { return false; }
  // The output size for `in` when no draw changes it; nullopt when it varies per sample.
  // in unknown (0 x 0): known only for transforms that end in a fixed size.
  virtual std::optional<Size> StaticOutput(Size in) const { return in; }
  // Every draw refuses an input of size `in` (known): BadInput saying why, as Draw says it
  // (a crop larger than the image without pad_if_needed). OK when some draw may take it.
  virtual Status RefusesInput(Size in) const {
    (void)in;
    return Status::OK();
  }
  // The arguments cannot fit an input of `in` (known): InvalidArgument with the reason, or OK.
  // Checked at open where the size is known (TransformPipeline::CheckInputSize) and by Draw.
  virtual Status CheckInput(Size /*in*/) const { return Status::OK(); }
  // Geometric: this step alone, exactly as albumentations computes it, src (step.in) -> *dst
  // (allocated step.out, same type). is_mask selects mask interpolation and fill.
  virtual void Warp(const Step& step, const cv::Mat& src, cv::Mat* dst, bool is_mask) const;
  // Warp of a part of step.in: src holds source pixels from (x0, y0) on (a region decode).
  // True when the step could and did: exactly Warp's output. False (nothing written): the
  // caller resamples through the step's map instead.
  virtual bool WarpPart(const Step& step, const cv::Mat& src, int x0, int y0, cv::Mat* dst,
                        bool is_mask) const;
  // Photometric: in place. mask may be null (no mask); only CoarseDropout touches it.
  virtual Status Apply(const Step& step, cv::Mat* image, cv::Mat* mask) const;
  // kLut: the per-channel table that Apply is on this image (data-dependent tables read it).
  virtual void Lut(const Step& step, const cv::Mat& image, uint8_t lut[4][256]) const;
  // A step that needs no neighbours and no whole-image statistics: its row-by-row form, which
  // the caller may fuse into its normalize pass (Execute's Fold); null otherwise.
  virtual std::unique_ptr<RowOp> Rows(const Step& step, int channels) const;
  // albumentations' apply() arguments for this draw (tests feed them to albumentations).
  virtual nlohmann::json Params(const Step& step) const = 0;

  std::string name;     // albumentations class name
  double prob = 1.0;    // probability (albumentations p)
  nlohmann::json args;  // normalized arguments (A.to_dict), without name and p
};

// Parses one leaf from its JSON object (name known). Errors name `where` and the argument.
using LeafFactory = Status (*)(ArgReader& r, std::unique_ptr<Leaf>* out);

struct LeafType {
  const char* name;
  LeafFactory make;
  const char* kind;  // "geometric" / "photometric" / "normalize"
  const char* mask;  // mask behaviour for the docs table
  bool fused;
  std::vector<std::string> args;  // albumentations' signature order (positional arguments)
};

// Each ops_*.cc file's leaves.
void AddGeometricLeaves(std::vector<LeafType>* types);
void AddCropLeaves(std::vector<LeafType>* types);
void AddResizeLeaves(std::vector<LeafType>* types);
void AddColorLeaves(std::vector<LeafType>* types);
void AddPixelLeaves(std::vector<LeafType>* types);
void AddDistortLeaves(std::vector<LeafType>* types);

// Shared helpers for the ops files.
// Python's round(): half to even (albumentations' sizes).
int PyRound(double v);
// fcrops.get_crop_coords: the crop of size `crop` (clamped to image) at (h_start, w_start) in
// [0, 1], as x0, y0, x1, y1 in xy[0..3] (ops_crop.cc).
void CropCoords(Size image, Size crop, double h_start, double w_start, int* xy);
cv::Scalar FillScalar(const Fill& f, int channels);
// cv::resize as albumentations' fgeometric.resize (no-op copy when the size is unchanged).
void ResizeLike(const cv::Mat& src, cv::Mat* dst, int interpolation);
// A crop + optional pad step's geometry (RandomCrop, CenterCrop, PadIfNeeded).
nlohmann::json AffineJson(const Affine& m);

}  // namespace dspipe::transforms
