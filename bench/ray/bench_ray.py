# SPDX-License-Identifier: Apache-2.0
"""Ray overhead: dspipe.ray.convert (4 shards, local Ray with 2 CPUs, 1 CPU per task) vs one
process building the same --shards 4 dataset with --threads 2, side by side in one run.

    python bench/ray/bench_ray.py [--count 600] [--size 256x256] [--repeats 5] [--store raw]

Needs the package with its extra (`pip install '.[ray]'`). Each repeat runs both builds (in
alternating order) over the same synthetic source, warm in the page cache after the first
read; Ray is started once before the repeats (its start-up time is printed separately and not
counted in the rate: a cluster is up before a conversion is submitted). Prints records/s of
each, the ratio ray/single per repeat, and the median with min..max of each.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import ray

import dspipe
import dspipe.ray


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--size", default="256x256", help="HxW of the synthetic images")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--store", default="raw", choices=["raw", "encoded"])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--fresh-worker-per-task", action="store_true",
                    help="dspipe.ray.convert(fresh_worker_per_task=True): one worker per shard")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    a = ap.parse_args()
    h, w = (int(v) for v in a.size.lower().split("x"))
    root = a.dir or tempfile.mkdtemp(prefix="dspipe-bench-ray-")
    src = os.path.join(root, "src")
    if not os.path.isdir(src):
        dspipe.synth(src, count=a.count, size=(h, w), seed=1)
    build = dict(store=a.store, shuffle=True, seed=0)

    t = time.monotonic()
    ray.init(address="local", num_cpus=a.cpus, include_dashboard=False, log_to_driver=False)
    print(f"ray.init(num_cpus={a.cpus}): {time.monotonic() - t:.2f} s (not in the rates)")

    def single() -> float:
        out = os.path.join(root, "single")
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.monotonic()
        r = dspipe.build(src, out, shards=a.shards, threads=a.cpus, progress=False, **build)
        dt = time.monotonic() - t0
        assert r["records"] == a.count
        return a.count / dt

    def on_ray() -> float:
        out = os.path.join(root, "ray")
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.monotonic()
        r = dspipe.ray.convert(src, out, shards=a.shards, num_cpus_per_task=1,
                               progress=False,
                               fresh_worker_per_task=a.fresh_worker_per_task, **build)
        dt = time.monotonic() - t0
        assert r["records"] == a.count
        return a.count / dt

    rates: dict[str, list[float]] = {"single": [], "ray": []}
    ratios = []
    for i in range(a.repeats):
        order = [("single", single), ("ray", on_ray)]
        if i % 2:
            order.reverse()
        got = {name: fn() for name, fn in order}
        for name, v in got.items():
            rates[name].append(v)
        ratios.append(got["ray"] / got["single"])
        print(f"repeat {i}: single --threads {a.cpus} {got['single']:.1f} rec/s, "
              f"ray {a.shards} shards {got['ray']:.1f} rec/s, ratio {ratios[-1]:.3f}", flush=True)
    ray.shutdown()

    def line(name, v, unit):
        print(f"  {name:<34} median {statistics.median(v):8.3f} {unit}   "
              f"(min {min(v):.3f}, max {max(v):.3f}, n={len(v)})")

    print(f"{a.count} images {w}x{h}, --store {a.store}, {a.shards} shards, {a.cpus} CPUs, "
          f"fresh_worker_per_task={a.fresh_worker_per_task}:")
    line(f"single process --threads {a.cpus}", rates["single"], "rec/s")
    line(f"ray, {a.shards} tasks x 1 CPU", rates["ray"], "rec/s")
    line("ratio ray / single", ratios, "x")
    if a.dir is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
