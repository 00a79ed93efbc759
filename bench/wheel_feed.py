# SPDX-License-Identifier: Apache-2.0
"""dspipe.Loader's feed rate from two installs of dspipe, e.g. the self-contained wheel
(scripts/build-wheel.sh) against the source build (`pip install .`), on the same LMDBs,
interleaved: each round runs bench/python_feed.py's timed child (--measure: the loop of
dspipe.Loader(device="cpu", hflip=0.5, mask_dtype="uint8") batches as torch tensors) once under each
venv's interpreter, in a fresh process, alternating which goes first.

Usage (each venv has dspipe and torch, e.g. made with --system-site-packages over
/usr/bin/python3, which sees Debian's python3-torch):
  /usr/bin/python3 bench/wheel_feed.py --a wheel=VENV_A/bin/python --b source=VENV_B/bin/python
      [--dir /tmp/dspipe-wheelfeed] [--count 256] [--size 512x512] [--batch 8] [--threads 2]
      [--batches 32] [--warmup 4] [--rounds 7] [--stores raw,encoded]
The data (synth + build) is made once with A's dspipe. Prints per store the median (min-max)
images/s of each and the median of the per-round ratio A/B with its spread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEED = os.path.join(ROOT, "bench", "python_feed.py")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import python_feed  # noqa: E402  (its flags; it imports dspipe only when run)


def run(py: str, code: str, *args: str) -> str:
    r = subprocess.run([py, "-c", code, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{py}: {r.stderr}")
    return r.stdout


def measure(py: str, lmdb: str, a) -> float:
    cmd = [py, FEED, "--measure", lmdb, "--threads", str(a.threads), "--batch", str(a.batch),
           "--batches", str(a.batches), "--warmup", str(a.warmup)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])["images_per_s"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", required=True, help="NAME=PYTHON")
    p.add_argument("--b", required=True, help="NAME=PYTHON")
    p.add_argument("--dir", default="/tmp/dspipe-wheelfeed")
    python_feed.add_work_args(p, rounds=7)
    a = p.parse_args()
    (na, pa), (nb, pb) = (x.split("=", 1) for x in (a.a, a.b))
    for name, py in ((na, pa), (nb, pb)):
        where = run(py, "import dspipe, dspipe._dspipe as m; print(m.__file__)").strip()
        print(f"{name}: {py} -> {where}")
    h, w = (int(v) for v in a.size.split("x"))
    src = os.path.join(a.dir, "src")
    stores = a.stores.split(",")
    make = ("import dspipe, os, sys\n"
            "src, d, w, h, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), "
            "int(sys.argv[5])\n"
            "if not os.path.isdir(os.path.join(src, 'masks')):\n"
            "    dspipe.synth(src, count=n, size=(h, w), seed=0, classes=3)\n"
            "for s in sys.argv[6:]:\n"
            "    out = os.path.join(d, s + '.lmdb')\n"
            "    if not os.path.exists(os.path.join(out, 'data.mdb')):\n"
            "        dspipe.build(src, out, store=s, shuffle=True, progress=False)\n")
    run(pa, make, src, a.dir, str(w), str(h), str(a.count), *stores)
    for s in stores:
        with open(os.path.join(a.dir, f"{s}.lmdb", "data.mdb"), "rb") as f:  # warm page cache
            while f.read(1 << 24):
                pass
    rates: dict[str, list[float]] = {}
    for r in range(a.rounds):
        order = [(na, pa), (nb, pb)] if r % 2 == 0 else [(nb, pb), (na, pa)]
        for s in stores:
            for name, py in order:
                rates.setdefault(f"{name}_{s}", []).append(
                    measure(py, os.path.join(a.dir, f"{s}.lmdb"), a))
        print(f"round {r + 1}/{a.rounds}: " +
              ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items()), flush=True)
    print(f"\n{a.count} x {a.size} RGB PNG + mask, batch {a.batch}, {a.threads} threads, hflip "
          f"0.5, CPU normalize, torch tensors; {a.rounds} rounds interleaved, images/s")
    print(f"| store | {na} median (min-max) | {nb} median (min-max) | {na}/{nb} per round: "
          "median (min-max) |")
    print("|---|---|---|---|")
    for s in stores:
        ra, rb = rates[f"{na}_{s}"], rates[f"{nb}_{s}"]
        paired = [x / y for x, y in zip(ra, rb)]
        print(f"| {s} | {statistics.median(ra):.1f} ({min(ra):.1f}-{max(ra):.1f}) | "
              f"{statistics.median(rb):.1f} ({min(rb):.1f}-{max(rb):.1f}) | "
              f"{statistics.median(paired):.3f} ({min(paired):.3f}-{max(paired):.3f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
