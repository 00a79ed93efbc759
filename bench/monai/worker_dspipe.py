# SPDX-License-Identifier: Apache-2.0
"""The dspipe contender of bench/monai/monai_bench.py, in its own process.

  worker_dspipe.py LMDB --pipeline JSON --epochs E --batch B --threads T --json OUT [--check]

One dspipe.Loader(LMDB, batch_size=B, shuffle=True, seed=0, device="cpu", threads=T,
transform=the pipeline's MONAI config), E passes over it (each pass is the next epoch). The
loop body takes batch["image"] (float32 NCHW) and batch["mask"], nothing else. --check: after
the run, a second Loader with only LoadImaged + EnsureChannelFirstd, unshuffled, records every
slice's min/max/sum as dspipe loads it (monai_bench.py compares them with the written data).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rss import PeakMemory  # noqa: E402

mem = PeakMemory().__enter__()  # before the imports: their memory counts

import numpy as np  # noqa: E402
import torch  # noqa: E402
import dspipe  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("lmdb")
    p.add_argument("--pipeline", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", required=True)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    with open(a.pipeline) as f:
        pipeline = json.load(f)

    result = {"name": "dspipe",
              "versions": {"dspipe": dspipe.__version__, "torch": torch.__version__,
                           "numpy": np.__version__, "python": sys.version.split()[0]},
              "torch_threads": torch.get_num_threads()}
    t = time.perf_counter()
    loader = dspipe.Loader(a.lmdb, batch_size=a.batch, shuffle=True, seed=0, device="cpu",
                           threads=a.threads, transform=pipeline)
    result["setup_s"] = time.perf_counter() - t

    epochs = []
    shape = None
    for _ in range(a.epochs):
        n = 0
        t = time.perf_counter()
        for batch in loader:
            x, y = batch["image"], batch["mask"]  # what a training step reads
            n += x.shape[0]
            if shape is None:
                shape = [list(x.shape), str(x.dtype), type(x).__name__,
                         list(y.shape), str(y.dtype)]
        dt = time.perf_counter() - t
        epochs.append({"samples": n, "seconds": dt, "samples_per_s": n / dt})
    result["epochs"] = epochs
    result["batch"] = shape
    mem.stop()
    result["memory"] = mem.result()
    del loader

    if a.check:
        info = dspipe.info(a.lmdb)
        raw = dspipe.Loader(a.lmdb, batch_size=1, shuffle=False, device="cpu",
                            threads=a.threads, transform=pipeline[:2])
        slices = []
        first = None
        for batch in raw:
            x = batch["image"].numpy()
            y = batch["mask"].numpy()
            slices.append({"min": float(x.min()), "max": float(x.max()),
                           "sum": float(x.sum(dtype=np.float64)),
                           "label_sum": float(y.sum(dtype=np.float64))})
            if first is None:
                first = (f"record 0: stored {info.get('sample_type', '?')}, "
                         f"the Loader gives {x.dtype} {tuple(x.shape)} min {x.min():.0f} "
                         f"max {x.max():.0f}")
        result["check"] = {"how": "dspipe.Loader(LoadImaged, EnsureChannelFirstd)",
                           "first": first, "slices": slices, "info": info}

    with open(a.json, "w") as f:
        json.dump(result, f, default=str)


if __name__ == "__main__":
    main()
