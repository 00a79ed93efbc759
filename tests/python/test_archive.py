# SPDX-License-Identifier: Apache-2.0
"""dspipe.build from an archive made with Python's tarfile/zipfile (issue 10, archive sources):
the same records as the build from the extracted folder, and bad members named inside it."""
from __future__ import annotations

import os
import tarfile
import zipfile

import pytest

import dspipe

torch = pytest.importorskip("torch")


def batches(path):
    loader = dspipe.Loader(path, batch_size=4, threads=1, device="cpu")
    return [{k: v.clone() for k, v in b.items() if v is not None} for b in loader]


def sorted_files(root):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        out += [os.path.join(d, f) for f in sorted(files)]
    return sorted(out)


def test_tarfile_and_zipfile_archives_build_like_the_folder(tmp_path):
    src = tmp_path / "src"
    dspipe.synth(src, count=10, size=(24, 40), seed=4, classes=3)
    r = dspipe.build(src, tmp_path / "folder.lmdb", store="raw", progress=False)
    assert r["records"] == 10
    want = batches(str(tmp_path / "folder.lmdb"))
    with tarfile.open(tmp_path / "data.tar.gz", "w:gz") as t:
        t.add(src, arcname="data")  # one top-level folder, directory entries, sorted members
    with zipfile.ZipFile(tmp_path / "data.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted_files(src):
            z.write(f, os.path.relpath(f, src))
    for arc in ("data.tar.gz", "data.zip"):
        out = tmp_path / (arc + ".lmdb")
        r = dspipe.build(tmp_path / arc, out, store="raw", progress=False)
        assert r["records"] == 10
        got = batches(str(out))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert torch.equal(g["image"], w["image"]) and torch.equal(g["mask"], w["mask"])
        assert dspipe.info(str(out))["mean"] == dspipe.info(str(tmp_path / "folder.lmdb"))["mean"]


def test_bad_member_is_named_by_its_path_in_the_archive(tmp_path):
    src = tmp_path / "src"
    dspipe.synth(src, count=4, size=(16, 16), seed=1, classes=2)
    bad = src / "images" / "000002.png"
    bad.write_bytes(bad.read_bytes()[:40])
    with tarfile.open(tmp_path / "bad.tar", "w") as t:
        t.add(src / "images", arcname="images")
        t.add(src / "masks", arcname="masks")
    with pytest.raises(Exception, match=r"bad\.tar:images/000002\.png: "):
        dspipe.build(tmp_path / "bad.tar", tmp_path / "out.lmdb", progress=False)
