// SPDX-License-Identifier: Apache-2.0
// TransformPipeline: parsing and checking a spec (Normalize last, static segments for the stage
// table), the static output-size analysis, and the per-sample entry points (Apply,
// ApplySequential, Draws) over plan.h.
#include <algorithm>
#include <opencv2/core.hpp>

#include "dspipe/transforms.h"
#include "transforms/impl.h"
#include "transforms/monai.h"

namespace dspipe {
namespace transforms {
namespace {

using nlohmann::json;

const char* KindWord(Kind k) {
  switch (k) {
    case Kind::kGeometric:
      return "geometric";
    case Kind::kLut:
      return "lut";
    default:
      return "pixel";
  }
}

// Static segments: runs of geometric leaves, runs of LUT leaves, each other pixel leaf alone.
void AssignSegments(Node* root, std::vector<std::string>* labels) {
  std::vector<Node*> leaves;
  AllLeaves(*root, &leaves);
  Kind prev = Kind::kNormalize;
  for (Node* n : leaves) {
    const Kind k = n->leaf->kind();
    if (k == Kind::kNormalize) continue;
    const bool extend = !labels->empty() && k == prev && k != Kind::kPixel;
    if (extend) {
      labels->back() += " > " + n->leaf->name;
    } else {
      labels->push_back(k == Kind::kPixel ? n->leaf->name
                                          : std::string(KindWord(k)) + ": " + n->leaf->name);
    }
    n->segment = static_cast<int>(labels->size()) - 1;
    prev = k;
  }
}

struct SizeState {
  bool known = false;  // a fixed size for every sample
  Size size;
  std::string why;  // when !known: what made it vary ("" = the input size is unknown)
};

bool Same(const SizeState& a, const SizeState& b) {
  if (a.known || b.known) return a.known && b.known && a.size == b.size;
  // Both "the input's size, not known here", or varying for the same reason (a step that keeps
  // the size after one that made it vary).
  return a.why == b.why;
}

SizeState Varies(std::string why) {
  SizeState v;
  v.why = std::move(why);
  return v;
}

SizeState After(const Node& n, SizeState in, bool forced);

// The size after `n` runs.
SizeState Body(const Node& n, SizeState in) {
  switch (n.type) {
    case Node::kLeaf: {
      if (n.leaf->kind() != Kind::kGeometric) return in;
      const std::optional<Size> out = n.leaf->StaticOutput(in.known ? in.size : Size{});
      if (!out) return Varies(Where(n.position, n.leaf->name) + " gives each sample its own size");
      if (!out->known()) return in;  // keeps a size that is not known here
      SizeState s;
      s.known = true;
      s.size = *out;
      return s;
    }
    case Node::kCompose:
    case Node::kSequential: {
      SizeState s = in;
      for (const auto& c : n.children) s = After(*c, s, false);
      return s;
    }
    case Node::kOneOf:
    case Node::kOneOrOther: {
      if (n.children.empty()) return in;
      const char* name = n.type == Node::kOneOf ? "OneOf" : "OneOrOther";
      const SizeState first = After(*n.children[0], in, true);
      for (const auto& c : n.children) {
        if (!Same(After(*c, in, true), first)) {
          return Varies(Where(n.position, name) + ": its choices give different sizes");
        }
      }
      return first;
    }
    case Node::kSomeOf: {
      for (const auto& c : n.children) {
        if (!Same(After(*c, in, false), in)) {
          return Varies(Where(n.position, "SomeOf") + " picks a transform that changes the size");
        }
      }
      return in;
    }
  }
  return in;
}

SizeState After(const Node& n, SizeState in, bool forced) {
  // OneOrOther runs one of its children whatever its p (p picks which).
  if (n.type == Node::kOneOrOther) forced = true;
  if (!forced && n.p <= 0) return in;
  const SizeState out = Body(n, in);
  if (forced || n.p >= 1 || Same(out, in)) return out;
  return Varies(Where(n.position, n.type == Node::kLeaf ? n.leaf->name : "container") +
                " changes the size only when it is applied (p=" + json(n.p).dump() + ")");
}

SizeState OutputOf(const Node& root, int in_h, int in_w) {
  SizeState in;
  if (in_h > 0 && in_w > 0) {
    in.known = true;
    in.size = {in_h, in_w};
  }
  return After(root, in, false);
}

// Walks the steps every sample runs (leaves and Compose / Sequential with p >= 1, outside
// OneOf / SomeOf) with the size each gets: the first that refuses its input for every draw.
Status CertainRefusal(const Node& n, SizeState* size) {
  if (n.p < 1 || n.type == Node::kOneOf || n.type == Node::kSomeOf || n.type == Node::kOneOrOther) {
    *size = After(n, *size, false);  // may not run, or a choice: sizes after it as OutputOf
    return Status::OK();
  }
  if (n.type != Node::kLeaf) {
    for (const auto& c : n.children) DSPIPE_RETURN_IF_ERROR(CertainRefusal(*c, size));
    return Status::OK();
  }
  if (size->known) {
    const Status s = n.leaf->RefusesInput(size->size);
    if (!s.ok()) {
      return Status::InvalidArgument(Where(n.position, n.leaf->name) + " refuses its " +
                                     std::to_string(size->size.h) + "x" +
                                     std::to_string(size->size.w) + " input: " + s.message());
    }
  }
  *size = Body(n, *size);
  return Status::OK();
}

// Leaf::CheckInput for every leaf whose input size is known here (`in`: the size before n).
Status CheckSizes(const Node& n, const SizeState& in) {
  switch (n.type) {
    case Node::kLeaf:
      if (!in.known) return Status::OK();
      return n.leaf->CheckInput(in.size).WithContext(Where(n.position, n.leaf->name));
    case Node::kCompose:
    case Node::kSequential: {
      SizeState s = in;
      for (const auto& c : n.children) {
        DSPIPE_RETURN_IF_ERROR(CheckSizes(*c, s));
        s = After(*c, s, false);
      }
      return Status::OK();
    }
    case Node::kOneOf:
    case Node::kSomeOf:
    case Node::kOneOrOther:
      for (const auto& c : n.children) DSPIPE_RETURN_IF_ERROR(CheckSizes(*c, in));
      return Status::OK();
  }
  return Status::OK();
}

// The tail of the top-level Compose that maps onto the loader's output: at most one scaling
// step (Normalize or ToFloat, the normalize stage), then at most one ToTensorV2 (the layout the
// batches already have), after every other transform.
Status CheckNormalize(const Node& root, std::vector<double>* mean, std::vector<double>* stdv) {
  std::vector<Node*> leaves;
  AllLeaves(root, &leaves);
  const Node* scaling = nullptr;
  for (const Node* n : leaves) {  // two scaling steps: named before their order is
    std::vector<double> m, sd;
    if (n->leaf->kind() != Kind::kNormalize || !NormalizeOf(*n->leaf, &m, &sd)) continue;
    if (scaling != nullptr) {
      return Status::InvalidArgument(
          Where(n->position, n->leaf->name) + ": the pipeline already scales the pixels with " +
          Where(scaling->position, scaling->leaf->name) +
          "; keep one of them (ToFloat() is Normalize(mean=0, std=1): x / 255)");
    }
    scaling = n;
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Leaf& leaf = *leaves[i]->leaf;
    if (leaf.kind() != Kind::kNormalize) continue;
    const std::string where = Where(leaves[i]->position, leaf.name);
    const bool top = std::any_of(root.children.begin(), root.children.end(),
                                 [&](const auto& c) { return c.get() == leaves[i]; });
    std::vector<double> m, sd;
    const bool scales = NormalizeOf(leaf, &m, &sd);
    bool tail = top;
    for (size_t j = i + 1; j < leaves.size(); ++j) {
      // After a scaling step only ToTensorV2; after ToTensorV2 nothing.
      std::vector<double> m2, sd2;
      const Leaf& next = *leaves[j]->leaf;
      const bool layout = next.kind() == Kind::kNormalize && !NormalizeOf(next, &m2, &sd2);
      if (!scales || !layout) tail = false;
    }
    if (!scales && !tail) {
      return Status::InvalidArgument(
          where +
          ": ToTensorV2 must be the last transform of the top-level Compose (dspipe's batches "
          "are already CHW tensors; it only marks the end of the pipeline)");
    }
    if (scales && !tail) {
      return Status::InvalidArgument(
          where + ": " + leaf.name +
          " must be the last transform of the top-level Compose, or be followed only by "
          "ToTensorV2 (it maps onto the loader's normalize stage, after every other transform)");
    }
    if (!scales) continue;
    if (root.p < 1) {
      return Status::InvalidArgument(where + ": the Compose has p=" + json(root.p).dump() +
                                     ", which would skip " + leaf.name + " for some samples");
    }
    *mean = m;
    *stdv = sd;
  }
  return Status::OK();
}

}  // namespace
}  // namespace transforms

using transforms::Plan;
using transforms::Region;

TransformPipeline::TransformPipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TransformPipeline::~TransformPipeline() = default;

Status TransformPipeline::Parse(const std::string& json_text,
                                std::shared_ptr<const TransformPipeline>* out) {
  auto impl = std::make_unique<Impl>();
  DSPIPE_RETURN_IF_ERROR(transforms::ParseSpec(json_text, &impl->root, &impl->node_count));
  impl->monai = impl->root->extra.contains("__monai__");
  if (!impl->monai) {  // MONAI's no-ops (LoadImaged, ToTensord) are not a normalize tail
    DSPIPE_RETURN_IF_ERROR(transforms::CheckNormalize(*impl->root, &impl->mean, &impl->stdv));
  } else {
    DSPIPE_RETURN_IF_ERROR(transforms::MonaiLabelClasses(*impl->root, &impl->label_classes));
  }
  transforms::AssignSegments(impl->root.get(), &impl->labels);
  std::vector<transforms::Node*> leaves;
  transforms::AllLeaves(*impl->root, &leaves);
  const transforms::Node* split = nullptr;
  for (const transforms::Node* n : leaves) {
    impl->needs_mask |= n->leaf->draw_needs_mask();
    if (n->leaf->samples() <= 1) continue;
    if (split != nullptr) {
      return Status::InvalidArgument(
          transforms::Where(n->position, n->leaf->name) + ": " +
          transforms::Where(split->position, split->leaf->name) +
          " already makes several samples of each record; one transform may (num_samples)");
    }
    split = n;
    impl->samples = n->leaf->samples();
  }
  out->reset(new TransformPipeline(std::move(impl)));
  return Status::OK();
}

std::string TransformPipeline::ToJson(int indent) const {
  if (impl_->monai) return transforms::MonaiJson(*impl_->root).dump(indent);
  const nlohmann::json j = {{"__version__", "2.0.8"},
                            {"transform", transforms::NodeJson(*impl_->root)}};
  return j.dump(indent);
}

bool TransformPipeline::OutputSize(int in_h, int in_w, int* out_h, int* out_w) const {
  const transforms::SizeState s = transforms::OutputOf(*impl_->root, in_h, in_w);
  if (!s.known) return false;
  *out_h = s.size.h;
  *out_w = s.size.w;
  return true;
}

std::string TransformPipeline::OutputSizeReason(int in_h, int in_w) const {
  const transforms::SizeState s = transforms::OutputOf(*impl_->root, in_h, in_w);
  if (s.known) return "";
  return s.why.empty() ? "the output size is the record's size, which is not fixed" : s.why;
}

Status TransformPipeline::CheckInputSize(int in_h, int in_w) const {
  transforms::SizeState in;
  if (in_h > 0 && in_w > 0) {
    in.known = true;
    in.size = {in_h, in_w};
  }
  DSPIPE_RETURN_IF_ERROR(transforms::CheckSizes(*impl_->root, in));
  if (!in.known) return Status::OK();
  return transforms::CertainRefusal(*impl_->root, &in);
}

bool TransformPipeline::float_pixels() const { return impl_->monai; }
bool TransformPipeline::has_normalize() const { return !impl_->mean.empty(); }
const std::vector<double>& TransformPipeline::normalize_mean() const { return impl_->mean; }
const std::vector<double>& TransformPipeline::normalize_std() const { return impl_->stdv; }
const std::vector<std::string>& TransformPipeline::segment_labels() const { return impl_->labels; }

namespace {

cv::Mat Wrap(const ImageRef& r) { return cv::Mat(r.height, r.width, CV_8UC(r.channels), r.data); }

Status CheckInput(const ImageRef& image, const ImageRef* mask) {
  if (image.data == nullptr || image.height <= 0 || image.width <= 0 ||
      (image.channels != 1 && image.channels != 3)) {
    return Status::InvalidArgument("transforms: the image must be H x W x 1 or 3 uint8");
  }
  if (mask != nullptr && (mask->data == nullptr || mask->height != image.height ||
                          mask->width != image.width || mask->channels != 1)) {
    return Status::InvalidArgument("transforms: the mask must be H x W uint8, the image's size");
  }
  return Status::OK();
}

Status MonaiNeedsPixels() {
  return Status::InvalidArgument(
      "transforms: a MONAI config computes on float32 pixels and gives float32: apply it with "
      "ApplyPixels (Python: dspipe.transforms.apply takes any dtype)");
}

int Depth(SampleType t) {
  switch (t) {
    case SampleType::kUint16:
      return CV_16U;
    case SampleType::kInt16:
      return CV_16S;
    case SampleType::kFloat32:
      return CV_32F;
    case SampleType::kUint8:
      break;
  }
  return CV_8U;
}

SampleType TypeOf(int depth) {
  switch (depth) {
    case CV_16U:
      return SampleType::kUint16;
    case CV_16S:
      return SampleType::kInt16;
    case CV_32F:
      return SampleType::kFloat32;
    default:
      return SampleType::kUint8;
  }
}

void OwnPixels(const cv::Mat& m, OwnedPixels* out) {
  out->height = m.rows;
  out->width = m.cols;
  out->channels = m.channels();
  out->type = TypeOf(m.depth());
  const cv::Mat c = m.isContinuous() ? m : m.clone();
  out->bytes.assign(c.data, c.data + c.total() * c.elemSize());
}

void Own(const cv::Mat& m, OwnedImage* out) {
  out->height = m.rows;
  out->width = m.cols;
  out->channels = m.channels();
  out->pixels.assign(m.data, m.data + m.total() * m.elemSize());
}

}  // namespace

Status TransformPipeline::Apply(uint64_t seed, uint64_t epoch, uint64_t index,
                                const ImageRef& image, const ImageRef* mask, OwnedImage* out_image,
                                OwnedImage* out_mask) const {
  DSPIPE_RETURN_IF_ERROR(CheckInput(image, mask));
  if (impl_->monai) return MonaiNeedsPixels();
  Plan plan;
  DSPIPE_RETURN_IF_ERROR(transforms::MakePlan(*impl_->root, seed, epoch, index,
                                              {image.height, image.width}, image.channels, &plan));
  cv::Mat dst(plan.out.h, plan.out.w, CV_8UC(image.channels));
  cv::Mat dst_mask;
  if (mask != nullptr) dst_mask.create(plan.out.h, plan.out.w, CV_8UC1);
  transforms::Scratch scratch;
  DSPIPE_RETURN_IF_ERROR(transforms::Execute(&plan, Wrap(image), Region{},
                                             mask ? Wrap(*mask) : cv::Mat(), &dst, &dst_mask,
                                             &scratch, nullptr, {}));
  Own(dst, out_image);
  if (out_mask != nullptr && mask != nullptr) Own(dst_mask, out_mask);
  return Status::OK();
}

Status TransformPipeline::ApplySequential(uint64_t seed, uint64_t epoch, uint64_t index,
                                          const ImageRef& image, const ImageRef* mask,
                                          OwnedImage* out_image, OwnedImage* out_mask) const {
  DSPIPE_RETURN_IF_ERROR(CheckInput(image, mask));
  if (impl_->monai) return MonaiNeedsPixels();
  Plan plan;
  DSPIPE_RETURN_IF_ERROR(transforms::MakePlan(*impl_->root, seed, epoch, index,
                                              {image.height, image.width}, image.channels, &plan));
  cv::Mat out, out_mask_mat;
  DSPIPE_RETURN_IF_ERROR(transforms::ExecuteSequential(
      &plan, Wrap(image), mask ? Wrap(*mask) : cv::Mat(), &out, &out_mask_mat));
  Own(out, out_image);
  if (out_mask != nullptr && mask != nullptr) Own(out_mask_mat, out_mask);
  return Status::OK();
}

namespace {

// ApplyPixels' inputs checked and wrapped: the image (float32 for a MONAI config) and the mask.
Status PixelInputs(const TransformPipeline::Impl& impl, const PixelsRef& image,
                   const PixelsRef* mask, cv::Mat* in, cv::Mat* m) {
  if (image.data == nullptr || image.height <= 0 || image.width <= 0 || image.channels < 1 ||
      image.channels > kMaxChannels) {
    return Status::InvalidArgument("transforms: the image must be H x W x C with 1 to " +
                                   std::to_string(kMaxChannels) + " channels");
  }
  if (mask != nullptr &&
      (mask->data == nullptr || mask->height != image.height || mask->width != image.width ||
       mask->channels != 1 ||
       (mask->type != SampleType::kUint8 && mask->type != SampleType::kUint16))) {
    return Status::InvalidArgument(
        "transforms: the mask must be H x W uint8 or uint16, the image's size (" +
        std::to_string(image.height) + "x" + std::to_string(image.width) + ")");
  }
  if (!impl.monai && image.type != SampleType::kUint8) {
    // albumentations' typed-pixel rules: what the loader accepts for typed datasets.
    std::vector<transforms::Node*> leaves;
    transforms::AllLeaves(*impl.root, &leaves);
    for (const transforms::Node* n : leaves) {
      const transforms::Kind k = n->leaf->kind();
      if (k == transforms::Kind::kGeometric ||
          (k == transforms::Kind::kNormalize && n->leaf->name != "ToFloat")) {
        continue;
      }
      return Status::InvalidArgument(transforms::Where(n->position, n->leaf->name) +
                                     " computes on uint8 pixels; a " + SampleTypeName(image.type) +
                                     " image takes the geometric transforms and Normalize");
    }
  }
  if (impl.monai && mask != nullptr) {
    if (const transforms::Node* n = transforms::MonaiSpatialWithoutLabel(*impl.root)) {
      return Status::InvalidArgument(
          transforms::Where(n->position, n->leaf->name) +
          " moves the image without its label (keys has no \"label\"): add \"label\" to its "
          "keys, or apply it without a mask");
    }
  }
  const cv::Mat img(image.height, image.width, CV_MAKETYPE(Depth(image.type), image.channels),
                    const_cast<void*>(image.data));
  *in = img;
  if (impl.monai && img.depth() != CV_32F) img.convertTo(*in, CV_32F);
  *m = cv::Mat();
  if (mask != nullptr) {
    *m = cv::Mat(mask->height, mask->width, Depth(mask->type), const_cast<void*>(mask->data));
  }
  return Status::OK();
}

}  // namespace

Status TransformPipeline::ApplyPixels(uint64_t seed, uint64_t epoch, uint64_t index,
                                      const PixelsRef& image, const PixelsRef* mask,
                                      OwnedPixels* out_image, OwnedPixels* out_mask) const {
  cv::Mat in, m;
  DSPIPE_RETURN_IF_ERROR(PixelInputs(*impl_, image, mask, &in, &m));
  Plan plan;
  DSPIPE_RETURN_IF_ERROR(transforms::MakePlan(*impl_->root, seed, epoch, index,
                                              {image.height, image.width}, image.channels, &plan));
  cv::Mat out, out_m;
  DSPIPE_RETURN_IF_ERROR(transforms::ExecuteSequential(&plan, in, m, &out, &out_m));
  OwnPixels(out, out_image);
  if (out_mask != nullptr && mask != nullptr) OwnPixels(out_m, out_mask);
  return Status::OK();
}

Status TransformPipeline::ApplyPixelsSamples(uint64_t seed, uint64_t epoch, uint64_t index,
                                             const PixelsRef& image, const PixelsRef* mask,
                                             std::vector<OwnedPixels>* out_images,
                                             std::vector<OwnedPixels>* out_masks) const {
  cv::Mat in, m;
  DSPIPE_RETURN_IF_ERROR(PixelInputs(*impl_, image, mask, &in, &m));
  Plan plan;
  DSPIPE_RETURN_IF_ERROR(transforms::MakePlan(*impl_->root, seed, epoch, index,
                                              {image.height, image.width}, image.channels, &plan));
  std::vector<cv::Mat> outs, out_ms;
  DSPIPE_RETURN_IF_ERROR(
      transforms::ExecuteSamples(*impl_->root, seed, epoch, index, &plan, in, m, &outs, &out_ms));
  out_images->assign(outs.size(), OwnedPixels());
  if (out_masks != nullptr) out_masks->assign(mask != nullptr ? outs.size() : 0, OwnedPixels());
  for (size_t k = 0; k < outs.size(); ++k) {
    OwnPixels(outs[k], &(*out_images)[k]);
    if (out_masks != nullptr && mask != nullptr) OwnPixels(out_ms[k], &(*out_masks)[k]);
  }
  return Status::OK();
}

int TransformPipeline::samples_per_record() const { return impl_->samples; }

int TransformPipeline::label_classes() const { return impl_->label_classes; }

Status TransformPipeline::Draws(uint64_t seed, uint64_t epoch, uint64_t index, int in_h, int in_w,
                                const ImageRef* mask, std::string* json_out) const {
  Plan plan;
  DSPIPE_RETURN_IF_ERROR(
      transforms::MakePlan(*impl_->root, seed, epoch, index, {in_h, in_w}, 3, &plan));
  if (mask != nullptr) {  // deferred draws need the mask as it is at their step
    cv::Mat image(in_h, in_w, impl_->monai ? CV_32FC3 : CV_8UC3, cv::Scalar::all(0)), out, out_mask;
    DSPIPE_RETURN_IF_ERROR(
        transforms::ExecuteSequential(&plan, image, Wrap(*mask), &out, &out_mask));
  }
  nlohmann::json list = nlohmann::json::array();
  for (const transforms::Step& s : plan.steps) {
    nlohmann::json e = {{"position", s.position},
                        {"name", s.leaf->name},
                        {"in", {s.in.h, s.in.w}},
                        {"out", {s.out.h, s.out.w}}};
    if (s.deferred) {
      e["deferred"] = true;
    } else {
      e["params"] = s.leaf->Params(s);
    }
    list.push_back(e);
  }
  *json_out = list.dump();
  return Status::OK();
}

const std::vector<MonaiTransformInfo>& SupportedMonaiTransforms() {
  static const std::vector<MonaiTransformInfo> table = [] {
    std::vector<MonaiTransformInfo> t;
    for (const transforms::MonaiType& m : transforms::MonaiTypes()) {
      t.push_back({m.name, m.kind, m.label, m.args});
    }
    return t;
  }();
  return table;
}

const std::vector<TransformInfo>& SupportedTransforms() {
  static const std::vector<TransformInfo> table = [] {
    std::vector<TransformInfo> t;
    for (const char* c : {"Compose", "OneOf", "SomeOf", "Sequential", "OneOrOther"}) {
      const std::string n = c;
      TransformInfo i{c,
                      "container",
                      "as its children",
                      false,
                      {"transforms", "p"},
                      n == "OneOf" || n == "Sequential" || n == "OneOrOther" ? 0.5 : 1.0};
      if (n == "SomeOf") i.args = {"transforms", "n", "replace", "p"};
      t.push_back(i);
    }
    for (const transforms::LeafType& l : transforms::LeafTypes()) {
      // The constructor's p: what the leaf's parser is told (it is asked first, so a bare
      // object that then lacks a required argument still tells it).
      const nlohmann::json bare = {{"__class_fullname__", l.name}};
      transforms::ArgReader r(bare, l.name);
      std::unique_ptr<transforms::Leaf> unused;
      (void)l.make(r, &unused);
      t.push_back({l.name, l.kind, l.mask, l.fused, l.args, r.class_default_p()});
    }
    return t;
  }();
  return table;
}

}  // namespace dspipe
