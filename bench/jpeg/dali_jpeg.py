#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""DALI's CPU classification pipeline over an ImageFolder of JPEGs, for bench/jpeg/jpeg_bench.sh.

  VENV/bin/python bench/jpeg/dali_jpeg.py SRC_DIR [--mode train|val] [--batch 64] [--threads 2]
                                          [--batches 30] [--warmup 5] [--json FILE]

train: fn.readers.file (shuffled) -> fn.decoders.image_random_crop(device="cpu",
random_area=[0.08, 1], random_aspect_ratio=[3/4, 4/3]) -> fn.resize(224 x 224) ->
fn.crop_mirror_normalize(mirror=coin_flip(0.5), ImageNet mean/std, float32, CHW).
val: fn.decoders.image(device="cpu") -> fn.resize(resize_shorter=256) ->
fn.crop_mirror_normalize(crop=(224, 224)). Pipeline(device_id=None): CPU only, num_threads
threads. Untimed --warmup batches, then --batches timed ones; images/s = images / wall seconds.
Needs pip nvidia-dali-cuda130 (jpeg_bench.sh installs it into its own venv).
"""
import argparse
import json
import time

from nvidia.dali import fn, pipeline_def, types

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("--mode", default="train", choices=["train", "val"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None, seed=1,
                  prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.src, random_shuffle=a.mode == "train",
                                        name="reader")
        if a.mode == "train":
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0],
                                                   random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, resize_x=224, resize_y=224)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              mean=MEAN, std=STD,
                                              mirror=fn.random.coin_flip(probability=0.5))
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=256)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                              crop=(224, 224), mean=MEAN, std=STD)
        return images, labels

    p = pipe()
    p.build()
    for _ in range(a.warmup):
        p.run()
    t0 = time.perf_counter()
    images = 0
    for _ in range(a.batches):
        out, _ = p.run()
        images += len(out)
    wall = time.perf_counter() - t0
    doc = {"tool": "dali_cpu", "mode": a.mode, "batch": a.batch, "threads": a.threads,
           "images": images, "seconds": wall, "images_per_s": images / wall}
    print(f"dali_jpeg: {a.mode}, batch {a.batch}, {a.threads} threads: "
          f"{images / wall:.1f} images/s ({images} images, {wall:.2f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
