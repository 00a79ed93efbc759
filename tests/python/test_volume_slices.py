# SPDX-License-Identifier: Apache-2.0
"""Issue 36: the per-slice foreground table (dspipe.slice_table), skip_empty and 2.5D context,
checked against nibabel's canonical arrays (volumes written here with nibabel, as
test_volumes.py does)."""
from __future__ import annotations

import json

import pytest

import dspipe
from test_volumes import LAS, LPS, RAS, _affine

nib = pytest.importorskip("nibabel")


def _write(src, volumes):
    """imagesTr/ + labelsTr/ from name -> (image array, label array or None, affine); returns
    per name nibabel's canonical image and label arrays."""
    import numpy as np

    (src / "imagesTr").mkdir(parents=True)
    canon = {}
    for name, (image, label, affine) in sorted(volumes.items()):
        nib.save(nib.Nifti1Image(image, affine), str(src / "imagesTr" / f"{name}.nii.gz"))
        img = nib.as_closest_canonical(nib.load(str(src / "imagesTr" / f"{name}.nii.gz")))
        lab = None
        if label is not None:
            (src / "labelsTr").mkdir(exist_ok=True)
            nib.save(nib.Nifti1Image(label, affine), str(src / "labelsTr" / f"{name}.nii.gz"))
            lab = np.asarray(nib.as_closest_canonical(
                nib.load(str(src / "labelsTr" / f"{name}.nii.gz"))).dataobj)
        canon[name] = (np.asarray(img.get_fdata(dtype=np.float64)), lab)
    return canon


def _records(out):
    import numpy as np

    loader = dspipe.Loader(str(out), batch_size=1, shuffle=False, device="cpu", normalize=False)
    got = {}
    for batch in loader:
        got[int(batch["index"][0])] = (np.asarray(batch["image"])[0],
                                       np.asarray(batch["mask"])[0])
    return [got[i] for i in range(len(got))]


def _sparse_labels(shape, rng, slices, axis=2):
    """A label volume whose foreground (ids 1, 2) lies only in `slices` along `axis` of the
    file's array."""
    import numpy as np

    lab = np.zeros(shape, np.uint8)
    for k in slices:
        index = [slice(None)] * 3
        index[axis] = k
        lab[tuple(index)] = rng.choice([0, 0, 1, 2], size=lab[tuple(index)].shape)
    return lab


@pytest.mark.parametrize("axis", ["axial", "sagittal"])
def test_skip_empty_with_context_maps_every_record_to_its_canonical_slice(tmp_path, axis):
    import numpy as np

    rng = np.random.default_rng(5)
    shape = (9, 8, 7)
    vols = {
        # LPS flips the file's first two axes: sagittal slices come out reversed.
        "lps": (rng.integers(-1000, 2000, shape).astype(np.int16),
                _sparse_labels(shape, rng, [0, 3], axis=0 if axis == "sagittal" else 2),
                _affine(LPS, (0.7, 0.8, 2.5))),
        "las": (rng.integers(-1000, 2000, shape).astype(np.int16),
                _sparse_labels(shape, rng, [6], axis=0 if axis == "sagittal" else 2),
                _affine(LAS, (0.7, 0.8, 2.5))),
        "empty": (rng.integers(-1000, 2000, shape).astype(np.int16), np.zeros(shape, np.uint8),
                  _affine(RAS, (0.7, 0.8, 2.5))),
    }
    canon = _write(tmp_path / "Task", vols)
    ax = {"sagittal": 0, "axial": 2}[axis]
    out = tmp_path / "ds"
    K = 2
    r = dspipe.build(tmp_path / "Task", out, slice_axis=axis, skip_empty=True, context=K,
                     progress=False)
    kept = {n: [k for k in range(lab.shape[ax]) if np.take(lab, k, axis=ax).any()]
            for n, (_, lab) in canon.items()}
    total = sum(c[0].shape[ax] for c in canon.values())
    assert r["records"] == sum(len(k) for k in kept.values()) and r["skipped"] == 0, r
    assert r["empty_slices"] == total - r["records"], r
    assert dspipe.info(out)["channels"] == 2 * K + 1

    t = dspipe.slice_table(out)
    assert t["slice_axis"] == axis and t["context"] == K and t["skip_empty"] is True
    names = [v["image"].rsplit("/", 1)[1].split(".")[0] for v in t["volumes"]]
    assert names == sorted(vols)
    got_pairs = [(names[v], int(k)) for v, k in zip(t["volume"], t["slice"])]
    assert got_pairs == [(n, k) for n in sorted(vols) for k in kept[n]]
    assert t["volumes"][names.index("empty")]["records"][1] == 0  # listed, keeps nothing
    fg = t["foreground"]
    assert fg.dtype == np.uint32 and fg.shape == (r["records"], 3)
    for i, (image, mask) in enumerate(_records(out)):
        name, k = got_pairs[i]
        volume, label = canon[name]
        n = volume.shape[ax]
        for j in range(2 * K + 1):  # slice-major: channel j is slice k-K+j, clamped
            want = np.take(volume, min(max(k - K + j, 0), n - 1), axis=ax)
            assert np.array_equal(image[j], want.astype(np.float32)), (name, k, j)
        want_label = np.take(label, k, axis=ax)
        assert np.array_equal(mask, want_label.astype(np.int64)), (name, k)
        assert fg[i].tolist() == np.bincount(want_label.ravel(), minlength=3).tolist(), (name, k)


def test_context_on_multimodal_volumes_is_slice_major(tmp_path):
    import numpy as np

    rng = np.random.default_rng(6)
    image = (rng.random((6, 5, 4, 3), dtype=np.float32) * 100)  # 3 modalities
    label = rng.integers(0, 2, (6, 5, 4)).astype(np.uint8)
    canon = _write(tmp_path / "T", {"mr": (image, label, _affine(LAS, (1.0, 1.2, 3.0)))})
    out = tmp_path / "mr"
    dspipe.build(tmp_path / "T", out, context=1, store="raw", progress=False)
    assert dspipe.info(out)["channels"] == 9
    volume, lab = canon["mr"]
    for k, (got, mask) in enumerate(_records(out)):
        for j in range(3):
            for m in range(3):
                want = volume[:, :, min(max(k - 1 + j, 0), 3), m]
                assert np.allclose(got[j * 3 + m], want, rtol=1e-6, atol=0), (k, j, m)
        assert np.array_equal(mask, lab[:, :, k].astype(np.int64)), k
    t = dspipe.slice_table(out)
    assert t["slice"].tolist() == [0, 1, 2, 3] and t["context"] == 1 and not t["skip_empty"]
    assert (t["foreground"].sum(axis=1) == 6 * 5).all()  # every pixel counted once


def test_foreground_weights_drive_the_weighted_loader(tmp_path):
    import numpy as np

    rng = np.random.default_rng(7)
    shape = (8, 8, 10)
    lab = _sparse_labels(shape, rng, [2, 7])
    _write(tmp_path / "T", {"ct": (rng.integers(0, 100, shape).astype(np.int16), lab,
                                   _affine(RAS, (1, 1, 1)))})
    out = tmp_path / "ds"
    dspipe.build(tmp_path / "T", out, progress=False)
    fg = dspipe.slice_table(out)["foreground"]
    weights = (fg[:, 1:].sum(axis=1) > 0).astype(np.float64)  # slices with foreground only
    assert weights.tolist() == [1.0 if k in (2, 7) else 0.0 for k in range(10)]
    loader = dspipe.Loader(str(out), batch_size=4, device="cpu", weights=weights, num_samples=16,
                           seed=1)
    drawn = [i for batch in loader for i in batch["index"].tolist()]
    assert len(drawn) == 16 and set(drawn) <= {2, 7}


def test_misuse_is_refused_naming_the_keyword(tmp_path):
    import numpy as np

    rng = np.random.default_rng(8)
    _write(tmp_path / "T", {"a": (rng.integers(0, 9, (4, 4, 3)).astype(np.int16), None,
                                  _affine(RAS, (1, 1, 1)))})
    with pytest.raises(ValueError, match=r": skip_empty needs label volumes"):
        dspipe.build(tmp_path / "T", tmp_path / "o1", skip_empty=True, progress=False)
    assert not (tmp_path / "o1").exists()
    with pytest.raises(ValueError, match=r"context must be 0\.\.7"):
        dspipe.build(tmp_path / "T", tmp_path / "o2", context=8, progress=False)
    dspipe.build(tmp_path / "T", tmp_path / "o3", progress=False)
    t = dspipe.slice_table(tmp_path / "o3")  # no labels: no foreground table
    assert t["foreground"] is None and t["slice"].tolist() == [0, 1, 2]
    dspipe.synth(tmp_path / "src", count=3, size=(16, 16))
    with pytest.raises(ValueError, match=r": context applies to volume sources"):
        dspipe.build(tmp_path / "src", tmp_path / "o4", context=1, progress=False)
    dspipe.build(tmp_path / "src", tmp_path / "o5", progress=False)
    with pytest.raises(ValueError, match="not built from volumes"):
        dspipe.slice_table(tmp_path / "o5")
    manifest = json.loads((tmp_path / "o3" / "manifest.json").read_text())
    assert manifest["volumes"]["context"] == 0 and "foreground" not in manifest["volumes"]
