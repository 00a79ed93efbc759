# SPDX-License-Identifier: Apache-2.0
"""Every C++ option reachable from Python by a keyword argument (issue 20, items 1 and 10).

The C++ side exports its option fields (include/dspipe/option_fields.h, static_asserts keep that
list complete); these tests fail when a field has no keyword (or a stated reason for none), when
a keyword is not documented in docs/PYTHON.md beside its C++ name, when the type stubs and the
binding disagree, and they use the options that were out of Python's reach (plain LMDB keys,
mean/std, size, crop, interpolation, channels, readahead)."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import warnings

import numpy as np

import pytest

import dspipe
from dspipe import _dspipe, _kwargs, _options
from conftest import COUNT, H, W, cpu_loader

torch = pytest.importorskip("torch")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def cpp_fields():
    """(struct, field) of every non-nested C++ option field."""
    structs = {s for s, _, _, _ in _dspipe.option_fields()}
    return [(s, f) for s, f, t, _ in _dspipe.option_fields() if t not in structs]


# Item 10: the 25 positional arguments are gone; a C++ field without a Python name fails here.
def test_every_cpp_option_field_has_a_python_name_or_a_reason():
    covered = {f for table in (_options.LOADER, _options.BUILD, _options.VERIFY)
               for k in table.values() for f in k.fields}
    missing = [f"{s}::{f}" for s, f in cpp_fields()
               if f"{s}::{f}" not in covered and f"{s}::{f}" not in _options.NOT_KWARGS]
    assert not missing, ("C++ option fields with no keyword argument (add one line to "
                         f"python/dspipe/_options.py, or a reason to NOT_KWARGS): {missing}")
    known = {f"{s}::{f}" for s, f in cpp_fields()}
    stale = sorted((covered | set(_options.NOT_KWARGS)) - known)
    assert not stale, f"keywords for C++ fields that do not exist: {stale}"
    assert len(known) > 80


def test_bound_structs_have_the_cpp_defaults():
    lo, d, b = _dspipe.LoaderOptions(), _dspipe.DeviceOptions(), _dspipe.BuildOptions()
    assert (lo.batch_size, lo.prefetch, lo.readahead, lo.cache) == (8, 2, -1, "off")
    assert lo.sampler.remainder == _dspipe.RemainderRule.pad and lo.sampler.block_size == 4096
    assert lo.augment.crop_ratio_min == 0.75 and lo.dataset.plain.image_key == "{key}"
    assert (d.device, d.slots, d.mask_dtype.name, d.pin_memory) == (-1, 2, "int64", False)
    assert b.commit_bytes == 64 << 20 and b.on_error == _dspipe.OnError.fail
    lo.sampler.seed = 11  # nested structs are the loader's own, not copies
    assert lo.sampler.seed == 11
    for s, f, _, bound in _dspipe.option_fields():  # every bound field reads and prints
        if bound:
            getattr(getattr(_dspipe, s)(), f)
    assert "batch_size=8" in repr(lo)


def test_unknown_names_are_refused_listing_close_ones(dataset):
    with pytest.raises(TypeError, match=r"'thread' \(did you mean 'threads'\?\)"):
        dspipe.Loader(dataset, thread=2)
    with pytest.raises(TypeError, match="'hflip_p' .*'hflip'"):
        dspipe.Loader(dataset, hflip_p=0.5)
    with pytest.raises(TypeError, match="unknown keyword argument 'zzz'; help"):
        dspipe.Loader(dataset, zzz=1)
    with pytest.raises(TypeError, match="'overwrte'.*'overwrite'"):
        dspipe.build(dataset, dataset + ".x", overwrte=True)
    with pytest.raises(ValueError, match=r"remainder='even'.*'pad', 'drop', 'uneven'"):
        dspipe.Loader(dataset, remainder="even")
    with pytest.raises(TypeError, match=r"batch_size='8'"):
        dspipe.Loader(dataset, batch_size="8")


def test_a_renamed_keyword_works_for_a_release_with_a_warning_naming_the_new_one(dataset):
    # threads= is the one name for worker threads (Loader, build, verify, the CLIs' --threads).
    with pytest.warns(DeprecationWarning,
                      match=r"dspipe.Loader\(num_threads=\) is deprecated: write threads="):
        loader = dspipe.Loader(dataset, num_threads=1, device="cpu")
    assert loader.options().threads == 1
    with pytest.raises(TypeError, match="num_threads= and threads= are one option"):
        dspipe.Loader(dataset, num_threads=1, threads=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dspipe.Loader(dataset, threads=2, device="cpu").options().threads == 2


def test_typed_kwargs_match_the_tables():
    assert set(_kwargs.LoaderArgs.__annotations__) | set(_kwargs._PlainArgs.__annotations__) \
        == set(_options.LOADER) | set(_options.LOADER_PYTHON)
    assert set(_kwargs.BuildArgs.__annotations__) | set(_kwargs._PlainArgs.__annotations__) \
        == set(_options.BUILD) - {"source", "output"}
    assert set(_kwargs.VerifyArgs.__annotations__) == set(_options.VERIFY)


def test_type_stubs_match_the_binding():
    stub = ast.parse(open(os.path.join(os.path.dirname(dspipe.__file__), "_dspipe.pyi")).read())
    classes = {n.name: n for n in stub.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in stub.body if isinstance(n, ast.FunctionDef)}
    public = {n for n in dir(_dspipe) if not n.startswith("__")}
    assert public - {"__doc__"} <= set(classes) | functions, \
        f"in the binding, not in _dspipe.pyi: {sorted(public - set(classes) - functions)}"
    assert (set(classes) | functions) <= public, "in _dspipe.pyi, not in the binding"
    for s, f, _, bound in _dspipe.option_fields():
        if not bound:
            continue
        members = {t.target.id for t in classes[s].body if isinstance(t, ast.AnnAssign)}
        assert f in members, f"_dspipe.pyi: {s}.{f} missing"
    for name in ("Loader", "Batch", "LoaderState"):
        stubbed = {getattr(t, "name", None) or getattr(getattr(t, "target", None), "id", None)
                   for t in classes[name].body}
        real = {m for m in dir(getattr(_dspipe, name)) if not m.startswith("_")}
        assert real <= stubbed, f"_dspipe.pyi {name}: missing {sorted(real - stubbed)}"


def test_every_keyword_is_documented_with_its_cpp_name():
    doc = open(os.path.join(ROOT, "docs", "PYTHON.md")).read()

    def rows(section):
        text = doc[doc.index(section):]
        text = text[:text.index("\n\n", text.index("|---"))]
        return {m.group(1): m.group(2) for m in
                re.finditer(r"^\| `(\w+)` \| ([^|]*) \|", text, re.M)}

    loader, build = rows("### Loader options"), rows("### Build and verify options")
    for table, documented in ((_options.LOADER, loader), (_options.BUILD, build),
                              (_options.VERIFY, build)):
        for kw, k in table.items():
            row = documented.get(kw) or (loader.get(kw) if kw in _options.PLAIN else None)
            assert row is not None, f"docs/PYTHON.md: no row for `{kw}`"
            for f in k.fields:
                assert f"`{f}`" in row, f"docs/PYTHON.md `{kw}`: C++ name {f} missing"
    for kw in _options.LOADER_PYTHON:
        assert kw in loader, f"docs/PYTHON.md: no row for `{kw}`"


def test_every_option_field_the_docs_name_exists():
    """The one vocabulary: `Struct::field` of an options struct, wherever a page, the README or
    ARCHITECTURE.md names it, is a field of that struct now (a rename leaves no page behind).
    The glossary's "Older names" and the CHANGELOG name the old spellings on purpose."""
    fields = {(s, f) for s, f, *_ in _dspipe.option_fields()}
    structs = {s for s, _ in fields}
    pages = [os.path.join(d, n) for d, _, names in os.walk(os.path.join(ROOT, "docs"))
             for n in names if n.endswith(".md")]
    pages += [os.path.join(ROOT, n) for n in ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")]
    stale, named = [], 0
    for page in pages:
        text = open(page, encoding="utf-8").read()
        if page.endswith("glossary.md"):
            text = text[:text.index("## Older names")]
        for m in re.finditer(r"\b([A-Z]\w*Options)::(\w+)", text):
            if m.group(1) in structs:
                named += 1
                if (m.group(1), m.group(2)) not in fields:
                    stale.append(f"{os.path.relpath(page, ROOT)}: {m.group(0)}")
    assert named > 50
    assert not stale, f"pages name options that are not fields: {stale}"


def test_every_option_named_in_a_message_has_a_python_name():
    """Opt("Struct::field") in the C++ sources: each renders as a keyword in Python errors."""
    names = _options.option_names()
    seen = set()
    for base, _, files in os.walk(os.path.join(ROOT, "lib")):
        for f in files:
            if f.endswith(".cc"):
                text = open(os.path.join(base, f)).read()
                seen |= set(re.findall(r'Opt\("(\w+::\w+)"', text))
                for pair in re.findall(r'Opt\("(\w+::\w+,\w+::\w+)"', text):  # "A,B" pairs
                    seen |= set(pair.split(","))
    assert len(seen) > 20
    missing = sorted(f for f in seen if f not in names and f not in _options.NOT_KWARGS)
    assert not missing, f"options in messages without a Python name: {missing}"


# Item 1: only flips reached Python; a plain LMDB could not even be normalized.
@pytest.fixture(scope="module")
def plain_lmdb(tmp_path_factory):
    lmdb = pytest.importorskip("lmdb")
    cv2 = pytest.importorskip("cv2")
    root = tmp_path_factory.mktemp("plain")
    dspipe.synth(root / "src", count=8, size=(H, W), seed=4, classes=3)
    env = lmdb.open(str(root / "plain.lmdb"), map_size=1 << 26)
    masks = lmdb.open(str(root / "masks.lmdb"), map_size=1 << 26)
    with env.begin(write=True) as txn, masks.begin(write=True) as mtxn:
        for i in range(8):
            img = cv2.imread(str(root / "src" / "images" / f"{i:06d}.png"))
            mask = cv2.imread(str(root / "src" / "masks" / f"{i:06d}.png"), cv2.IMREAD_GRAYSCALE)
            txn.put(f"img_{i}".encode(), cv2.imencode(".png", img)[1].tobytes())
            mtxn.put(f"img_{i}".encode(), cv2.imencode(".png", mask)[1].tobytes())
    env.close()
    masks.close()
    (root / "labels.csv").write_text("".join(f"img_{i},{i % 2}\n" for i in range(8)))
    return root


def test_plain_lmdb_options_mean_std_and_labels(plain_lmdb):
    with pytest.raises(ValueError, match="set mean and std"):  # now settable: the message says
        cpu_loader(plain_lmdb / "plain.lmdb")
    loader = cpu_loader(plain_lmdb / "plain.lmdb", mean=127.5, std=(64, 64, 64),
                        image_key="img_{id}", masks=plain_lmdb / "masks.lmdb",
                        labels=plain_lmdb / "labels.csv", shuffle=False, readahead=0,
                        os_readahead=True, verify_crc=True, detect_masks=False)
    b = next(iter(loader))
    assert b["mask"].shape == (4, H, W) and int(b["mask"].max()) <= 2
    assert b["label"].tolist() == [0, 1, 0, 1]
    assert loader.mean == [127.5] * 3 and loader.std == [64.0] * 3
    o = loader.options()
    assert (o.readahead, o.dataset.os_readahead, o.dataset.plain.image_key) == (0, True, "img_{id}")


def test_size_crop_interpolation_channels_reach_the_loader(dataset):
    loader = cpu_loader(dataset, size=(16, 24), crop_scale=(0.25, 0.5), crop_ratio=(0.5, 2.0),
                        interpolation="nearest", channels=1, normalize=False, shuffle=False)
    b = next(iter(loader))
    assert b["image"].shape == (4, 1, 16, 24) and b["mask"].shape == (4, 16, 24)
    o = loader.options()
    assert (o.height, o.width, o.channels) == (16, 24, 1)
    assert (o.augment.crop_scale_min, o.augment.crop_scale_max) == (0.25, 0.5)
    assert o.augment.image_interpolation == _dspipe.Interpolation.nearest
    # Nearest keeps pixel values exact: every value is an integer 0..255.
    assert torch.equal(b["image"], b["image"].round())
    full = next(iter(cpu_loader(dataset, size=(16, 24), normalize=False, shuffle=False)))
    assert full["image"].shape == (4, 3, 16, 24) and not torch.equal(full["image"][:, :1],
                                                                     b["image"])


# Main's LoaderOptions::transform in the option machinery: a bound field (the pipeline as its
# JSON text), the transform= keyword in every accepted form, part of the state's options, and
# its errors in keyword names.
def test_transform_is_an_option_field_and_keyword(dataset):
    import json

    import dspipe.transforms as T
    lo = _dspipe.LoaderOptions()
    assert lo.transform == ""
    lo.transform = T.Compose([T.HorizontalFlip()]).to_json()
    names = [t["__class_fullname__"] for t in json.loads(lo.transform)["transform"]["transforms"]]
    assert names == ["HorizontalFlip"]
    with pytest.raises(ValueError, match="NoSuchTransform"):
        lo.transform = '[{"__class_fullname__": "NoSuchTransform"}]'
    assert "HorizontalFlip" in lo.transform  # a refused spec leaves the field as it was
    assert "transform=" in repr(lo)
    lo.transform = ""
    assert lo.transform == ""

    aug = T.Compose([T.VerticalFlip(p=1.0)])
    for form in (aug, aug.to_dict(), aug.to_json()):
        loader = cpu_loader(dataset, transform=form, shuffle=False, normalize=False)
        assert json.loads(loader.options().transform) == aug.to_dict()
        state = loader.state_dict()
        assert json.loads(state["options"]["transform"]) == aug.to_dict()
    plain = next(iter(cpu_loader(dataset, shuffle=False, normalize=False)))
    flipped = next(iter(loader))
    assert torch.equal(flipped["image"], plain["image"].flip(2))
    with pytest.raises(ValueError, match=r"transform with hflip: set augment or transform"):
        cpu_loader(dataset, transform=aug, hflip=0.5)
    with pytest.raises(ValueError, match=r"transform with interpolation: set augment or trans"):
        cpu_loader(dataset, transform=aug, interpolation="area")
    with pytest.raises(ValueError, match=r"dspipe.Loader\(transform=.*NoSuchTransform"):
        cpu_loader(dataset, transform=[{"__class_fullname__": "NoSuchTransform"}])
    with pytest.raises(ValueError, match=r"leave mean and std empty"):
        cpu_loader(dataset, transform=T.Compose([T.Normalize()]), mean=100, std=50)
    # A state resumes only under the same pipeline; the message names the keyword.
    other = cpu_loader(dataset, transform=T.Compose([T.HorizontalFlip(p=1.0)]))
    with pytest.raises(ValueError, match=r"transform: state has \.\.\..*VerticalFlip"):
        other.load_state_dict(state)


def test_build_and_verify_take_every_build_option(tmp_path, dataset):
    src = os.path.dirname(dataset) + "/src"
    r = dspipe.build(src, tmp_path / "o.lmdb", store="raw", compression="none", zstd_level=5,
                     resize=(16, 24), gray=True, stats_sample=4, archive_buffer_mb=1,
                     commit_mb=1, sync=False, check="decode", progress=False)
    assert r["records"] == COUNT
    assert dspipe.info(tmp_path / "o.lmdb")["shape"] == (1, 16, 24)
    assert dspipe.verify(tmp_path / "o.lmdb", threads=1, max_listed=3, file_sha256=False) == \
        {"records": COUNT, "bad": 0}
    with pytest.raises(ValueError, match="compression='none' applies to store='raw'"):
        dspipe.build(src, tmp_path / "p.lmdb", compression="none", progress=False)


def test_decode_router_options_reach_python_and_errors_name_keywords(tmp_path, dataset):
    """main's JPEG router options (AugmentOptions::resize_shorter, BuildOptions::max_side and
    jpeg_quality) are keywords; their errors name the keywords, not dsconvert's flags."""
    loader = cpu_loader(dataset, size=(16, 16), resize_shorter=20, normalize=False, shuffle=False)
    assert next(iter(loader))["image"].shape == (4, 3, 16, 16)
    assert loader.options().augment.resize_shorter == 20
    with pytest.raises(ValueError, match=r"resize_shorter \(.*crop_scale < 1\) exclude"):
        cpu_loader(dataset, size=(16, 16), resize_shorter=20, crop_scale=(0.5, 1.0))
    src = os.path.dirname(dataset) + "/src"
    assert dspipe.build(src, tmp_path / "j.lmdb", max_side=16, jpeg_quality=90,
                        progress=False)["records"] == COUNT
    assert dspipe.info(tmp_path / "j.lmdb")["shape"] == (3, round(16 * H / W), 16)  # aspect kept


@pytest.mark.parametrize("kwargs,named", [
    ({"store": "raw", "jpeg_quality": 90}, ["jpeg_quality", "store='raw'"]),
    ({"max_side": 16, "resize": (8, 8)}, ["max_side", "resize"]),
    ({"jpeg_quality": 101}, ["jpeg_quality"]),
    ({"compression": "none"}, ["compression='none'", "store='raw'"]),
])
def test_bad_build_options_are_refused_before_anything_is_written(tmp_path, dataset, kwargs,
                                                                   named):
    """Options that exclude each other fail in the up-front check (ValidateBuildOptions, the one
    dsconvert uses), not at the first record: no output is left behind, and the message names
    the keywords (no "rerun with resume=True" for a build that never started)."""
    src = os.path.dirname(dataset) + "/src"
    out = tmp_path / "out.lmdb"
    with pytest.raises(ValueError) as e:
        dspipe.build(src, out, progress=False, **kwargs)
    for name in named:
        assert name in str(e.value), str(e.value)
    assert "resume" not in str(e.value) and "BuildOptions" not in str(e.value), str(e.value)
    assert not out.exists(), f"refused options left {out}"


def test_dsbench_takes_the_loader_options(dataset, tmp_path):
    import json
    import sysconfig
    dsbench = os.path.join(sysconfig.get_path("scripts"), "dsbench")
    out = tmp_path / "r.json"
    r = subprocess.run([dsbench, dataset, "--batches", "3", "--warmup", "0", "--threads", "2",
                        "--sample-ms", "0", "--size", "16x24", "--crop-scale", "0.25,0.5",
                        "--crop-ratio", "0.5,2", "--interpolation", "area", "--channels", "1",
                        "--mean", "100", "--std", "50", "-q", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    c = json.load(open(out))["config"]
    assert c["size"] == [16, 24] and c["channels"] == 1 and c["interpolation"] == "area"
    assert c["crop_scale"] == [0.25, 0.5] and c["mean"] == [100] and c["std"] == [50]
    r = subprocess.run([dsbench, dataset, "--crop-scale", "0.5,0.25"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "--crop-scale" in r.stderr, r.stderr


def test_numpy_output_with_uint8_masks(dataset):
    b = next(iter(cpu_loader(dataset, output="numpy", mask_dtype="uint8")))
    assert isinstance(b["mask"], np.ndarray) and b["mask"].dtype == np.uint8
    with pytest.warns(DeprecationWarning, match="mask_dtype"):
        cpu_loader(dataset, masks="uint8")


def test_help_lists_every_keyword_with_its_cpp_default():
    doc = dspipe.Loader.__doc__
    for kw, k in _options.LOADER.items():
        assert f"  {kw} [" in doc and " ".join(k.fields) in doc, kw
    assert "  batch_size [8] (LoaderOptions::batch_size)" in doc
    assert "  remainder ['pad']" in doc and "  crop_ratio [(0.75, " in doc
    assert "  commit_mb [64]" in dspipe.build.__doc__


def test_python_m_pydoc_runs():
    r = subprocess.run([sys.executable, "-c", "import dspipe; help(dspipe.Loader)"],
                       capture_output=True, text=True, timeout=120, env={**os.environ,
                                                                         "PAGER": "cat"})
    assert r.returncode == 0 and "threads [0] (LoaderOptions::threads)" in r.stdout, r.stderr
