# SPDX-License-Identifier: Apache-2.0
"""examples/colab_unet.ipynb runs headless (nbclient) in a small CPU configuration."""
from __future__ import annotations

import os

import pytest

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "colab_unet.ipynb")


def test_colab_unet_notebook_runs(tmp_path, monkeypatch):
    for k, v in {"DSPIPE_NB_COUNT": "32", "DSPIPE_NB_SIZE": "64", "DSPIPE_NB_STEPS": "6",
                 "DSPIPE_NB_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(k, v)  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert text.count("verdict:") == 2, text  # the stage report before and after training
    assert "6 steps on " in text, text
    # The resume cell: the checkpoint taken at step 6 continues its epoch (4 batches of 8 per
    # epoch with drop_last: 6 steps = epoch 1 after 2 batches, 2 left).
    assert "resumed at epoch 1 position 16: 2 batches left" in text, text
    assert "2 more steps to the end of epoch 1" in text, text
    assert "CUDA: " in text, text  # python -m dspipe ran
