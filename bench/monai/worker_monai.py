# SPDX-License-Identifier: Apache-2.0
"""One MONAI contender of bench/monai/monai_bench.py, in its own process (the MONAI venv).

  worker_monai.py DIR --format png|npy --loader dl|tdl0|tdl2 [--tuned] --pipeline JSON
                  --epochs E --batch B --threads T --json OUT [--check]

CacheDataset(DIR's slices, Compose(pipeline), cache_rate=1.0, num_workers=T) - it caches the
deterministic prefix (LoadImaged, EnsureChannelFirstd, ScaleIntensityRanged) - then E passes of
  dl    monai.data.DataLoader (torch's, with MONAI's list_data_collate and per-worker seeds),
        num_workers=T, persistent_workers=True
  tdl0  monai.data.ThreadDataLoader, num_workers=0 (transforms in its one background thread)
  tdl2  monai.data.ThreadDataLoader, num_workers=T, persistent_workers=True
batch B, shuffle=True. --tuned: MONAI's fast-training-tutorial additions, same meaning:
FgBgToIndicesd(label) and EnsureTyped(track_meta=False) cached before RandCropByPosNegLabeld,
which reads those indices; set_track_meta(False) after the fill; copy_cache=False (safe here:
no random transform of the pipeline writes into its input). LoadImaged gets reader=PILReader
(png) or NumpyReader (npy). --check: also loads every slice with LoadImaged +
EnsureChannelFirstd alone and records its min/max/sum (monai_bench.py compares them with the
written data).
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
import monai  # noqa: E402
import monai.transforms as mt  # noqa: E402
from monai.data import CacheDataset, DataLoader, ThreadDataLoader, set_track_meta  # noqa: E402


def transforms(pipeline: list, reader: str, tuned: bool) -> list:
    out = []
    for entry in pipeline:
        args = dict(entry)
        target = args.pop("_target_").rsplit(".", 1)[-1]
        if target == "LoadImaged":
            args["reader"] = reader
        if tuned and target == "RandCropByPosNegLabeld":
            label = args["label_key"]
            out.append(mt.FgBgToIndicesd(keys=label, fg_postfix="_fg", bg_postfix="_bg",
                                         image_key=args.get("image_key")))
            out.append(mt.EnsureTyped(keys=args["keys"], track_meta=False))
            args["fg_indices_key"], args["bg_indices_key"] = label + "_fg", label + "_bg"
        out.append(getattr(mt, target)(**args))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--format", choices=["png", "npy"], required=True)
    p.add_argument("--loader", choices=["dl", "tdl0", "tdl2"], required=True)
    p.add_argument("--tuned", action="store_true")
    p.add_argument("--pipeline", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", required=True)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    with open(a.pipeline) as f:
        pipeline = json.load(f)

    if a.format == "png":
        reader = "PILReader"
        img_dir, lab_dir, ext = "src/images", "src/masks", ".png"
    else:
        reader = "NumpyReader"
        img_dir, lab_dir, ext = "npy/images", "npy/labels", ".npy"
    names = sorted(n[:-len(ext)] for n in os.listdir(os.path.join(a.dir, img_dir))
                   if n.endswith(ext))
    data = [{"image": os.path.join(a.dir, img_dir, n + ext),
             "label": os.path.join(a.dir, lab_dir, n + ext)} for n in names]

    result = {"name": f"monai-{a.loader}" + ("-tuned" if a.tuned else ""),
              "versions": {"monai": monai.__version__, "torch": torch.__version__,
                           "numpy": np.__version__, "python": sys.version.split()[0]},
              "torch_threads": torch.get_num_threads(), "reader": reader}

    compose = mt.Compose(transforms(pipeline, reader, a.tuned))
    compose.set_random_state(seed=0)
    t = time.perf_counter()
    ds = CacheDataset(data, transform=compose, cache_rate=1.0, num_workers=a.threads,
                      copy_cache=not a.tuned, progress=False)
    if a.tuned:
        set_track_meta(False)
    result["setup_s"] = time.perf_counter() - t

    kw = {"batch_size": a.batch, "shuffle": True}
    if a.loader == "dl":
        loader = DataLoader(ds, num_workers=a.threads, persistent_workers=a.threads > 0, **kw)
    elif a.loader == "tdl0":
        loader = ThreadDataLoader(ds, num_workers=0, **kw)
    else:
        loader = ThreadDataLoader(ds, num_workers=a.threads, persistent_workers=a.threads > 0,
                                  **kw)

    epochs = []
    shape = None
    for _ in range(a.epochs):
        n = 0
        t = time.perf_counter()
        for batch in loader:
            x, y = batch["image"], batch["label"]  # what a training step reads
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
    if a.check:  # after the run, outside timing and memory: the raw pixels LoadImaged gives
        set_track_meta(True)  # EnsureChannelFirstd reads the MetaTensor's metadata
        r = getattr(monai.data, reader)()
        handle = r.read(data[0]["image"])
        native, _ = r.get_data(handle)  # the reader's array, before LoadImaged's float32
        mode = f" (PIL mode {handle.mode})" if reader == "PILReader" else ""
        load = mt.Compose([mt.LoadImaged(keys=["image", "label"], reader=reader),
                           mt.EnsureChannelFirstd(keys=["image", "label"])])
        slices = []
        for d in data:
            s = load(d)
            x, y = s["image"].numpy(), s["label"].numpy()
            slices.append({"min": float(x.min()), "max": float(x.max()),
                           "sum": float(x.sum(dtype=np.float64)),
                           "label_sum": float(y.sum(dtype=np.float64))})
        x0 = load(data[0])["image"]
        result["check"] = {
            "how": f"LoadImaged({reader})",
            "first": f"{names[0]}: {reader} gives {native.dtype}{mode} min {native.min()} "
                     f"max {native.max()}, "
                     f"LoadImaged gives {x0.dtype} {tuple(x0.shape)} min {float(x0.min()):.0f} "
                     f"max {float(x0.max()):.0f}",
            "slices": slices}

    with open(a.json, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
