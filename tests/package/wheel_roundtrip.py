# SPDX-License-Identifier: Apache-2.0
"""What tests/package/wheel_selfcontained.sh runs with the installed wheel, inside the mount
namespace that hides every non-glibc library of the system: the loader resolution check
(every ELF file of the installed wheel resolves to the wheel itself or to the allowed system
libraries) and a small round trip through every bundled dependency:
synth PNG + JPEG (OpenCV imgcodecs, libspng), build encoded and raw/zstd sharded datasets
(LMDB, oneTBB, zstd, libdeflate), a .tar.gz source (libarchive), verify, load, fetch the raw
dataset over HTTP from tests/fetch/server.py on 127.0.0.1 into a cache directory (libcurl) and
read it back from the cache; DICOM series (explicit VR, implicit VR, RLE; the static DCMTK, its
compiled-in dictionary and RLE decoder) build into int16 slices; the CLIs and `python -m dspipe`
run too.

Usage: python wheel_roundtrip.py WORK_DIR ALLOWED_LIB_DIR
"""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile

import numpy as np

import dspipe

WORK, ALLOWED = sys.argv[1], os.path.realpath(sys.argv[2])
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fetch", "server.py")
# tests/fuzz/make_seeds.py's DICOM series, written by hand (no DICOM library): each seed is the
# files of one series joined by fuzz_dicom's marker. 4x4 slices, 12 bits stored, intercept -1024.
DICOM_SEEDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "seeds",
                           "dicom")
DICOM_NEXT = b"\0DSPIPE-NEXT\0"
LDSO = "/lib64/ld-linux-x86-64.so.2"
MULTIARCH = "/usr/lib/x86_64-linux-gnu"
SCRIPTS = sysconfig.get_path("scripts")


def elf_files(root):
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    if f.read(4) == b"\x7fELF":
                        yield p


def check_resolution():
    """ld.so --list of each ELF file: nothing missing, each library inside the venv (the wheel's
    dspipe.libs/, numpy's own) or in ALLOWED (glibc, libstdc++, libgcc_s, libz, libexpat)."""
    venv = os.path.realpath(sys.prefix)
    site = sysconfig.get_path("platlib")
    files = [p for p in elf_files(site) if "dspipe" in os.path.relpath(p, site).split(os.sep)[0]]
    # The CLIs: auditwheel moves the executables to dspipe.scripts/ and leaves launchers in bin/.
    names = {os.path.basename(p) for p in files}
    assert {"dsconvert", "dsbench"} <= names and any("_dspipe" in n for n in names), names
    bundled = [p for p in files if os.sep + "dspipe.libs" + os.sep in p]
    assert bundled, "no dspipe.libs/ in the installed wheel: auditwheel repair did not run"
    for p in files:
        out = subprocess.run([LDSO, "--list", p], capture_output=True, text=True)
        assert out.returncode == 0, f"{p}: {out.stdout}{out.stderr}"
        for line in out.stdout.splitlines():
            line = line.strip()
            assert "not found" not in line, f"{p}: {line}"
            if "=>" not in line:
                continue  # the vDSO and the loader itself
            target = os.path.realpath(line.split("=>")[1].split("(")[0].strip())
            # In the namespace the multiarch directory is ALLOWED, bind-mounted.
            system = os.path.dirname(target) in (MULTIARCH, ALLOWED) and os.path.exists(
                os.path.join(ALLOWED, os.path.basename(target)))
            ok = target.startswith(venv + os.sep) or system
            assert ok, f"{p} needs {line}: neither in the wheel nor an allowed system library"
    print(f"resolution: {len(files)} ELF files ({len(bundled)} bundled libraries) resolve to the "
          f"wheel or to glibc/libstdc++/libgcc_s/libz")


def run(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def epoch(path, **kw):
    loader = dspipe.Loader(path, batch_size=4, threads=2, shuffle=False, device="cpu",
                           output="numpy", **kw)
    return loader, [np.array(b["image"]) for b in loader]


def round_trip():
    os.makedirs(WORK, exist_ok=True)
    src_png, src_jpg = os.path.join(WORK, "png"), os.path.join(WORK, "jpg")
    dspipe.synth(src_png, count=12, size=(40, 56), seed=3, classes=3)
    dspipe.synth(src_jpg, count=12, size=(40, 56), seed=4, format="jpg")
    enc = dspipe.build(src_jpg, os.path.join(WORK, "jpg.lmdb"), progress=False)
    assert enc["records"] == 12, enc
    dspipe.verify(os.path.join(WORK, "jpg.lmdb"))
    tgz = os.path.join(WORK, "png.tar.gz")
    with tarfile.open(tgz, "w:gz") as t:
        t.add(src_png, arcname="png")
    arch = dspipe.build(tgz, os.path.join(WORK, "tgz.lmdb"), progress=False)
    assert arch["records"] == 12, arch
    root = os.path.join(WORK, "srv")
    dspipe.build(src_png, os.path.join(root, "ds"), store="raw", shards=2, progress=False)
    dspipe.verify(os.path.join(root, "ds"))
    _, jpg = epoch(os.path.join(WORK, "jpg.lmdb"))
    assert sum(len(b) for b in jpg) == 12
    _, local = epoch(os.path.join(root, "ds"))
    _, from_tgz = epoch(os.path.join(WORK, "tgz.lmdb"))
    for a, b in zip(local, from_tgz, strict=True):
        assert np.array_equal(a, b), "the .tar.gz build differs from the folder build"

    server = subprocess.Popen([sys.executable, SERVER, root], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("PORT "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}/files/ds/"
        cache = os.path.join(WORK, "cache")
        loader, remote = epoch(url, cache=cache)
        for a, b in zip(local, remote, strict=True):
            assert np.array_equal(a, b), "fetched batches differ from the local ones"
        _, again = epoch(url, cache=cache)
        assert len(again) == len(local)
        assert any(os.scandir(cache)), "nothing in the cache directory"
    finally:
        server.stdin.close()
        server.kill()
        server.wait()
    print(f"round trip: synth, build (encoded JPEG, .tar.gz, raw sharded), verify, load, fetch "
          f"{url} through the cache, read again: {sum(len(b) for b in local)} samples equal")

    dicom_round_trip()

    out = run(os.path.join(SCRIPTS, "dsconvert"), "info", os.path.join(root, "ds"))
    assert "12" in out, out
    run(os.path.join(SCRIPTS, "dsbench"), "--help")
    out = run(sys.executable, "-m", "dspipe")
    for needle in ("build: wheel", "libstdc++ static", "libraries:", "opencv: 4.6.0",
                   "libcurl: libcurl/", "libarchive: libarchive ", "SIMD: OpenCV "):
        assert needle in out, f"python -m dspipe lacks {needle!r}:\n{out}"
    print("CLIs (dsconvert info, dsbench --help) and python -m dspipe ran:")
    print("  " + "\n  ".join(out.rstrip().splitlines()))


def dicom_round_trip():
    """Three series, one case folder each: explicit VR, implicit VR (its elements' VRs come from
    the data dictionary, compiled into the wheel's DCMTK) and RLE Lossless (DCMTK's RLE decoder).
    Each slice k of a seed stores (4x4 ramp * 37 + 100 k) % 2048 with RescaleIntercept -1024, so
    every record holds those values minus 1024 (in some in-plane orientation) as int16."""
    src = os.path.join(WORK, "dicom")
    want = []
    for seed, case in (("ct3_explicit", "explicit"), ("ct3_implicit", "implicit"),
                       ("ct2_rle", "rle")):
        with open(os.path.join(DICOM_SEEDS, seed), "rb") as f:
            files = f.read().split(DICOM_NEXT)
        os.makedirs(os.path.join(src, "images", case))
        for i, data in enumerate(files):
            with open(os.path.join(src, "images", case, f"{i}.dcm"), "wb") as f:
                f.write(data)
        for k in range(len(files)):
            want.append(sorted(int(v) for v in
                               (np.arange(16) * 37 + 100 * k) % 2048 - 1024))
    out = os.path.join(WORK, "dicom.lmdb")
    built = dspipe.build(src, out, progress=False)
    assert built["records"] == len(want) == 8, built
    info = dspipe.info(out)
    assert info["sample_type"] == "int16", info
    loader = dspipe.Loader(out, batch_size=1, shuffle=False, device="cpu", output="numpy",
                           normalize=False)
    got = [sorted(int(v) for v in np.array(b["image"]).ravel()) for b in loader]
    assert sorted(got) == sorted(want), (got, want)
    print(f"DICOM: {len(want)} slices of 3 series (explicit VR, implicit VR, RLE) built as "
          f"{info['sample_type']}, values equal")


if __name__ == "__main__":
    check_resolution()
    round_trip()
