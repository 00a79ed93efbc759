# SPDX-License-Identifier: Apache-2.0
"""Driver of bench/volumes/volume_bench.sh (run in its venv; see that script for the steps).

Conversion: ROUNDS rounds, each running every contender once in its own process, the order
rotated by one each round, on the same task with the page cache warm (the task is read once
before the first round). Contenders, per store in --stores:
  dsconvert-STORE-tN   `dsconvert build TASK OUT -q --threads N` (+ `--store raw --compression
                       none` for raw), for each N in --dsconvert-threads (0: all cores)
  nibabel-STORE        `python nib_to_lmdb.py TASK OUT --store STORE` (one thread)
Times: wall seconds of the process (its start and imports included), its CPU seconds (user +
system, from wait4) and its peak RSS (wait4's, which on Linux starts from this driver's own peak:
it stays small until the conversions are done, and is printed). After the rounds, every record of the last round's
dsconvert and nibabel outputs of a store is compared (image and label samples equal).

Loader: the task's slices exported as 16-bit PNG files (export_png.py, once, cached), built
with `dsconvert build PNG_DIR OUT` (16-bit PNG records); then LOADER_ROUNDS rounds of dsbench
(`--batch 16 --threads T --batches B --warmup W`, normalize on, shuffle) over the volume
builds and the PNG build, interleaved. images/s median (min-max).
"""
import argparse
import io
import json
import os
import pathlib
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


def run(cmd, log):
    """Runs cmd, its output to log; wall seconds, CPU seconds and peak RSS (MB)."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.stderr.write(pathlib.Path(log).read_text()[-3000:])
        sys.exit(f"volume_bench.py: {' '.join(map(str, cmd))} exited {p.returncode} (log {log})")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}


def du_mb(path):
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file()) / 1e6


def cell(v, fmt="{:.2f}"):
    return (fmt + " (" + fmt + "-" + fmt + ")").format(statistics.median(v), min(v), max(v))


def loadavg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# dspipe records (docs/FORMAT.md): "DSR1", version, image codec | type << 4, mask codec |
# type << 4, channels, height, width, label, image size, mask size, crc32; then the payloads.
def dspipe_record(v):
    assert v[:4] == b"DSR1", v[:4]
    ic, mc = v[5] & 15, v[6] & 15
    h, w, _, isz, msz = struct.unpack_from("<IIiII", v, 8)
    return ic, mc, h, w, v[32:32 + isz], v[32 + isz:32 + isz + msz]


def compare(store, dsp_path, nib_path):
    """Every record of the dspipe build against the nibabel script's: same samples."""
    import lmdb
    import numpy as np
    import zstandard
    from PIL import Image

    zd = zstandard.ZstdDecompressor()
    png = lambda b: np.asarray(Image.open(io.BytesIO(b)))
    a = lmdb.open(str(dsp_path), readonly=True, lock=False, max_dbs=2)
    b = lmdb.open(str(nib_path), readonly=True, lock=False)
    recs = a.open_db(b"records")
    n = 0
    with a.begin(db=recs) as ta, b.begin() as tb:
        meta = json.loads(tb.get(b"meta"))
        assert ta.stat(recs)["entries"] == meta["count"], (ta.stat(recs), meta)
        for key, v in ta.cursor():
            ic, mc, h, w, img, mask = dspipe_record(v)
            u = tb.get(key)
            uh, uw, uisz = struct.unpack_from("<III", u)
            uimg, umask = u[12:12 + uisz], u[12 + uisz:]
            assert (h, w) == (uh, uw), (key, h, w, uh, uw)
            if store == "raw":
                assert (ic, mc) == (1, 1), (ic, mc)  # raw samples, no compression
                ok = img == uimg and mask == umask
            else:
                assert (ic, mc) == (2, 3), (ic, mc)  # zstd samples, PNG mask
                ok = (zd.decompress(img) == zd.decompress(uimg) and
                      np.array_equal(png(mask), png(umask)))
            if not ok:
                sys.exit(f"volume_bench.py: record {int.from_bytes(key, 'big')} differs between "
                         f"{dsp_path} and {nib_path}")
            n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--dsconvert", required=True)
    ap.add_argument("--dsbench", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stores", default="raw,encoded")
    ap.add_argument("--dsconvert-threads", default="0,1")
    ap.add_argument("--loader-rounds", type=int, default=3)
    ap.add_argument("--loader-threads", type=int, default=2)
    ap.add_argument("--loader-batches", type=int, default=150)
    ap.add_argument("--loader-warmup", type=int, default=10)
    ap.add_argument("--no-loader", action="store_true")
    ap.add_argument("--command-line", default="")
    a = ap.parse_args()
    d = pathlib.Path(a.dir)
    task = pathlib.Path(a.task)
    out, logs = d / "out", d / "logs"
    out.mkdir(parents=True, exist_ok=True)
    logs.mkdir(exist_ok=True)
    py = sys.executable
    stores = a.stores.split(",")
    threads = [int(t) for t in a.dsconvert_threads.split(",")]
    import lmdb
    import nibabel
    import numpy
    import PIL
    import zstandard
    env = {
        "command": a.command_line, "cpu": platform.processor() or platform.machine(),
        "nproc": os.cpu_count(), "python": platform.python_version(),
        "nibabel": nibabel.__version__, "numpy": numpy.__version__, "lmdb": lmdb.__version__,
        "zstandard": zstandard.__version__, "pillow": PIL.__version__,
        "dsconvert": a.dsconvert,
        "task": json.loads((task / ".complete").read_text()),
        "task_gz_mb": du_mb(task), "load_before": loadavg(),
    }
    try:
        env["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                          if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"task {task}: {env['task']['volumes']} volumes of {env['task']['size']}x"
          f"{env['task']['size']}x{env['task']['slices']} int16 + uint8 labels, "
          f"{env['task_gz_mb']:.0f} MB of .nii.gz; {env['nproc']} cores; load {env['load_before']}")
    for f in task.rglob("*.nii.gz"):  # the page cache warm for every contender alike
        f.read_bytes()

    import resource
    env["driver_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"this driver's peak RSS, the floor of every contender's: {env['driver_rss_mb']:.0f} MB")
    contenders = []
    for s in stores:
        for t in threads:
            extra = ["--store", "raw", "--compression", "none"] if s == "raw" else []
            contenders.append((f"dsconvert-{s}-t{t}", s, lambda o, t=t, extra=extra: [
                a.dsconvert, "build", str(task), str(o), "-q", "--threads", str(t)] + extra))
        contenders.append((f"nibabel-{s}", s, lambda o, s=s: [
            py, str(HERE / "nib_to_lmdb.py"), str(task), str(o), "--store", s]))
    conv = {name: [] for name, _, _ in contenders}
    for r in range(a.rounds):
        k = r % len(contenders)
        for name, s, cmd in contenders[k:] + contenders[:k]:
            o = out / name
            shutil.rmtree(o, ignore_errors=True)
            # Each contender starts with no dirty pages: the last one's 1.6 GB would otherwise
            # be written back to disk (kernel CPU time and I/O) during this one's run.
            os.sync()
            res = run(cmd(o), logs / f"{name}-{r + 1}.log")
            res["out_mb"] = du_mb(o)
            conv[name].append(res)
            print(f"round {r + 1}/{a.rounds} {name:22} {res['wall_s']:7.2f} s wall "
                  f"{res['cpu_s']:7.2f} s CPU {res['rss_mb']:6.0f} MB RSS "
                  f"{res['out_mb']:6.0f} MB out  (load {loadavg()})", flush=True)
    checked = {}
    for s in stores:
        # In a process of its own: the driver's peak RSS is inherited by every child it starts
        # later (Linux keeps it across fork + exec), and comparing maps both outputs.
        r = subprocess.run([py, __file__, "--compare", s, str(out / f"dsconvert-{s}-t{threads[0]}"),
                            str(out / f"nibabel-{s}")], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr + r.stdout)
        checked[s] = int(r.stdout)
        print(f"checked: the {checked[s]} records of dsconvert-{s}-t{threads[0]} equal "
              f"nibabel-{s}'s")

    loader = {}
    png_info = {}
    if not a.no_loader:
        png_dir = d / f"png-{task.name}"
        if not (png_dir / ".complete").exists():
            shutil.rmtree(png_dir, ignore_errors=True)
            png_info["export"] = run([py, str(HERE / "export_png.py"), str(task), str(png_dir)],
                                     logs / "export_png.log")
            (png_dir / ".complete").write_text(json.dumps(png_info["export"]))
        png_info["export"] = json.loads((png_dir / ".complete").read_text())
        png_info["png_mb"] = du_mb(png_dir)
        o = out / "png-build"
        shutil.rmtree(o, ignore_errors=True)
        png_info["build"] = run([a.dsconvert, "build", str(png_dir), str(o), "-q"],
                                logs / "png-build.log")
        png_info["build"]["out_mb"] = du_mb(o)
        print(f"PNG route: export {png_info['export']['wall_s']:.1f} s "
              f"({png_info['png_mb']:.0f} MB of PNG), dsconvert build of the folder "
              f"{png_info['build']['wall_s']:.1f} s ({png_info['build']['out_mb']:.0f} MB)")
        what = {"raw": "raw samples, no compression", "encoded": "int16 zstd, PNG masks"}
        dbs = {f"volume build, {s} ({what[s]})": out / f"dsconvert-{s}-t{threads[0]}"
               for s in stores}
        dbs["PNG folder build (16-bit PNG)"] = o
        loader = {name: [] for name in dbs}
        for r in range(a.loader_rounds):
            for name, db in dbs.items():
                j = logs / f"dsbench-{name.split(' (')[0].replace(' ', '_').replace(',', '')}-{r + 1}.json"
                run([a.dsbench, str(db), "--batch", "16", "--threads", str(a.loader_threads),
                     "--batches", str(a.loader_batches), "--warmup", str(a.loader_warmup),
                     "--json", str(j), "-q"], str(j) + ".log")
                t = json.loads(j.read_text())["throughput"]
                loader[name].append(t)
                print(f"loader round {r + 1}/{a.loader_rounds} {name:52} "
                      f"{t['images_per_s']:8.1f} images/s {t['mb_per_s']:7.1f} MB/s read",
                      flush=True)

    env["load_after"] = loadavg()
    # The summary.
    lines = [f"Conversion, {a.rounds} rounds: seconds, median (min-max); CPU seconds and peak "
             f"RSS medians; load average {env['load_before']} before, {env['load_after']} after",
             "", "| store | contender | wall s | CPU s | peak RSS MB | output MB | nibabel / this |",
             "|---|---|---|---|---|---|---|"]
    ratios = {}
    for s in stores:
        base = [x["wall_s"] for x in conv[f"nibabel-{s}"]]
        for name, cs, _ in contenders:
            if cs != s:
                continue
            w = [x["wall_s"] for x in conv[name]]
            per = [b / x for b, x in zip(base, w)]  # same round
            ratio = (f"{statistics.median(base) / statistics.median(w):.2f}x "
                     f"(per round {min(per):.2f}-{max(per):.2f})") if name != f"nibabel-{s}" else "1"
            ratios[name] = statistics.median(base) / statistics.median(w)
            lines.append(f"| {s} | {name} | {cell(w)} | "
                         f"{statistics.median(x['cpu_s'] for x in conv[name]):.2f} | "
                         f"{statistics.median(x['rss_mb'] for x in conv[name]):.0f} | "
                         f"{conv[name][-1]['out_mb']:.0f} | {ratio} |")
    if loader:
        lines += ["", f"Loader (dsbench --batch 16 --threads {a.loader_threads} --batches "
                  f"{a.loader_batches} --warmup {a.loader_warmup}), {a.loader_rounds} rounds: "
                  "images/s median (min-max)", "", "| dataset | images/s | MB/s read | / PNG |",
                  "|---|---|---|---|"]
        png_med = statistics.median(t["images_per_s"] for t in loader["PNG folder build (16-bit PNG)"])
        for name, ts in loader.items():
            v = [t["images_per_s"] for t in ts]
            lines.append(f"| {name} | {cell(v, '{:.0f}')} | "
                         f"{statistics.median(t['mb_per_s'] for t in ts):.0f} | "
                         f"{statistics.median(v) / png_med:.2f}x |")
        lines += ["", f"PNG route: export_png.py {png_info['export']['wall_s']:.1f} s "
                  f"({png_info['png_mb']:.0f} MB of PNG), then dsconvert build of the folder "
                  f"{png_info['build']['wall_s']:.1f} s"]
    table = "\n".join(lines)
    print("\n" + table)
    (d / "table.md").write_text(table + "\n")
    json.dump({"env": env, "conversion": conv, "ratios": ratios, "checked": checked,
               "loader": loader, "png": png_info}, open(d / "summary.json", "w"), indent=1)
    print(f"\n{d / 'summary.json'}, {d / 'table.md'}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        print(compare(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        main()
