// SPDX-License-Identifier: Apache-2.0
// The parsed pipeline: a tree of containers (Compose, OneOf, SomeOf, Sequential) and leaves,
// read from albumentations' A.to_dict JSON and written back in the same form, and the random
// selection of which leaves run for one sample. Internal to dspipe::transforms.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dspipe/status.h"
#include "transforms/ops.h"

namespace dspipe::transforms {

struct Node {
  enum Type { kLeaf, kCompose, kOneOf, kSomeOf, kSequential, kOneOrOther };
  Type type = kLeaf;
  int position = 0;  // pre-order index: the root Compose is 0
  double p = 1.0;
  std::unique_ptr<Leaf> leaf;                       // kLeaf
  std::vector<std::unique_ptr<Node>> children;      // containers
  std::vector<double> weights;                      // OneOf: children's p normalized
  int n = 1;                                        // SomeOf
  bool replace = false;                             // SomeOf
  nlohmann::json extra = nlohmann::json::object();  // Compose's other keys, written back
  int segment = -1;                                 // leaves: static segment (plan.h)
};

// How deep containers (Compose / OneOf / SomeOf / Sequential) may nest: the root Compose is
// level 1, a container directly inside it level 2, ... A deeper spec is refused with
// InvalidArgument naming this limit and the JSON path of the too-deep container (every walk of
// the tree recurses per level; albumentations itself stops near Python's recursion limit).
constexpr int kMaxSpecDepth = 64;
// How deep the JSON text may nest at all, checked by a scan before nlohmann parses it (one
// container level is two JSON levels, an object and its "transforms" list; the rest is room for
// the {"transform": ...} wrapper and arguments such as Affine's {"x": [lo, hi]}).
constexpr int kMaxSpecJsonDepth = 2 * kMaxSpecDepth + 16;

// Every leaf type dspipe implements, in docs order.
const std::vector<LeafType>& LeafTypes();

// Parses the JSON text into a tree whose root is a Compose. Errors: InvalidArgument naming the
// transform's position and class and the reason; text nested deeper than kMaxSpecJsonDepth, or
// containers deeper than kMaxSpecDepth, are refused before anything recurses over them.
Status ParseSpec(const std::string& text, std::unique_ptr<Node>* root, int* node_count);

// A.to_dict form of a node (the root: wrapped as {"__version__", "transform"} by the caller).
nlohmann::json NodeJson(const Node& node);

// The leaves that run for one sample, in order (containers' draws from their own streams).
// sample > 0: nodes after position `split` (the leaf that yields several samples) draw from
// that sample's streams (StepRng's sample).
void SelectLeaves(const Node& root, uint64_t seed, uint64_t epoch, uint64_t index,
                  std::vector<const Node*>* out, int split = 1 << 30, int sample = 0);

// Every leaf in pre-order (the static order segments are cut from).
void AllLeaves(const Node& node, std::vector<Node*>* out);

}  // namespace dspipe::transforms
