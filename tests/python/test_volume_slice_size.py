# SPDX-License-Identifier: Apache-2.0
"""Issue 36: a fixed slice size for volume builds (dspipe.build(slice_size=...), dsconvert build
--slice-size). Every record is its canonical slice (nibabel's, as test_volumes.py checks them)
padded or cropped as dspipe's ResizeWithPadOrCropd does it (the MONAI transform the loader
runs, compared with MONAI 1.6.1's own outputs in test_monai_golden.py), after spacing; the label
alike; and the volumes table's "sized" affine puts each record pixel where the canonical voxel
it came from is."""
from __future__ import annotations

import json

import pytest

import dspipe
import dspipe.transforms as T
from dspipe.transforms import monai as M
from test_volume_slices import _records, _write
from test_volumes import LPS, _affine

nib = pytest.importorskip("nibabel")
np = pytest.importorskip("numpy")


def _pad_or_crop(size, image, label):
    """MONAI's ResizeWithPadOrCropd on one slice, as the loader runs it."""
    config = M.Compose([M.ResizeWithPadOrCropd(keys=["image", "label"], spatial_size=size)])
    out = T.apply(config, image.astype(np.float32), label)
    return np.squeeze(out["image"]), out["mask"]


def _manifest(out):
    m = json.loads((out / "manifest.json").read_text())
    return m.get("manifest", m)


@pytest.mark.parametrize("size", [(10, 3), (3, 10), (6, 5), (7, 4), 2])
@pytest.mark.parametrize("store", ["raw", "encoded"])
def test_slices_are_padded_or_cropped_as_resizewithpadorcropd(tmp_path, size, store):
    rng = np.random.default_rng(7)
    image = rng.integers(-1024, 3000, (6, 5, 3)).astype(np.int16)  # LPS: canonical 6 x 5 rows
    label = rng.integers(0, 3, (6, 5, 3)).astype(np.uint8)
    affine = _affine(LPS, (0.8, 0.7, 2.5), origin=(10.0, -20.0, 5.0))
    canon = _write(tmp_path / "Task", {"a": (image, label, affine)})
    out = tmp_path / "out"
    r = dspipe.build(str(tmp_path / "Task"), str(out), slice_size=size, store=store,
                     progress=False)
    assert r["records"] == 3
    h, w = (size, size) if isinstance(size, int) else size
    img, lab = canon["a"]
    t = dspipe.slice_table(str(out))
    for record, (got_image, got_mask) in enumerate(_records(out)):
        k = int(t["slice"][record])
        want_image, want_mask = _pad_or_crop([h, w], img[:, :, k], lab[:, :, k])
        assert got_image.shape == (1, h, w), got_image.shape
        np.testing.assert_array_equal(got_image[0], want_image)
        np.testing.assert_array_equal(got_mask, want_mask)
        # The foreground table counts the stored (padded or cropped) label.
        counts = np.bincount(want_mask.ravel(), minlength=t["foreground"].shape[1])
        np.testing.assert_array_equal(t["foreground"][record], counts)
    v = _manifest(out)["volumes"]
    assert v["slice_size"] == [h, w]
    e = v["list"][0]
    sized = e["sized"]
    assert sized["slice_shape"] == [h, w]
    # Record pixel (i, j) of slice k is canonical voxel (i + offset[0], j + offset[1], k): the
    # sized affine maps the one where the canonical affine maps the other.
    canonical, moved = np.array(e["affine"]), np.array(sized["affine"])
    np.testing.assert_allclose(canonical, nib.as_closest_canonical(
        nib.load(str(tmp_path / "Task" / "imagesTr" / "a.nii.gz"))).affine, atol=1e-5)
    off = sized["offset"]
    for i, j, k in [(0, 0, 0), (h - 1, w - 1, 2), (1, 0, 1)]:
        np.testing.assert_allclose(moved @ [i, j, k, 1],
                                   canonical @ [i + off[0], j + off[1], k, 1], atol=1e-9)
    # A side cropped starts at n // 2 - want // 2; a side padded at -((want - n) // 2).
    for n, want, o in zip((6, 5), (h, w), off):
        assert o == (n // 2 - want // 2 if n >= want else -((want - n) // 2))


def test_slice_size_follows_spacing_and_is_refused_where_it_has_no_meaning(tmp_path):
    rng = np.random.default_rng(3)
    image = rng.integers(0, 2000, (8, 7, 2)).astype(np.int16)
    label = rng.integers(0, 2, (8, 7, 2)).astype(np.uint8)
    _write(tmp_path / "Task", {"a": (image, label, _affine(LPS, (0.8, 0.8, 2.0)))})
    src = str(tmp_path / "Task")
    dspipe.build(src, str(tmp_path / "resampled"), spacing=0.5, progress=False)
    dspipe.build(src, str(tmp_path / "both"), spacing=0.5, slice_size=(9, 16), progress=False)
    for (ri, rm), (bi, bm) in zip(_records(tmp_path / "resampled"), _records(tmp_path / "both")):
        want_image, want_mask = _pad_or_crop([9, 16], ri[0], rm.astype(np.uint8))  # 12x11
        np.testing.assert_array_equal(bi[0], want_image)
        np.testing.assert_array_equal(bm, want_mask)
    v = _manifest(tmp_path / "both")["volumes"]["list"][0]
    assert v["resampled"]["slice_shape"] == [12, 11]
    assert v["sized"]["offset"] == [2, -2]
    # The sized grid is the resampled one moved by the offset.
    np.testing.assert_allclose(np.array(v["sized"]["affine"]) @ [0, 0, 0, 1],
                               np.array(v["resampled"]["affine"]) @ [2, -2, 0, 1], atol=1e-9)
    assert "padded or cropped to 9x16 (HxW)" in dspipe.describe(str(tmp_path / "both"))

    with pytest.raises(ValueError, match=r"slice_size \(height, width\) must be both 0"):
        dspipe.build(src, str(tmp_path / "bad"), slice_size=(9, 0), progress=False)
    with pytest.raises(ValueError, match=r"slice_size=9.5\): 'float' object cannot be"):
        dspipe.build(src, str(tmp_path / "bad"), slice_size=9.5, progress=False)
    flat = tmp_path / "flat"
    (flat / "images").mkdir(parents=True)
    import cv2  # noqa: PLC0415 (Debian's python3-opencv, as the other tests)

    cv2.imwrite(str(flat / "images" / "a.png"), np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match=r"slice_size applies to volume sources.*drop it; 2D "
                                         r"images are sized by resize$"):
        dspipe.build(str(flat), str(tmp_path / "flatout"), slice_size=4, progress=False)
