// SPDX-License-Identifier: Apache-2.0
// Parsing albumentations' serialized pipelines into a Node tree, writing them back (A.to_dict's
// form), and the per-sample selection of the leaves that run (albumentations' container rules:
// Compose / Sequential apply every child with its own p; OneOf picks one child by the children's
// p as weights and forces it; SomeOf picks n children uniformly, sorted, each then with its p).
#include "transforms/spec.h"

#include <algorithm>
#include <iterator>

#include "transforms/monai.h"

namespace dspipe::transforms {
namespace {

using nlohmann::json;

constexpr const char* kContainers[] = {"Compose", "OneOf", "SomeOf", "Sequential", "OneOrOther"};

std::string SupportedNames() {
  std::string s;
  for (const char* c : kContainers) s += std::string(s.empty() ? "" : ", ") + c;
  for (const LeafType& t : LeafTypes()) s += std::string(", ") + t.name;
  return s;
}

// "albumentations.augmentations.geometric.flip.HorizontalFlip" -> "HorizontalFlip".
std::string ShortName(const std::string& full) {
  const size_t dot = full.rfind('.');
  return dot == std::string::npos ? full : full.substr(dot + 1);
}

class Parser {
 public:
  // path: the JSON pointer of j ("" for the root); depth: containers above j.
  Status Parse(const json& j, std::unique_ptr<Node>* out, bool root, const std::string& path = "",
               int depth = 0) {
    const int position = next_++;
    if (!j.is_object()) {
      return Status::InvalidArgument("transform " + std::to_string(position) +
                                     ": expected a JSON object, got " + j.dump().substr(0, 80));
    }
    auto it = j.find("__class_fullname__");
    if (it == j.end() || !it->is_string()) {
      return Status::InvalidArgument("transform " + std::to_string(position) +
                                     ": no \"__class_fullname__\" (not albumentations JSON)");
    }
    const std::string name = ShortName(it->get<std::string>());
    auto node = std::make_unique<Node>();
    node->position = position;
    const std::string where = Where(position, name);
    if (root && name != "Compose") {  // a bare transform or container: wrap it
      --next_;
      node->type = Node::kCompose;
      node->position = next_++;
      std::unique_ptr<Node> child;
      DSPIPE_RETURN_IF_ERROR(Parse(j, &child, false, path, depth + 1));
      node->children.push_back(std::move(child));
      node->extra = DefaultComposeExtra();
      *out = std::move(node);
      return Status::OK();
    }
    for (const char* c : kContainers) {
      if (name != c) continue;
      if (depth + 1 > kMaxSpecDepth) {
        return Status::InvalidArgument(
            where + " at JSON path " + (path.empty() ? "/" : path) + ": containers nest " +
            std::to_string(depth + 1) + " levels deep here, more than the limit of " +
            std::to_string(kMaxSpecDepth) +
            " (kMaxSpecDepth); flatten the pipeline (a Compose inside a Compose is the same as its "
            "children in place)");
      }
      return ParseContainer(j, name, where, path, depth + 1, std::move(node), out);
    }
    const auto& types = LeafTypes();
    auto t = std::find_if(types.begin(), types.end(),
                          [&](const LeafType& lt) { return name == lt.name; });
    if (t == types.end()) {
      return Status::InvalidArgument(where + ": transform " + name +
                                     " is not supported (supported: " + SupportedNames() + ")");
    }
    ArgReader r(j, where);
    std::unique_ptr<Leaf> leaf;
    DSPIPE_RETURN_IF_ERROR(t->make(r, &leaf));
    leaf->name = t->name;
    leaf->args = r.normalized();
    leaf->args.erase("p");
    node->type = Node::kLeaf;
    node->p = leaf->prob;
    node->leaf = std::move(leaf);
    *out = std::move(node);
    return Status::OK();
  }

  static json DefaultComposeExtra() {
    return {{"bbox_params", nullptr},
            {"keypoint_params", nullptr},
            {"additional_targets", json::object()},
            {"is_check_shapes", true}};
  }

  int count() const { return next_; }

 private:
  Status ParseContainer(const json& j, const std::string& name, const std::string& where,
                        const std::string& path, int depth, std::unique_ptr<Node> node,
                        std::unique_ptr<Node>* out) {
    ArgReader r(j, where);
    node->type = name == "Compose"      ? Node::kCompose
                 : name == "OneOf"      ? Node::kOneOf
                 : name == "SomeOf"     ? Node::kSomeOf
                 : name == "OneOrOther" ? Node::kOneOrOther
                                        : Node::kSequential;
    // from_dict gives a serialized container without "p" 0.5, but Compose and Sequential their
    // class defaults (1 and 0.5).
    const bool keeps_default = node->type == Node::kCompose || node->type == Node::kSequential;
    node->p = r.Prob(node->type == Node::kOneOf || node->type == Node::kSequential ||
                             node->type == Node::kOneOrOther
                         ? 0.5
                         : 1.0,
                     keeps_default);
    std::vector<std::string> args = {"transforms", "p"};
    if (node->type == Node::kSomeOf) {
      node->n = r.Int("n", 1, 0);
      node->replace = r.Bool("replace", false);
      args.insert(args.end(), {"n", "replace"});
    }
    if (node->type == Node::kCompose) {
      for (const char* k : {"bbox_params", "keypoint_params"}) {
        r.OnlyDefault(k, nullptr, "dspipe transforms images and masks, not boxes or keypoints");
      }
      r.OnlyDefault("additional_targets", json::object(), "one image and one mask per sample");
      r.Ignored("is_check_shapes", true);
      r.Ignored("strict", false);
      r.Ignored("seed", nullptr);  // dspipe's draws come from the loader's seed
      r.OnlyDefault("mask_interpolation", nullptr,
                    "set each transform's mask_interpolation instead");
      r.Ignored("save_applied_params", false);
      args.insert(args.end(),
                  {"bbox_params", "keypoint_params", "additional_targets", "is_check_shapes"});
      node->extra = DefaultComposeExtra();
      node->extra["is_check_shapes"] = r.normalized()["is_check_shapes"];
    }
    const json* list = r.Raw("transforms");
    DSPIPE_RETURN_IF_ERROR(r.Finish(args));
    if (list == nullptr || !list->is_array()) {
      return Status::InvalidArgument(where + ": argument transforms must be a list");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      std::unique_ptr<Node> c;
      DSPIPE_RETURN_IF_ERROR(
          Parse((*list)[i], &c, false, path + "/transforms/" + std::to_string(i), depth));
      node->children.push_back(std::move(c));
    }
    if (node->type == Node::kOneOf) {
      // albumentations 2.0.8 divides each child's p by their sum (ZeroDivisionError when every
      // child has p=0) and picks with those weights: a p=0 child is never picked.
      double sum = 0;
      for (const auto& c : node->children) sum += c->p;
      if (!node->children.empty() && !(sum > 0)) {
        return Status::InvalidArgument(
            where +
            ": every transform inside this OneOf has p=0, so it has none to pick "
            "(albumentations fails on it with ZeroDivisionError); give at least one of "
            "them p > 0, or remove the OneOf");
      }
      for (const auto& c : node->children) node->weights.push_back(c->p / sum);
    }
    if (node->type == Node::kOneOrOther && node->children.size() != 2) {
      // albumentations warns and goes on (the first or the last); a spec is refused instead.
      return Status::InvalidArgument(where + ": OneOrOther needs exactly two transforms, got " +
                                     std::to_string(node->children.size()));
    }
    if (node->type == Node::kSomeOf && !node->replace) {
      node->n = std::min(node->n, static_cast<int>(node->children.size()));
    }
    *out = std::move(node);
    return Status::OK();
  }

  int next_ = 0;
};

struct SampleKey {
  int split = 1 << 30;
  int sample = 0;
  int For(const Node& n) const { return n.position > split ? sample : 0; }
};

void Select(const Node& node, uint64_t seed, uint64_t epoch, uint64_t index, bool forced,
            std::vector<const Node*>* out, const SampleKey& key) {
  Rng rng = StepRng(seed, epoch, index, node.position, key.For(node));
  // should_apply: p <= 0 never, p >= 1 always, else random() < p (drawn either way, so one
  // node's probability never shifts another's stream).
  const double u = rng.Uniform();
  // SomeOf checks its own p even when a OneOf forces it (albumentations 2.0.8's
  // SomeOf.__call__ ignores force_apply); a transform with p <= 0 never runs, forced or not
  // (should_apply; OneOrOther can force one); the others run when forced. OneOrOther (2.0.8's
  // __call__) always runs: its p only chooses the child.
  const bool forced_runs = forced && node.type != Node::kSomeOf &&
                           !(node.type == Node::kLeaf && node.p <= 0);
  const bool run = node.type == Node::kOneOrOther || forced_runs ||
                   (node.p > 0 && (node.p >= 1 || u < node.p));
  if (!run) return;
  switch (node.type) {
    case Node::kLeaf:
      out->push_back(&node);
      return;
    case Node::kOneOrOther: {  // one child, forced: the first when random() < p, else the last
      if (node.children.empty()) return;
      const auto& chosen = u < node.p ? node.children.front() : node.children.back();
      Select(*chosen, seed, epoch, index, true, out, key);
      return;
    }
    case Node::kCompose:
    case Node::kSequential:
      for (const auto& c : node.children) Select(*c, seed, epoch, index, false, out, key);
      return;
    case Node::kOneOf: {
      if (node.children.empty()) return;
      const double pick = rng.Uniform();
      double acc = 0;
      // When rounding leaves pick at or above the sum of the weights: the last child that can
      // be picked (weight > 0), never a p=0 one.
      size_t chosen = node.children.size() - 1;
      while (chosen > 0 && !(node.weights[chosen] > 0)) --chosen;
      for (size_t i = 0; i < node.weights.size(); ++i) {
        acc += node.weights[i];
        if (node.weights[i] > 0 && pick < acc) {
          chosen = i;
          break;
        }
      }
      Select(*node.children[chosen], seed, epoch, index, true, out, key);
      return;
    }
    case Node::kSomeOf: {
      const size_t k = node.children.size();
      if (k == 0 || node.n <= 0) return;
      std::vector<size_t> idx;
      if (node.replace) {
        for (int i = 0; i < node.n; ++i) idx.push_back(rng.Below(k));
      } else {  // a uniform n-subset: partial Fisher-Yates
        std::vector<size_t> all(k);
        for (size_t i = 0; i < k; ++i) all[i] = i;
        for (int i = 0; i < node.n; ++i) {
          std::swap(all[static_cast<size_t>(i)], all[i + rng.Below(k - static_cast<size_t>(i))]);
        }
        idx.assign(all.begin(), all.begin() + node.n);
      }
      std::sort(idx.begin(), idx.end());
      for (size_t i : idx) Select(*node.children[i], seed, epoch, index, false, out, key);
      return;
    }
  }
}

}  // namespace

const std::vector<LeafType>& LeafTypes() {
  static const std::vector<LeafType> types = [] {
    std::vector<LeafType> t;
    AddGeometricLeaves(&t);
    AddCropLeaves(&t);
    AddResizeLeaves(&t);
    AddColorLeaves(&t);
    AddPixelLeaves(&t);
    AddDistortLeaves(&t);
    return t;
  }();
  return types;
}

// nlohmann's parser keeps its own stack, but the tree it builds is walked recursively (dump,
// comparisons, our Parser): refuse text nested deeper than kMaxSpecJsonDepth before parsing.
// Brackets inside strings do not count.
static Status CheckJsonDepth(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxSpecJsonDepth) {
        return Status::InvalidArgument(
            "transforms: the JSON nests deeper than " + std::to_string(kMaxSpecJsonDepth) +
            " levels (at byte " + std::to_string(i) + "); a spec's containers nest at most " +
            std::to_string(kMaxSpecDepth) +
            " levels (kMaxSpecDepth), two JSON levels each: flatten the pipeline");
      }
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return Status::OK();
}

Status ParseSpec(const std::string& text, std::unique_ptr<Node>* root, int* node_count) {
  DSPIPE_RETURN_IF_ERROR(CheckJsonDepth(text));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::InvalidArgument("transforms: not valid JSON: " + text.substr(0, 80));
  }
  if (IsMonaiSpec(j)) return ParseMonaiSpec(j, root, node_count);
  if (j.is_object() && j.contains("transform") && !j.contains("__class_fullname__")) {
    j = j["transform"];  // {"__version__": ..., "transform": {...}}
  } else if (j.is_array()) {
    j = json{{"__class_fullname__", "Compose"}, {"transforms", j}};
  }
  Parser parser;
  DSPIPE_RETURN_IF_ERROR(parser.Parse(j, root, true));
  *node_count = parser.count();
  return Status::OK();
}

json NodeJson(const Node& node) {
  if (node.type == Node::kLeaf) {
    json j = node.leaf->args;
    j["__class_fullname__"] = node.leaf->name;
    j["p"] = node.leaf->prob;
    return j;
  }
  // By Node::Type; a type without its name here would read past the table (fuzz_transform_spec
  // found OneOrOther missing).
  static constexpr const char* kNames[] = {"", "Compose", "OneOf", "SomeOf", "Sequential",
                                           "OneOrOther"};
  static_assert(std::size(kNames) == Node::kOneOrOther + 1, "a container type without a name");
  json j = {{"__class_fullname__", kNames[node.type]}, {"p", node.p}};
  json list = json::array();
  for (const auto& c : node.children) list.push_back(NodeJson(*c));
  j["transforms"] = list;
  if (node.type == Node::kSomeOf) {
    j["n"] = node.n;
    j["replace"] = node.replace;
  }
  if (node.type == Node::kCompose) j.update(node.extra);
  return j;
}

void SelectLeaves(const Node& root, uint64_t seed, uint64_t epoch, uint64_t index,
                  std::vector<const Node*>* out, int split, int sample) {
  out->clear();
  Select(root, seed, epoch, index, false, out, SampleKey{split, sample});
}

void AllLeaves(const Node& node, std::vector<Node*>* out) {
  if (node.type == Node::kLeaf) {
    out->push_back(const_cast<Node*>(&node));
    return;
  }
  for (const auto& c : node.children) AllLeaves(*c, out);
}

}  // namespace dspipe::transforms
