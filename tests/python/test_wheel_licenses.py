# SPDX-License-Identifier: Apache-2.0
"""tests/package/wheel_licenses.py, the wheel's licence check, on small hand-made wheels: it
passes a complete one and names what is missing in each broken copy (a bundled library without
a licence, an empty licence file, a static component of NOTICE without a line, a stale RECORD).
The real wheel is checked by scripts/build-wheel.sh and tests/package/wheel_selfcontained.sh."""
import base64
import hashlib
import importlib.util
import os
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INFO = "dspipe-0.1.0.dist-info"
THIRD = f"{INFO}/licenses/third_party/"


def _checker():
    spec = importlib.util.spec_from_file_location(
        "wheel_licenses", os.path.join(ROOT, "tests", "package", "wheel_licenses.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _files():
    with open(os.path.join(ROOT, "NOTICE"), encoding="utf-8") as f:
        notice = f.read()
    statics = _checker().notice_static(notice)
    index = ["# component\tlicence files\torigin",
             "dspipe.libs/libfoo-0123abcd.so.1\tlibfoo1.copyright common-licenses/GPL-2\tlibfoo1",
             "dspipe.libs/libbar-89abcdef.so.2.0\tlibfoo1.copyright\tlibfoo1"]
    files = {
        "dspipe/__init__.py": b"",
        "dspipe.libs/libfoo-0123abcd.so.1": b"not an ELF file",
        "dspipe.libs/libbar-89abcdef.so.2.0": b"not an ELF file either",
        f"{INFO}/METADATA": b"Metadata-Version: 2.4\nName: dspipe\nVersion: 0.1.0\n",
        f"{INFO}/WHEEL": b"Wheel-Version: 1.0\n",
        f"{INFO}/licenses/LICENSE": b"Apache License\n",
        f"{INFO}/licenses/NOTICE": notice.encode(),
        f"{THIRD}libfoo1.copyright": b"License: GPL-2\n see /usr/share/common-licenses/GPL-2.\n",
        f"{THIRD}common-licenses/GPL-2": b"GNU GENERAL PUBLIC LICENSE\n",
    }
    for name, cuda_only in statics.items():
        if not cuda_only:
            slug = name.lower().replace(" ", "-")
            files[f"{THIRD}{slug}.license"] = f"the licence of {name}\n".encode()
            index.append(f"static: {name}\t{slug}.license\tstatic")
    files[f"{THIRD}INDEX.txt"] = ("\n".join(index) + "\n").encode()
    return files


def _write(path, files, record=True):
    with zipfile.ZipFile(path, "w") as z:
        rows = []
        for name, data in files.items():
            z.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            rows.append(f"{name},sha256={digest.decode()},{len(data)}")
        if record:
            z.writestr(f"{INFO}/RECORD", "\n".join(rows + [f"{INFO}/RECORD,,"]) + "\n")
    return str(path)


def test_notice_lists_the_static_components():
    with open(os.path.join(ROOT, "NOTICE"), encoding="utf-8") as f:
        statics = _checker().notice_static(f.read())
    for name in ("OpenCV", "DCMTK", "libarchive", "libstdc++", "nanobind"):
        assert statics.get(name) is False, statics
    assert statics.get("CUDA runtime") is True, statics


def test_a_complete_wheel_passes(tmp_path):
    problems, summary = _checker().check(_write(tmp_path / "ok.whl", _files()))
    assert problems == []
    assert summary.startswith("2 bundled libraries")


def test_each_missing_licence_is_named(tmp_path):
    check = _checker().check
    files = _files()
    del files[f"{THIRD}libfoo1.copyright"]  # both libraries' licence
    problems, _ = check(_write(tmp_path / "a.whl", files))
    assert any("dspipe.libs/libfoo-0123abcd.so.1: its licence file" in p for p in problems)
    assert any("dspipe.libs/libbar-89abcdef.so.2.0: its licence file" in p for p in problems)

    files = _files()
    files["dspipe.libs/libnew-00000000.so"] = b"bundled, not in INDEX.txt"
    files[f"{THIRD}opencv.license"] = b"  \n"
    del files[f"{THIRD}common-licenses/GPL-2"]
    files[f"{THIRD}INDEX.txt"] = b"\n".join(
        line for line in files[f"{THIRD}INDEX.txt"].split(b"\n")
        if not line.startswith(b"static: DCMTK"))
    problems, _ = check(_write(tmp_path / "b.whl", files))
    assert "dspipe.libs/libnew-00000000.so: not in INDEX.txt (no licence)" in problems
    assert f"{THIRD}opencv.license is empty" in problems
    assert "static: DCMTK: not in INDEX.txt (no licence)" in problems
    assert any("refers to /usr/share/common-licenses/GPL-2" in p for p in problems)


def test_record_must_match(tmp_path):
    files = _files()
    path = _write(tmp_path / "r.whl", files)
    with zipfile.ZipFile(path, "a") as z:
        z.writestr(f"{THIRD}late.txt", b"added after RECORD was written")
    problems, _ = _checker().check(path)
    assert problems == [f"RECORD does not list {THIRD}late.txt"]
