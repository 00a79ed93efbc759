# SPDX-License-Identifier: Apache-2.0
"""Golden outputs of the real MONAI's Spacingd for dspipe's in-plane resampling
(BuildOptions::spacing_rows / spacing_cols, dsconvert build --spacing; tests/python/
test_volume_spacing.py compares a volume build against them).

Run it with a Python that has MONAI 1.6.1 (bench/monai/requirements.txt; the venv
bench/monai/compare_live.sh makes):

    python tests/python/monai_golden/make_spacing_golden.py tests/python/monai_golden/spacing.npz

Inputs come from a fixed numpy seed: an int16 image H x W (CT-like, -1024..3000) and a uint8
label H x W (ids 0..3), H=23, W=20. Each case gives MONAI {"image": float32 1 x H x W, "label":
uint8 1 x H x W} as MetaTensors whose affine is diag(from_r, from_c, 1, 1) (the slice's rows
along the first spatial axis), through
Spacingd(keys=["image", "label"], pixdim=(to_r, to_c), mode=("bilinear", "nearest")), MONAI's
defaults otherwise (padding_mode "border", align_corners False, scale_extent False).

Layout (np.savez_compressed; strings as 0-d unicode arrays, no pickle):
    "index"         JSON: {"monai", "torch", "numpy": versions, "cases": [{"name", "from": [r, c],
                    "to": [r, c]}]}
    "input.image"   int16 H x W;  "input.label"  uint8 H x W
    "<name>.image"  MONAI's image, float32 H' x W';  "<name>.label"  its label, uint8 H' x W'
"""
from __future__ import annotations

import json
import sys

import numpy as np

H, W = 23, 20
SEED = 20261206
# (name, from (rows, cols) mm, to (rows, cols) mm): up, down, anisotropic, a length that rounds
# up (the last sample clamped to the border), and non-integer ratios. No case puts a label
# sample exactly halfway between two voxels: there MONAI's float32 grid rounds either way (a 2x
# upsampling, every other sample a tie, disagrees with round-half-to-even and with
# round-half-up alike), so no rule matches it.
CASES = [
    ("up-2.5x", (1.0, 1.1), (0.4, 0.4)),
    ("down-0.7-to-1", (0.7, 0.7), (1.0, 1.0)),
    ("aniso", (0.8, 1.25), (1.07, 0.6)),
    ("rounds-up", (1.0, 1.0), (0.6, 0.8)),
    ("ct-like", (0.782, 0.782), (1.5, 1.5)),
]


def inputs():
    rng = np.random.default_rng(SEED)
    image = rng.integers(-1024, 3000, size=(H, W)).astype(np.int16)
    label = rng.integers(0, 4, size=(H, W)).astype(np.uint8)
    return image, label


def main(out: str) -> None:
    import monai
    import torch
    from monai.data import MetaTensor
    from monai.transforms import Spacingd

    image, label = inputs()
    arrays = {"input.image": image, "input.label": label}
    cases = []
    for name, src, dst in CASES:
        affine = torch.diag(torch.tensor([src[0], src[1], 1.0, 1.0], dtype=torch.float64))
        d = {"image": MetaTensor(torch.from_numpy(image.astype(np.float32))[None], affine=affine),
             "label": MetaTensor(torch.from_numpy(label)[None], affine=affine.clone())}
        r = Spacingd(keys=["image", "label"], pixdim=dst, mode=("bilinear", "nearest"))(d)
        arrays[f"{name}.image"] = r["image"][0].numpy().astype(np.float32)
        arrays[f"{name}.label"] = r["label"][0].numpy().round().astype(np.uint8)
        cases.append({"name": name, "from": list(src), "to": list(dst)})
    index = {"monai": monai.__version__, "torch": torch.__version__, "numpy": np.__version__,
             "cases": cases}
    arrays["index"] = np.array(json.dumps(index))
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
