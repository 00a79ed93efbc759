# SPDX-License-Identifier: Apache-2.0
"""Puts the licences of everything the wheel bundles into its dist-info (scripts/build-wheel.sh
runs it on the unpacked, auditwheel-repaired wheel; `wheel pack` then rewrites RECORD).

Into <name>-<version>.dist-info/licenses/third_party/ (the PEP 639 folder where
scikit-build-core already puts LICENSE and NOTICE):
- <package>.copyright for each Debian package a library in dspipe.libs/ came from: auditwheel
  names a bundled file after the system file with a hash inserted (libtbb-4d79fbbd.so.12.8 for
  libtbb.so.12.8), so the name without the hash is the system file's (in
  /usr/lib/x86_64-linux-gnu, or a soname ldconfig -p knows), `dpkg -S` gives its package, and
  /usr/share/doc/<package>/copyright (Debian's machine-readable copyright file) is its licence.
  Several libraries of one package share one file.
- one file per component compiled in statically: OpenCV, DCMTK, libarchive, libstdc++,
  nanobind, nlohmann_json and CLI11 (header-only) and, when the wheel was built with CUDA, the
  CUDA runtime (cudart).
- common-licenses/<name>: the texts Debian's copyright files refer to in
  /usr/share/common-licenses/ instead of quoting them (GPL-2, LGPL-2.1, Apache-2.0, ...).
- INDEX.txt: one line per bundled file (dspipe.libs/<file>) or static component
  ("static: OpenCV"), tab-separated: the component, its licence files (relative to
  third_party/, space-separated) and where they came from.
METADATA gets a License-File line for each new file (PEP 639) when it has License-File lines.

tests/package/wheel_licenses.py checks the result in the packed wheel.

Usage: python wheel_licenses.py UNPACKED_WHEEL_DIR --opencv PREFIX --dcmtk PREFIX
                                --cmake-cache CMakeCache.txt
"""
from __future__ import annotations

import argparse
import glob
import importlib.metadata
import os
import re
import subprocess
import sys

MULTIARCH = "/usr/lib/x86_64-linux-gnu"
COMMON = "/usr/share/common-licenses"
# What scripts/build-opencv.sh builds (apt-get source opencv=...).
OPENCV_DEBIAN_VERSION = "4.6.0+dfsg-12"
# auditwheel repair names a copy <file name up to its first dot>-<8 hex digits>.<the rest>, from
# the system file's name (the real file's: libtbb.so.12.8 -> libtbb-4d79fbbd.so.12.8,
# liblber-2.5.so.0.1.8 -> liblber-2-64f183c1.5.so.0.1.8).
BUNDLED = re.compile(r"^(?P<base>[^.]+)-[0-9a-f]{8}\.(?P<rest>.+)$")


def fail(msg):
    sys.exit(f"wheel_licenses.py: {msg}")


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def cmake_cache(path):
    values = {}
    for line in read(path).splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_.+-]*):[A-Z]+=(.*)$", line)
        if m:
            values[m.group(1)] = m.group(2)
    return values


def ldconfig_paths():
    """soname -> path of the x86-64 library ldconfig knows."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    paths = {}
    for line in out.splitlines()[1:]:
        m = re.match(r"^\s*(\S+) \(([^)]*)\) => (\S+)$", line)
        if m and "x86-64" in m.group(2):
            paths.setdefault(m.group(1), m.group(3))
    return paths


def dpkg_package(path):
    """The Debian package that installed path (merged /usr: tries /lib <-> /usr/lib too)."""
    real = os.path.realpath(path)
    tries = []
    for p in (real, path):
        tries.append(p)
        if p.startswith("/usr/lib/"):
            tries.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            tries.append("/usr" + p)
    for p in dict.fromkeys(tries):
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            # "libtbb12:amd64: /usr/lib/x86_64-linux-gnu/libtbb.so.12.9" (one line per package)
            pkg = r.stdout.splitlines()[0].split(": ", 1)[0].split(",")[0].strip()
            return pkg.split(":")[0]
    fail(f"no Debian package owns {path} ({real}): dpkg -S found nothing")


def dpkg_version(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "?"


def debian_copyright(pkg):
    path = f"/usr/share/doc/{pkg}/copyright"
    if not os.path.isfile(path):
        fail(f"{path} is missing (the package's machine-readable copyright file)")
    return path


class Licences:
    def __init__(self, wheel_dir):
        infos = glob.glob(os.path.join(wheel_dir, "*.dist-info"))
        if len(infos) != 1:
            fail(f"{wheel_dir}: expected one *.dist-info folder, found {infos}")
        self.dist_info = infos[0]
        self.licenses = os.path.join(self.dist_info, "licenses")
        self.dir = os.path.join(self.licenses, "third_party")
        os.makedirs(os.path.join(self.dir, "common-licenses"), exist_ok=True)
        self.index = []   # (component, [licence files], origin)
        self.written = {}  # licence file name -> its text

    def write(self, name, text):
        """Writes third_party/<name> (once: a second writer must bring the same text) and the
        /usr/share/common-licenses texts it refers to; returns [name, common-licenses/...]."""
        if not text.strip():
            fail(f"{name}: the licence text is empty")
        if name in self.written and self.written[name] != text:
            fail(f"{name}: two different texts")
        self.written[name] = text
        with open(os.path.join(self.dir, name), "w", encoding="utf-8") as f:
            f.write(text)
        files = [name]
        refs = {r.rstrip(".") for r in re.findall(re.escape(COMMON) + r"/([A-Za-z0-9._+-]+)", text)}
        for ref in sorted(refs):
            src = os.path.join(COMMON, ref)
            if not os.path.isfile(src):
                print(f"wheel_licenses.py: {name} refers to {src}, which does not exist",
                      file=sys.stderr)
                continue
            # GPL -> GPL-3 etc.: the text under the name the copyright file uses.
            dst = f"common-licenses/{ref}"
            if dst not in self.written:
                self.written[dst] = read(src)
                with open(os.path.join(self.dir, dst), "w", encoding="utf-8") as f:
                    f.write(self.written[dst])
            files.append(dst)
        return files

    def add(self, component, files, origin):
        self.index.append((component, files, origin))


def header(title, source):
    return (f"{title}\n{'=' * len(title)}\n"
            f"Licence text as found at build time: {source}\n"
            "(added to the dspipe wheel by scripts/build-wheel.sh)\n\n")


def bundled_libraries(lic, wheel_dir):
    libs_dir = os.path.join(wheel_dir, "dspipe.libs")
    names = sorted(os.listdir(libs_dir)) if os.path.isdir(libs_dir) else []
    if not names:
        fail(f"{libs_dir}: no bundled libraries (did auditwheel repair run?)")
    known = ldconfig_paths()
    for name in names:
        m = BUNDLED.match(name)
        if not m:
            fail(f"dspipe.libs/{name}: not an auditwheel name (<name>-<8 hex digits>.<rest>)")
        original = m.group("base") + "." + m.group("rest")
        system = os.path.join(MULTIARCH, original)
        if not os.path.exists(system):
            system = known.get(original)
        if system is None:
            fail(f"dspipe.libs/{name}: {original} is neither in {MULTIARCH} nor a soname "
                 "ldconfig knows")
        pkg = dpkg_package(system)
        copyright_path = debian_copyright(pkg)
        files = lic.write(f"{pkg}.copyright", read(copyright_path))
        lic.add(f"dspipe.libs/{name}", files,
                f"{os.path.realpath(system)}, Debian package {pkg} "
                f"{dpkg_version(pkg)}: {copyright_path}")


def static_parts(lic, args, cache):
    # OpenCV: scripts/build-opencv.sh deletes its source tree after the install, and OpenCV
    # installs no LICENSE on Linux; the source is Debian's own package, so Debian's copyright
    # file of that same source (libopencv-core406) is its licence, plus the third-party notice
    # the install does keep (Berkeley SoftFloat, compiled into core).
    pkg = "libopencv-core406"
    version = dpkg_version(pkg)
    if version != OPENCV_DEBIAN_VERSION:
        fail(f"{pkg} is {version}, not {OPENCV_DEBIAN_VERSION} (the source scripts/"
             "build-opencv.sh builds): its copyright file would describe another source")
    text = header("OpenCV 4.6.0 (static: core, imgproc, imgcodecs)",
                  f"/usr/share/doc/{pkg}/copyright (Debian's copyright file of the source "
                  f"package opencv {version}, which scripts/build-opencv.sh builds; the source "
                  "tree itself is not kept)")
    text += read(debian_copyright(pkg))
    for extra in sorted(glob.glob(os.path.join(args.opencv, "share", "licenses", "opencv4", "*"))):
        text += f"\n\n{'-' * 78}\n{os.path.basename(extra)} ({extra}, installed by the build)\n\n"
        text += read(extra)
    lic.add("static: OpenCV", lic.write("opencv.copyright", text),
            f"{args.opencv} (scripts/build-opencv.sh)")

    # DCMTK: the COPYRIGHT of the very source scripts/build-dcmtk.sh built (with its IJG libjpeg
    # and CharLS notices); Debian's libdcmtk17 copyright when the install lacks it.
    path = os.path.join(args.dcmtk, "share", "doc", "dcmtk", "COPYRIGHT")
    if not os.path.isfile(path):
        path = debian_copyright("libdcmtk17")
    text = header("DCMTK 3.6.7 (static: ofstd, oflog, dcmdata, dcmimgle, dcmimage, dcmjpeg, "
                  "dcmjpls)", path) + read(path)
    lic.add("static: DCMTK", lic.write("dcmtk.copyright", text),
            f"{args.dcmtk} (scripts/build-dcmtk.sh)")

    # Static archives and header-only libraries from Debian packages: the package that owns the
    # file the build used.
    cxx = cache.get("CMAKE_CXX_COMPILER", "c++")
    libstdcxx = subprocess.run([cxx, "-print-file-name=libstdc++.a"], capture_output=True,
                               text=True, check=True).stdout.strip()
    debian = [
        ("libarchive", cache.get("DSPIPE_WHEEL_LIBARCHIVE_A", f"{MULTIARCH}/libarchive.a"),
         "static"),
        ("libstdc++", libstdcxx, "static, GCC Runtime Library Exception"),
    ]
    for name, var, config in (("nlohmann_json", "nlohmann_json_DIR", "nlohmann_jsonConfig.cmake"),
                              ("CLI11", "CLI11_DIR", "CLI11Config.cmake")):
        d = cache.get(var)
        if not d or not os.path.isfile(os.path.join(d, config)):
            fail(f"{var} in {args.cmake_cache} does not name a folder with {config}")
        debian.append((name, os.path.join(d, config), "header-only"))
    for name, path, how in debian:
        if not os.path.isfile(path):
            fail(f"{name}: {path} does not exist")
        pkg = dpkg_package(path)
        files = lic.write(f"{pkg}.copyright", read(debian_copyright(pkg)))
        lic.add(f"static: {name}", files,
                f"{how}; {os.path.realpath(path)}, Debian package {pkg} {dpkg_version(pkg)}: "
                f"/usr/share/doc/{pkg}/copyright")

    # nanobind: the licence files of the pip package the build used (this venv's), and the
    # MIT notice of tsl::robin_map, which nanobind compiles in (its licence is only in its header).
    dist = importlib.metadata.distribution("nanobind")
    paths = [dist.locate_file(f) for f in dist.files or []
             if re.search(r"(^|/)(LICEN[CS]E|COPYING)[^/]*$", str(f), re.I)]
    if not paths:
        fail(f"nanobind {dist.version}: no licence file in its pip package")
    text = header(f"nanobind {dist.version} (static)", ", ".join(str(p) for p in paths))
    text += "\n".join(read(p) for p in paths)
    robin = os.path.join(str(dist.locate_file("nanobind")), "ext", "robin_map", "include", "tsl",
                         "robin_map.h")
    if os.path.isfile(robin):
        m = re.match(r"\s*/\*\*?(.*?)\*/", read(robin), re.S)
        if m and "License" in m.group(1):
            notice = "\n".join(re.sub(r"^\s*\* ?", "", line) for line in
                               m.group(1).strip("\n").splitlines())
            text += (f"\n\n{'-' * 78}\ntsl::robin_map (nanobind/ext/robin_map, compiled into "
                     f"nanobind; the notice of {robin})\n\n{notice}\n")
    lic.add("static: nanobind", lic.write("nanobind.license", text),
            f"pip package nanobind {dist.version}")

    # The CUDA runtime, linked statically when the wheel has the CUDA path (the build's
    # DSPIPE_CUDA was not OFF and CMake found cudart_static): NVIDIA's EULA from that toolkit.
    cudart = cache.get("CUDA_cudart_static_LIBRARY", "")
    if cache.get("DSPIPE_CUDA", "AUTO").upper() != "OFF" and os.path.isfile(cudart):
        root = os.path.dirname(os.path.dirname(os.path.realpath(cudart)))
        found = sorted(glob.glob(os.path.join(root, "EULA.txt")) +
                       glob.glob(os.path.join(root, "dist-info", "nvidia_cuda_runtime-*",
                                              "licenses", "*")) +
                       glob.glob(os.path.join(root, "doc", "EULA.txt")))
        if not found:
            fail(f"the wheel links {cudart} but no EULA.txt (or nvidia_cuda_runtime licence) "
                 f"was found under {root}")
        text = header("NVIDIA CUDA runtime (cudart, static)", found[0]) + read(found[0])
        lic.add("static: CUDA runtime", lic.write("cuda-runtime.license", text),
                f"{os.path.realpath(cudart)}: {found[0]}")


def add_metadata(lic, names):
    path = os.path.join(lic.dist_info, "METADATA")
    text = read(path)
    head, sep, body = text.partition("\n\n")
    if "\nLicense-File:" not in "\n" + head:
        return
    lines = head.split("\n")
    last = max(i for i, line in enumerate(lines) if line.startswith("License-File:"))
    have = {line.split(":", 1)[1].strip() for line in lines if line.startswith("License-File:")}
    new = [f"License-File: {n}" for n in names if n not in have]
    lines[last + 1:last + 1] = new
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + sep + body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel_dir")
    ap.add_argument("--opencv", required=True)
    ap.add_argument("--dcmtk", required=True)
    ap.add_argument("--cmake-cache", required=True)
    args = ap.parse_args()
    cache = cmake_cache(args.cmake_cache)
    lic = Licences(args.wheel_dir)
    bundled_libraries(lic, args.wheel_dir)
    static_parts(lic, args, cache)
    lines = ["# The third-party code in this wheel and its licence files (paths relative to this",
             "# folder). One line per file in dspipe.libs/ and per component compiled in",
             "# statically, tab-separated: component, licence files (space-separated), origin.",
             "# Written by scripts/build-wheel.sh (scripts/wheel_licenses.py)."]
    for component, files, origin in lic.index:
        lines.append(f"{component}\t{' '.join(files)}\t{origin}")
    with open(os.path.join(lic.dir, "INDEX.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    names = ["third_party/INDEX.txt"] + [f"third_party/{n}" for n in sorted(lic.written)]
    add_metadata(lic, names)
    pkgs = {n for n in lic.written if not n.startswith("common-licenses/")}
    libs = sum(c.startswith("dspipe.libs/") for c, _, _ in lic.index)
    print(f"licences: {libs} bundled libraries and {len(lic.index) - libs} static components: "
          f"{len(pkgs)} licence files and {len(lic.written) - len(pkgs)} common licence texts in "
          f"{os.path.relpath(lic.dir, args.wheel_dir)}/")


if __name__ == "__main__":
    main()
