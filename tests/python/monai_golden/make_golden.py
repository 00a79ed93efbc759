# SPDX-License-Identifier: Apache-2.0
"""Golden outputs of the real MONAI for the dictionary transforms dspipe implements natively
(tests/python/test_monai_golden.py compares dspipe.transforms.apply against them).

Run it with a Python that has MONAI (bench/monai/requirements.txt; bench/monai/compare_live.sh
makes such a venv and runs this script and the test in one go):

    python tests/python/monai_golden/make_golden.py tests/python/monai_golden/golden.npz

Inputs are made here from a fixed numpy seed, so the output depends only on MONAI / torch /
numpy. Images are H x W x C with H=23, W=20 (odd / even on purpose), in uint16 (0..4095),
int16 (-1024..3000) and float32 (normal-ish), with C=1 and C=4; a triangular region of ~20% of
the pixels (top-left corner) is exactly 0 in every channel but the last of a C=4 image, so
nonzero=True matters. The last channel of a C=4 image is the constant 1000: it takes the
degenerate paths of the channel-wise transforms (min == max, std == 0, equal percentiles). The
label is H x W uint8 with ids 0..3.

Each case is a list of MONAI bundle-config dicts ({"_target_": "ScaleIntensityRanged", "keys":
["image"], ...}, the transform's own arguments only, no filled-in defaults). MONAI gets
{"image": float32 C x H x W tensor (the input converted to float32 first, as LoadImaged does),
"label": 1 x H x W uint8 tensor} through monai.transforms.Compose of the instantiated
transforms, after monai.utils.set_determinism(0) and Compose.set_random_state(0).

Layout of the .npz (np.savez_compressed; every string is a 0-d unicode array, so np.load needs
no pickle):
    "index"               JSON text: {"monai": version, "torch": version, "numpy": version,
                          "cases": [{"name": ..., "input": "input.<dtype>-c<C>",
                                     "config": [transform dicts]}, ...]}
    "input.<dtype>-c<C>"  the input image, H x W x C, in its own dtype (uint16/int16/float32)
    "input.label"         the input label, H x W uint8 (a case's "label" in the index names
                          the label it takes: this one, or "input.label-corner" /
                          "input.label-middle", one foreground pixel each)
    "<name>.config"       the case's config list as JSON text (the same as in the index)
    "<name>.image"        MONAI's output image, float32, H' x W' x C (channels last again)
    "<name>.label"        MONAI's output label, H' x W' uint8 (after AsDiscreted(to_onehot=N):
                          H' x W' x N float32 one-hot)
    "elastic.<name>.grid0", "elastic.<name>.basis"
                          Rand2DElasticd's grid as a function of its offsets (ELASTIC below;
                          the index's "elastic" lists them with their configs)
A case name is "<variant>-<dtype>-c<C>", e.g. "NormalizeIntensityd-nonzero-int16-c4".
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

H, W = 23, 20
SEED = 20240611
DTYPES = ("uint16", "int16", "float32")
CHANNELS = (1, 4)
CONST = 1000  # the last channel of a C=4 image

SPATIAL = ["image", "label"]


def _t(name: str, keys=("image",), **kwargs) -> dict:
    return {"_target_": name, "keys": list(keys), **kwargs}


SIR = dict(a_min=-175, a_max=250, b_min=0.0, b_max=1.0)

# (variant name, config list, dtypes it runs on: None = all)
VARIANTS: list[tuple[str, list[dict], tuple[str, ...] | None]] = [
    ("ScaleIntensityRanged-clip", [_t("ScaleIntensityRanged", **SIR, clip=True)], None),
    ("ScaleIntensityRanged-noclip", [_t("ScaleIntensityRanged", **SIR, clip=False)], None),
    # b_min = b_max = None: no rescale to [b_min, b_max]. (With clip=True MONAI 1.6.1 fails in
    # torch.clamp(x, None, None), so this one is clip=False.)
    ("ScaleIntensityRanged-nob", [_t("ScaleIntensityRanged", a_min=-175, a_max=250, b_min=None,
                                     b_max=None, clip=False)], None),
    ("ScaleIntensityd", [_t("ScaleIntensityd")], None),
    ("ScaleIntensityd-channelwise", [_t("ScaleIntensityd", channel_wise=True)], None),
    # minv != 0: on a constant channel MONAI gives x * minv (not minv).
    ("ScaleIntensityd-minv-channelwise", [_t("ScaleIntensityd", minv=0.25, maxv=2.0,
                                             channel_wise=True)], None),
    ("ScaleIntensityd-factor", [_t("ScaleIntensityd", minv=None, maxv=None, factor=0.5)], None),
    ("NormalizeIntensityd", [_t("NormalizeIntensityd")], None),
    ("NormalizeIntensityd-nonzero", [_t("NormalizeIntensityd", nonzero=True)], None),
    ("NormalizeIntensityd-channelwise", [_t("NormalizeIntensityd", channel_wise=True)], None),
    ("NormalizeIntensityd-nonzero-channelwise",
     [_t("NormalizeIntensityd", nonzero=True, channel_wise=True)], None),
    ("NormalizeIntensityd-fixed", [_t("NormalizeIntensityd", subtrahend=100.0, divisor=50.0)],
     None),
    ("ThresholdIntensityd-above", [_t("ThresholdIntensityd", threshold=100, above=True, cval=0)],
     None),
    ("ThresholdIntensityd-below", [_t("ThresholdIntensityd", threshold=100, above=False,
                                      cval=-1)], None),
    ("ScaleIntensityRangePercentilesd",
     [_t("ScaleIntensityRangePercentilesd", lower=1, upper=99, b_min=0.0, b_max=1.0, clip=True)],
     None),
    ("ScaleIntensityRangePercentilesd-channelwise",
     [_t("ScaleIntensityRangePercentilesd", lower=1, upper=99, b_min=0.0, b_max=1.0, clip=True,
         channel_wise=True)], None),
    ("ScaleIntensityRangePercentilesd-relative",
     [_t("ScaleIntensityRangePercentilesd", lower=1, upper=99, b_min=0.0, b_max=1.0, clip=True,
         relative=True)], None),
    ("ClipIntensityPercentilesd", [_t("ClipIntensityPercentilesd", lower=5, upper=95)], None),
    ("ClipIntensityPercentilesd-channelwise",
     [_t("ClipIntensityPercentilesd", lower=5, upper=95, channel_wise=True)], None),
    ("ClipIntensityPercentilesd-upper", [_t("ClipIntensityPercentilesd", lower=None, upper=90)],
     None),
    ("RandScaleIntensityd", [_t("RandScaleIntensityd", factors=[0.2, 0.2], prob=1.0)], None),
    ("RandShiftIntensityd", [_t("RandShiftIntensityd", offsets=[5, 5], prob=1.0)], None),
    ("RandAdjustContrastd", [_t("RandAdjustContrastd", gamma=[1.7, 1.7], prob=1.0)], None),
    ("RandAdjustContrastd-invert-retain",
     [_t("RandAdjustContrastd", gamma=[0.6, 0.6], prob=1.0, invert_image=True,
         retain_stats=True)], None),
    ("RandAdjustContrastd-retain",
     [_t("RandAdjustContrastd", gamma=[2.5, 2.5], prob=1.0, retain_stats=True)], None),
    ("RandGaussianSmoothd",
     [_t("RandGaussianSmoothd", sigma_x=[1.0, 1.0], sigma_y=[0.6, 0.6], prob=1.0)], None),
    ("RandGaussianSmoothd-sampled",
     [_t("RandGaussianSmoothd", sigma_x=[1.3, 1.3], sigma_y=[2.1, 2.1], approx="sampled",
         prob=1.0)], None),
    # A degenerate coeff_range fixes every coefficient (each is drawn uniform in the range).
    ("RandBiasFieldd", [_t("RandBiasFieldd", coeff_range=[0.05, 0.05], prob=1.0)], None),
    ("RandBiasFieldd-degree2",
     [_t("RandBiasFieldd", degree=2, coeff_range=[-0.2, -0.2], prob=1.0)], None),
    ("RandFlipd-axis0", [_t("RandFlipd", SPATIAL, prob=1.0, spatial_axis=0)], None),
    ("RandFlipd-axis1", [_t("RandFlipd", SPATIAL, prob=1.0, spatial_axis=1)], None),
    ("RandFlipd-all", [_t("RandFlipd", SPATIAL, prob=1.0, spatial_axis=None)], None),
    ("RandRotate90d", [_t("RandRotate90d", SPATIAL, prob=1.0, max_k=1)], None),
    ("RandRotate90d-axes01", [_t("RandRotate90d", SPATIAL, prob=1.0, max_k=1,
                                 spatial_axes=[0, 1])], None),
    ("SpatialPadd", [_t("SpatialPadd", SPATIAL, spatial_size=[26, 24])], None),
    ("SpatialPadd-end", [_t("SpatialPadd", SPATIAL, spatial_size=[26, 24], method="end")], None),
    ("SpatialPadd-keep", [_t("SpatialPadd", SPATIAL, spatial_size=[-1, 25])], None),
    ("CenterSpatialCropd", [_t("CenterSpatialCropd", SPATIAL, roi_size=[20, 15])], None),
    ("CenterSpatialCropd-larger", [_t("CenterSpatialCropd", SPATIAL, roi_size=[30, 9])], None),
    ("ResizeWithPadOrCropd", [_t("ResizeWithPadOrCropd", SPATIAL, spatial_size=[25, 17])], None),
    # Resampling: torch's interpolate / grid_sample reach their sample points through float32
    # (normalized) coordinates, dspipe computes them in double: these cases carry a tolerance
    # (TOLERANCE below), the label (nearest) must match exactly.
    ("Resized-area", [_t("Resized", SPATIAL, spatial_size=[15, 31], mode=["area", "nearest"])],
     None),
    ("Resized-bilinear", [_t("Resized", SPATIAL, spatial_size=[31, 13],
                             mode=["bilinear", "nearest"])], None),
    ("Resized-bilinear-corners", [_t("Resized", SPATIAL, spatial_size=[17, 29],
                                     mode=["bilinear", "nearest-exact"],
                                     align_corners=[True, None])], None),
    ("Resized-bicubic", [_t("Resized", SPATIAL, spatial_size=[40, 11],
                            mode=["bicubic", "nearest"])], None),
    ("Resized-longest", [_t("Resized", SPATIAL, spatial_size=16, size_mode="longest",
                            mode=["area", "nearest"])], None),
    ("RandZoomd-in", [_t("RandZoomd", SPATIAL, prob=1.0, min_zoom=1.3, max_zoom=1.3,
                         mode=["bilinear", "nearest"])], None),
    ("RandZoomd-out-area", [_t("RandZoomd", SPATIAL, prob=1.0, min_zoom=0.7, max_zoom=0.7,
                               mode=["area", "nearest"])], None),
    ("RandZoomd-axes", [_t("RandZoomd", SPATIAL, prob=1.0, min_zoom=[1.2, 0.8],
                           max_zoom=[1.2, 0.8], mode=["bilinear", "nearest"],
                           padding_mode="constant", keep_size=True)], None),
    ("RandZoomd-nokeep", [_t("RandZoomd", SPATIAL, prob=1.0, min_zoom=0.6, max_zoom=0.6,
                             mode=["bicubic", "nearest"], keep_size=False)], None),
    ("RandRotated", [_t("RandRotated", SPATIAL, range_x=[0.3, 0.3], prob=1.0,
                        mode=["bilinear", "nearest"])], None),
    ("RandRotated-zeros-nokeep", [_t("RandRotated", SPATIAL, range_x=[-0.7, -0.7], prob=1.0,
                                     keep_size=False, mode=["bilinear", "nearest"],
                                     padding_mode="zeros")], None),
    ("RandRotated-reflection-corners", [_t("RandRotated", SPATIAL, range_x=[1.1, 1.1],
                                           prob=1.0, mode=["bilinear", "nearest"],
                                           padding_mode="reflection", align_corners=True)],
     None),
    ("RandAffined", [_t("RandAffined", SPATIAL, prob=1.0, rotate_range=[[0.2, 0.2]],
                        shear_range=[[0.1, 0.1], [0.05, 0.05]],
                        translate_range=[[2, 2], [-1.5, -1.5]],
                        scale_range=[[0.1, 0.1], [-0.2, -0.2]],
                        mode=["bilinear", "nearest"])], None),
    ("RandAffined-size-zeros", [_t("RandAffined", SPATIAL, prob=1.0, spatial_size=[25, 18],
                                   rotate_range=[[-0.4, -0.4]], scale_range=[[0.3, 0.3]],
                                   mode=["bilinear", "nearest"], padding_mode="zeros")], None),
    # Not drawn, another size: the identity grid about the centres (whole-pixel offsets here: a
    # half-pixel one puts the label's nearest sample on float32 ties).
    ("RandAffined-notdrawn-size", [_t("RandAffined", SPATIAL, prob=0.0, spatial_size=[21, 22],
                                      mode=["bilinear", "nearest"])], None),
    # Rand2DElasticd with magnitude_range=[0, 0]: the deformation offsets (normal draws) are
    # zero, so the case is the affine applied to the control grid, torch's bicubic upsampling
    # and the centre crop, and Resample (test_monai_golden.py checks nonzero offsets).
    ("Rand2DElasticd", [_t("Rand2DElasticd", SPATIAL, spacing=[8, 8], magnitude_range=[0, 0],
                           prob=1.0, rotate_range=[[0.2, 0.2]],
                           shear_range=[[0.1, 0.1], [0.05, 0.05]],
                           translate_range=[[2, 2], [-1.5, -1.5]],
                           scale_range=[[0.1, 0.1], [-0.2, -0.2]],
                           mode=["bilinear", "nearest"])], None),
    ("Rand2DElasticd-size-zeros", [_t("Rand2DElasticd", SPATIAL, spacing=5,
                                      magnitude_range=[0, 0], spatial_size=[25, 18], prob=1.0,
                                      rotate_range=[[-0.4, -0.4]], scale_range=[[0.3, 0.3]],
                                      mode=["bilinear", "nearest"], padding_mode="zeros")],
     None),
    ("Rand2DElasticd-fractional-border", [_t("Rand2DElasticd", SPATIAL, spacing=[3.5, 6.25],
                                             magnitude_range=[0, 0], prob=1.0,
                                             rotate_range=[[0.7, 0.7]],
                                             mode=["bilinear", "nearest"],
                                             padding_mode="border")], None),
    # Not drawn: the same size is the input itself, another size the identity grid.
    ("Rand2DElasticd-notdrawn", [_t("Rand2DElasticd", SPATIAL, spacing=10,
                                    magnitude_range=[1, 2], prob=0.0,
                                    mode=["bilinear", "nearest"])], None),
    ("Rand2DElasticd-notdrawn-size", [_t("Rand2DElasticd", SPATIAL, spacing=10,
                                         magnitude_range=[1, 2], prob=0.0,
                                         spatial_size=[21, 22],
                                         mode=["bilinear", "nearest"])], None),
    ("CropForegroundd-image", [_t("CropForegroundd", SPATIAL, source_key="image", margin=1)],
     None),
    # The label one-hot (float32, channels last in the .npz), the image thresholded / rounded.
    ("AsDiscreted-onehot", [_t("AsDiscreted", ["label"], to_onehot=4)], None),
    ("AsDiscreted-threshold", [_t("AsDiscreted", ["image"], threshold=2000)], None),
    ("AsDiscreted-rounding", [_t("ScaleIntensityd", minv=0.0, maxv=7.0),
                              _t("AsDiscreted", ["image"], rounding="torchrounding")], None),
    ("AsDiscreted-perkey", [_t("RandFlipd", SPATIAL, prob=1.0, spatial_axis=1),
                            _t("AsDiscreted", SPATIAL, to_onehot=[None, 5],
                               threshold=[1000, None])], None),
    ("chain", [
        _t("EnsureTyped", SPATIAL),
        _t("ScaleIntensityRanged", **SIR, clip=True),
        _t("RandFlipd", SPATIAL, prob=1.0, spatial_axis=1),
        _t("RandRotate90d", SPATIAL, prob=1.0, max_k=1),
        _t("ThresholdIntensityd", threshold=0.5, above=False, cval=0.5),
    ], None),
]

# Cases on another label (its input key): RandCropByPosNegLabeld with neg=0 on a label with one
# foreground pixel is deterministic (the crop is centred there, clamped inside the image).
POSNEG = dict(label_key="label", pos=1, neg=0)
LABELED: list[tuple[str, list[dict], tuple[str, ...] | None, str]] = [
    ("RandCropByPosNegLabeld-corner",
     [_t("RandCropByPosNegLabeld", SPATIAL, spatial_size=[8, 6], **POSNEG)], None,
     "input.label-corner"),
    ("RandCropByPosNegLabeld-middle",
     [_t("RandCropByPosNegLabeld", SPATIAL, spatial_size=[7, 9], **POSNEG)], None,
     "input.label-middle"),
    ("RandCropByLabelClassesd-corner",
     [_t("RandCropByLabelClassesd", SPATIAL, label_key="label", spatial_size=[9, 7],
         num_classes=3, ratios=[0, 0, 1])], None, "input.label-corner"),
    ("RandWeightedCropd", [_t("RandWeightedCropd", SPATIAL, w_key="label",
                              spatial_size=[7, 9])], None, "input.label-middle"),
    ("RandWeightedCropd-taller", [_t("RandWeightedCropd", SPATIAL, w_key="label",
                                     spatial_size=[30, 5])], None, "input.label-middle"),
    ("CropForegroundd-label-k", [_t("CropForegroundd", SPATIAL, source_key="label", margin=3,
                                    k_divisible=4)], None, "input.label-middle"),
    ("CropForegroundd-label-pad", [_t("CropForegroundd", SPATIAL, source_key="label",
                                      margin=[3, 2], k_divisible=[1, 5], mode="edge")], None,
     "input.label-corner"),
    ("CropForegroundd-label-smaller", [_t("CropForegroundd", SPATIAL, source_key="label",
                                          margin=4, allow_smaller=True)], None,
     "input.label-corner"),
    ("CropForegroundd-then-pad", [
        _t("CropForegroundd", SPATIAL, source_key="label", margin=2),
        _t("ResizeWithPadOrCropd", SPATIAL, spatial_size=[8, 8]),
        _t("RandFlipd", SPATIAL, prob=1.0, spatial_axis=0),
    ], None, "input.label-middle"),
    ("RandCropByPosNegLabeld-smaller",
     [_t("RandCropByPosNegLabeld", SPATIAL, spatial_size=[30, 5], allow_smaller=True,
         **POSNEG)], None, "input.label-corner"),
]


# Cases compared with a tolerance instead of 1e-5 (prefix of the variant name: atol, rtol):
# - resampling: torch's interpolate / grid_sample reach their sample points through float32
#   (normalized) coordinates, dspipe computes them in double (about 1e-6 of the range);
# - Rand2DElasticd: as resampling, and torch's float32 bicubic upsampling of the control grid
#   rounds in its own order: the sample points differ by a few float32 ulps of the grid
#   (up to ~2e-5 pixel), about 1.5e-5 of the range;
# - RandAdjustContrastd: torch's float32 pow (Sleef's powf, 1 ulp) and dspipe's (float64 pow
#   rounded once) differ by one float32 ulp of x ** gamma for a few pixels; x ** gamma is in
#   [0, 1] and is multiplied by the intensity range (about 4100 for these inputs), so one ulp
#   (6e-8) becomes up to 2.5e-4 in the output (x 1.2 after retain_stats' rescale).
TOLERANCE = {"Resized-bilinear": (0.01, 1e-5), "Resized-bicubic": (0.01, 1e-5),
             "RandZoomd": (0.01, 1e-5), "RandRotated": (0.05, 1e-5),
             "RandAffined": (0.05, 1e-5), "Rand2DElasticd": (0.1, 1e-5),
             "RandAdjustContrastd": (5e-4, 1e-5)}


def make_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    yy, xx = np.mgrid[0:H, 0:W]
    background = (yy + 0.5) / H + (xx + 0.5) / W < 0.63  # ~20% of the pixels, a corner
    out: dict[str, np.ndarray] = {}
    for dtype in DTYPES:
        for c in CHANNELS:
            if dtype == "uint16":
                img = rng.integers(0, 4096, size=(H, W, c)).astype(np.uint16)
            elif dtype == "int16":
                img = rng.integers(-1024, 3001, size=(H, W, c)).astype(np.int16)
            else:
                img = rng.normal(300.0, 400.0, size=(H, W, c)).astype(np.float32)
            img[background] = 0
            if c == 4:
                img[..., 3] = CONST
            out[f"input.{dtype}-c{c}"] = img
    out["input.label"] = rng.integers(0, 4, size=(H, W)).astype(np.uint8)
    for name, (y, x) in (("corner", (H - 2, 1)), ("middle", (11, 9))):
        one = np.zeros((H, W), np.uint8)
        one[y, x] = 2
        out[f"input.label-{name}"] = one
    return out


def run_monai(config: list[dict], image: np.ndarray, label: np.ndarray):
    import monai
    import torch
    from monai.utils import set_determinism

    transforms = []
    for d in config:
        kwargs = {k: v for k, v in d.items() if k != "_target_"}
        transforms.append(getattr(monai.transforms, d["_target_"])(**kwargs))
    set_determinism(0)
    pipeline = monai.transforms.Compose(transforms)
    pipeline.set_random_state(0)
    data = {"image": torch.tensor(image.transpose(2, 0, 1).astype(np.float32)),
            "label": torch.tensor(label[None])}
    out = pipeline(data)
    if isinstance(out, list):  # RandCropByPosNegLabeld returns its num_samples (1) samples
        if len(out) != 1:
            raise SystemExit(f"{config}: MONAI gave {len(out)} samples, the cases have 1")
        out = out[0]
    img = out["image"]
    lab = out["label"]
    img = img.as_tensor() if hasattr(img, "as_tensor") else img
    lab = lab.as_tensor() if hasattr(lab, "as_tensor") else lab
    if img.dtype != torch.float32:
        raise SystemExit(f"{config}: MONAI gave a {img.dtype} image, expected float32")
    lab_np = lab.numpy()
    image_out = np.ascontiguousarray(img.numpy().transpose(1, 2, 0), dtype=np.float32)
    if any(d.get("to_onehot") not in (None, [None, None]) for d in config):  # AsDiscreted
        if lab.dtype != torch.float32 or set(np.unique(lab_np)) - {0.0, 1.0}:
            raise SystemExit(f"{config}: the one-hot label is not float32 0 / 1: {lab.dtype}")
        return image_out, np.ascontiguousarray(lab_np.transpose(1, 2, 0), dtype=np.float32)
    if lab_np.shape[0] != 1 or (lab_np.astype(np.uint8) != lab_np).any():
        raise SystemExit(f"{config}: the label is no longer 1 x H x W uint8 ids: {lab_np.dtype}")
    return image_out, np.ascontiguousarray(lab_np[0], dtype=np.uint8)


# Rand2DElasticd with nonzero offsets: its offsets are normal draws that no argument fixes, so
# the file holds MONAI's grid as a function of them (Resample's grid, 2 x H' x W', relative to
# the input's centre). The grid is affine in the offsets (the affine, the bicubic upsampling
# and the crop are linear): "elastic.<name>.grid0" is the grid for zero offsets (float64) and
# "elastic.<name>.basis" (K x 2 x H' x W', float64) its change per unit of each of the K
# scaled offsets magnitude * random_offset (RandDeformGrid's (2, rows, columns) order, row-major).
# test_monai_golden.py takes dspipe's drawn offsets and magnitude, builds MONAI's grid from
# these and resamples the input on it (grid_sample in numpy).
ELASTIC = [
    ("default", _t("Rand2DElasticd", SPATIAL, spacing=[6, 5], magnitude_range=[1, 3], prob=1.0,
                   rotate_range=[[0.25, 0.25]], scale_range=[[0.1, 0.1]],
                   mode=["bilinear", "nearest"])),
    ("size-zeros", _t("Rand2DElasticd", SPATIAL, spacing=4, magnitude_range=[0.5, 1.5],
                      prob=1.0, spatial_size=[26, 17], translate_range=[[1, 1], [-2, -2]],
                      mode=["bilinear", "nearest"], padding_mode="zeros")),
]
UNIT = 1000.0  # the basis is measured with offsets of UNIT (float32 rounding / UNIT)


def elastic_grid(config: dict, image: np.ndarray, offset, magnitude: float) -> np.ndarray:
    """MONAI's Resample grid (rows, columns; float64) for given RandDeformGrid draws."""
    import monai
    import torch

    kwargs = {k: v for k, v in config.items() if k != "_target_"}
    t = monai.transforms.Rand2DElasticd(**kwargs)
    t.set_random_state(0)
    el = t.rand_2d_elastic
    grids = []
    resample = el.resampler

    class Capture:
        def __call__(self, img, grid, **kw):
            grids.append(grid.detach().double().numpy()[:2].copy())
            return resample(img, grid, **kw)

    el.resampler = Capture()

    def fixed(grid_size):  # Rand2DElasticd calls it with the image size first: no use
        shape = [len(grid_size)] + list(grid_size)
        if offset is None or np.size(offset) != np.prod(shape):
            el.deform_grid.random_offset = np.zeros(shape, np.float32)
        else:
            el.deform_grid.random_offset = np.asarray(offset, np.float32).reshape(shape)
        el.deform_grid.rand_mag = magnitude

    el.deform_grid.randomize = fixed
    data = {"image": torch.tensor(image.transpose(2, 0, 1).astype(np.float32)),
            "label": torch.zeros((1,) + image.shape[:2], dtype=torch.uint8)}
    t(data)
    return grids[0]


def make_elastic(arrays: dict[str, np.ndarray]) -> list[dict]:
    from monai.transforms.utils import create_control_grid

    image = arrays["input.float32-c1"]
    out = []
    for name, config in ELASTIC:
        size = [s if s > 0 else d for s, d in
                zip(config.get("spatial_size") or image.shape[:2], image.shape[:2])]
        spacing = config["spacing"] if isinstance(config["spacing"], list) else \
            [config["spacing"]] * 2
        shape = create_control_grid(size, spacing, backend="numpy").shape[1:]
        k = 2 * int(np.prod(shape))
        grid0 = elastic_grid(config, image, None, 1.0)
        basis = np.empty((k,) + grid0.shape, np.float64)
        for i in range(k):
            unit = np.zeros(k, np.float32)
            unit[i] = UNIT
            basis[i] = (elastic_grid(config, image, unit, 1.0) - grid0) / UNIT
        # The affine model holds: random offsets and magnitude, built vs MONAI's own grid.
        rng = np.random.default_rng(7)
        off = rng.normal(size=k).astype(np.float32)
        want = elastic_grid(config, image, off, 2.0)
        got = grid0 + np.tensordot(np.float32(2.0) * off, basis, axes=1)
        if np.abs(got - want).max() > 1e-4:
            raise SystemExit(f"elastic {name}: the grid is not affine in the offsets "
                             f"({np.abs(got - want).max()})")
        arrays[f"elastic.{name}.grid0"] = grid0
        arrays[f"elastic.{name}.basis"] = basis
        out.append({"name": name, "config": config, "control_grid": list(map(int, shape))})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_golden.py OUT.npz", file=sys.stderr)
        return 2
    import warnings

    import monai
    import torch

    warnings.filterwarnings("ignore")  # MONAI's "Divide by zero (a_min == a_max)" is expected
    arrays = make_inputs()
    label = arrays["input.label"]
    cases = []
    variants = [(v, c, d, "input.label") for v, c, d in VARIANTS] + LABELED
    for variant, config, dtypes, label_key in variants:
        text = json.dumps(config)
        for dtype in dtypes or DTYPES:
            for c in CHANNELS:
                name = f"{variant}-{dtype}-c{c}"
                key = f"input.{dtype}-c{c}"
                image, lab = run_monai(json.loads(text), arrays[key], arrays[label_key])
                arrays[f"{name}.config"] = np.array(text)
                arrays[f"{name}.image"] = image
                arrays[f"{name}.label"] = lab
                case = {"name": name, "input": key, "config": config, "label": label_key}
                for prefix, (atol, rtol) in TOLERANCE.items():
                    if variant.startswith(prefix):
                        case["atol"], case["rtol"] = atol, rtol
                cases.append(case)
    index = {"monai": monai.__version__, "torch": torch.__version__, "numpy": np.__version__,
             "shape": [H, W], "cases": cases, "elastic": make_elastic(arrays)}
    arrays["index"] = np.array(json.dumps(index))
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:  # a file object: savez would add ".npz" to another suffix
        np.savez_compressed(f, **arrays)
    print(f"{out}: {len(cases)} cases, {out.stat().st_size} bytes (MONAI {monai.__version__}, "
          f"torch {torch.__version__}, numpy {np.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
