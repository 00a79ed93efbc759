# SPDX-License-Identifier: Apache-2.0
"""The wheel carries the licence of everything it bundles (scripts/wheel_licenses.py writes them
at build time; scripts/build-wheel.sh and tests/package/wheel_selfcontained.sh run this check).

Reads the wheel as a zip, nothing installed, the standard library only:
- <dist-info>/licenses/ holds LICENSE and NOTICE (dspipe's own) and third_party/INDEX.txt;
- every file in dspipe.libs/ has a line in INDEX.txt;
- every component NOTICE lists as compiled in ("  * <name> (static...") has a "static: <name>"
  line; the CUDA runtime's is required when an ELF file of the wheel has CUDA kernels (an
  .nv_fatbin section), and NOTICE lists it as "(static, when built with CUDA)";
- each licence file an INDEX line names is in the wheel and not empty, and so is every file
  under licenses/ (a /usr/share/common-licenses/X a copyright file refers to is there as
  third_party/common-licenses/X);
- RECORD lists every file of the wheel with its sha256 and size (the wheel was rewritten after
  auditwheel repair).

Usage: python wheel_licenses.py WHEEL      (exit 1 and the problems on stderr when it fails)
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import struct
import sys
import zipfile

COMMON = "/usr/share/common-licenses/"


def elf_sections(data):
    """Section names of a 64-bit little-endian ELF file ([] for anything else)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return []
    str_off, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    names = []
    for i in range(shnum):
        name, = struct.unpack_from("<I", data, shoff + i * shentsize)
        end = data.index(b"\0", str_off + name)
        names.append(data[str_off + name:end].decode("ascii", "replace"))
    return names


def notice_static(notice):
    """The components NOTICE lists as compiled in: lines "  * <name> (static...)"; name ->
    whether only a CUDA build has it."""
    found = {}
    for m in re.finditer(r"^\s*\* (.+?) \((static[^)]*)\)", notice, re.M):
        found[m.group(1)] = "CUDA" in m.group(2)
    return found


def check(path):
    problems = []
    z = zipfile.ZipFile(path)
    names = [i.filename for i in z.infolist() if not i.is_dir()]
    infos = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    if len(infos) != 1:
        return [f"expected one .dist-info folder, found {sorted(infos)}"], ""
    info = infos.pop()
    lic = f"{info}/licenses/"
    third = f"{lic}third_party/"

    def text(name):
        return z.read(name).decode("utf-8", "replace")

    for own in ("LICENSE", "NOTICE"):
        if lic + own not in names:
            problems.append(f"{lic}{own} is missing")
    if third + "INDEX.txt" not in names:
        return problems + [f"{third}INDEX.txt is missing"], ""

    index = {}
    for n, line in enumerate(text(third + "INDEX.txt").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) < 2 or not cols[1].split():
            problems.append(f"INDEX.txt:{n}: no licence file: {line!r}")
            continue
        index[cols[0]] = cols[1].split()

    def covered(component):
        files = index.get(component)
        if files is None:
            problems.append(f"{component}: not in INDEX.txt (no licence)")
            return
        for f in files:
            if third + f not in names:
                problems.append(f"{component}: its licence file third_party/{f} is missing")

    libs = sorted(n for n in names if n.startswith("dspipe.libs/"))
    if not libs:
        problems.append("no dspipe.libs/ (not an auditwheel-repaired wheel)")
    for n in libs:
        covered(n)

    cuda = any(".nv_fatbin" in elf_sections(z.read(n)) for n in names)
    static = notice_static(text(lic + "NOTICE")) if lic + "NOTICE" in names else {}
    if not static:
        problems.append("NOTICE lists no static component (\"  * <name> (static...)\")")
    for component, cuda_only in static.items():
        if cuda_only and not cuda:
            continue
        covered(f"static: {component}")
    if cuda and not any("CUDA" in c for c, only in static.items() if only):
        problems.append("the wheel has CUDA kernels but NOTICE lists no CUDA runtime")

    for n in names:
        if n.startswith(lic):
            data = z.read(n)
            if not data.strip():
                problems.append(f"{n} is empty")
            if n.startswith(third) and "/common-licenses/" not in n:
                for ref in set(re.findall(re.escape(COMMON) + r"([A-Za-z0-9._+-]+)",
                                          data.decode("utf-8", "replace"))):
                    ref = ref.rstrip(".")
                    # Debian 12's texts (a reference to another name: wheel_licenses.py warns)
                    if ref in KNOWN_COMMON and f"{third}common-licenses/{ref}" not in names:
                        problems.append(f"{n} refers to {COMMON}{ref}, which the wheel lacks")

    record = f"{info}/RECORD"
    if record not in names:
        problems.append("RECORD is missing")
    else:
        rows = {r[0]: r for r in csv.reader(io.StringIO(text(record))) if r}
        for n in names:
            if n == record:
                continue
            row = rows.get(n)
            if row is None:
                problems.append(f"RECORD does not list {n}")
                continue
            data = z.read(n)
            digest = "sha256=" + base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if row[1] != digest or row[2] != str(len(data)):
                problems.append(f"RECORD: {n}: {row[1]} {row[2]}, the file is {digest} "
                                f"{len(data)}")
    n_static = len(static) - (0 if cuda else sum(static.values()))
    summary = (f"{len(libs)} bundled libraries, {n_static} static components"
               f"{' (CUDA)' if cuda else ''}, "
               f"{sum(n.startswith(third) for n in names)} files in {third}")
    return problems, summary


# Debian 12's /usr/share/common-licenses.
KNOWN_COMMON = {"Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL", "GFDL-1.2", "GFDL-1.3", "GPL",
                "GPL-1", "GPL-2", "GPL-3", "LGPL", "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1",
                "MPL-2.0"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("Usage: ")[1])
    problems, summary = check(sys.argv[1])
    if problems:
        print(f"wheel licences: {sys.argv[1]}: {len(problems)} problems", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        sys.exit(1)
    print(f"wheel licences: every bundled library and static component has its licence "
          f"({summary})")


if __name__ == "__main__":
    main()
