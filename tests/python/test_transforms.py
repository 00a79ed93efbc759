# SPDX-License-Identifier: Apache-2.0
"""dspipe.transforms and dspipe.Loader(transform=...): the Python side of docs/TRANSFORMS.md.

The classes build the same documents as albumentations.to_dict (when albumentations imports);
bad arguments are refused at construction; the loader takes a dspipe.transforms pipeline, an
albumentations Compose, its dict or JSON text and gives the same batches for all four.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import dspipe
import dspipe.transforms as T

torch = pytest.importorskip("torch")

COUNT, H, W = 12, 40, 48


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("tds")
    dspipe.synth(root / "src", count=COUNT, size=(W, H), seed=5, classes=3)
    dspipe.build(root / "src", root / "t.lmdb", progress=False)
    return str(root / "t.lmdb")


def recipe():
    return T.Compose([T.SmallestMaxSize(max_size=32), T.RandomCrop(32, 32), T.SquareSymmetry(),
                      T.Affine(rotate=(-15, 15), translate_percent=0.05, fill_mask=255),
                      T.RandomBrightnessContrast(), T.GaussNoise(), T.Normalize()])


def batches(loader):
    return [{k: v.clone() for k, v in b.items() if v is not None} for b in loader]


def test_classes_refuse_what_dspipe_does_not_implement():
    with pytest.raises(ValueError, match="num_output_channels"):
        T.ToGray(num_output_channels=1)
    with pytest.raises(ValueError, match="unknown argument foo"):
        T.Rotate(foo=1)
    with pytest.raises(TypeError):
        T.Compose([object()])
    assert {"HorizontalFlip", "Affine", "Normalize", "OneOf"} <= {t["name"] for t in T.supported()}
    # Positional arguments in albumentations' order.
    assert T.RandomCrop(20, 30).to_dict()["transform"]["width"] == 30


def test_to_dict_is_albumentations_to_dict():
    A = pytest.importorskip("albumentations")
    ours = T.Compose([T.RandomCrop(32, 32), T.OneOf([T.HorizontalFlip(), T.Rotate(limit=10)]),
                      T.SomeOf([T.VerticalFlip(), T.Transpose()], n=1), T.Resize(16, 20),
                      T.GaussNoise(std_range=(0.1, 0.2)), T.Normalize()])
    theirs = A.Compose([A.RandomCrop(32, 32), A.OneOf([A.HorizontalFlip(), A.Rotate(limit=10)]),
                        A.SomeOf([A.VerticalFlip(), A.Transpose()], n=1), A.Resize(16, 20),
                        A.GaussNoise(std_range=(0.1, 0.2)), A.Normalize()])
    assert ours.to_dict() == json.loads(json.dumps(A.to_dict(theirs)))
    assert T.to_dict(theirs) == ours.to_dict()
    assert T.Affine(rotate=15).to_dict() == json.loads(json.dumps(A.to_dict(A.Affine(rotate=15))))


def test_loader_takes_every_form_of_a_pipeline(dataset):
    aug = recipe()
    forms = [aug, aug.to_dict(), aug.to_json()]
    A = None
    try:
        import albumentations as A  # noqa: PLC0415
    except ImportError:
        pass
    if A is not None:
        forms.append(A.Compose([A.SmallestMaxSize(max_size=32), A.RandomCrop(32, 32),
                                A.SquareSymmetry(),
                                A.Affine(rotate=(-15, 15), translate_percent=0.05, fill_mask=255),
                                A.RandomBrightnessContrast(), A.GaussNoise(), A.Normalize()]))
    want = None
    for form in forms:
        loader = dspipe.Loader(dataset, batch_size=4, threads=2, device="cpu", seed=3,
                               transform=form)
        assert loader.mean == pytest.approx([0.485 * 255, 0.456 * 255, 0.406 * 255], rel=1e-6)
        got = batches(loader)
        assert got[0]["image"].shape == (4, 3, 32, 32)
        assert set(torch.unique(got[0]["mask"]).tolist()) <= {0, 1, 2, 255}
        if want is None:
            want = got
        else:
            assert all(torch.equal(a[k], b[k]) for a, b in zip(want, got) for k in a)
    stats = loader.stats()
    # The stage is "transform" (named after the option); its segment rows are "transform<N>".
    assert "transform" in stats and "augment" not in stats
    rows = sorted(k for k in stats if k.startswith("transform") and k != "transform")
    # The row-wise tail (RandomBrightnessContrast, GaussNoise) and Normalize fold into the
    # normalize pass on the CPU path and are timed there (docs/STATS.md): their rows count those
    # samples as folded, so they do not look as if the transforms rarely ran.
    assert rows == ["transform1", "transform2", "transform3"], rows
    assert stats["transform1"]["label"].startswith("geometric: SmallestMaxSize")
    assert stats["transform1"]["folded"] == 0
    for row, label in (("transform2", "lut: RandomBrightnessContrast"),
                       ("transform3", "GaussNoise")):
        assert stats[row]["label"] == label
        assert stats[row]["count"] == 0, stats[row]
        assert stats[row]["folded"] > 0, stats[row]
    assert stats["normalize"]["count"] > 0


def test_state_dict_checks_the_transform(dataset):
    a = dspipe.Loader(dataset, batch_size=4, device="cpu", transform=recipe())
    next(iter(a))
    state = a.state_dict()
    b = dspipe.Loader(dataset, batch_size=4, device="cpu",
                      transform=T.Compose([T.HorizontalFlip(), T.Normalize()]))
    with pytest.raises(ValueError, match="transform"):
        b.load_state_dict(state)
    c = dspipe.Loader(dataset, batch_size=4, device="cpu", transform=recipe())
    c.load_state_dict(state)


def test_apply_previews_a_sample():
    img = (np.arange(30 * 40 * 3) % 251).astype(np.uint8).reshape(30, 40, 3)
    mask = (np.arange(30 * 40) % 3).astype(np.uint8).reshape(30, 40)
    out = T.Compose([T.HorizontalFlip(p=1)])(image=img, mask=mask)
    np.testing.assert_array_equal(out["image"], img[:, ::-1])
    np.testing.assert_array_equal(out["mask"], mask[:, ::-1])
    crop = T.apply(T.RandomCrop(10, 12), img, seed=1, index=4)["image"]
    assert crop.shape == (10, 12, 3)


def test_flips_and_a_transform_are_refused_together(dataset):
    with pytest.raises(ValueError, match="augment or transform"):
        dspipe.Loader(dataset, device="cpu", hflip=0.5, transform=T.Compose([T.VerticalFlip()]))
