#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torchvision's classification pipeline over an ImageFolder of JPEGs, for jpeg_bench.sh.

  /usr/bin/python3 bench/jpeg/torch_jpeg.py SRC_DIR [--mode train|val] [--batch 64]
                                            [--workers 2] [--batches 30] [--warmup 5] [--json F]

train: ImageFolder + RandomResizedCrop(224, scale=(0.08, 1)) + RandomHorizontalFlip(0.5) +
ToTensor + Normalize(ImageNet); val: Resize(256) + CenterCrop(224) + ToTensor + Normalize.
DataLoader(batch, shuffle=train, num_workers, persistent_workers, prefetch_factor 2,
drop_last). PIL decodes (Debian's python3-pil: libjpeg-turbo). Untimed --warmup batches, then
--batches timed ones; images/s = images / wall seconds. Debian's python3-torch and
python3-torchvision (scripts/install-deps.sh --bench).
"""
import argparse
import json
import time

import torch
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("--mode", default="train", choices=["train", "val"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    norm = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if a.mode == "train":
        tf = transforms.Compose([transforms.RandomResizedCrop(224, scale=(0.08, 1.0)),
                                 transforms.RandomHorizontalFlip(0.5), transforms.ToTensor(),
                                 norm])
    else:
        tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224),
                                 transforms.ToTensor(), norm])
    ds = datasets.ImageFolder(a.src, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=a.mode == "train",
                                     num_workers=a.workers, persistent_workers=True,
                                     prefetch_factor=2, drop_last=True)

    def batches():
        while True:
            yield from dl

    it = batches()
    for _ in range(a.warmup):
        next(it)
    t0 = time.perf_counter()
    images = 0
    for _ in range(a.batches):
        x, _ = next(it)
        images += x.shape[0]
    wall = time.perf_counter() - t0
    doc = {"tool": "torchvision", "mode": a.mode, "batch": a.batch, "workers": a.workers,
           "images": images, "seconds": wall, "images_per_s": images / wall,
           "versions": {"torch": torch.__version__}}
    print(f"torch_jpeg: {a.mode}, batch {a.batch}, {a.workers} workers: "
          f"{images / wall:.1f} images/s ({images} images, {wall:.2f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
