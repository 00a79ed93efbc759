# SPDX-License-Identifier: Apache-2.0
"""Shared pytest fixtures for tests/python: a small synthetic raw dataset and a CPU loader."""
from __future__ import annotations

import pytest

import dspipe

COUNT = 26  # batches of 4: 6 full + a short one
H, W = 32, 48


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    dspipe.synth(root / "src", count=COUNT, size=(H, W), seed=3, classes=3)
    r = dspipe.build(root / "src", root / "train.lmdb", store="raw", shuffle=True,
                     on_error="skip", progress=False)
    assert r["records"] == COUNT
    return str(root / "train.lmdb")


def cpu_loader(path, **kw):
    kw.setdefault("batch_size", 4)
    kw.setdefault("threads", 2)
    kw.setdefault("device", "cpu")
    return dspipe.Loader(path, **kw)


def indices(batches):
    return [b["index"].tolist() for b in batches]
