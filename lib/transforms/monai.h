// SPDX-License-Identifier: Apache-2.0
// The second front end of the transform plan: MONAI 1.6.1 dictionary transforms, read from a
// bundle config's form (a list of {"_target_": "ScaleIntensityRanged", "keys": [...], ...}
// objects, or {"_target_": "Compose", "transforms": [...]}) into the same Node tree the
// albumentations spec builds, and written back in that form. The leaves compute on float32
// pixels (MONAI's LoadImaged gives float32) in the image's channels; labels keep their ids and
// follow the spatial transforms. Internal to dspipe::transforms; docs/MONAI.md is the table.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dspipe/status.h"
#include "transforms/spec.h"

namespace dspipe::transforms {

// A parsed JSON document in MONAI's form: a "_target_" object, or a list whose first element is
// one.
bool IsMonaiSpec(const nlohmann::json& j);

// Parses a MONAI config into a Compose root. Errors: InvalidArgument naming the transform's
// position and name, and the argument; an unsupported transform lists the supported ones.
Status ParseMonaiSpec(const nlohmann::json& j, std::unique_ptr<Node>* root, int* node_count);

// The config back in MONAI's form: {"_target_": "Compose", "transforms": [...]}, every
// argument filled in.
nlohmann::json MonaiJson(const Node& root);

// A spatial transform that leaves the label behind (keys without a label key): its Node, or
// null. Such a pipeline cannot run on a dataset with masks (the label would no longer fit).
const Node* MonaiSpatialWithoutLabel(const Node& root);

// The classes of the label's one-hot: AsDiscreted(to_onehot=N) on the label gives N, else 0.
// InvalidArgument when a spatial transform comes after it or the label is one-hot twice.
Status MonaiLabelClasses(const Node& root, int* classes);

struct MonaiType {
  const char* name;               // MONAI's class name, e.g. "ScaleIntensityRanged"
  const char* kind;               // "intensity" | "spatial" | "label output" | "no-op"
  const char* label;              // what happens to the label
  std::vector<std::string> args;  // MONAI's argument names dspipe reads, in signature order
};
// Every MONAI transform the parser accepts, in docs order.
const std::vector<MonaiType>& MonaiTypes();

}  // namespace dspipe::transforms
