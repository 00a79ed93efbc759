# SPDX-License-Identifier: Apache-2.0
"""MONAI configs from Python (docs/MONAI.md): dspipe.transforms.monai's classes are the bundle
config's dicts, checked at construction; the loader's batches over 16-bit CT slices are the
config's float32 output, sample for sample what dspipe.transforms.apply gives; YAML text is read
as the same config. Equality with MONAI itself: test_monai_golden.py."""
from __future__ import annotations

import json

import pytest

import dspipe
import dspipe.transforms as T
from dspipe.transforms import monai as M


def _ct_dataset(root, count=5, size=(24, 30)):
    import cv2
    import numpy as np

    src = root / "ct"
    (src / "images").mkdir(parents=True)
    (src / "masks").mkdir()
    rng = np.random.default_rng(3)
    for i in range(count):
        hu = rng.integers(0, 4096, size=size, dtype=np.uint16)
        ids = rng.integers(0, 3, size=size, dtype=np.uint8)
        assert cv2.imwrite(str(src / "images" / f"s{i}.png"), hu)
        assert cv2.imwrite(str(src / "masks" / f"s{i}.png"), ids)
    out = root / "ct.lmdb"
    dspipe.build(src, out, progress=False)
    return src, out


def _config():
    return M.Compose([
        M.LoadImaged(keys=["image", "label"]),
        M.ScaleIntensityRanged(keys=["image"], a_min=0, a_max=4095, b_min=0.0, b_max=1.0,
                               clip=True),
        M.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=1),
        M.RandRotate90d(keys=["image", "label"], prob=0.5),
        M.RandShiftIntensityd(keys=["image"], offsets=0.1, prob=0.5),
        M.ResizeWithPadOrCropd(keys=["image", "label"], spatial_size=[32, 32]),
    ])


def test_classes_are_the_config_dicts_and_refuse_bad_arguments():
    t = M.ScaleIntensityRanged(["image"], -175, 250, 0.0, 1.0, True)  # MONAI's positional order
    assert t == {"_target_": "ScaleIntensityRanged", "keys": ["image"], "a_min": -175,
                 "a_max": 250, "b_min": 0.0, "b_max": 1.0, "clip": True}
    filled = M.config([M.RandFlipd(keys=["image", "label"])])["transforms"][0]
    assert filled["prob"] == 0.1 and filled["spatial_axis"] is None  # MONAI's defaults
    with pytest.raises(ValueError, match="probb"):
        M.RandFlipd(keys=["image"], probb=0.5)
    with pytest.raises(ValueError, match="class ids"):
        M.NormalizeIntensityd(keys=["image", "label"])
    with pytest.raises(ValueError, match=r"RandElasticd.*supported"):
        T.to_dict([{"_target_": "RandElasticd", "keys": ["image"]}])
    names = {r["name"] for r in M.supported()}
    assert {"ScaleIntensityRanged", "RandFlipd", "NormalizeIntensityd"} <= names


def test_yaml_and_json_text_are_the_same_config():
    yaml_text = """
transforms:
  - _target_: monai.transforms.ScaleIntensityRanged
    keys: [image]
    a_min: -175
    a_max: 250
  - _target_: RandFlipd
    keys: [image, label]
    prob: 1.0
_target_: Compose
"""
    pytest.importorskip("yaml")
    doc = M.config(yaml_text)
    assert doc == M.config(json.dumps(doc)) == M.config(
        M.Compose([M.ScaleIntensityRanged(keys=["image"], a_min=-175, a_max=250),
                   M.RandFlipd(keys=["image", "label"], prob=1.0)]))


def test_loader_batches_are_the_configs_output_sample_for_sample(tmp_path):
    import cv2
    import numpy as np

    src, out = _ct_dataset(tmp_path)
    config = _config()
    loader = dspipe.Loader(str(out), batch_size=2, shuffle=False, device="cpu", seed=11,
                           transform=config)
    seen = 0
    for epoch in range(2):
        for batch in loader:
            images = batch["image"].numpy()
            masks = batch["mask"].numpy()
            assert images.dtype == np.float32 and images.shape[1:] == (1, 32, 32)
            for i, index in enumerate(batch["index"].tolist()):
                hu = cv2.imread(str(src / "images" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
                ids = cv2.imread(str(src / "masks" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
                want = T.apply(config, hu, ids, seed=11, epoch=epoch, index=index)
                assert want["image"].dtype == np.float32
                np.testing.assert_array_equal(images[i, 0], want["image"])
                np.testing.assert_array_equal(masks[i], want["mask"])
                assert 0.0 - 0.1 <= want["image"].min() and want["image"].max() <= 1.0 + 0.1
                seen += 1
    assert seen == 10



def test_asdiscreted_gives_one_hot_float_masks_in_batches_and_from_apply(tmp_path):
    import cv2
    import numpy as np

    src, out = _ct_dataset(tmp_path, count=3)
    config = M.Compose([
        M.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=0),
        M.ResizeWithPadOrCropd(keys=["image", "label"], spatial_size=[20, 20]),
        M.AsDiscreted(keys=["label"], to_onehot=3),
    ])
    loader = dspipe.Loader(str(out), batch_size=3, shuffle=False, device="cpu", seed=2,
                           transform=config)
    batch = next(iter(loader))
    masks = batch["mask"].numpy()
    assert masks.dtype == np.float32 and masks.shape == (3, 3, 20, 20)
    for i, index in enumerate(batch["index"].tolist()):
        hu = cv2.imread(str(src / "images" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
        ids = cv2.imread(str(src / "masks" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
        want = T.apply(config, hu, ids, seed=2, epoch=0, index=index)["mask"]
        assert want.dtype == np.float32 and want.shape == (20, 20, 3)  # channels last
        np.testing.assert_array_equal(masks[i], want.transpose(2, 0, 1))
        assert (masks[i].sum(0) == 1).all()
    # An id the one-hot has no channel for fails the record, naming it.
    with pytest.raises(RuntimeError, match=r"AsDiscreted\): the label holds id 2.*to_onehot=2"):
        T.apply(M.Compose([M.AsDiscreted(keys=["label"], to_onehot=2)]), hu, ids)

def test_a_typed_array_is_never_converted_to_uint8():
    import numpy as np

    hu = np.full((4, 4), 3000, dtype=np.uint16)
    out = T.apply(T.Compose([T.HorizontalFlip(p=1.0)]), hu)["image"]
    assert out.dtype == np.uint16 and int(out[0, 0]) == 3000  # was 3000 % 256 = 184
    with pytest.raises(ValueError, match="uint8, uint16, int16 or float32"):
        T.apply(T.Compose([T.HorizontalFlip(p=1.0)]), hu.astype(np.int64))


def test_num_samples_gives_every_crop_in_the_batch_and_a_list_from_apply(tmp_path):
    import cv2
    import numpy as np

    src, out = _ct_dataset(tmp_path, count=3)
    config = M.Compose([
        M.ScaleIntensityRanged(keys=["image"], a_min=0, a_max=4095, b_min=0.0, b_max=1.0),
        M.RandCropByPosNegLabeld(keys=["image", "label"], label_key="label",
                                 spatial_size=[16, 16], pos=1, neg=1, num_samples=4),
        M.RandRotate90d(keys=["image", "label"], prob=0.5),
    ])
    loader = dspipe.Loader(str(out), batch_size=2, shuffle=False, device="cpu", seed=5,
                           transform=config)
    sizes = []
    for batch in loader:
        images, indices = batch["image"].numpy(), batch["index"].tolist()
        sizes.append(len(indices))
        for i in range(0, len(indices), 4):
            index = indices[i]
            assert indices[i:i + 4] == [index] * 4  # a record's crops in a row
            hu = cv2.imread(str(src / "images" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
            ids = cv2.imread(str(src / "masks" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
            want = T.apply(config, hu, ids, seed=5, epoch=0, index=index)
            assert isinstance(want, list) and len(want) == 4  # as MONAI returns them
            for k in range(4):
                np.testing.assert_array_equal(images[i + k, 0], want[k]["image"])
    assert sizes == [8, 4]  # 2 records x 4 crops, then the last record's 4



def test_multichannel_crops_are_the_configs_output_normalized_or_not(tmp_path):
    """4-channel 16-bit slices, 2 crops a record: the batch's planes are apply()'s HWC output
    channel by channel, as it is (the identity: written straight into the batch) and with a
    mean/std given ((x - mean) / std per channel, the loader's normalize pass)."""
    import cv2
    import numpy as np

    src = tmp_path / "rgba"
    (src / "images").mkdir(parents=True)
    (src / "masks").mkdir()
    rng = np.random.default_rng(4)
    for i in range(3):
        rgba = rng.integers(0, 65536, size=(20, 24, 4), dtype=np.uint16)
        ids = rng.integers(0, 3, size=(20, 24), dtype=np.uint8)
        assert cv2.imwrite(str(src / "images" / f"s{i}.png"), cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA))
        assert cv2.imwrite(str(src / "masks" / f"s{i}.png"), ids)
    out = tmp_path / "rgba.lmdb"
    dspipe.build(src, out, progress=False)
    config = M.Compose([
        M.ScaleIntensityRanged(keys=["image"], a_min=0, a_max=65535, b_min=0.0, b_max=1.0),
        M.RandCropByPosNegLabeld(keys=["image", "label"], label_key="label", spatial_size=[8, 8],
                                 pos=1, neg=1, num_samples=2),
        M.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=0),
    ])
    mean, std = np.float32([0.1, 0.2, 0.3, 0.4]), np.float32([2, 4, 0.5, 1])
    for given in (False, True):
        kw = {"mean": mean.tolist(), "std": std.tolist()} if given else {}
        loader = dspipe.Loader(str(out), batch_size=3, shuffle=False, device="cpu", seed=7,
                               transform=config, **kw)
        batch = next(iter(loader))
        images, indices = batch["image"].numpy(), batch["index"].tolist()
        assert images.shape == (6, 4, 8, 8), images.shape
        for i in range(0, 6, 2):
            index = indices[i]
            bgra = cv2.imread(str(src / "images" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
            ids = cv2.imread(str(src / "masks" / f"s{index}.png"), cv2.IMREAD_UNCHANGED)
            want = T.apply(config, cv2.cvtColor(bgra, cv2.COLOR_BGRA2RGBA), ids, seed=7,
                           epoch=0, index=index)
            for k in range(2):
                planes = want[k]["image"].transpose(2, 0, 1)
                if given:
                    expect = (planes - mean[:, None, None]) * (np.float32(1) / std[:, None, None])
                    np.testing.assert_allclose(images[i + k], expect, rtol=1e-6, atol=1e-7)
                else:
                    np.testing.assert_array_equal(images[i + k], planes)
