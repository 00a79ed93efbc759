# SPDX-License-Identifier: Apache-2.0
"""dspipe's native MONAI transforms against the real MONAI (docs/MONAI.md): every case of
tests/python/monai_golden/golden.npz, made by monai_golden/make_golden.py with MONAI 1.6.1 (its
docstring has the cases, the inputs and the file's layout), through dspipe.transforms.apply.

DSPIPE_MONAI_GOLDEN names another .npz of that layout: bench/monai/compare_live.sh makes one
with the MONAI of its venv and runs this file against it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import dspipe
import dspipe.transforms as T

GOLDEN = Path(os.environ.get("DSPIPE_MONAI_GOLDEN")
              or Path(__file__).parent / "monai_golden" / "golden.npz")


def _load():
    with np.load(GOLDEN) as z:  # strings are unicode arrays: no pickle
        return {k: z[k] for k in z.files}


_GOLDEN = _load()
_INDEX = json.loads(str(_GOLDEN["index"]))
_CASES = {c["name"]: c for c in _INDEX["cases"]}


def test_the_golden_file_is_whole():
    assert _CASES, f"{GOLDEN}: no cases"
    for name, case in _CASES.items():
        assert json.loads(str(_GOLDEN[f"{name}.config"])) == case["config"], name
        assert case["input"] in _GOLDEN and f"{name}.image" in _GOLDEN, name
        assert _GOLDEN[f"{name}.image"].dtype == np.float32, name


@pytest.mark.parametrize("name", sorted(_CASES))
def test_matches_monai(name):
    case = _CASES[name]
    config = json.loads(str(_GOLDEN[f"{name}.config"]))
    image = _GOLDEN[case["input"]]
    label = _GOLDEN[case.get("label", "input.label")]
    want_image = _GOLDEN[f"{name}.image"]
    want_label = _GOLDEN[f"{name}.label"]
    assert image.ndim == 3 and label.ndim == 2

    out = T.apply(config, image.copy(), label.copy(), seed=0)

    got_image = np.asarray(out["image"])
    got_mask = np.asarray(out["mask"])
    assert got_image.dtype == np.float32, f"{name}: image dtype {got_image.dtype}"
    assert got_image.shape == want_image.shape, \
        f"{name}: image shape {got_image.shape}, MONAI {want_image.shape}"
    # Cases that cannot match to 1e-5 carry their tolerance (make_golden.py TOLERANCE says why).
    np.testing.assert_allclose(got_image, want_image, rtol=case.get("rtol", 1e-5),
                               atol=case.get("atol", 1e-5),
                               err_msg=f"{name}: image differs from MONAI {_INDEX['monai']}")
    assert got_mask.shape == want_label.shape, \
        f"{name}: mask shape {got_mask.shape}, MONAI {want_label.shape}"
    if want_label.ndim == 3:  # one-hot (AsDiscreted): float32 channels last
        assert got_mask.dtype == np.float32, f"{name}: one-hot mask dtype {got_mask.dtype}"
    np.testing.assert_array_equal(got_mask.astype(np.int64), want_label.astype(np.int64),
                                  err_msg=f"{name}: mask differs from MONAI {_INDEX['monai']}")
    # The inputs are not written through.
    assert np.array_equal(image, _GOLDEN[case["input"]])


def test_an_unsupported_transform_is_refused_by_name():
    image = _GOLDEN["input.uint16-c1"]
    label = _GOLDEN["input.label"]
    config = [{"_target_": "ScaleIntensityRanged", "keys": ["image"], "a_min": 0, "a_max": 4095},
              {"_target_": "Spacingd", "keys": ["image", "label"], "pixdim": [1.5, 1.5],
               "mode": ["bilinear", "nearest"]}]
    with pytest.raises(ValueError, match=r"Spacingd") as err:
        T.apply(config, image, label, seed=0)
    assert "supported" in str(err.value)
    assert dspipe.transforms is T


def _torch_interp_f32(x, xp, fp):
    """MONAI's RandHistogramShift.interp for a torch tensor (the path its dictionary transform
    takes), in numpy float32: slope and intercept per segment, the segment searchsorted - 1
    clipped, the values below / above the end points held at fp's ends."""
    m = (fp[1:] - fp[:-1]) / (xp[1:] - xp[:-1])
    b = fp[:-1] - m * xp[:-1]
    i = np.clip(np.searchsorted(xp, x.ravel(), side="left") - 1, 0, len(m) - 1)
    f = (m[i] * x.ravel() + b[i]).reshape(x.shape)
    f[x < xp[0]] = fp[0]
    f[x > xp[-1]] = fp[-1]
    return f


@pytest.mark.parametrize("key", sorted(k for k in _GOLDEN if k.startswith("input.") and
                                       k[len("input."):].split("-")[0] in
                                       ("uint16", "int16", "float32")))
@pytest.mark.parametrize("index", [0, 1, 2])
def test_histogram_shift_is_monais_mapping_of_its_control_points(key, index):
    """RandHistogramShiftd's control points cannot be fixed by its arguments, so this reads
    them from dspipe's draws and applies MONAI's mapping to them here (its torch path in
    float32); np.interp in float64 of the same points agrees to float32 rounding."""
    from dspipe import _dspipe

    image = _GOLDEN[key]
    config = [{"_target_": "RandHistogramShiftd", "keys": ["image"], "num_control_points": [4, 12],
               "prob": 1.0}]
    draws = json.loads(_dspipe.transforms_draws(T.spec_json(config), image.shape[0],
                                                image.shape[1], None, 5, 0, index))
    assert [d["name"] for d in draws] == ["RandHistogramShiftd"]
    params = draws[0]["params"]
    ref = np.asarray(params["reference_control_points"], np.float64)
    moved = np.asarray(params["floating_control_points"], np.float64)
    assert 4 <= len(ref) <= 12 and len(moved) == len(ref)
    np.testing.assert_array_equal(ref, np.linspace(0, 1, len(ref)))
    assert moved[0] == 0 and moved[-1] == 1 and np.all(np.diff(moved) >= 0)

    got = np.asarray(T.apply(config, image.copy(), None, seed=5, index=index)["image"])
    x = image.astype(np.float32).transpose(2, 0, 1)
    lo, hi = x.min(), x.max()
    xp = ref.astype(np.float32) * (hi - lo) + lo
    fp = moved.astype(np.float32) * (hi - lo) + lo
    want = _torch_interp_f32(x, xp, fp).transpose(1, 2, 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * float(hi - lo))
    near = np.interp(x.astype(np.float64), xp.astype(np.float64), fp.astype(np.float64))
    np.testing.assert_allclose(got, near.transpose(1, 2, 0), rtol=0, atol=1e-5 * float(hi - lo))
    assert not np.array_equal(got, image.astype(np.float32))  # the points did move


def _grid_sample(img, rows, cols, nearest, padding):
    """torch's grid_sample (align_corners=False) of an H x W x C image at input indices (rows,
    cols), in float64: bilinear or nearest (half to even), padding zeros / border / reflection."""
    h, w = img.shape[:2]

    def pad(v, n):
        if padding == "zeros":
            return v
        if padding == "reflection":  # about -0.5 and n - 0.5
            v = np.abs(v + 0.5)
            extra, flips = np.fmod(v, n), np.floor(v / n)
            v = np.where(flips % 2 == 0, extra - 0.5, n - extra - 0.5)
        return np.clip(v, 0, n - 1)

    y, x = pad(rows, h), pad(cols, w)
    src = img.astype(np.float64)

    def gather(yy, xx):
        ok = (yy >= 0) & (xx >= 0) & (yy < h) & (xx < w)
        v = np.zeros(rows.shape + img.shape[2:])
        v[ok] = src[yy[ok], xx[ok]]
        return v

    if nearest:
        return gather(np.rint(y).astype(np.int64), np.rint(x).astype(np.int64))
    y0, x0 = np.floor(y), np.floor(x)
    wy, wx = (y - y0)[..., None], (x - x0)[..., None]
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    return ((1 - wy) * (1 - wx) * gather(y0, x0) + (1 - wy) * wx * gather(y0, x0 + 1) +
            wy * (1 - wx) * gather(y0 + 1, x0) + wy * wx * gather(y0 + 1, x0 + 1))


@pytest.mark.parametrize("elastic", [e["name"] for e in _INDEX.get("elastic", [])])
@pytest.mark.parametrize("key", ["input.uint16-c1", "input.int16-c4", "input.float32-c1"])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_elastic_deformation_is_monais_grid_for_dspipes_offsets(elastic, key, index):
    """Rand2DElasticd with nonzero offsets: its normal draws cannot be fixed by its arguments,
    so this reads them (and the magnitude) from dspipe's draws, builds MONAI's grid for them
    from the golden file (make_golden.py ELASTIC: MONAI's grid is affine in magnitude *
    offsets) and resamples the input on it here."""
    from dspipe import _dspipe

    case = next(e for e in _INDEX["elastic"] if e["name"] == elastic)
    config = [case["config"]]
    image, label = _GOLDEN[key], _GOLDEN["input.label"]
    draws = json.loads(_dspipe.transforms_draws(T.spec_json(config), image.shape[0],
                                                image.shape[1], None, 11, 0, index))
    params = draws[0]["params"]
    assert params["applied"] and params["control_grid"] == case["control_grid"]
    lo, hi = case["config"]["magnitude_range"]
    assert lo <= params["magnitude"] <= hi
    offsets = np.asarray(params["offsets"], np.float32)
    basis = _GOLDEN[f"elastic.{elastic}.basis"]
    assert offsets.shape == (basis.shape[0],)
    scaled = np.float32(params["magnitude"]) * offsets  # RandDeformGrid: float32
    grid = _GOLDEN[f"elastic.{elastic}.grid0"] + np.tensordot(scaled.astype(np.float64), basis,
                                                               axes=1)
    h, w = image.shape[:2]
    rows = ((grid[0] * (2.0 / max(2, h)) + 1) * h - 1) / 2
    cols = ((grid[1] * (2.0 / max(2, w)) + 1) * w - 1) / 2
    padding = case["config"].get("padding_mode", "reflection")
    want = _grid_sample(image, rows, cols, False, padding)
    want_label = _grid_sample(label[..., None], rows, cols, True, padding)[..., 0]

    out = T.apply(config, image.copy(), label.copy(), seed=11, index=index)
    got, got_label = np.asarray(out["image"]), np.asarray(out["mask"])
    assert got.shape == want.shape and got_label.shape == want_label.shape
    span = float(image.max()) - float(image.min())
    # The grids agree to ~2e-5 pixel (make_golden.py TOLERANCE: Rand2DElasticd).
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-5 * span)
    # The label exactly, but where a sample point is within 1e-3 of a half pixel (a tie that
    # float32 rounding decides for torch).
    ties = (np.abs(np.abs(rows - np.floor(rows)) - 0.5) < 1e-3) | \
        (np.abs(np.abs(cols - np.floor(cols)) - 0.5) < 1e-3)
    np.testing.assert_array_equal(got_label[~ties], want_label[~ties])
    moved = np.abs(grid - _GOLDEN[f"elastic.{elastic}.grid0"]).max()
    assert moved > 0.3 * lo, moved  # the offsets did move the grid
