# SPDX-License-Identifier: Apache-2.0
"""Feed rate of a PyTorch training loop from Python (dspipe.Loader) vs the C++ loader (dsbench)
vs a PyTorch DataLoader, on the same LMDBs and the same work, interleaved in one run.

Usage (the venv that has dspipe installed, e.g. the one scripts/test.sh makes):
  build-pyvenv/bin/python bench/python_feed.py [--dir /tmp/dspipe-pyfeed] [--count 256]
      [--size 512x512] [--batch 8] [--threads 2] [--batches 32] [--warmup 4] [--rounds 5]
      [--stores raw,encoded] [--out-size HxW] [--crop-scale MIN,MAX] [--out FILE.json]

Per round and store, each in a fresh process (so none inherits another's warm threads):
  cpp     dsbench LMDB --batch B --threads T --batches N --warmup W --hflip 0.5 (CPU normalize)
          [--size HxW --crop-scale MIN,MAX]
  python  for batch in dspipe.Loader(..., device="cpu", hflip=0.5, mask_dtype="uint8",
          pin_memory=False [, size=(H, W), crop_scale=(MIN, MAX)]): the loop body takes
          batch["image"] and batch["mask"] as torch tensors (zero copy), nothing else
  torch   bench/torch_loader.py LMDB --kind lmdb (DataLoader, T workers, same work)
Work: batch B, T threads/workers, shuffle, random hflip 0.5 on image and mask, float32 NCHW
(x - mean) / std on the CPU, uint8 masks. images/s = N * B / wall time after W warm-up batches.
Prints the medians (min-max over rounds), python/cpp and the ratios over torch.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_options(a) -> dict:
    """The same options as dsbench's flags (cpp_flags), as dspipe.Loader keywords."""
    o = {}
    if a.out_size:
        h, w = (int(v) for v in a.out_size.split("x"))
        o["size"] = (h, w)
    if a.crop_scale:
        o["crop_scale"] = tuple(float(v) for v in a.crop_scale.split(","))
    return o


def cpp_flags(a) -> list:
    flags = []
    if a.out_size:
        flags += ["--size", a.out_size]
    if a.crop_scale:
        flags += ["--crop-scale", a.crop_scale]
    return flags


def measure_python(a) -> float:
    import dspipe

    # pin_memory=False: dsbench's CPU path is pageable too (True is the default only when torch
    # sees CUDA).
    loader = dspipe.Loader(a.measure, batch_size=a.batch, threads=a.threads, shuffle=True,
                           seed=0, prefetch=2, device="cpu", hflip=0.5, mask_dtype="uint8",
                           pin_memory=False, output="torch", **python_options(a))
    it = iter(loader)

    def take():
        nonlocal it
        for b in it:
            return b
        it = iter(loader)  # the next pass: the next epoch
        return next(it)

    for _ in range(a.warmup):
        take()
    start = time.perf_counter()
    for _ in range(a.batches):
        b = take()
        x, y = b["image"], b["mask"]  # what a training step reads
        del x, y, b
    return a.batches * a.batch / (time.perf_counter() - start)


def run_json(cmd) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = subprocess.run(cmd + ["--json", f.name], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
        return json.load(open(f.name))


def add_work_args(p: argparse.ArgumentParser, rounds: int) -> None:
    """The data and work flags, shared with bench/wheel_feed.py."""
    p.add_argument("--count", type=int, default=256)
    p.add_argument("--size", default="512x512")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", type=int, default=32)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--stores", default="raw,encoded")
    p.add_argument("--out-size", help="resize to HxW in both (dsbench --size, Loader size=)")
    p.add_argument("--crop-scale", help="random resized crop MIN,MAX in both")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", default="/tmp/dspipe-pyfeed")
    add_work_args(p, rounds=5)
    p.add_argument("--no-torch", action="store_true", help="skip the torch DataLoader runs")
    p.add_argument("--out")
    p.add_argument("--measure", help=argparse.SUPPRESS)  # child: time dspipe.Loader on LMDB
    a = p.parse_args()
    if a.measure:
        print(json.dumps({"images_per_s": measure_python(a)}))
        return 0

    import dspipe

    scripts = sysconfig.get_path("scripts")
    dsbench = os.path.join(scripts, "dsbench")
    h, w = (int(v) for v in a.size.split("x"))
    src = os.path.join(a.dir, "src")
    if not os.path.isdir(os.path.join(src, "masks")):
        dspipe.synth(src, count=a.count, size=(h, w), seed=0, classes=3)
    stores = a.stores.split(",")
    for s in stores:
        out = os.path.join(a.dir, f"{s}.lmdb")
        if not os.path.exists(os.path.join(out, "data.mdb")):
            dspipe.build(src, out, store=s, shuffle=True, progress=False)
        with open(os.path.join(out, "data.mdb"), "rb") as f:  # warm the page cache
            while f.read(1 << 24):
                pass
    common = ["--batch", str(a.batch), "--batches", str(a.batches), "--warmup", str(a.warmup)]
    py_flags = ([f"--out-size={a.out_size}"] if a.out_size else []) + (
        [f"--crop-scale={a.crop_scale}"] if a.crop_scale else [])
    # torch_loader.py does the default work only (no resize or crop).
    with_torch = not (a.no_torch or a.out_size or a.crop_scale)
    rates: dict[str, list[float]] = {}
    for r in range(a.rounds):
        for s in stores:
            lmdb = os.path.join(a.dir, f"{s}.lmdb")
            def cpp():
                d = run_json([dsbench, lmdb, "--threads", str(a.threads), "--hflip", "0.5"] +
                             common + cpp_flags(a))
                rates.setdefault(f"cpp_{s}", []).append(d["throughput"]["images_per_s"])

            def python():
                out = subprocess.run([sys.executable, __file__, "--measure", lmdb, "--threads",
                                      str(a.threads)] + common + py_flags, capture_output=True,
                                     text=True)
                if out.returncode != 0:
                    sys.exit(out.stderr)
                rates.setdefault(f"python_{s}", []).append(
                    json.loads(out.stdout.strip().splitlines()[-1])["images_per_s"])

            # Interleaved: which of the pair runs first alternates by round.
            for run in (cpp, python) if r % 2 == 0 else (python, cpp):
                run()
            if with_torch:
                t = run_json(["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_loader.py"),
                              lmdb, "--kind", "lmdb", "--workers", str(a.threads), "--repeats",
                              "1"] + common)
                rates.setdefault(f"torch_{s}", []).append(t["images_per_s"]["median"])
        print(f"round {r + 1}/{a.rounds}: " +
              ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()), flush=True)

    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n{a.count} x {a.size} RGB PNG + mask, batch {a.batch}, {a.threads} threads/workers, "
          f"hflip 0.5, CPU normalize; {a.rounds} rounds, median (min-max) images/s")
    print("| store | C++ dsbench | Python dspipe.Loader | torch DataLoader | Python / C++ "
          "(per round) | C++ / torch | Python / torch |")
    print("|---|---|---|---|---|---|---|")

    def cell(k):
        if k not in rates:
            return "—"
        return f"{med[k]:.1f} ({min(rates[k]):.1f}–{max(rates[k]):.1f})"

    summary = {"rates": rates, "median": med, "ratios": {}}
    for s in stores:
        c, py, t = med[f"cpp_{s}"], med[f"python_{s}"], med.get(f"torch_{s}")
        # Python and C++ run back to back in each round: their ratio per round cancels most of
        # the load that other processes put on a shared machine.
        paired = [p / q for p, q in zip(rates[f"python_{s}"], rates[f"cpp_{s}"])]
        pm = statistics.median(paired)
        summary["ratios"][s] = {"python_over_cpp": py / c, "python_over_cpp_paired": pm,
                                "python_over_cpp_rounds": paired,
                                "cpp_over_torch": c / t if t else None,
                                "python_over_torch": py / t if t else None}
        vs_torch = f"{c / t:.2f}× | {py / t:.2f}×" if t else "— | —"
        print(f"| {s} | {cell(f'cpp_{s}')} | {cell(f'python_{s}')} | {cell(f'torch_{s}')} | "
              f"{py / c:.3f}× ({pm:.3f}×, {min(paired):.3f}–{max(paired):.3f}) | {vs_torch} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
