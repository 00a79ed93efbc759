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
