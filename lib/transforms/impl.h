// SPDX-License-Identifier: Apache-2.0
// TransformPipeline's private state, shared by pipeline.cc and the loader's sample code
// (loader/sample.cc reaches the plan through it). Internal to dspipe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dspipe/transforms.h"
#include "transforms/plan.h"
#include "transforms/spec.h"

namespace dspipe {

struct TransformPipeline::Impl {
  std::unique_ptr<transforms::Node> root;
  int node_count = 0;
  std::vector<std::string> labels;  // segment labels (stage-table rows)
  std::vector<double> mean, stdv;   // Normalize's, pixel units; empty without one
  bool needs_mask = false;          // a draw needs the mask (CropNonEmptyMaskIfExists)
  bool monai = false;               // parsed from a MONAI config (transforms/monai.h)
  int samples = 1;                  // per record (Leaf::samples of the one that splits)
  int label_classes = 0;            // MONAI's AsDiscreted(to_onehot=N) on the label: N
};

namespace transforms {
// The mean / std of a Normalize leaf (ops_color.cc); false for other leaves.
bool NormalizeOf(const Leaf& leaf, std::vector<double>* mean, std::vector<double>* stdv);
}  // namespace transforms

}  // namespace dspipe
