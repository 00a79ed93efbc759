# SPDX-License-Identifier: Apache-2.0
"""dspipe.transforms.monai: MONAI 1.6.1 dictionary transforms that dspipe runs in C++
(docs/MONAI.md).

    from dspipe.transforms import monai as M
    config = M.Compose([
        M.ScaleIntensityRanged(keys=["image"], a_min=-175, a_max=250, b_min=0.0, b_max=1.0,
                               clip=True),
        M.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=1),
        M.RandRotate90d(keys=["image", "label"], prob=0.5),
    ])
    loader = dspipe.Loader("ct.lmdb", transform=config)

Each class takes MONAI's arguments (keys first, the others in MONAI's order) and is the
bundle-config dict of that transform ({"_target_": "ScaleIntensityRanged", "keys": [...], ...}),
checked by the C++ parser at construction: what dspipe refuses is refused here, naming the
transform and the argument. `dspipe.Loader(transform=...)` takes these, or the same config as
plain dicts, JSON or YAML text (a bundle's preprocessing section with its references resolved).
The classes are made from the C++ table of supported transforms (`supported()`).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

from .. import _dspipe
from . import _keywords, _plain

__all__ = ["Compose", "MonaiTransform", "config", "supported"]


def supported() -> list[dict[str, Any]]:
    """The supported MONAI transforms: name, kind, what happens to the label, argument names."""
    return [{"name": n, "kind": k, "label": lab, "args": list(a)}
            for n, k, lab, a in _dspipe.transforms_supported_monai()]


class MonaiTransform(dict):  # type: ignore[type-arg]
    """One MONAI dictionary transform as its bundle-config dict."""

    _name = ""
    _args: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs = _keywords(self._name, self._args, args, kwargs)
        super().__init__({"_target_": self._name, **_plain(kwargs)})
        _dspipe.transforms_to_json(json.dumps([dict(self)]))  # refuses bad arguments now

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.items() if k != "_target_")
        return f"{self._name}({args})"


class Compose(dict):  # type: ignore[type-arg]
    """MONAI's Compose: the transforms in order, as {"_target_": "Compose", "transforms": [...]}."""

    def __init__(self, transforms: Iterable[dict[str, Any]]) -> None:
        super().__init__({"_target_": "Compose", "transforms": [dict(t) for t in transforms]})
        _dspipe.transforms_to_json(json.dumps(dict(self)))


def config(transform: Any) -> dict[str, Any]:
    """The config as dspipe reads it: {"_target_": "Compose", "transforms": [...]} with every
    argument filled in (MONAI's defaults: a Rand* transform's prob is 0.1)."""
    from . import spec_json  # noqa: PLC0415
    doc: dict[str, Any] = json.loads(_dspipe.transforms_to_json(spec_json(transform)))
    return doc


def _make_classes() -> None:
    for name, kind, label, args in _dspipe.transforms_supported_monai():
        doc = (f"monai.transforms.{name} ({kind}; label: {label}). "
               f"Arguments: {', '.join(args)}.")
        globals()[name] = type(name, (MonaiTransform,), {"_name": name, "_args": tuple(args),
                                                         "__doc__": doc})
        __all__.append(name)


_make_classes()

if TYPE_CHECKING:
    # The classes _make_classes() makes, for type checkers (mypy --strict on user code).
    def __getattr__(name: str) -> type[MonaiTransform]:
        raise AttributeError(name)
