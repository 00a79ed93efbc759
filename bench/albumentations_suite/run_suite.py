# SPDX-License-Identifier: Apache-2.0
"""albumentations 2.0.8's own test suite as a check of dspipe (issue 40).

Collects the suite's parametrized items with pytest's own collection (from a checkout or an
extract of albumentations' repository: nothing of it is copied here), keeps those that apply ONE
transform dspipe implements to a uint8 1- or 3-channel image, and runs each through
dspipe.Loader: a small dataset of the item's image size is built from PNG files, the Loader runs
`A.Compose([transform(p=1, **params)])` on it, and every batch sample is compared with
albumentations' own `apply` / `apply_to_mask` given the parameters dspipe drew for that
(seed, epoch, index) (`_dspipe.transforms_draws`, the method of
tests/python/test_transforms_albumentations.py; the output side here is the Loader's batch).

Each kept item ends as one of:
  exact                  every image equal, every mask equal
  within 1               masks equal, images within 1 level
  equal in distribution  per-pixel random transforms (GaussNoise, CoarseDropout's random fills):
                         the same shape and mask, and per sample the difference to the clean
                         image has the reference's mean (within 0.5 + 3 standard errors) and
                         standard deviation (within 0.5 + 5%), and as many pixels changed alike
                         in channels 0 and 1 (within 5 points: shared or per-channel noise);
                         the reference is albumentations' own output with dspipe's drawn
                         sigma / mean / holes and its own noise
  differs                anything else (the largest |diff|, shape or mask mismatch)
  refused                dspipe refused the pipeline (the first line of its message)
  error                  something raised while running or comparing (its first line)

It is a report, not a test: the exit code is 0 whatever the counts. Deterministic: the pixels,
seeds and sample indices are fixed, so a rerun gives the same table.

    git clone --branch 2.0.8 https://github.com/albumentations-team/albumentations /tmp/alb
    PYTHONPATH=<dspipe's python root> python bench/albumentations_suite/run_suite.py \
        --albumentations-tests /tmp/alb/tests [--json out.json]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import io
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SAMPLES = 4          # records per dataset (one batch)
SEEDS = range(4)     # Loader seeds (--seeds): SAMPLES * len(SEEDS) samples compared per case
EPOCH = 0            # the first pass of a new Loader is epoch 0

# The transform is the one callspec value that is an albumentations transform (a class or an
# instance); its arguments are these keys' dicts, plus the callspec values named as its arguments.
PARAM_KEYS = ("params", "transform_params", "crop_params")
# Arguments a test body adds to (or renames from) its parametrized ones, so that the case is
# the one the suite runs (read from the 2.0.8 sources these tests are in).
BODY_ARGS = {
    "test_pad_position_equivalence": {"pad_if_needed": True, "fill": 0},        # test_crop.py
    "test_mask_interpolation": {"interpolation": 1, "mask_interpolation": 1,    # test_core.py
                                "fill": 10, "fill_mask": 10},
    # test_resize_area_downscale.py: each test's first transform (its reference is the second)
    "test_downscale_area_option_matches_area_interp": {"area_for_downscale": "image"},
    "test_downscale_area_option_for_mask": {"area_for_downscale": "image_mask",
                                            "mask_interpolation": 0},
    "test_upscale_ignores_area_for_downscale": {"area_for_downscale": "image"},
}
RENAMED = {"blur_limit_input": "blur_limit"}  # test_blur.py: aug(blur_limit=blur_limit_input)
# Image sizes the tests build in their bodies where no parameter or fixture gives one.
BODY_SHAPES = {"test_padding_color": (4, 4),  # test_transforms.py: np.zeros((4, 4[, c]))
               # test_resize_area_downscale.py: get_downscale_image / get_upscale_image
               "test_downscale_area_option_matches_area_interp": (100, 100),
               "test_downscale_area_option_for_mask": (100, 100),
               "test_upscale_ignores_area_for_downscale": (50, 50)}
# test_resize_area_downscale.py parametrizes both param sets; each test uses one of them.
PARAM_SET = {"test_upscale_ignores_area_for_downscale": "upscale_params",
             "test_downscale_area_option_matches_area_interp": "downscale_params",
             "test_downscale_area_option_for_mask": "downscale_params"}
DEFAULT_SHAPE = (100, 100)  # conftest.py's `image` / `mask` fixtures and SQUARE_UINT8_IMAGE
RECT_SHAPE = (101, 99)      # conftest.py's RECTANGULAR_UINT8_IMAGE


@dataclass
class Case:
    """One kept item: the transform it applies and the image it applies it to."""
    item: str
    cls: type
    params: dict[str, Any]
    height: int
    width: int
    channels: int
    instance: Any = None  # a transform instance the suite parametrizes directly

    def key(self) -> str:
        what = repr(self.instance) if self.instance is not None else repr(sorted(
            self.params.items(), key=lambda kv: kv[0]))
        return f"{self.cls.__name__}|{what}|{self.height}x{self.width}x{self.channels}"


@dataclass
class Result:
    status: str                     # exact, within 1, equal in distribution, differs, ...
    max_diff: int = 0
    detail: str = ""
    samples: int = 0
    items: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- collection


class _Collector:
    """A pytest plugin that keeps the collected items and the collection errors."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.errors: list[str] = []

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        self.items = list(items)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            text = str(report.longrepr).strip().splitlines()
            self.errors.append(f"{report.nodeid}: {text[-1] if text else 'failed'}")


def collect(tests_dir: Path) -> _Collector:
    import pytest
    plugin = _Collector()
    args = ["--collect-only", "-p", "no:cacheprovider", "-p", "no:terminal",
            "--continue-on-collection-errors", "--rootdir", str(tests_dir.parent),
            "-W", "ignore", str(tests_dir)]
    with contextlib.redirect_stdout(io.StringIO()):
        pytest.main(args, plugins=[plugin])
    return plugin


def _is_transform(v: Any, A: Any) -> bool:
    base = A.core.transforms_interface.BasicTransform
    comp = A.core.composition.BaseCompose
    return (inspect.isclass(v) and issubclass(v, (base, comp))) or isinstance(v, (base, comp))


def _init_args(cls: type) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters) - {"self", "args", "kwargs"}


def _image_shape(item: Any, cs: dict[str, Any]) -> tuple[tuple[int, int, int] | None, str]:
    """(h, w, channels) of the image the item applies its transform to, or (None, why not)."""
    name = item.originalname
    if "float" in name and "uint8_float32" not in name:
        return None, "float32 image"
    try:
        src = inspect.getsource(item.function)
    except (OSError, TypeError):
        src = ""
    if "multichannel" in name or "SQUARE_MULTI" in src:
        return None, "more than 3 channels"
    for key in ("image", "img"):
        v = cs.get(key)
        if isinstance(v, np.ndarray):
            if v.dtype != np.uint8:
                return None, "float32 image"
            c = 1 if v.ndim == 2 else v.shape[2]
            return (v.shape[0], v.shape[1], c), ""
    if "shape" in cs:
        s = tuple(cs["shape"])
        return (s[0], s[1], 1 if len(s) == 2 else s[2]), ""
    h, w = BODY_SHAPES.get(name, RECT_SHAPE if "RECTANGULAR_UINT8" in src else DEFAULT_SHAPE)
    if "image_shape" in cs:
        h, w = tuple(cs["image_shape"])[:2]
    c = int(cs.get("num_channels", cs.get("img_channels", 3)))
    return (h, w, c), ""


def make_case(item: Any, supported: set[str], A: Any) -> Case | str:
    """The item as a Case, or the reason it is skipped."""
    path = str(item.path)
    name = item.originalname
    low = name.lower()
    if "transforms3d" in path or "volume" in low or "3d" in low:
        return "3D / volumes"
    if "serializ" in path or "serializ" in low:
        return "serialization"
    if any(k in low or k in item.path.name for k in ("bbox", "keypoint")):
        return "bboxes / keypoints"
    cs = dict(getattr(item, "callspec", None).params) if hasattr(item, "callspec") else {}
    found = [(k, v) for k, v in cs.items() if _is_transform(v, A)]
    if not found:
        return "no transform among its parameters"
    if len(found) > 1:
        return "several transforms"
    key, t = found[0]
    cls = t if inspect.isclass(t) else type(t)
    if issubclass(cls, A.core.composition.BaseCompose):
        return "a container (Compose, SomeOf, ...), not one transform"
    if cls.__name__ not in supported:
        return "a transform dspipe does not implement"
    shape, why = _image_shape(item, cs)
    if shape is None:
        return why
    if shape[2] not in (1, 3):
        return "more than 3 channels"
    if not inspect.isclass(t):
        return Case(item.nodeid, cls, {}, *shape, instance=t)
    params: dict[str, Any] = {}
    for k in (PARAM_SET[name],) if name in PARAM_SET else PARAM_KEYS:
        if isinstance(cs.get(k), dict):
            params.update(copy.deepcopy(cs[k]))
    accepted = _init_args(cls)
    for k, v in cs.items():
        k = RENAMED.get(k, k)
        if k in accepted and k not in params and not _is_transform(v, A):
            params[k] = copy.deepcopy(v)
    params.update(BODY_ARGS.get(name, {}))
    if shape[2] == 1:  # test_images_as_target: a per-channel fill becomes its first value
        for k in ("fill", "fill_mask"):
            if k in params and not np.isscalar(params[k]) and params[k] is not None:
                params[k] = params[k][0]
    params["p"] = 1
    return Case(item.nodeid, cls, params, *shape)


# --------------------------------------------------------------------------- datasets


def build_dataset(root: Path, h: int, w: int, c: int) -> tuple[str, np.ndarray, np.ndarray]:
    """SAMPLES uniform-noise uint8 images (the suite's cv2.randu images) with 0/1 masks (its
    `mask` fixture), as PNGs, built into a raw dataset; returns (path, images, masks) as the
    Loader reads them back (N, H, W, C) and (N, H, W)."""
    import cv2
    import dspipe
    src = root / f"src-{h}x{w}x{c}"
    (src / "images").mkdir(parents=True, exist_ok=True)
    (src / "masks").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(h * 100003 + w * 101 + c)
    written = []
    for i in range(SAMPLES):
        img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        written.append(img)
        cv2.imwrite(str(src / "images" / f"s{i}.png"), img[..., 0] if c == 1 else img[..., ::-1])
        cv2.imwrite(str(src / "masks" / f"s{i}.png"),
                    rng.integers(0, 2, (h, w), dtype=np.uint8))
    db = str(root / f"db-{h}x{w}x{c}.lmdb")
    dspipe.build(src, db, store="raw", gray=(c == 1), progress=False)
    plain = dspipe.Loader(db, batch_size=SAMPLES, shuffle=False, device="cpu", output="numpy",
                          normalize=False)
    raw = next(iter(plain))
    images = np.asarray(raw["image"]).transpose(0, 2, 3, 1).astype(np.uint8)
    if not np.array_equal(images, np.stack(written)):
        raise RuntimeError(f"{db}: the Loader does not give back the pixels written")
    return db, images, np.asarray(raw["mask"]).astype(np.uint8)


# --------------------------------------------------------------------------- comparison


def kwargs_for(params: dict[str, Any], img: np.ndarray) -> dict[str, Any]:
    """dspipe's drawn parameters (JSON) as albumentations' apply() takes them."""
    kw = dict(params)
    for k in ("matrix", "bbox_matrix"):
        if k in kw:
            kw[k] = np.array(kw[k], dtype=np.float64)
    for k in ("map_x", "map_y"):
        if k in kw:
            kw[k] = np.array(kw[k], dtype=np.float32)
    for k in ("output_shape", "crop_coords"):
        if k in kw:
            kw[k] = tuple(kw[k])
    if isinstance(kw.get("kernel"), list):
        kw["kernel"] = np.array(kw["kernel"])
    if "holes" in kw:
        kw["holes"] = np.array(kw["holes"], dtype=np.int64).reshape(-1, 4)
    kw["shape"] = img.shape
    return kw


def data_dependent(t: Any, params: dict[str, Any], img: np.ndarray) -> dict[str, Any]:
    """Apply arguments albumentations computes from the image (RandomBrightnessContrast's beta
    by the image mean, its safe range), by albumentations' formula, from dspipe's draws."""
    if type(t).__name__ != "RandomBrightnessContrast":
        return {}
    out = {}
    if not t.brightness_by_max:
        out["beta"] = params["beta_fraction"] * float(np.mean(img))
    if t.ensure_safe_range:
        b = float(np.clip(params["beta_fraction"] * 255.0, 0, 255))
        out = {"beta": b, "alpha": min(params["alpha"], (255.0 - b) / 255.0)}
    return out


def per_pixel_random(t: Any) -> bool:
    name = type(t).__name__
    return name == "GaussNoise" or (name == "CoarseDropout" and isinstance(t.fill, str)
                                    and t.fill.startswith("random"))


def reference(A: Any, t: Any, draws: list[dict[str, Any]], img: np.ndarray, mask: np.ndarray,
              noise_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """albumentations' output for dspipe's draws (its own noise for per-pixel randomness)."""
    if not draws and type(t).__name__ in ("Normalize", "ToFloat"):  # the normalize stage
        draws = [{"params": {}}]
    if not draws:  # drawn as a no-op: albumentations returns the input
        return img, mask
    if len(draws) != 1:
        raise RuntimeError(f"dspipe drew {len(draws)} transforms for one")
    params = draws[0]["params"]
    if type(t).__name__ == "GaussNoise":  # albumentations' noise at dspipe's sigma and mean
        g = A.Compose([A.GaussNoise(std_range=(params["sigma"],) * 2,
                                    mean_range=(params["mean"],) * 2, per_channel=t.per_channel,
                                    noise_scale_factor=t.noise_scale_factor, p=1)],
                      seed=noise_seed)
        return g(image=img.copy())["image"], mask
    kw = kwargs_for(params, img)
    if type(t).__name__ == "RGBShift":  # its noise map is the drawn shift per channel, px
        kw["noise_map"] = np.asarray(params["shift"][:(1 if img.ndim == 2 else img.shape[2])],
                                     np.float32)
    if per_pixel_random(t):
        kw["seed"] = noise_seed
    kw.update(data_dependent(t, params, img))
    ref = np.asarray(t.apply(img.copy(), **kw))
    ref_mask = np.asarray(t.apply_to_mask(mask.copy(), **kw)) if hasattr(t, "apply_to_mask") \
        else mask
    return ref, ref_mask


def same_distribution(ours: np.ndarray, ref: np.ndarray, clean: np.ndarray) -> str:
    """'' when ours - clean and ref - clean have the same mean and standard deviation (the rule
    in the module docstring), else what differs."""
    if ours.shape != clean.shape:
        return "shape differs from the input's"
    a = ours.astype(np.float64) - clean
    b = ref.astype(np.float64) - clean
    n = a.size
    se = np.sqrt((a.var() + b.var()) / n)
    if abs(a.mean() - b.mean()) > 0.5 + 3 * se:
        return f"mean of the change {a.mean():.2f} vs {b.mean():.2f}"
    if abs(a.std() - b.std()) > 0.5 + 0.05 * b.std():
        return f"std of the change {a.std():.2f} vs {b.std():.2f}"
    if a.ndim == 3 and a.shape[2] > 1:  # noise shared across channels (per_channel=False) or not
        sa, sb = (np.mean(x[..., 0] == x[..., 1]) for x in (a, b))
        if abs(sa - sb) > 0.05:
            return f"share of pixels changed alike in channels 0 and 1 {sa:.3f} vs {sb:.3f}"
    return ""


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def run_case(A: Any, case: Case, ds: tuple[str, np.ndarray, np.ndarray]) -> Result:
    import dspipe
    from dspipe import _dspipe
    db, images, masks = ds
    try:
        t = case.instance if case.instance is not None else case.cls(**case.params)
        t.p = 1
        spec = json.dumps(A.to_dict(A.Compose([t])))
    except Exception as e:  # noqa: BLE001 (albumentations refused the suite's own arguments)
        return Result("error", detail=f"albumentations: {first_line(e)}")
    noisy = per_pixel_random(t)
    worst, samples, problems = 0, 0, []
    for seed in SEEDS:
        try:
            loader = dspipe.Loader(db, batch_size=SAMPLES, shuffle=False, device="cpu",
                                   output="numpy", normalize=False, transform=spec, seed=seed)
        except (ValueError, TypeError) as e:
            return Result("refused", detail=first_line(e))
        try:
            batch = next(iter(loader))
        except Exception as e:  # noqa: BLE001
            return Result("error", detail=f"dspipe.Loader: {first_line(e)}")
        for k, index in enumerate(np.asarray(batch["index"])):
            img, mask = images[index], masks[index]
            if case.channels == 1:
                img = img[..., 0]
            got = np.asarray(batch["image"][k]).transpose(1, 2, 0)
            got_mask = np.asarray(batch["mask"][k])
            try:
                draws = json.loads(_dspipe.transforms_draws(spec, img.shape[0], img.shape[1],
                                                            mask, seed, EPOCH, int(index)))
                ref, ref_mask = reference(A, t, draws, img, mask, seed * 1000 + int(index))
            except Exception as e:  # noqa: BLE001
                return Result("error", detail=f"albumentations apply: {first_line(e)}")
            ref = ref.reshape(ref.shape[0], ref.shape[1], -1)
            samples += 1
            where = f"seed {seed} index {index}"
            if got.shape != ref.shape or got_mask.shape != ref_mask.shape:
                problems.append(f"{where}: shape {got.shape}/{got_mask.shape} vs "
                                f"{ref.shape}/{ref_mask.shape}")
                continue
            if not np.array_equal(got_mask, ref_mask):
                problems.append(f"{where}: mask differs at {int((got_mask != ref_mask).sum())} "
                                "pixels")
            if ref.dtype != np.uint8:  # Normalize, ToFloat: float32 out, compared in ulps
                d = np.abs(got.astype(np.float64) - ref)
                ulps = d / np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
                worst = max(worst, int(np.ceil(ulps.max())) if ulps.size else 0)
                continue
            if not np.array_equal(got, np.round(got)):
                problems.append(f"{where}: non-integer image values")
            if noisy:
                why = same_distribution(got, ref, img.reshape(ref.shape))
                if why:
                    problems.append(f"{where}: {why}")
                continue
            worst = max(worst, int(np.abs(got.astype(np.int64) - ref.astype(np.int64)).max())
                        if ref.size else 0)
    if problems:
        return Result("differs", worst, "; ".join(problems[:3]), samples)
    if noisy:
        return Result("equal in distribution", 0, "", samples)
    status = "exact" if worst == 0 else "within 1" if worst == 1 else "differs"
    return Result(status, worst, f"max |diff| {worst}" if worst > 1 else "", samples)


# --------------------------------------------------------------------------- report

STATUSES = ("exact", "within 1", "equal in distribution", "differs", "refused", "error")


def report(results: list[tuple[Case, Result]], skipped: Counter, collected: int,
           collect_errors: list[str]) -> dict[str, Any]:
    per: dict[str, Counter] = defaultdict(Counter)
    worst: dict[str, int] = defaultdict(int)
    for case, r in results:
        per[case.cls.__name__][r.status] += 1
        if r.status == "differs":
            worst[case.cls.__name__] = max(worst[case.cls.__name__], r.max_diff)
    totals = Counter(r.status for _, r in results)
    unique: dict[str, tuple[Case, Result]] = {}
    for case, r in results:
        if r.status != "exact":
            unique.setdefault(case.key(), (case, r))[1].items.append(case.item)
    return {
        "collected": collected, "collection_errors": collect_errors,
        "kept": len(results), "skipped": dict(skipped.most_common()),
        "totals": {s: totals[s] for s in STATUSES},
        "per_transform": {n: {**{s: c[s] for s in STATUSES}, "cases": sum(c.values()),
                              "max_diff": worst[n]} for n, c in sorted(per.items())},
        "not_exact": [{"transform": c.cls.__name__, "params": c.params if c.instance is None
                       else repr(c.instance), "image": [c.height, c.width, c.channels],
                       "status": r.status, "max_diff": r.max_diff, "detail": r.detail,
                       "items": r.items} for c, r in unique.values()],
    }


def print_report(rep: dict[str, Any]) -> None:
    print(f"collected {rep['collected']} items; kept {rep['kept']}; skipped "
          f"{sum(rep['skipped'].values())}:")
    for why, n in rep["skipped"].items():
        print(f"  {n:6d}  {why}")
    for e in rep["collection_errors"]:
        print(f"  (not collected: {e})")
    cols = ("cases",) + STATUSES
    head = f"{'transform':28s}" + "".join(f"{c:>12s}" for c in cols[:3]) + f"{'in distr.':>12s}" \
        + "".join(f"{c:>12s}" for c in cols[4:])
    print("\n" + head)
    for name, row in rep["per_transform"].items():
        cells = [str(row[c]) for c in cols]
        if row["differs"]:
            cells[4] += f" ({row['max_diff']})"
        print(f"{name:28s}" + "".join(f"{c:>12s}" for c in cells))
    tot = rep["totals"]
    print(f"{'total':28s}{rep['kept']:>12d}" + "".join(f"{tot[s]:>12d}" for s in STATUSES))
    if rep["not_exact"]:
        print("\nnot exact (distinct cases; items that share one are listed once):")
        for c in rep["not_exact"]:
            print(f"- {c['status']}: {c['transform']} {c['params']} on "
                  f"{'x'.join(map(str, c['image']))}: {c['detail']} [{len(c['items'])} items, "
                  f"e.g. {c['items'][0]}]")


# --------------------------------------------------------------------------- main


def tests_dir_from(args: argparse.Namespace, tmp: Path) -> Path:
    if args.albumentations_tests:
        return Path(args.albumentations_tests).resolve()
    out = tmp / "albumentations"
    out.mkdir()
    archive = subprocess.run(["git", "-C", args.albumentations_repo, "archive", args.tag,
                              "tests"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", str(out)], input=archive, check=True)
    return out / "tests"


def main() -> int:
    global SEEDS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--albumentations-tests", metavar="DIR",
                     help="the tests/ folder of an albumentations 2.0.8 checkout or extract")
    src.add_argument("--albumentations-repo", metavar="GIT",
                     help="an albumentations git repository (its --tag's tests/ is extracted)")
    ap.add_argument("--tag", default="2.0.8", help="with --albumentations-repo (default 2.0.8)")
    ap.add_argument("--json", metavar="OUT", help="write the report as JSON here")
    ap.add_argument("--seeds", type=int, default=len(SEEDS), metavar="N",
                    help=f"Loader seeds per case, {SAMPLES} samples each (default {len(SEEDS)})")
    ap.add_argument("--workdir", metavar="DIR", help="where the datasets go (default: a temp "
                    "folder, removed afterwards)")
    args = ap.parse_args()
    SEEDS = range(args.seeds)

    warnings.filterwarnings("ignore")
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    import albumentations as A
    from dspipe import _dspipe
    if A.__version__ != "2.0.8":
        print(f"warning: albumentations {A.__version__} is installed; dspipe follows 2.0.8",
              file=sys.stderr)
    supported = {row[0] for row in _dspipe.transforms_supported()}

    with tempfile.TemporaryDirectory(prefix="albsuite-") as tmp_name:
        tmp = Path(args.workdir or tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        tests = tests_dir_from(args, Path(tmp_name))
        col = collect(tests)
        skipped: Counter = Counter()
        cases = []
        for item in col.items:
            c = make_case(item, supported, A)
            if isinstance(c, Case):
                cases.append(c)
            else:
                skipped[c] += 1
        datasets: dict[tuple[int, int, int], Any] = {}
        done: dict[str, Result] = {}
        results = []
        for case in cases:
            dims = (case.height, case.width, case.channels)
            if dims not in datasets:
                datasets[dims] = build_dataset(tmp, *dims)
            key = case.key()
            if key not in done:
                done[key] = run_case(A, case, datasets[dims])
            results.append((case, done[key]))
        rep = report(results, skipped, len(col.items), col.errors)
        rep["distinct_cases"] = len(done)
        rep["samples_per_case"] = SAMPLES * len(SEEDS)
    print_report(rep)
    print(f"\n{rep['kept']} items ({rep['distinct_cases']} distinct cases), "
          f"{rep['samples_per_case']} Loader samples each")
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=1, default=repr) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
