# SPDX-License-Identifier: Apache-2.0
"""Issue 36: nnU-Net's one-file-per-channel naming (imagesTr/CASE_0000.nii.gz, CASE_0001.nii.gz,
...; labelsTr/CASE.nii.gz; dataset.json's "channel_names" and name-to-id "labels") builds one
record per slice whose channels are the case's files in order, each exactly nibabel's canonical
array of that file (nibabel writes them here)."""
from __future__ import annotations

import json

import pytest

import dspipe

nib = pytest.importorskip("nibabel")  # the CI venv installs it (scripts/test.sh)


def _records(out):
    import numpy as np

    loader = dspipe.Loader(str(out), batch_size=1, shuffle=False, device="cpu", normalize=False)
    got = {}
    for batch in loader:
        got[int(batch["index"][0])] = (np.asarray(batch["image"])[0],
                                       np.asarray(batch["mask"])[0])
    return [got[i] for i in range(len(got))]


def _nnunet(root, cases=("BRATS_001", "BRATS_002"), channels=4, labels=None):
    import numpy as np

    src = root / "Dataset001_BrainTumour"
    (src / "imagesTr").mkdir(parents=True)
    (src / "labelsTr").mkdir()
    lps = np.diag([-1.0, -1.0, 1.2, 1.0])  # an LPS grid: the canonical array flips x and y
    want = {}
    rng = np.random.default_rng(7)
    for case in cases:
        chans = []
        for c in range(channels):
            arr = rng.normal(100 * c, 10, size=(6, 5, 3)).astype(np.float32)
            path = src / "imagesTr" / f"{case}_{c:04d}.nii.gz"
            nib.save(nib.Nifti1Image(arr, lps), str(path))
            chans.append(np.asarray(nib.as_closest_canonical(nib.load(str(path))).dataobj))
        lab = rng.integers(0, 4, size=(6, 5, 3)).astype(np.uint8)
        nib.save(nib.Nifti1Image(lab, lps), str(src / "labelsTr" / f"{case}.nii.gz"))
        want[case] = (np.stack(chans, axis=0),
                      np.asarray(nib.as_closest_canonical(
                          nib.load(str(src / "labelsTr" / f"{case}.nii.gz"))).dataobj))
    (src / "dataset.json").write_text(json.dumps({
        "channel_names": {str(c): n for c, n in
                          enumerate(["FLAIR", "T1w", "t1gd", "T2w"][:channels])},
        "labels": labels or {"background": 0, "edema": 1, "non-enhancing": 2, "enhancing": 3},
        "numTraining": len(cases), "file_ending": ".nii.gz"}))
    return src, want


def test_each_case_s_channel_files_become_one_record_s_channels(tmp_path):
    import numpy as np

    src, want = _nnunet(tmp_path)
    out = tmp_path / "brats.lmdb"
    dspipe.build(src, out, progress=False)
    info = dspipe.info(str(out))
    assert info["count"] == 6 and info["sample_type"] == "float32", info
    recs = _records(out)
    for i, (img, mask) in enumerate(recs):
        case, k = ("BRATS_001", "BRATS_002")[i // 3], i % 3
        chans, lab = want[case]
        assert img.shape == (4, 6, 5)
        np.testing.assert_array_equal(img, chans[:, :, :, k])
        np.testing.assert_array_equal(mask, lab[:, :, k])
    m = json.loads((out / "manifest.json").read_text())
    m = m.get("manifest", m)
    assert m["class_names"] == ["background", "edema", "non-enhancing", "enhancing"]
    assert m["volumes"]["channel_names"] == ["FLAIR", "T1w", "t1gd", "T2w"]
    files = m["volumes"]["list"][0]["channel_files"]
    assert [f.rsplit("/", 1)[1] for f in files] == [f"BRATS_001_{c:04d}.nii.gz" for c in range(4)]


def test_region_labels_name_no_class_and_a_missing_channel_is_named(tmp_path):
    src, _ = _nnunet(tmp_path, channels=2, labels={
        "background": 0, "whole tumor": [1, 2, 3], "tumor core": [2, 3], "enhancing": 3})
    out = tmp_path / "regions.lmdb"
    dspipe.build(src, out, progress=False)
    m = json.loads((out / "manifest.json").read_text())
    assert "class_names" not in m.get("manifest", m) or not m.get("manifest", m)["class_names"]
    (src / "imagesTr" / "BRATS_002_0001.nii.gz").unlink()
    with pytest.raises(dspipe.CorruptRecord) as e:
        dspipe.build(src, tmp_path / "missing.lmdb", progress=False)
    assert "BRATS_002_0000.nii.gz" in str(e.value) and "1 channel file" in str(e.value)
