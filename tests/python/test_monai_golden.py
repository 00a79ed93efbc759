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
    # Resampling cases carry their own tolerance (make_golden.py TOLERANCE: torch reaches the
    # sample points through float32 normalized coordinates).
    np.testing.assert_allclose(got_image, want_image, rtol=case.get("rtol", 1e-5),
                               atol=case.get("atol", 1e-5),
                               err_msg=f"{name}: image differs from MONAI {_INDEX['monai']}")
    assert got_mask.shape == want_label.shape, \
        f"{name}: mask shape {got_mask.shape}, MONAI {want_label.shape}"
    np.testing.assert_array_equal(got_mask.astype(np.int64), want_label.astype(np.int64),
                                  err_msg=f"{name}: mask differs from MONAI {_INDEX['monai']}")
    # The inputs are not written through.
    assert np.array_equal(image, _GOLDEN[case["input"]])


def test_an_unsupported_transform_is_refused_by_name():
    image = _GOLDEN["input.uint16-c1"]
    label = _GOLDEN["input.label"]
    config = [{"_target_": "ScaleIntensityRanged", "keys": ["image"], "a_min": 0, "a_max": 4095},
              {"_target_": "Rand2DElasticd", "keys": ["image", "label"], "prob": 1.0,
               "spacing": [20, 20], "magnitude_range": [1, 2]}]
    with pytest.raises(ValueError, match=r"Rand2DElasticd") as err:
        T.apply(config, image, label, seed=0)
    assert "supported" in str(err.value)
    assert dspipe.transforms is T
