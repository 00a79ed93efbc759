# SPDX-License-Identifier: Apache-2.0
"""dspipe.transforms: albumentations 2.0.8 pipelines that dspipe runs in C++ (docs/TRANSFORMS.md).

    import dspipe.transforms as T
    aug = T.Compose([T.SmallestMaxSize(max_size=512), T.RandomCrop(512, 512), T.SquareSymmetry(),
                     T.Affine(rotate=(-15, 15), translate_percent=0.05),
                     T.RandomBrightnessContrast(), T.GaussNoise(), T.Normalize()])
    loader = dspipe.Loader("train.lmdb", transform=aug)

Every class takes albumentations' arguments (positional ones in its order) and `to_dict()` gives
what `albumentations.to_dict` gives for the same pipeline: both are the C++ parser's view of the
spec (defaults filled in, arguments normalized), so what is refused is refused here, at
construction, naming the transform and the argument. `dspipe.Loader(transform=...)` also takes
that dict, its JSON text, or an albumentations Compose itself (through `albumentations.to_dict`).
The classes are made from the C++ table of supported transforms (`supported()`).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

from .. import _dspipe

__all__ = ["BasicTransform", "Compose", "OneOf", "SomeOf", "Sequential", "apply", "spec_json",
           "supported", "to_dict"]

_CONTAINERS = ("Compose", "OneOf", "SomeOf", "Sequential")


def supported() -> list[dict[str, Any]]:
    """The supported transforms: name, kind, mask behaviour, fused, argument names, default p."""
    return [{"name": n, "kind": k, "mask": m, "fused": f, "args": list(a), "p": p}
            for n, k, m, f, a, p in _dspipe.transforms_supported()]


def _plain(value: Any) -> Any:
    """Tuples, numpy scalars and arrays as JSON values."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _keywords(name: str, names: tuple[str, ...], args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> dict[str, Any]:
    """Positional arguments (in the transform's signature order) merged into the keywords."""
    if len(args) > len(names):
        raise TypeError(f"{name} takes at most {len(names)} positional arguments")
    for arg, value in zip(names, args):
        if arg in kwargs:
            raise TypeError(f"{name} got two values for argument {arg!r}")
        kwargs[arg] = value
    return kwargs


class BasicTransform:
    """One albumentations transform, by name and arguments."""

    _name = ""
    _args: tuple[str, ...] = ()
    _default_p = 0.5  # the albumentations constructor's (a serialized one without p: 0.5)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs = _keywords(self._name, self._args, args, kwargs)
        kwargs.setdefault("p", self._default_p)
        self.kwargs = kwargs
        self._normalized = _normalize(self._raw())  # refuses bad arguments now

    def _raw(self) -> dict[str, Any]:
        return {"__class_fullname__": self._name, **_plain(self.kwargs)}

    @property
    def p(self) -> float:
        return float(self._normalized.get("p", 1.0))

    def to_dict(self) -> dict[str, Any]:
        """albumentations.to_dict of this transform: {"__version__", "transform": {...}}."""
        return {"__version__": "2.0.8", "transform": self._normalized}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def __call__(self, *, image: Any, mask: Any = None, seed: int = 0, epoch: int = 0,
                 index: int = 0) -> dict[str, Any]:
        """Applies the pipeline to one numpy image (H x W or H x W x 3 uint8) and mask, with the
        draws the loader makes for (seed, epoch, index)."""
        return apply(self, image, mask, seed=seed, epoch=epoch, index=index)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self._name}({args})"


def _normalize(raw: dict[str, Any]) -> dict[str, Any]:
    """The C++ parser's A.to_dict form of one transform or container (Compose: itself)."""
    if raw["__class_fullname__"] == "Compose":
        one: dict[str, Any] = json.loads(_dspipe.transforms_to_json(json.dumps(raw)))["transform"]
        return one
    doc = json.loads(_dspipe.transforms_to_json(json.dumps([raw])))
    first: dict[str, Any] = doc["transform"]["transforms"][0]
    return first


class _Container(BasicTransform):

    def __init__(self, transforms: Iterable[BasicTransform], p: float | None = None,
                 **kwargs: Any) -> None:
        self.transforms = list(transforms)
        for t in self.transforms:
            if not isinstance(t, BasicTransform):
                raise TypeError(f"{self._name}: {t!r} is not a dspipe.transforms transform "
                                "(pass an albumentations Compose to dspipe.Loader directly)")
        kwargs["p"] = self._default_p if p is None else p
        self.kwargs = kwargs
        self._normalized = _normalize(self._raw())

    def _raw(self) -> dict[str, Any]:
        return {"__class_fullname__": self._name, **_plain(self.kwargs),
                "transforms": [t._raw() for t in self.transforms]}

    def __repr__(self) -> str:
        inner = ", ".join(repr(t) for t in self.transforms)
        return f"{self._name}([{inner}])"


class Compose(_Container):
    """Runs each transform in order (each with its own p); p: the whole pipeline's."""
    _name = "Compose"
    _default_p = 1.0


class OneOf(_Container):
    """Runs one of its transforms, picked with their p as weights (p: whether any runs)."""
    _name = "OneOf"


class SomeOf(_Container):
    """Picks n of its transforms uniformly (sorted), each then run with its own p."""
    _name = "SomeOf"
    _default_p = 1.0

    def __init__(self, transforms: Iterable[BasicTransform], n: int = 1, replace: bool = False,
                 p: float | None = None) -> None:
        super().__init__(transforms, p=p, n=n, replace=replace)


class Sequential(_Container):
    """Runs all its transforms in order, with probability p."""
    _name = "Sequential"


def _make_classes() -> None:
    for name, kind, mask, fused, args, p in _dspipe.transforms_supported():
        if name in _CONTAINERS:
            continue
        doc = (f"albumentations.{name} ({kind}; mask: {mask}; "
               f"{'fused' if fused else 'not fused'}). Arguments: {', '.join(args)}; p={p}.")
        globals()[name] = type(name, (BasicTransform,), {"_name": name, "_args": tuple(args),
                                                         "_default_p": p, "__doc__": doc})
        __all__.append(name)


_make_classes()

if TYPE_CHECKING:
    # The classes _make_classes() makes, for type checkers (mypy --strict on user code).
    def __getattr__(name: str) -> type[BasicTransform]:
        raise AttributeError(name)


def _text_json(text: str) -> str:
    """JSON text as given; YAML text (a MONAI bundle's config) as JSON, through PyYAML."""
    try:
        json.loads(text)
        return text
    except ValueError:
        pass
    try:
        import yaml  # noqa: PLC0415 (optional: only YAML configs need it)
    except ImportError:
        return text  # the C++ parser names the JSON error
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return json.dumps(_plain(doc)) if isinstance(doc, (dict, list)) else text


def spec_json(transform: Any) -> str:
    """The pipeline as JSON text for the C++ side: a dspipe.transforms object, an
    albumentations transform (through albumentations.to_dict), a dict, a list of transform
    dicts, or JSON text."""
    if isinstance(transform, BasicTransform):
        return transform.to_json()
    if isinstance(transform, str):
        return _text_json(transform)
    if isinstance(transform, (dict, list)):
        return json.dumps(_plain(transform))
    if type(transform).__module__.split(".")[0] == "albumentations":
        import albumentations  # noqa: PLC0415 (optional)
        return json.dumps(albumentations.to_dict(transform))
    raise TypeError(f"transform must be a dspipe.transforms or albumentations pipeline, a dict or "
                    f"JSON text, got {type(transform).__name__}")


def to_dict(transform: Any) -> dict[str, Any]:
    """albumentations.to_dict's document for any accepted form of a pipeline."""
    doc: dict[str, Any] = json.loads(_dspipe.transforms_to_json(spec_json(transform)))
    return doc


def apply(transform: Any, image: Any, mask: Any = None, *, seed: int = 0, epoch: int = 0,
          index: int = 0) -> Any:
    """Applies a pipeline to one numpy image and mask as the loader's workers do, with the draws
    of (seed, epoch, index): {"image": ..., "mask": ...}. uint8 images through an albumentations
    spec take the fused path; other dtypes (uint16, int16, float32) and MONAI configs run each
    transform on its own, as the loader does for such samples. A MONAI config gives a float32
    image; the mask keeps its dtype (uint8 or uint16). Arrays are never converted to another
    dtype: one a dataset cannot hold is refused. A config that yields several samples per record
    (MONAI's num_samples) gives a list of such dicts, as MONAI does. After MONAI's
    AsDiscreted(to_onehot=N) the mask is one-hot: H x W x N float32 (channels last, as the
    image), what the loader's batches give as N x H x W."""
    import numpy as np  # noqa: PLC0415
    spec = spec_json(transform)
    img = np.ascontiguousarray(image)
    m = None if mask is None else np.ascontiguousarray(mask)
    classes = _dspipe.transforms_label_classes(spec)

    def onehot(ids: Any) -> Any:  # the transform checked every id < classes
        return ids if ids is None or classes == 0 else np.eye(classes, dtype=np.float32)[ids]

    if _dspipe.transforms_samples_per_record(spec) > 1:
        return [{"image": o, "mask": onehot(om)} for o, om in
                _dspipe.transforms_apply_samples(spec, img, m, seed, epoch, index)]
    if img.dtype == np.uint8 and (m is None or m.dtype == np.uint8) and \
            not _dspipe.transforms_float_pixels(spec):
        out, out_mask = _dspipe.transforms_apply(spec, img, m, seed, epoch, index)
    else:
        out, out_mask = _dspipe.transforms_apply_pixels(spec, img, m, seed, epoch, index)
    return {"image": out, "mask": onehot(out_mask)}

from . import monai  # noqa: E402 (dspipe.transforms.monai: MONAI's dictionary transforms)
