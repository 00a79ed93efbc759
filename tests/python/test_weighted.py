# SPDX-License-Identifier: Apache-2.0
"""order='weighted' from Python (SamplerOptions::weights, docs/PYTHON.md): weights= alone asks
for it; draws follow the weights, deterministic by (seed, epoch); without replacement every
sample of nonzero weight once. The chi-square, rank and resume tests are C++'s
(tests/loader/sampler_test.cc, loader_test.cc)."""
from __future__ import annotations

import pytest

import dspipe
from test_monai import _ct_dataset
def test_weights_alone_ask_for_weighted_draws(tmp_path):
    import numpy as np

    _, out = _ct_dataset(tmp_path, count=5)
    weights = np.array([0.0, 1.0, 0.0, 0.0, 9.0])  # e.g. each slice's foreground share
    loader = dspipe.Loader(str(out), batch_size=4, device="cpu", seed=3, weights=weights,
                           num_samples=40)
    drawn = [i for batch in loader for i in batch["index"].tolist()]
    assert len(drawn) == 40 and set(drawn) <= {1, 4}
    assert drawn.count(4) > drawn.count(1)
    again = dspipe.Loader(str(out), batch_size=4, device="cpu", seed=3, weights=weights,
                          num_samples=40)
    assert [i for b in again for i in b["index"].tolist()] == drawn  # (seed, epoch) only
    once = dspipe.Loader(str(out), batch_size=8, device="cpu", weights=weights,
                         replacement=False)
    assert sorted(i for b in once for i in b["index"].tolist()) == [1, 4]
    with pytest.raises(ValueError, match="weights"):
        dspipe.Loader(str(out), weights=[1.0, 2.0])
