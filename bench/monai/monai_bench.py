# SPDX-License-Identifier: Apache-2.0
"""MONAI 1.6.1 vs dspipe running the same MONAI training preprocessing, side by side: the driver.
Run through bench/monai/monai_bench.sh (which makes the MONAI venv and finds the build); it
runs this file with a Python that imports dspipe and numpy.

  monai_bench.py --dir DIR --monai-python PY [--count 96] [--rounds 3] [--epochs 3] [--batch 16]
                 [--threads 2] [--store encoded|raw] [--monai-format auto|png|npy]
                 [--contenders NAME,...]

1. DIR/src/{images,masks}/ct_NNNN.png: COUNT synthetic 512x512 CT-like slices, 16-bit gray PNG
   (HU + 1024: air 0, body ~1000-1100, a bone disc ~1500, bright lesions ~1250) and 8-bit labels
   (lesions = 1, ~1% of the slice; ~20% of slices have none); the same arrays as .npy in
   DIR/npy/ for MONAI's NumpyReader; DIR/ds.lmdb (dspipe.build, store encoded: the PNG bytes)
   or DIR/ds-raw.lmdb (--store raw). Written once, reused while DIR/data.json matches.
2. PIPELINE below (the one definition), written to DIR/pipeline.json; both sides read it.
3. ROUNDS rounds; each runs every contender once, each in a fresh process, in the same order:
     dspipe             worker_dspipe.py: one dspipe.Loader, THREADS threads, transform=PIPELINE
     monai-dl           worker_monai.py: CacheDataset(cache_rate=1, num_workers=THREADS) +
                        monai.data.DataLoader (torch's DataLoader with MONAI's collate and
                        per-worker seeding), num_workers=THREADS, persistent_workers=True
     monai-tdl0/-tdl2   the same CacheDataset + monai.data.ThreadDataLoader, num_workers 0 / THREADS
     monai-*-tuned      the same three with MONAI's fast-training-tutorial additions, which keep
                        the pipeline's meaning: FgBgToIndicesd(label) + EnsureTyped(track_meta=
                        False) cached after ScaleIntensityRanged, RandCropByPosNegLabeld reading
                        those indices, set_track_meta(False), CacheDataset(copy_cache=False)
   Timed per process: setup (MONAI: the cache fill; dspipe: opening the Loader), then EPOCHS
   full passes (batch BATCH, shuffled); samples/s = samples / wall time of the pass, every pass
   counted, the first one too (it includes starting the DataLoader workers / loader threads).
   The loop body takes batch image and label, nothing else. Peak memory: bench/monai/rss.py.
4. Prints per contender samples/s median (min-max) over rounds x epochs, epoch 1 and later
   epochs apart, setup time, peak RSS / PSS; the best DataLoader, ThreadDataLoader and MONAI
   variants; dspipe / each. Round 1 also checks the pixels each side loads against the written
   data. Exit 1 when a contender fails or the check does not match.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import zlib
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# The pipeline, as a MONAI 1.6.1 bundle config (the one definition both sides read, from
# DIR/pipeline.json). 849..1274 is the -175..250 HU soft-tissue window on uint16 = HU + 1024.
PIPELINE = [
    {"_target_": "LoadImaged", "keys": ["image", "label"]},
    {"_target_": "EnsureChannelFirstd", "keys": ["image", "label"]},
    {"_target_": "ScaleIntensityRanged", "keys": ["image"], "a_min": 849, "a_max": 1274,
     "b_min": 0.0, "b_max": 1.0, "clip": True},
    {"_target_": "RandCropByPosNegLabeld", "keys": ["image", "label"], "label_key": "label",
     "spatial_size": [256, 256], "pos": 1, "neg": 1, "num_samples": 4},
    {"_target_": "RandFlipd", "keys": ["image", "label"], "prob": 0.5, "spatial_axis": 0},
    {"_target_": "RandRotate90d", "keys": ["image", "label"], "prob": 0.5, "max_k": 3},
    {"_target_": "RandGaussianNoised", "keys": ["image"], "prob": 0.5, "std": 0.01},
    {"_target_": "RandScaleIntensityd", "keys": ["image"], "factors": 0.1, "prob": 0.5},
]

CONTENDERS = ["dspipe", "monai-dl", "monai-tdl0", "monai-tdl2",
              "monai-dl-tuned", "monai-tdl0-tuned", "monai-tdl2-tuned"]
DATA_VERSION = 1  # bump when the generator changes: the data is rewritten


# ---------------------------------------------------------------------------------------------
# Data

def _png(path: str, a: np.ndarray) -> None:
    """A grayscale PNG (8 or 16 bits, filter 0), written without any imaging library."""
    h, w = a.shape
    depth = 16 if a.dtype == np.uint16 else 8
    rows = a.astype(">u2" if depth == 16 else "u1").reshape(h, -1).view(np.uint8)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows], axis=1).tobytes()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def _slice(rng: np.random.Generator, size: int = 512) -> tuple[np.ndarray, np.ndarray]:
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    c = size / 2
    img = np.zeros((size, size), np.float32)  # air: 0 (HU -1024)
    cy, cx = c + rng.uniform(-15, 15), c + rng.uniform(-15, 15)
    ay, ax = rng.uniform(150, 190), rng.uniform(200, 235)
    body = ((yy - cy) / ay) ** 2 + ((xx - cx) / ax) ** 2 <= 1
    img[body] = rng.uniform(1010, 1050)  # fat / soft tissue
    for _ in range(3):  # organs
        oy, ox = cy + rng.uniform(-0.5, 0.5) * ay, cx + rng.uniform(-0.5, 0.5) * ax
        organ = ((yy - oy) / rng.uniform(25, 60)) ** 2 + ((xx - ox) / rng.uniform(25, 70)) ** 2 <= 1
        img[organ & body] = rng.uniform(1060, 1100)
    spine = (yy - (cy + 0.6 * ay)) ** 2 + (xx - cx) ** 2 <= 22 ** 2
    img[spine] = 1500  # bone: clipped by the window
    label = np.zeros((size, size), np.uint8)
    if rng.random() >= 0.2:  # ~20% of slices have no lesion
        n = int(rng.integers(1, 5))
        r = np.sqrt(0.01 * size * size / n / np.pi)  # together ~1% of the slice
        for _ in range(n):
            ly, lx = cy + rng.uniform(-0.6, 0.6) * ay, cx + rng.uniform(-0.6, 0.6) * ax
            lesion = (yy - ly) ** 2 + (xx - lx) ** 2 <= (r * rng.uniform(0.8, 1.2)) ** 2
            img[lesion] = rng.uniform(1200, 1300)
            label[lesion] = 1
    img[body] += rng.normal(0, 12, int(body.sum())).astype(np.float32)
    return np.clip(np.rint(img), 0, 65535).astype(np.uint16), label


def prepare(a, lmdb: str) -> dict:
    """Writes the data once; returns the truth (per-slice statistics of what was written)."""
    meta = {"version": DATA_VERSION, "count": a.count, "seed": 0}
    meta_path = os.path.join(a.dir, "data.json")
    src, npy = os.path.join(a.dir, "src"), os.path.join(a.dir, "npy")
    have = None
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            have = json.load(f)
    if have is None or have.get("data") != meta:
        for p in (src, npy, os.path.join(a.dir, "ds.lmdb"), os.path.join(a.dir, "ds-raw.lmdb")):
            shutil.rmtree(p, ignore_errors=True)
        for sub in ("src/images", "src/masks", "npy/images", "npy/labels"):
            os.makedirs(os.path.join(a.dir, sub))
        t = time.perf_counter()
        rng = np.random.default_rng(0)
        truth = []
        for i in range(a.count):
            img, lab = _slice(rng)
            name = f"ct_{i:04d}"
            _png(f"{src}/images/{name}.png", img)
            _png(f"{src}/masks/{name}.png", lab)
            np.save(f"{npy}/images/{name}.npy", img)
            np.save(f"{npy}/labels/{name}.npy", lab)
            truth.append({"name": name, "min": int(img.min()), "max": int(img.max()),
                          "sum": int(img.sum(dtype=np.int64)), "label_sum": int(lab.sum())})
        have = {"data": meta, "truth": truth}
        with open(meta_path, "w") as f:
            json.dump(have, f)
        print(f"data: {a.count} slices written to {src} and {npy} in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
    if not os.path.exists(os.path.join(lmdb, "data.mdb")) and not os.path.exists(
            os.path.join(lmdb, "manifest.json")):
        import dspipe
        shutil.rmtree(lmdb, ignore_errors=True)
        t = time.perf_counter()
        dspipe.build(src, lmdb, progress=False, store=a.store)
        print(f"data: built {lmdb} (store {a.store}) in {time.perf_counter() - t:.1f} s",
              flush=True)
    return have["truth"]


# ---------------------------------------------------------------------------------------------
# Rounds

def run_worker(a, name: str, rnd: int, lmdb: str, fmt: str, out: str, check: bool) -> dict:
    res_path = os.path.join(out, f"{name}-{rnd}.json")
    log_path = os.path.join(out, f"{name}-{rnd}.log")
    common = ["--epochs", str(a.epochs), "--batch", str(a.batch), "--threads", str(a.threads),
              "--pipeline", os.path.join(a.dir, "pipeline.json"), "--json", res_path]
    if check:
        common.append("--check")
    if name == "dspipe":
        cmd = [sys.executable, os.path.join(HERE, "worker_dspipe.py"), lmdb] + common
    else:
        loader = name.split("-")[1]
        cmd = [a.monai_python, os.path.join(HERE, "worker_monai.py"), a.dir, "--format", fmt,
               "--loader", loader] + common + (["--tuned"] if name.endswith("-tuned") else [])
    if os.path.exists(res_path):
        os.remove(res_path)
    t = time.perf_counter()
    with open(log_path, "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t
    if rc != 0 or not os.path.exists(res_path):
        with open(log_path) as f:
            tail = f.read()[-3000:]
        return {"failed": f"exit {rc}; {log_path}:\n{tail}"}
    with open(res_path) as f:
        r = json.load(f)
    r["process_wall_s"] = wall
    rates = " ".join(f"{e['samples_per_s']:.0f}" for e in r["epochs"])
    m = r["memory"]
    print(f"  {name:17} setup {r['setup_s']:6.2f} s  samples/s {rates:24} "
          f"peak RSS {m['peak_rss_sum_mib']:6.0f} MiB  PSS {m['peak_pss_sum_mib']:6.0f} MiB "
          f"({m['max_procs']} procs)", flush=True)
    return r


def compare_pixels(truth: list, results: dict) -> list[str]:
    """Each side's loaded slices (before any transform) against the written ones, as
    multisets of (min, max, sum, label sum): the order and the orientation (PILReader turns
    the slice: reverse_indexing) do not matter, the values do."""
    want = sorted((t["min"], t["max"], t["sum"], t["label_sum"]) for t in truth)
    problems = []
    for name, r in results.items():
        c = r.get("check")
        if c is None:
            continue
        got = sorted((round(s["min"]), round(s["max"]), round(s["sum"]), round(s["label_sum"]))
                     for s in c["slices"])
        if got != want:
            bad = next((f"e.g. written {w} loaded {g}" for w, g in zip(want, got) if w != g),
                       f"{len(got)} slices loaded, {len(want)} written")
            problems.append(f"{name}: loaded pixels differ from the written data ({bad})")
    return problems


def fmt_cell(v: list[float]) -> str:
    if not v:
        return "-"
    return f"{statistics.median(v):7.1f} ({min(v):.1f}-{max(v):.1f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--monai-python", required=True)
    p.add_argument("--count", type=int, default=96)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--store", choices=["encoded", "raw"], default="encoded")
    p.add_argument("--monai-format", choices=["auto", "png", "npy"], default="auto")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--command-line", default=" ".join(sys.argv))
    a = p.parse_args()
    names = [n for n in a.contenders.split(",") if n]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        p.error(f"unknown contender(s) {unknown}; known: {', '.join(CONTENDERS)}")
    os.makedirs(a.dir, exist_ok=True)

    load_before = os.getloadavg()
    print(f"command: {a.command_line}")
    print(f"machine: nproc {os.cpu_count()} (usable {len(os.sched_getaffinity(0))}), "
          f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")

    fmt = a.monai_format
    if fmt == "auto":
        has_pil = subprocess.call([a.monai_python, "-c", "import PIL"],
                                  stderr=subprocess.DEVNULL) == 0
        fmt = "png" if has_pil else "npy"
    print(f"MONAI reads: {'the same 16-bit PNGs with PILReader' if fmt == 'png' else 'the same slices as .npy with NumpyReader'}"
          + (" (auto: no Pillow in the MONAI venv)" if a.monai_format == "auto" and fmt == "npy" else ""))

    lmdb = os.path.join(a.dir, "ds.lmdb" if a.store == "encoded" else "ds-raw.lmdb")
    truth = prepare(a, lmdb)
    with open(os.path.join(a.dir, "pipeline.json"), "w") as f:
        json.dump(PIPELINE, f, indent=1)
    out = os.path.join(a.dir, "results")
    os.makedirs(out, exist_ok=True)

    results: dict[str, list] = {n: [] for n in names}
    failed = []
    round1 = {}
    for rnd in range(1, a.rounds + 1):
        print(f"== round {rnd}/{a.rounds}", flush=True)
        for name in names:
            r = run_worker(a, name, rnd, lmdb, fmt, out, check=(rnd == 1))
            if "failed" in r:
                failed.append(f"{name} round {rnd}: {r['failed']}")
                print(f"  {name:17} FAILED ({r['failed'].splitlines()[0]})", flush=True)
                continue
            results[name].append(r)
            if rnd == 1:
                round1[name] = r

    load_after = os.getloadavg()
    print(f"\nload average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")

    # Pixel check (round 1): both sides load the values that were written.
    problems = compare_pixels(truth, round1)
    t0 = truth[0]
    print(f"pixels: written slice {t0['name']} uint16 min {t0['min']} max {t0['max']}; "
          f"{len(truth)} slices, {sum(1 for t in truth if t['label_sum'] == 0)} without lesion")
    for name, r in round1.items():
        c = r.get("check")
        if c:
            print(f"  {name:17} {c['how']}: {c['first']}")
    print("  check: " + ("; ".join(problems) if problems else
                         "every side's loaded slices equal the written ones (min, max, sum, label sum)"))

    # Table.
    epochs = a.epochs
    print(f"\nsamples/s per epoch, median (min-max) over {a.rounds} rounds x {epochs} epochs; "
          f"batch {a.batch}, 512x512 uint16 -> 256x256 float32 crops, {a.threads} threads/workers")
    print(f"{'contender':18}{'all epochs':28}{'epoch 1':28}{'epochs 2+':28}"
          f"{'setup s':>9}{'peak RSS MiB':>14}{'peak PSS MiB':>14}")
    summary = {}
    for name in names:
        rs = results[name]
        if not rs:
            print(f"{name:18}failed")
            continue
        allv = [e["samples_per_s"] for r in rs for e in r["epochs"]]
        first = [r["epochs"][0]["samples_per_s"] for r in rs]
        later = [e["samples_per_s"] for r in rs for e in r["epochs"][1:]]
        setup = statistics.median(r["setup_s"] for r in rs)
        rss = statistics.median(r["memory"]["peak_rss_sum_mib"] for r in rs)
        pss = statistics.median(r["memory"]["peak_pss_sum_mib"] for r in rs)
        summary[name] = {"median": statistics.median(allv), "min": min(allv), "max": max(allv),
                         "epoch1": statistics.median(first),
                         "later": statistics.median(later) if later else None,
                         "setup_s": setup, "rss_mib": rss, "pss_mib": pss,
                         "rates": [[e["samples_per_s"] for e in r["epochs"]] for r in rs]}
        print(f"{name:18}{fmt_cell(allv):28}{fmt_cell(first):28}{fmt_cell(later):28}"
              f"{setup:9.2f}{rss:14.0f}{pss:14.0f}")
    print("setup: MONAI = CacheDataset fill (not in the rates); dspipe = opening the Loader. "
          "Epoch 1 includes starting workers/threads.")
    print("peak RSS = peak of the sum of VmRSS over the worker process and its children, sampled "
          "every 50 ms (shared pages counted once per process); PSS = the same sum of Pss every "
          "250 ms (shared pages split), each process measured alone; median over rounds.")

    # Bests and ratios.
    groups = {
        "DataLoader": [n for n in names if n.startswith("monai-dl") and n in summary],
        "ThreadDataLoader": [n for n in names if n.startswith("monai-tdl") and n in summary],
        "MONAI (any)": [n for n in names if n.startswith("monai-") and n in summary],
    }
    ratios = {}
    if "dspipe" in summary:
        d = summary["dspipe"]
        print("\ndspipe / MONAI (best = highest median samples/s over all epochs; memory: median peaks)")
        for g, members in groups.items():
            if not members:
                continue
            best = max(members, key=lambda n: summary[n]["median"])
            b = summary[best]
            ratios[g] = {"best": best, "speed": d["median"] / b["median"],
                         "speed_later": (d["later"] / b["later"]) if b["later"] else None,
                         "rss": d["rss_mib"] / b["rss_mib"], "pss": d["pss_mib"] / b["pss_mib"]}
            later = (f" (epochs 2+ {ratios[g]['speed_later']:5.2f}x)"
                     if ratios[g]["speed_later"] else "")
            print(f"  vs best {g:17} {best:17} speed {ratios[g]['speed']:5.2f}x{later}   "
                  f"RSS {ratios[g]['rss']:5.2f}x   PSS {ratios[g]['pss']:5.2f}x")
    with open(os.path.join(a.dir, "summary.json"), "w") as f:
        json.dump({"command": a.command_line, "monai_format": fmt, "store": a.store,
                   "load_before": load_before, "load_after": load_after,
                   "summary": summary, "ratios": ratios, "failed": failed,
                   "pixel_problems": problems}, f, indent=1)
    print(f"results: {out}/, {a.dir}/summary.json")
    if failed:
        print("\nFAILED:\n" + "\n".join(failed), file=sys.stderr)
    if problems:
        print("\nPIXEL CHECK FAILED:\n" + "\n".join(problems), file=sys.stderr)
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main())
