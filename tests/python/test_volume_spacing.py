# SPDX-License-Identifier: Apache-2.0
"""Issue 36: in-plane resampling of volume slices (dspipe.build(spacing=...), dsconvert build
--spacing) against the real MONAI's Spacingd: golden outputs made by
tests/python/monai_golden/make_spacing_golden.py with MONAI 1.6.1 (CI has no MONAI: it needs
PyPI torch; bench/monai/compare_live.sh runs this file against the live MONAI). nibabel writes each golden input as a one-slice volume whose affine puts the
slice's rows and columns at the case's spacing; the build resamples it to the case's target."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import dspipe

nib = pytest.importorskip("nibabel")  # the CI venv installs it (scripts/test.sh)
np = pytest.importorskip("numpy")

# bench/monai/compare_live.sh points this at outputs of the live MONAI.
GOLDEN = Path(os.environ.get("DSPIPE_MONAI_SPACING_GOLDEN",
                             Path(__file__).parent / "monai_golden" / "spacing.npz"))


def _golden():
    z = np.load(GOLDEN)
    return z, json.loads(str(z["index"]))


def _records(out):
    loader = dspipe.Loader(str(out), batch_size=1, shuffle=False, device="cpu", normalize=False)
    got = {}
    for batch in loader:
        got[int(batch["index"][0])] = (np.asarray(batch["image"])[0],
                                       np.asarray(batch["mask"])[0])
    return [got[i] for i in range(len(got))]


def _task(root, image, label, spacing):
    """imagesTr/s.nii.gz + labelsTr/s.nii.gz: one axial slice (RAS, rows along x, columns
    along y) at `spacing` (rows, cols) mm."""
    src = root / "Task"
    (src / "imagesTr").mkdir(parents=True)
    (src / "labelsTr").mkdir()
    affine = np.diag([spacing[0], spacing[1], 2.5, 1.0])
    nib.save(nib.Nifti1Image(image[:, :, None], affine), str(src / "imagesTr" / "s.nii.gz"))
    nib.save(nib.Nifti1Image(label[:, :, None], affine), str(src / "labelsTr" / "s.nii.gz"))
    return src


@pytest.mark.parametrize("case", [c["name"] for c in _golden()[1]["cases"]])
@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_spacing_matches_monai_spacingd(tmp_path, case, store):
    z, index = _golden()
    c = next(c for c in index["cases"] if c["name"] == case)
    src = _task(tmp_path, z["input.image"], z["input.label"], c["from"])
    out = tmp_path / "out"
    r = dspipe.build(str(src), str(out), spacing=tuple(c["to"]), store=store, progress=False)
    assert r["records"] == 1
    (image, mask), = _records(out)
    want_image, want_label = z[f"{case}.image"], z[f"{case}.label"]
    assert image.dtype == np.float32
    assert image.shape == (1,) + want_image.shape, (image.shape, want_image.shape)
    # MONAI reaches its sample points through float32 normalized coordinates (and the header
    # holds the spacing as float32): within 0.0014 here, on values -1024..3000.
    np.testing.assert_allclose(image[0], want_image, rtol=0, atol=0.01)
    np.testing.assert_array_equal(mask, want_label)
    m = json.loads((out / "manifest.json").read_text())
    m = m.get("manifest", m)
    assert m["sample_type"] == "float32"
    v = m["volumes"]
    assert v["resampled_spacing"] == c["to"]
    e = v["list"][0]
    assert e["resampled"]["slice_shape"] == list(want_image.shape)
    assert e["resampled"]["slice_spacing"] == c["to"]
    # The resampled grid's affine: the volume's with the in-plane columns at the new spacing.
    a = np.array(e["resampled"]["affine"])
    np.testing.assert_allclose(np.diag(a)[:2], c["to"], rtol=1e-12)
    np.testing.assert_allclose(a[:3, 3], np.array(e["affine"])[:3, 3])


def test_spacing_is_one_number_or_a_pair_and_refused_for_2d_images(tmp_path):
    z, _ = _golden()
    src = _task(tmp_path, z["input.image"], z["input.label"], (1.0, 1.0))
    dspipe.build(str(src), str(tmp_path / "one"), spacing=0.5, progress=False)
    m = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert m.get("manifest", m)["volumes"]["resampled_spacing"] == [0.5, 0.5]
    with pytest.raises(ValueError, match=r"spacing \(rows, columns\) must be both 0"):
        dspipe.build(str(src), str(tmp_path / "bad"), spacing=(0.5, 0), progress=False)
    flat = tmp_path / "flat"
    (flat / "images").mkdir(parents=True)
    import cv2  # noqa: PLC0415 (Debian's python3-opencv, as the other tests)

    cv2.imwrite(str(flat / "images" / "a.png"), np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match="spacing applies to volume sources"):
        dspipe.build(str(flat), str(tmp_path / "flatout"), spacing=1.0, progress=False)
