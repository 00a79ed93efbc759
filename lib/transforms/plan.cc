// SPDX-License-Identifier: Apache-2.0
// Planning one sample (selection, draws, grouping, the first group's source region) and
// executing the plan group by group into the batch slot (see plan.h for the rules).
#include "transforms/plan.h"

#include <algorithm>
#include <cmath>

namespace dspipe::transforms {
namespace {

bool Joins(const Plan& plan, const Group& g, const Step& s) {
  if (g.kind != Kind::kGeometric || g.segment != s.segment) return false;
  if (s.leaf->draw_needs_mask() || s.geo.standalone) return false;
  bool has_border = false, aligned = true;
  for (int i = g.begin; i < g.end; ++i) {
    const Geo& t = plan.steps[static_cast<size_t>(i)].geo;
    if (t.standalone) return false;
    has_border |= t.frame == Frame::kBorder;
    // Axis-aligned (crops, flips, transposes, resizes): the border step's input frame is then
    // a rectangle of the group's source, where warp.cc applies the border.
    aligned &= (std::fabs(t.fwd.b) < 1e-12 && std::fabs(t.fwd.d) < 1e-12) ||
               (std::fabs(t.fwd.a) < 1e-12 && std::fabs(t.fwd.e) < 1e-12);
    if (!t.exact && !s.geo.exact &&
        (t.interp != s.geo.interp || t.mask_interp != s.geo.mask_interp)) {
      return false;
    }
  }
  return s.geo.frame != Frame::kBorder || (!has_border && aligned);
}

void MakeGroups(Plan* plan) {
  plan->groups.clear();
  for (int i = 0; i < static_cast<int>(plan->steps.size()); ++i) {
    const Step& s = plan->steps[static_cast<size_t>(i)];
    const Kind k = s.leaf->kind();
    Group* cur = plan->groups.empty() ? nullptr : &plan->groups.back();
    const bool extend = cur != nullptr && cur->end == i &&
                        ((k == Kind::kGeometric && Joins(*plan, *cur, s)) ||
                         (k == Kind::kLut && cur->kind == Kind::kLut && cur->segment == s.segment));
    if (extend) {
      cur->end = i + 1;
    } else {
      plan->groups.push_back({k, i, i + 1, s.segment});
    }
  }
}

// The ROI-decode contract for the first group (plan.h).
void FirstRegion(Plan* plan) {
  plan->source_rect = cv::Rect(0, 0, plan->in.w, plan->in.h);
  plan->first_output = plan->in;
  plan->source_per_output = 1.0;
  plan->has_geometry = false;
  for (const Group& g : plan->groups) plan->has_geometry |= g.kind == Kind::kGeometric;
  if (plan->groups.empty() || plan->groups[0].kind != Kind::kGeometric) return;
  const Group& g = plan->groups[0];
  Affine t;
  bool exact = true, whole = false;
  int support = 0;
  for (int i = g.begin; i < g.end; ++i) {
    const Step& s = plan->steps[static_cast<size_t>(i)];
    t = t.Then(s.geo.fwd);
    exact &= s.geo.exact;
    whole |= s.deferred || (s.geo.frame == Frame::kBorder && s.geo.border.mode != 0);
    if (!s.geo.exact) {
      const int interp = std::max(s.geo.interp, s.geo.mask_interp);
      support = std::max(support, interp == 2 ? 2 : interp == 4 ? 4 : interp == 3 ? 2 : 1);
    }
  }
  const Size out = plan->steps[static_cast<size_t>(g.end - 1)].out;
  plan->first_output = out;
  const Affine inv = t.Inverse();
  // The column lengths of the inverse map. sqrt, not std::hypot: glibc 2.35 gave hypot a new
  // symbol version, which alone raised the wheel's floor to manylinux_2_35 (docs/INSTALL.md).
  plan->source_per_output = std::min(std::sqrt(inv.a * inv.a + inv.d * inv.d),
                                     std::sqrt(inv.b * inv.b + inv.e * inv.e));
  const Step& s0 = plan->steps[static_cast<size_t>(g.begin)];
  if (s0.geo.map) {  // the distortions: their own Warp of the whole image at full resolution
    plan->source_per_output = 1.0;
    return;
  }
  // A resize the warp cannot do for the image (INTER_AREA, *_EXACT) runs as its own Warp /
  // WarpPart: full resolution (a part when it resizes a crop).
  if (s0.geo.standalone) plan->source_per_output = 1.0;
  if (whole || (g.end - g.begin == 1 && !exact && s0.geo.frame == Frame::kFull)) {
    return;  // reads outside (reflect, wrap...) / needs the mask / resizes the whole image
  }
  double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
  const double e = exact ? 0.0 : 0.5;  // pixel centres, or the pixels' outer edges
  for (const auto& [x, y] : {std::pair<double, double>{-e, -e},
                             {out.w - 1 + e, -e},
                             {out.w - 1 + e, out.h - 1 + e},
                             {-e, out.h - 1 + e}}) {
    const double u = inv.a * x + inv.b * y + inv.c, v = inv.d * x + inv.e * y + inv.f;
    x0 = std::min(x0, u), x1 = std::max(x1, u), y0 = std::min(y0, v), y1 = std::max(y1, v);
  }
  const int rx0 = std::max(0, static_cast<int>(std::floor(x0 + 1e-9)) - support);
  const int ry0 = std::max(0, static_cast<int>(std::floor(y0 + 1e-9)) - support);
  const int rx1 = std::min(plan->in.w - 1, static_cast<int>(std::ceil(x1 - 1e-9)) + support);
  const int ry1 = std::min(plan->in.h - 1, static_cast<int>(std::ceil(y1 - 1e-9)) + support);
  if (rx0 <= rx1 && ry0 <= ry1)
    plan->source_rect = cv::Rect(rx0, ry0, rx1 - rx0 + 1, ry1 - ry0 + 1);
}

Status NeedMask(const Step& s) {
  return Status::BadInput(Where(s.position, s.leaf->name) + " needs the mask, and there is none");
}

// The deferred draw of the group's first step, with the mask as it is now.
Status FinishDraw(Step* s, int channels, const cv::Mat& mask) {
  if (!s->deferred) return Status::OK();
  if (mask.empty() && s->leaf->draw_needs_mask()) return NeedMask(*s);
  Rng rng = s->rng;
  return s->leaf->Draw(rng, channels, mask.empty() ? nullptr : &mask, s);
}

// A step planned for another input size than it gets (after a step sized by the pixels) draws
// again for the size it gets, from the same stream: the same draws whenever the sizes agree.
Status Redraw(Step* s, int channels, const cv::Mat& img) {
  const Size actual{img.rows, img.cols};
  if (actual == s->in) return Status::OK();
  s->in = actual;
  Rng rng = s->rng;
  const Status st = s->leaf->Draw(rng, channels, nullptr, s);
  return st.ok() ? st : st.WithContext(Where(s->position, s->leaf->name));
}

}  // namespace

Status MakePlan(const Node& root, uint64_t seed, uint64_t epoch, uint64_t index, Size in,
                int channels, Plan* plan, int sample) {
  std::vector<const Node*> leaves;
  const int split = sample > 0 ? SplitPosition(root) : 1 << 30;
  SelectLeaves(root, seed, epoch, index, &leaves, split, sample);
  plan->in = in;
  plan->channels = channels;
  plan->steps.clear();
  std::vector<std::pair<int, Rng>> streams;  // a leaf SomeOf picks twice continues its stream
  Size cur = in;
  bool sized_by_pixels = false;  // a step before this one: later sizes are assumptions
  for (const Node* node : leaves) {
    if (node->leaf->kind() == Kind::kNormalize) continue;
    auto it = std::find_if(streams.begin(), streams.end(),
                           [&](const auto& e) { return e.first == node->position; });
    if (it == streams.end()) {
      Rng rng = StepRng(seed, epoch, index, node->position, node->position > split ? sample : 0);
      (void)rng.Next();  // the draw spec.cc's selection used for this node's p
      streams.emplace_back(node->position, rng);
      it = streams.end() - 1;
    }
    Step s;
    s.leaf = node->leaf.get();
    s.position = node->position;
    s.segment = node->segment;
    s.in = cur;
    s.rng = it->second;
    Status st = s.leaf->Draw(it->second, channels, nullptr, &s);
    if (!st.ok()) return st.WithContext(Where(node->position, node->leaf->name));
    cur = s.out;
    // A geometric step that maps every pixel onto itself (a Resize to the same size, an
    // identity Affine, a crop of the whole image) is albumentations' no-op: left out.
    if (s.leaf->kind() == Kind::kGeometric && !s.deferred && s.geo.exact && s.out == s.in &&
        s.geo.fwd.IsIdentity() && !sized_by_pixels) {
      continue;
    }
    sized_by_pixels |= s.leaf->sized_by_pixels();
    plan->steps.push_back(std::move(s));
  }
  plan->out = cur;
  MakeGroups(plan);
  FirstRegion(plan);
  return Status::OK();
}

Status Execute(Plan* plan, const cv::Mat& image, const Region& image_region, const cv::Mat& mask,
               cv::Mat* dst_image, cv::Mat* dst_mask, Scratch* scratch, Fold* fold,
               const Timing& timing) {
  const std::vector<Group>& groups = plan->groups;
  const bool masks = !mask.empty() && dst_mask != nullptr && !dst_mask->empty();
  int last_geo = -1;
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    if (groups[static_cast<size_t>(g)].kind == Kind::kGeometric) last_geo = g;
  }
  // Trailing row-wise steps (LUT ops, GaussNoise) the caller fuses into its normalize pass.
  size_t fold_step = plan->steps.size();
  if (fold != nullptr) {
    fold->rows.clear();
    while (fold->allowed && fold_step > 0) {
      const Step& s = plan->steps[fold_step - 1];
      if (s.leaf->kind() == Kind::kGeometric) break;
      std::unique_ptr<RowOp> op = s.leaf->Rows(s, plan->channels);
      if (!op) break;
      fold->rows.insert(fold->rows.begin(), std::move(op));
      --fold_step;
    }
  }
  const cv::Mat* cur = &image;
  const cv::Mat* cur_mask = &mask;
  Region region = image_region;
  bool writable = image.data == dst_image->data;  // decoded into the slot already
  cv::Mat* ping[2] = {&scratch->a, &scratch->b};
  cv::Mat* mping[2] = {&scratch->ma, &scratch->mb};
  int flip = 0;
  for (int gi = 0; gi < static_cast<int>(groups.size()); ++gi) {
    const Group& g = groups[static_cast<size_t>(gi)];
    const uint64_t t0 = timing.stats ? NowNs() : 0;
    Step* first = &plan->steps[static_cast<size_t>(g.begin)];
    Step* last = &plan->steps[static_cast<size_t>(g.end)];
    if (g.kind == Kind::kGeometric) {
      DSPIPE_RETURN_IF_ERROR(FinishDraw(first, plan->channels, masks ? *cur_mask : cv::Mat()));
      if (first->deferred) return NeedMask(*first);
      const Size out = (last - 1)->out;
      cv::Mat* target = dst_image;
      cv::Mat* mtarget = dst_mask;
      if (gi != last_geo) {
        target = ping[flip];
        mtarget = mping[flip];
        flip ^= 1;
        target->create(out.h, out.w, image.type());
        if (masks) mtarget->create(out.h, out.w, CV_8UC1);
      }
      RunGeometricGroup(first, last, *cur, region, target, false);
      if (masks) RunGeometricGroup(first, last, *cur_mask, Region{}, mtarget, true);
      cur = target;
      cur_mask = masks ? mtarget : cur_mask;
      region = Region{};
      writable = true;
    } else {
      if (!writable) {  // the decoded record stays as it is: work on a copy
        cv::Mat* target = gi > last_geo ? dst_image : ping[flip];
        cv::Mat* mtarget = gi > last_geo ? dst_mask : mping[flip];
        if (gi <= last_geo) flip ^= 1;
        cur->copyTo(*target);
        if (masks) cur_mask->copyTo(*mtarget);
        cur = target;
        cur_mask = masks ? mtarget : cur_mask;
        writable = true;
      }
      cv::Mat* img = const_cast<cv::Mat*>(cur);
      cv::Mat* msk = masks ? const_cast<cv::Mat*>(cur_mask) : nullptr;
      for (Step* s = first; s != last; ++s) {
        if (static_cast<size_t>(s - plan->steps.data()) >= fold_step) break;  // the caller's
        Status st = s->leaf->Apply(*s, img, msk);
        if (!st.ok()) return st.WithContext(Where(s->position, s->leaf->name));
      }
    }
    // A group left wholly to the caller (folded into its normalize pass) is timed there.
    const bool folded = static_cast<size_t>(g.begin) >= fold_step;
    if (timing.stats && folded) timing.stats->CountFoldedTransform(g.segment);
    if (timing.stats && !folded) timing.stats->RecordTransform(g.segment, t0, NowNs(), timing.id);
  }
  if (cur != dst_image && cur->data != dst_image->data) cur->copyTo(*dst_image);
  if (masks && cur_mask != dst_mask && cur_mask->data != dst_mask->data)
    cur_mask->copyTo(*dst_mask);
  return Status::OK();
}

bool OddHorizontalFlips(const Plan& plan) {
  bool odd = false;
  for (const Step& s : plan.steps) odd ^= s.leaf->name == "HorizontalFlip";
  return odd;
}

bool DeferLastHorizontalFlip(Plan* plan) {
  for (int i = static_cast<int>(plan->steps.size()) - 1; i >= 0; --i) {
    const Step& s = plan->steps[static_cast<size_t>(i)];
    if (s.leaf->name == "HorizontalFlip") {
      plan->steps.erase(plan->steps.begin() + i);
      MakeGroups(plan);
      FirstRegion(plan);
      return true;
    }
    if (!s.leaf->commutes_with_hflip()) return false;
  }
  return false;
}

bool FlipsAndRowOpsOnly(const Plan& plan, bool* mirror) {
  *mirror = false;
  for (const Step& s : plan.steps) {
    if (s.leaf->name == "HorizontalFlip") {
      *mirror = !*mirror;
    } else if (s.leaf->kind() == Kind::kGeometric || !s.leaf->Rows(s, plan.channels)) {
      return false;
    }
  }
  return true;
}

std::vector<std::unique_ptr<RowOp>> RowOpsOf(const Plan& plan) {
  std::vector<std::unique_ptr<RowOp>> ops;
  for (const Step& s : plan.steps) {
    if (s.leaf->name != "HorizontalFlip") ops.push_back(s.leaf->Rows(s, plan.channels));
  }
  return ops;
}

namespace {

// A geometric step's output written into the thread's spare buffer (the input of its previous
// step, handed back), which becomes *cur; the input becomes the spare. A buffer of the same
// size is reused instead of allocated (each new one page-faults in); the spare is dropped when
// anything else holds it.
void Resample(const Step& s, cv::Mat* cur, bool is_mask) {
  thread_local cv::Mat spares[2];
  cv::Mat& spare = spares[is_mask ? 1 : 0];
  if (spare.u != nullptr && spare.u->refcount > 1) spare.release();
  spare.create(s.out.h, s.out.w, cur->type());
  s.leaf->Warp(s, *cur, &spare, is_mask);
  std::swap(*cur, spare);
  if (spare.u != nullptr && spare.u == cur->u) spare.release();  // Warp handed its input back
}

// One step on its own (albumentations' / MONAI's sequential application), in place.
Status RunStep(Step& s, int channels, cv::Mat* img, cv::Mat* msk) {
  DSPIPE_RETURN_IF_ERROR(Redraw(&s, channels, *img));
  if (s.leaf->kind() == Kind::kGeometric) {
    s.image = img;
    const Status drawn = FinishDraw(&s, channels, *msk);
    s.image = nullptr;
    if (!drawn.ok()) return drawn;
    Resample(s, img, false);
    if (!msk->empty()) Resample(s, msk, true);
    return Status::OK();
  }
  Status st = s.leaf->Apply(s, img, msk->empty() ? nullptr : msk);
  if (!st.ok()) return st.WithContext(Where(s.position, s.leaf->name));
  return Status::OK();
}

}  // namespace

Status ExecuteSequential(Plan* plan, const cv::Mat& image, const cv::Mat& mask, cv::Mat* out_image,
                         cv::Mat* out_mask, bool scratch_image) {
  cv::Mat img = scratch_image ? image : image.clone(), msk = mask.clone();
  for (Step& s : plan->steps) DSPIPE_RETURN_IF_ERROR(RunStep(s, plan->channels, &img, &msk));
  *out_image = img;
  *out_mask = msk;
  return Status::OK();
}

int SplitPosition(const Node& root) {
  std::vector<Node*> leaves;
  AllLeaves(root, &leaves);
  for (const Node* n : leaves) {
    if (n->leaf->samples() > 1) return n->position;
  }
  return 1 << 30;
}

Status ExecuteSamples(const Node& root, uint64_t seed, uint64_t epoch, uint64_t index, Plan* plan,
                      const cv::Mat& image, const cv::Mat& mask, std::vector<cv::Mat>* out_images,
                      std::vector<cv::Mat>* out_masks, bool scratch_image) {
  out_images->clear();
  out_masks->clear();
  size_t split = 0;
  while (split < plan->steps.size() && plan->steps[split].leaf->samples() <= 1) ++split;
  if (split == plan->steps.size()) {
    out_images->emplace_back();
    out_masks->emplace_back();
    return ExecuteSequential(plan, image, mask, &out_images->back(), &out_masks->back(),
                             scratch_image);
  }
  cv::Mat img = scratch_image ? image : image.clone(), msk = mask.clone();
  for (size_t i = 0; i < split; ++i) {
    DSPIPE_RETURN_IF_ERROR(RunStep(plan->steps[i], plan->channels, &img, &msk));
  }
  Step& cut = plan->steps[split];
  DSPIPE_RETURN_IF_ERROR(Redraw(&cut, plan->channels, img));
  cut.image = &img;
  const Status drawn = FinishDraw(&cut, plan->channels, msk);
  cut.image = nullptr;
  if (!drawn.ok()) return drawn;
  const int n = cut.leaf->samples();
  if (cut.holes.size() != static_cast<size_t>(4 * n)) {
    return Status::Internal(Where(cut.position, cut.leaf->name) + ": drew " +
                            std::to_string(cut.holes.size() / 4) + " of " + std::to_string(n) +
                            " samples");
  }
  Plan other;
  for (int k = 0; k < n; ++k) {
    Plan* pk = plan;
    if (k > 0) {  // the same steps up to the cut (sample 0's draws), then sample k's
      DSPIPE_RETURN_IF_ERROR(
          MakePlan(root, seed, epoch, index, plan->in, plan->channels, &other, k));
      if (other.steps.size() <= split || other.steps[split].leaf != cut.leaf) {
        return Status::Internal(Where(cut.position, cut.leaf->name) + ": sample " +
                                std::to_string(k) + " planned another cut");
      }
      pk = &other;
    }
    const int* r = cut.holes.data() + 4 * k;
    const cv::Rect rect(r[0], r[1], r[2], r[3]);
    cv::Mat ik = img(rect).clone(), mk = msk.empty() ? cv::Mat() : msk(rect).clone();
    for (size_t i = split + 1; i < pk->steps.size(); ++i) {
      DSPIPE_RETURN_IF_ERROR(RunStep(pk->steps[i], plan->channels, &ik, &mk));
    }
    out_images->push_back(ik);
    out_masks->push_back(mk);
  }
  return Status::OK();
}

}  // namespace dspipe::transforms
