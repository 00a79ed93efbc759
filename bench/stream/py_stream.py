#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""LitData and MosaicML Streaming over the same S3 server and images as stream_bench (issue 23).

stream_bench.sh --compare runs this in DIR/venv-cmp (bench/stream/requirements.txt; PyPI torch,
because LitData needs torch >= 2.3 and Debian's is 1.13). The S3 server, bucket and credentials
come from the environment stream_bench.sh sets (AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ...).

  py_stream.py prepare SRC OUT --chunk-bytes N
      SRC/images/*.png + SRC/masks/*.png (the files dsconvert built DIR/ds from) written once
      into OUT/lit (litdata.optimize, chunks of about N bytes) and OUT/mds (MDSWriter, shards of
      about N bytes), each sample {"image": PNG bytes, "mask": PNG bytes}; both uploaded to
      s3://bkt/lit/ and s3://bkt/mds/ (every run: the server is fresh).
  py_stream.py run litdata|mosaic CACHE --reference OUT/lit|OUT/mds --epochs 3 --workers 2
                 --batch 8 --json OUT
      A fresh CACHE; the framework's dataset over s3://bkt/<lit|mds>/, shuffled, in a torch
      DataLoader (LitData: its StreamingDataLoader) with WORKERS persistent workers. Each worker
      decodes the image (cv2, BGR -> RGB) and the mask, flips both with p = 0.5 and normalizes
      the image to float32 CHW (x / 255 - mean) / std; the loader collates batches of BATCH.
      Epoch 1 is timed from the dataset's construction (its index is fetched from the server)
      to its last batch, later epochs from iter() to the last batch; images/s per epoch to OUT.
      A failed epoch (an exception from the loader) writes {"failed": why, "damaged": the
      cached files whose bytes differ from the uploaded ones} to OUT and exits 3.
"""
import argparse
import glob
import json
import os
import random
import shutil
import sys
import time

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 1, 3)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 1, 3)


def read_pair(pair):
    image, mask = pair
    with open(image, "rb") as f:
        img = f.read()
    with open(mask, "rb") as f:
        msk = f.read()
    return {"image": img, "mask": msk}


def pairs(src):
    images = sorted(glob.glob(os.path.join(src, "images", "*.png")))
    if not images:
        sys.exit(f"py_stream.py: no PNGs in {src}/images")
    out = []
    for image in images:
        mask = os.path.join(src, "masks", os.path.basename(image))
        if not os.path.exists(mask):
            sys.exit(f"py_stream.py: {image}: no mask {mask}")
        out.append((image, mask))
    return out


def lit_fn(pair):  # litdata.optimize's fn: module level, workers pickle it
    return read_pair(pair)


def s3_client():
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])


def upload(local, prefix):
    client = s3_client()
    n = 0
    for root, _, files in os.walk(local):
        for name in files:
            path = os.path.join(root, name)
            key = prefix + os.path.relpath(path, local)
            client.upload_file(path, "bkt", key)
            n += 1
    return n


def prepare(args):
    src_pairs = pairs(args.src)
    lit = os.path.join(args.out, "lit")
    mds = os.path.join(args.out, "mds")
    if not os.path.exists(os.path.join(lit, "index.json")):
        import litdata

        shutil.rmtree(lit, ignore_errors=True)
        litdata.optimize(fn=lit_fn, inputs=src_pairs, output_dir=lit,
                         chunk_bytes=args.chunk_bytes, num_workers=2, mode="overwrite",
                         verbose=False)
    if not os.path.exists(os.path.join(mds, "index.json")):
        from streaming import MDSWriter

        shutil.rmtree(mds, ignore_errors=True)
        with MDSWriter(out=mds, columns={"image": "bytes", "mask": "bytes"},
                       size_limit=args.chunk_bytes) as w:
            for pair in src_pairs:
                w.write(read_pair(pair))
    n_lit = upload(lit, "lit/")
    n_mds = upload(mds, "mds/")
    chunks = len(json.load(open(os.path.join(lit, "index.json")))["chunks"])
    shards = len(json.load(open(os.path.join(mds, "index.json")))["shards"])
    print(f"py_stream.py: {len(src_pairs)} pairs; LitData {chunks} chunks ({n_lit} objects), "
          f"MDS {shards} shards ({n_mds} objects) uploaded")


def transform(sample):
    import cv2

    img = cv2.imdecode(np.frombuffer(sample["image"], np.uint8), cv2.IMREAD_COLOR)
    img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    mask = cv2.imdecode(np.frombuffer(sample["mask"], np.uint8), cv2.IMREAD_UNCHANGED)
    if random.random() < 0.5:
        img = img[:, ::-1]
        mask = mask[:, ::-1]
    x = (img.astype(np.float32) * np.float32(1 / 255) - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)), np.ascontiguousarray(mask)


def worker_init(_):
    import cv2

    cv2.setNumThreads(1)  # each worker is one of the 2 cores, as a dspipe thread is


def run(args):
    import torch

    shutil.rmtree(args.cache, ignore_errors=True)
    os.makedirs(args.cache)
    t0 = time.perf_counter()
    if args.framework == "litdata":
        from litdata import StreamingDataLoader, StreamingDataset
        from litdata.streaming import downloader

        # LitData fetches S3 chunks with obstore, which refuses a plain-http endpoint (the local
        # SeaweedFS) unless its client allows http; LitData has no option for it.
        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True

        class Lit(StreamingDataset):
            def __getitem__(self, index):
                return transform(super().__getitem__(index))

        ds = Lit("s3://bkt/lit/", cache_dir=args.cache, shuffle=True, seed=1,
                 storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL_S3"]})
        loader = StreamingDataLoader(ds, batch_size=args.batch, num_workers=args.workers,
                                     persistent_workers=True, worker_init_fn=worker_init)
    else:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        os.environ["S3_ENDPOINT_URL"] = os.environ["AWS_ENDPOINT_URL_S3"]

        class Mds(StreamingDataset):
            def __getitem__(self, index):
                return transform(super().__getitem__(index))

        ds = Mds(remote="s3://bkt/mds/", local=args.cache, shuffle=True, shuffle_seed=1,
                 batch_size=args.batch)
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch,
                                             num_workers=args.workers, persistent_workers=True,
                                             worker_init_fn=worker_init)
    epochs = []
    try:
        for e in range(args.epochs):
            if e > 0:
                t0 = time.perf_counter()
            images = 0
            for x, mask in loader:
                assert x.dtype == torch.float32 and x.shape[1:] == (3, 512, 512), x.shape
                images += x.shape[0]
            s = time.perf_counter() - t0
            epochs.append({"images": images, "seconds": s, "images_per_s": images / s})
            print(f"{args.framework} epoch {e + 1}: {images} images in {s:.2f} s "
                  f"({images / s:.1f} images/s)", flush=True)
    except Exception as err:  # the round failed: say why, and which cached files are damaged
        damaged = damaged_files(args.cache, args.reference)
        why = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        print(f"{args.framework}: epoch {len(epochs) + 1} failed: {why}; cached files that "
              f"differ from the uploaded ones: {damaged or 'none'}", file=sys.stderr, flush=True)
        with open(args.json, "w") as f:
            json.dump({"framework": args.framework, "epochs": epochs, "failed": why,
                       "damaged": damaged}, f)
        sys.exit(3)
    with open(args.json, "w") as f:
        json.dump({"framework": args.framework, "epochs": epochs}, f)


def damaged_files(cache, reference):
    """The files in the framework's cache (recursively) whose bytes differ from the file of the
    same name that was uploaded (reference), with the first differing offset."""
    out = []
    names = {}
    for root, _, files in os.walk(reference):
        for name in files:
            names[name] = os.path.join(root, name)
    for root, _, files in os.walk(cache):
        for name in sorted(files):
            if name not in names:
                continue
            with open(os.path.join(root, name), "rb") as a, open(names[name], "rb") as b:
                x, y = a.read(), b.read()
            if x != y:
                first = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]),
                             min(len(x), len(y)))
                out.append(f"{name} ({len(x)} bytes, uploaded {len(y)}; "
                           f"first difference at byte {first}; {server_check(names[name], y)})")
    return out


def server_check(path, want):
    """What the server answers for the object now: whole, and in the 8 MiB ranges boto3's
    download_file asks for (so a damaged cached copy is the server's doing or the client's)."""
    prefix = "mds/" if "/mds/" in path else "lit/"
    key = prefix + os.path.basename(path)
    client = s3_client()
    whole = client.get_object(Bucket="bkt", Key=key)["Body"].read()
    bad = []
    step = 8 << 20
    for lo in range(0, len(want), step):
        hi = min(lo + step, len(want)) - 1
        part = client.get_object(Bucket="bkt", Key=key, Range=f"bytes={lo}-{hi}")["Body"].read()
        if part != want[lo:hi + 1]:
            bad.append(f"{lo}-{hi}")
    return (f"the server's copy now: whole {'right' if whole == want else 'WRONG'}, 8 MiB ranges "
            + (f"WRONG at {bad}" if bad else "right"))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare")
    pp.add_argument("src")
    pp.add_argument("out")
    pp.add_argument("--chunk-bytes", type=int, required=True)
    pr = sub.add_parser("run")
    pr.add_argument("framework", choices=["litdata", "mosaic"])
    pr.add_argument("cache")
    pr.add_argument("--epochs", type=int, default=3)
    pr.add_argument("--workers", type=int, default=2)
    pr.add_argument("--batch", type=int, default=8)
    pr.add_argument("--json", required=True)
    pr.add_argument("--reference", required=True,
                    help="the local copy of what was uploaded (prepare's OUT/lit or OUT/mds)")
    args = p.parse_args()
    prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    main()
