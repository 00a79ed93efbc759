# SPDX-License-Identifier: Apache-2.0
"""Issue 36: a folder of NIfTI volumes (nibabel writes them here) builds into one record per
slice of the closest canonical (RAS) array, exactly nibabel's as_closest_canonical, with image
and label aligned in every slice."""
from __future__ import annotations

import json

import pytest

import dspipe

nib = pytest.importorskip("nibabel")  # the CI venv installs it (scripts/test.sh)


def _affine(axes, spacing, origin=(0.0, 0.0, 0.0)):
    """An affine whose voxel axis i runs along world axis axes[i] (0 R, 1 A, 2 S; negative for
    L, P, I, as "-0" cannot be written: give (axis, sign) pairs)."""
    import numpy as np

    a = np.zeros((4, 4))
    for i, (world, sign) in enumerate(axes):
        a[world, i] = sign * spacing[i]
    a[:3, 3] = origin
    a[3, 3] = 1
    return a


LPS = [(0, -1), (1, -1), (2, 1)]
LAS = [(0, -1), (1, 1), (2, 1)]
RAS = [(0, 1), (1, 1), (2, 1)]
PSR = [(1, -1), (2, 1), (0, 1)]  # a permuted (sagittal-like) acquisition


def _task(root, volumes, labels=True):
    """Writes imagesTr/ + labelsTr/ + dataset.json; volumes: name -> (array, affine, slope,
    inter). Returns the folder and, per volume, nibabel's canonical image and label arrays."""
    import numpy as np

    src = root / "Task"
    (src / "imagesTr").mkdir(parents=True)
    (src / "labelsTr").mkdir()
    canon = {}
    for name, (arr, affine, slope, inter) in sorted(volumes.items()):
        img = nib.Nifti1Image(arr, affine)
        if slope is not None:
            img.header.set_slope_inter(slope, inter)
        nib.save(img, str(src / "imagesTr" / f"{name}.nii.gz"))
        rng = np.random.default_rng(len(name))
        lab = rng.integers(0, 3, size=arr.shape[:3]).astype(np.uint8)
        nib.save(nib.Nifti1Image(lab, affine), str(src / "labelsTr" / f"{name}.nii.gz"))
        im2 = nib.load(str(src / "imagesTr" / f"{name}.nii.gz"))
        lb2 = nib.load(str(src / "labelsTr" / f"{name}.nii.gz"))
        canon[name] = (np.asarray(nib.as_closest_canonical(im2).get_fdata(dtype=np.float64)),
                       np.asarray(nib.as_closest_canonical(lb2).dataobj),
                       nib.as_closest_canonical(im2).affine)
    (src / "dataset.json").write_text(json.dumps(
        {"labels": {"0": "background", "1": "organ", "2": "lesion"}}))
    return src, canon


def _records(out):
    import numpy as np

    loader = dspipe.Loader(str(out), batch_size=1, shuffle=False, device="cpu", normalize=False)
    got = {}
    for batch in loader:
        got[int(batch["index"][0])] = (np.asarray(batch["image"])[0],
                                       np.asarray(batch["mask"])[0])
    return [got[i] for i in range(len(got))]


def _manifest(out):
    m = json.loads((out / "manifest.json").read_text())
    return m.get("manifest", m)


@pytest.mark.parametrize("axis", ["axial", "coronal", "sagittal"])
def test_int16_volumes_in_any_orientation_slice_as_nibabels_canonical_array(tmp_path, axis):
    import numpy as np

    rng = np.random.default_rng(0)
    vols = {
        "lps": (rng.integers(-1024, 3000, size=(12, 10, 5)).astype(np.int16),
                _affine(LPS, (0.7, 0.7, 2.5), (10, -20, 30)), None, None),
        "las": (rng.integers(-1024, 3000, size=(12, 10, 5)).astype(np.int16),
                _affine(LAS, (0.7, 0.7, 2.5)), None, None),
        "psr": (rng.integers(-1024, 3000, size=(10, 5, 12)).astype(np.int16),
                _affine(PSR, (0.7, 2.5, 0.7)), None, None),
    }
    src, canon = _task(tmp_path, vols)
    out = tmp_path / f"ds-{axis}"
    r = dspipe.build(src, out, slice_axis=axis, progress=False)
    ax = {"sagittal": 0, "coronal": 1, "axial": 2}[axis]
    total = sum(c[0].shape[ax] for c in canon.values())
    assert r["records"] == total, r
    info = dspipe.info(out)
    assert info["sample_type"] == "int16" and info["channels"] == 1, info
    recs = _records(out)
    table = _manifest(out)["volumes"]
    assert table["slice_axis"] == axis and table["orientation"] == "RAS"
    names = sorted(vols)
    assert [v["image"].rsplit("/", 1)[1] for v in table["list"]] == [f"{n}.nii.gz" for n in names]
    for entry, name in zip(table["list"], names):
        image, label, affine = canon[name]
        first, count = entry["records"]
        assert count == image.shape[ax] and entry["shape"] == list(image.shape)
        assert np.allclose(entry["affine"], affine, atol=1e-5), (entry["affine"], affine)
        for k in range(count):
            want = np.take(image, k, axis=ax)
            want_label = np.take(label, k, axis=ax)
            got, got_mask = recs[first + k]
            assert np.array_equal(got[0], want.astype(np.float32)), (name, k)
            assert np.array_equal(got_mask, want_label.astype(np.int64)), (name, k)


def test_scaled_float_and_multimodal_volumes(tmp_path):
    import numpy as np

    rng = np.random.default_rng(1)
    # A CT stored as uint16 with RescaleIntercept -1024: int16 Hounsfield units, exact.
    ct = {"ct": (rng.integers(0, 4096, size=(8, 9, 4)).astype(np.uint16),
                 _affine(LPS, (0.8, 0.8, 3.0)), 1.0, -1024.0)}
    src, canon = _task(tmp_path / "a", ct)
    out = tmp_path / "ct"
    dspipe.build(src, out, progress=False)
    assert dspipe.info(out)["sample_type"] == "int16"
    recs = _records(out)
    for k in range(4):
        assert np.array_equal(recs[k][0][0], canon["ct"][0][:, :, k].astype(np.float32)), k
    # float32 with a fractional slope, and a 4D multi-modal float volume (channels).
    mr = {"mr": (rng.random((8, 9, 4, 3), dtype=np.float32) * 500,
                 _affine(LAS, (1.0, 1.2, 4.0)), None, None)}
    src, canon = _task(tmp_path / "b", mr)
    out = tmp_path / "mr"
    dspipe.build(src, out, store="raw", progress=False)
    info = dspipe.info(out)
    assert info["sample_type"] == "float32" and info["channels"] == 3, info
    recs = _records(out)
    for k in range(4):
        want = np.moveaxis(canon["mr"][0][:, :, k, :], -1, 0)  # channels first, as the loader
        assert np.allclose(recs[k][0], want, rtol=1e-6, atol=0), k


def test_a_corrupt_volume_is_named_and_skipped_when_asked(tmp_path):
    import numpy as np

    rng = np.random.default_rng(2)
    vols = {n: (rng.integers(0, 100, size=(6, 6, 3)).astype(np.int16), _affine(RAS, (1, 1, 1)),
                None, None) for n in ("a", "b")}
    src, _ = _task(tmp_path, vols)
    bad = src / "imagesTr" / "b.nii.gz"
    bad.write_bytes(bad.read_bytes()[:-40])  # a truncated gzip stream
    with pytest.raises(dspipe.CorruptRecord) as e:
        dspipe.build(src, tmp_path / "out", progress=False)
    assert str(bad) in str(e.value)
    r = dspipe.build(src, tmp_path / "out2", on_error="skip", progress=False)
    assert r["records"] == 3 and r["skipped"] == 3, r
