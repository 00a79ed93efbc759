# SPDX-License-Identifier: Apache-2.0
"""A new user's first hour (issue 40), written as the user wrote it: each mistake gets a message
in the user's terms, naming the call that fixes it."""
from __future__ import annotations

import os

import pytest

import dspipe


def test_opening_a_source_folder_says_to_build_it_first(tmp_path):
    # Item 13: Loader("my_src_folder") on the folder of images the user meant to convert.
    src = tmp_path / "my_src_folder"
    dspipe.synth(src, count=4, size=(16, 16), seed=1, classes=2)
    with pytest.raises(ValueError) as e:
        dspipe.Loader(str(src), batch_size=2, device="cpu")
    msg = str(e.value)
    assert "this is a source folder" in msg, msg
    assert f'dspipe.build("{src}", OUT)' in msg, msg
    assert "neither an LMDB" not in msg, msg


def test_no_gpu_machine_says_no_driver_instead_of_insufficient_driver():
    # Item 17: a machine with no /proc/driver/nvidia, no /dev/nvidia* and no libcuda.
    st = dspipe.cuda_status()
    if st["usable"]:
        pytest.skip("a CUDA device is usable here")
    if not dspipe.build_info().get("cuda_compiled"):
        pytest.skip("built without CUDA")
    has_driver = (os.path.exists("/proc/driver/nvidia")
                  or any(n.startswith("nvidia") for n in os.listdir("/dev")))
    if has_driver:
        pytest.skip("this machine has an NVIDIA driver or device node")
    try:
        import ctypes
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("libcuda.so.1 is installed")
    except OSError:
        pass
    assert st["reason"].startswith("no NVIDIA driver or device found"), st
    assert "insufficient" not in st["reason"], st


def test_folder2lmdb_style_lmdb_opens_and_other_keys_are_skipped_by_ignore_keys(tmp_path):
    # Item 12: a plain LMDB with folder2lmdb's __len__/__keys__ beside keys 0..N-1.
    import pickle

    import cv2
    import lmdb
    import numpy as np

    db = str(tmp_path / "train.lmdb")
    env = lmdb.open(db, map_size=1 << 24)
    keys = []
    with env.begin(write=True) as txn:
        for i in range(6):
            img = np.full((8, 10, 3), i * 20, np.uint8)
            txn.put(str(i).encode(), cv2.imencode(".png", img)[1].tobytes())
            keys.append(str(i).encode())
        txn.put(b"__keys__", pickle.dumps(keys))
        txn.put(b"__len__", pickle.dumps(len(keys)))
        txn.put(b"meta_info", b"made by my script")
    env.close()
    with pytest.raises(dspipe.CorruptRecord) as e:  # the source's keys are bad input
        dspipe.Loader(db, batch_size=3, device="cpu")
    assert "ignore_keys='meta_info'" in str(e.value), str(e.value)
    loader = dspipe.Loader(db, batch_size=3, device="cpu", ignore_keys="meta_*",
                           normalize=False)
    seen = sorted(int(i) for b in loader for i in b["index"].tolist())
    assert seen == list(range(6))
    out = tmp_path / "out"
    r = dspipe.build(db, out, ignore_keys="meta_*", progress=False)
    assert r["records"] == 6


def test_binary_masks_saved_as_0_255_are_named_and_mask_map_makes_them_classes(tmp_path):
    # Item 3: a folder of images and 0/255 binary masks (the common export of a labelling tool).
    import cv2
    import numpy as np

    src = tmp_path / "src"
    (src / "images").mkdir(parents=True)
    (src / "masks").mkdir()
    for i in range(4):
        img = np.full((16, 20, 3), 40 * i, np.uint8)
        mask = np.zeros((16, 20), np.uint8)
        mask[4:12, 5 + i:15] = 255
        cv2.imwrite(str(src / "images" / f"s{i}.png"), img)
        cv2.imwrite(str(src / "masks" / f"s{i}.png"), mask)
    r = dspipe.build(src, tmp_path / "plain.lmdb", progress=False)
    assert len(r["warnings"]) == 1, r
    assert "hold only the ids 0 and 255" in r["warnings"][0]
    assert "mask_map={255: 1}" in r["warnings"][0]
    assert dspipe.info(tmp_path / "plain.lmdb")["classes"] == 256

    out = tmp_path / "mapped.lmdb"
    r = dspipe.build(src, out, mask_map={255: 1}, progress=False)
    assert r["warnings"] == [], r
    assert dspipe.info(out)["classes"] == 2
    loader = dspipe.Loader(out, batch_size=4, shuffle=False, device="cpu", output="numpy")
    batch = next(iter(loader))
    assert sorted(np.unique(batch["mask"]).tolist()) == [0, 1]

    with pytest.raises(ValueError, match="mask ids are integers"):
        dspipe.build(src, tmp_path / "bad.lmdb", mask_map={255: "one"}, progress=False)
    with pytest.raises(ValueError, match="mask_map"):
        dspipe.build(src, tmp_path / "bad.lmdb", mask_map={300: 1}, progress=False)


def test_jpeg_masks_are_warned_about_as_lossy(tmp_path):
    # Item 3: JPEG masks carried ids 0..7 and 248..255 and built into "256 classes" silently.
    import cv2
    import numpy as np

    src = tmp_path / "src"
    (src / "images").mkdir(parents=True)
    (src / "masks").mkdir()
    for i in range(3):
        mask = np.zeros((32, 32), np.uint8)
        mask[8:24, 4 + i:28] = 2
        cv2.imwrite(str(src / "images" / f"s{i}.png"), np.full((32, 32, 3), 50 * i, np.uint8))
        cv2.imwrite(str(src / "masks" / f"s{i}.jpg"), mask)
    r = dspipe.build(src, tmp_path / "d.lmdb", progress=False)
    lossy = [w for w in r["warnings"] if "masks are JPEG files" in w]
    assert len(lossy) == 1, r["warnings"]
    assert "3 masks are JPEG files: JPEG is lossy" in lossy[0] and "save the masks as PNG" in \
        lossy[0], lossy


def _varied_folder(root, sizes):
    """A folder of RGB images (and masks) of the given (height, width) sizes."""
    import cv2
    import numpy as np

    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for i, (h, w) in enumerate(sizes):
        img = np.full((h, w, 3), 30 + 20 * i, np.uint8)
        img[: h // 2, : w // 3] = 200
        cv2.imwrite(str(root / "images" / f"s{i}.png"), img)
        cv2.imwrite(str(root / "masks" / f"s{i}.png"), (img[:, :, 0] > 100).astype(np.uint8))


def test_a_crop_larger_than_every_image_is_refused_at_open_not_counted_as_corrupt(tmp_path):
    # Item 5: A.RandomCrop(300, 300) on 256x256 data (here 64x64 and a crop of 80).
    A = pytest.importorskip("albumentations")
    dspipe.synth(tmp_path / "src", count=6, size=(64, 64), seed=1)
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", progress=False)
    aug = A.Compose([A.HorizontalFlip(), A.RandomCrop(80, 80), A.Normalize()])
    with pytest.raises(ValueError) as e:
        dspipe.Loader(tmp_path / "data.lmdb", batch_size=2, device="cpu", transform=aug,
                      max_corrupt=1000)
    msg = str(e.value)
    assert "is 64x64, and transform 2 (RandomCrop) refuses its 64x64 input" in msg, msg
    assert "crop size (80, 80) exceeds the image (64, 64)" in msg, msg
    assert "pad_if_needed=true" in msg, msg
    assert "CorruptRecord" not in msg, msg
    # The fix it names works.
    aug = A.Compose([A.RandomCrop(80, 80, pad_if_needed=True), A.Normalize()])
    loader = dspipe.Loader(tmp_path / "data.lmdb", batch_size=2, device="cpu", transform=aug,
                           output="numpy")
    assert sum(len(b["index"]) for b in loader) == 6


def test_an_epoch_where_every_sample_fails_is_an_error_even_with_a_large_max_corrupt(tmp_path):
    # Item 5: images of several sizes (the manifest fixes none), every one smaller than the crop:
    # each sample fails on its own; with max_corrupt large the epoch used to yield 0 samples and
    # raise nothing.
    A = pytest.importorskip("albumentations")
    _varied_folder(tmp_path / "src", [(40, 50), (44, 52), (48, 40)])
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", progress=False)
    loader = dspipe.Loader(tmp_path / "data.lmdb", batch_size=2, device="cpu", output="numpy",
                           transform=A.Compose([A.RandomCrop(60, 60)]), max_corrupt=1000)
    with pytest.raises(RuntimeError) as e:
        for _ in loader:
            pass
    msg = str(e.value)
    assert "delivered no sample: all 3 records read were skipped as corrupt" in msg, msg
    assert "(max_corrupt = 1000)" in msg, msg
    assert "crop size (60, 60) exceeds the image" in msg, msg


def test_images_of_different_sizes_without_size_are_refused_not_squashed(tmp_path):
    # Item 1: an ImageFolder-like set of images from 40 to 64 px, loaded with no size= and no
    # transform: it used to come out as record 0's size, aspect ratio lost, with no word.
    import subprocess
    import sysconfig

    _varied_folder(tmp_path / "src", [(40, 50), (64, 48), (52, 60), (44, 44)])
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", progress=False)
    with pytest.raises(ValueError) as e:
        dspipe.Loader(tmp_path / "data.lmdb", batch_size=2, device="cpu")
    msg = str(e.value)
    assert "differ in size (the manifest fixes none) and batches need one" in msg, msg
    assert "set the output size (size: every sample is resized to it)" in msg, msg
    assert "Resize(height=H, width=W)" in msg, msg
    loader = dspipe.Loader(tmp_path / "data.lmdb", batch_size=2, device="cpu", size=(48, 48),
                           output="numpy")
    assert [b["image"].shape[1:] for b in loader] == [(3, 48, 48)] * 2
    # dsbench says the same instead of printing record 0's size as if every image had it.
    dsbench = os.path.join(sysconfig.get_path("scripts"), "dsbench")
    r = subprocess.run([dsbench, str(tmp_path / "data.lmdb"), "--batches", "2", "--warmup", "0",
                        "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, r.stdout
    assert "differ in size" in r.stderr and "--size" in r.stderr, r.stderr
    assert "50x40x3" not in r.stdout, r.stdout


def test_a_plain_lmdb_of_different_sizes_names_the_first_record_of_another_size(tmp_path):
    # Item 1, a plain LMDB (no manifest: sizes unknown at open): record 0 sizes the batches and
    # the first record of another size is named, not resized to record 0's size.
    import cv2
    import lmdb
    import numpy as np

    db = str(tmp_path / "plain.lmdb")
    env = lmdb.open(db, map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, (h, w) in enumerate([(20, 30), (20, 30), (20, 30), (24, 36)]):
            img = np.full((h, w, 3), 10 * i, np.uint8)
            txn.put(str(i).encode(), cv2.imencode(".png", img)[1].tobytes())
    env.close()
    loader = dspipe.Loader(db, batch_size=2, device="cpu", shuffle=False, normalize=False,
                           output="numpy")
    it = iter(loader)
    assert next(it)["image"].shape == (2, 3, 20, 30)
    with pytest.raises(ValueError) as e:
        next(it)
    msg = str(e.value)
    assert f"record 3 (key 3) in {db} is 24x36, record 0 (key 0) is 20x30" in msg, msg
    assert "size: every sample is resized to it" in msg, msg
    loader = dspipe.Loader(db, batch_size=2, device="cpu", normalize=False, size=(20, 30),
                           output="numpy")
    assert sum(len(b["index"]) for b in loader) == 4


def test_imagenet_mean_std_in_0_1_units_are_warned_about_with_the_fix(tmp_path, capfd):
    # Item 2: the torchvision habit, mean/std in 0..1 units, on a dataset of 0..255 pixels: the
    # values came out in 85..931 with no word.
    import numpy as np

    dspipe.synth(tmp_path / "src", count=4, size=(16, 16), seed=1)
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", progress=False)
    capfd.readouterr()
    loader = dspipe.Loader(tmp_path / "data.lmdb", batch_size=4, device="cpu", output="numpy",
                           mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    assert len(loader.warnings) == 1, loader.warnings
    w = loader.warnings[0]
    assert "are all <= 1, but the pixels of" in w and "are 0..255" in w, w
    assert "mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]" in w, w
    assert w in capfd.readouterr().err  # logged once, at creation
    assert float(np.abs(next(iter(loader))["image"]).max()) > 100  # accepted as given
    # The fix it names: no warning, values around 0.
    loader = dspipe.Loader(tmp_path / "data.lmdb", batch_size=4, device="cpu", output="numpy",
                           mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
    assert loader.warnings == []
    assert float(np.abs(next(iter(loader))["image"]).max()) < 5
    assert "are all <= 1" not in capfd.readouterr().err
    # normalize=False (mean 0, std 1) is not such a mistake.
    assert dspipe.Loader(tmp_path / "data.lmdb", batch_size=4, device="cpu",
                         normalize=False).warnings == []


def test_channels_1_on_an_rgb_dataset_says_which_mean_std_to_pass(tmp_path):
    # Item 15: channels=1 on an RGB dataset, no mean/std given: the message used to be
    # "mean/std have 3/3 values for 1 channels" although none were set.
    import re

    dspipe.synth(tmp_path / "src", count=4, size=(16, 16), seed=1)
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", progress=False)
    with pytest.raises(ValueError) as e:
        dspipe.Loader(tmp_path / "data.lmdb", batch_size=2, device="cpu", channels=1)
    msg = str(e.value)
    assert "channels=1 converts the RGB images of" in msg, msg
    assert "manifest's mean/std are per RGB channel" in msg and "none were set" in msg, msg
    assert "values for 1 channels" not in msg, msg
    assert "gray=True" in msg, msg
    m = re.search(r"e\.g\. mean=([0-9.]+) std=([0-9.]+)", msg)
    assert m, msg
    loader = dspipe.Loader(tmp_path / "data.lmdb", batch_size=2, device="cpu", channels=1,
                           mean=float(m.group(1)), std=float(m.group(2)), output="numpy")
    assert next(iter(loader))["image"].shape == (2, 1, 16, 16)


def test_a_constant_channel_names_its_zero_std_instead_of_an_internal_check(tmp_path):
    # A dataset whose images are one value (a blank or padding channel): its std is 0, and the
    # loader used to refuse with "NormalizeParams.std[0] = 0.000000 must be finite and non-zero".
    import cv2
    import numpy as np

    (tmp_path / "src" / "images").mkdir(parents=True)
    for i in range(3):
        cv2.imwrite(str(tmp_path / "src" / "images" / f"{i}.png"), np.full((8, 8), 7, np.uint8))
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", gray=True, progress=False)
    with pytest.raises(ValueError) as e:
        dspipe.Loader(tmp_path / "data.lmdb", batch_size=1, device="cpu")
    msg = str(e.value)
    assert "gives channel 0 a std of 0 (every pixel of it holds 7" in msg, msg
    assert "normalize=False" in msg and "NormalizeParams" not in msg, msg
    batch = next(iter(dspipe.Loader(tmp_path / "data.lmdb", batch_size=1, device="cpu",
                                    normalize=False, output="numpy")))
    assert float(batch["image"].max()) == 7.0


def test_a_pipeline_without_normalize_yields_what_albumentations_yields(tmp_path):
    # Item 7: a transform= pipeline with no Normalize was still normalized with the manifest's
    # mean/std; normalize=False with A.Normalize() raised about mean/std the user never set.
    A = pytest.importorskip("albumentations")
    import numpy as np

    dspipe.synth(tmp_path / "src", count=4, size=(16, 16), seed=1)
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", progress=False)
    db = tmp_path / "data.lmdb"

    def first(**kw):
        loader = dspipe.Loader(db, batch_size=4, device="cpu", shuffle=False, output="numpy",
                               **kw)
        return next(iter(loader))["image"]

    flip = A.Compose([A.HorizontalFlip(p=0)])
    x = first(transform=flip)
    assert x.dtype == np.float32 and x.min() >= 0 and x.max() > 100  # 0..255, as albumentations
    assert np.array_equal(x, first(normalize=False))
    # Asked for: the dataset's statistics.
    n = first(transform=flip, normalize=True)
    assert abs(float(n.mean())) < 1.5 and float(n.max()) < 10
    assert np.allclose(n, first())  # what a loader without a pipeline gives
    # normalize=False with A.Normalize(): the pipeline's Normalize applies, no error.
    y = first(transform=A.Compose([A.Normalize()]), normalize=False)
    want = (x.transpose(0, 2, 3, 1) / 255.0 - np.array([0.485, 0.456, 0.406])) \
        / np.array([0.229, 0.224, 0.225])
    assert np.allclose(y, want.transpose(0, 3, 1, 2), atol=1e-4)
    # normalize=False with mean/std: one message naming both.
    with pytest.raises(ValueError) as e:
        first(normalize=False, mean=[100], std=[50])
    assert "normalize=False (no normalization) and mean/std exclude each other" in str(e.value)


def test_len_after_a_partial_pass_is_what_the_next_loop_yields(tmp_path):
    # Item 4: the notebook looked at one batch (next(iter(loader))), then printed len(loader) and
    # ran the epoch: len said 23, the loop made 25; torch's DataLoader warned about the length.
    import warnings

    dspipe.synth(tmp_path / "src", count=10, size=(16, 16), seed=1)
    dspipe.build(tmp_path / "src", tmp_path / "data.lmdb", progress=False)
    loader = dspipe.Loader(tmp_path / "data.lmdb", batch_size=4, device="cpu", output="numpy")
    assert len(loader) == 3
    next(iter(loader))  # a look at one batch: a partial pass
    assert len(loader) == 3 and loader.batches_left() == 2
    assert len(loader) == len(list(loader)) == 3  # the next loop is a whole epoch
    n = 0
    for _ in loader:  # during a pass: the pass a new loop would make, as torch's len is fixed
        assert len(loader) == 3
        n += 1
    assert n == 3
    torch = pytest.importorskip("torch")
    from dspipe.torch import IterableDataset

    ds = IterableDataset(tmp_path / "data.lmdb", batch_size=4, device="cpu")
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    next(iter(dl))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when a pass yields more than len()
        assert len(dl) == len(list(dl)) == 3


def _built_with_pixels(tmp_path, count, seed, classes):
    """A synthetic 24x32 dataset built to tmp_path/train.lmdb, and its stored pixels as a user
    compares them with albumentations: images (N, H, W, 3) and masks (N, H, W), uint8."""
    import numpy as np

    src = tmp_path / "src"
    dspipe.synth(src, count=count, size=(24, 32), seed=seed, classes=classes)
    db = tmp_path / "train.lmdb"
    dspipe.build(src, db, progress=False)
    plain = dspipe.Loader(db, batch_size=count, shuffle=False, device="cpu", output="numpy",
                          normalize=False)
    raw = next(iter(plain))
    return (db, raw["image"].transpose(0, 2, 3, 1).astype(np.uint8),
            raw["mask"].astype(np.uint8))


def test_tutorial_pipeline_ending_in_totensorv2_runs_as_albumentations_gives_it(tmp_path):
    # Item 10: every tutorial recipe ends in Normalize (or ToFloat) and ToTensorV2.
    import albumentations as A
    import numpy as np
    from albumentations.pytorch import ToTensorV2

    db, images, masks = _built_with_pixels(tmp_path, count=6, seed=3, classes=3)

    for aug in (A.Compose([A.HorizontalFlip(p=1), A.Normalize(), ToTensorV2()]),
                A.Compose([A.VerticalFlip(p=1), A.ToFloat(), ToTensorV2(transpose_mask=True)]),
                A.Compose([A.ToFloat(max_value=1023), ToTensorV2()])):
        loader = dspipe.Loader(db, batch_size=6, shuffle=False, device="cpu", output="numpy",
                               transform=aug)
        batch = next(iter(loader))
        for i in range(6):
            want = aug(image=images[i], mask=masks[i])
            assert batch["image"][i].shape == tuple(want["image"].shape)  # CHW
            ref = want["image"].numpy()
            # Normalize: bit-identical; ToFloat: x * (1/max) instead of x / max, within 1 ulp.
            assert np.all(np.abs(batch["image"][i] - ref) <= np.spacing(np.abs(ref))), aug
            assert np.array_equal(batch["mask"][i], want["mask"].numpy())

    with pytest.raises(ValueError, match="ToTensorV2 must be the last transform"):
        dspipe.Loader(db, batch_size=2, device="cpu",
                      transform=A.Compose([ToTensorV2(), A.HorizontalFlip()]))
    with pytest.raises(ValueError, match="already scales the pixels"):
        dspipe.Loader(db, batch_size=2, device="cpu",
                      transform=A.Compose([A.ToFloat(), A.Normalize()]))


def test_tutorial_blurs_and_pca_gray_run_as_albumentations_gives_them(tmp_path):
    # Items 10 and 23: tutorial recipes blur with A.OneOf([A.MotionBlur(), A.MedianBlur()]) and
    # some use A.ToGray(method="pca"); dspipe refused all three ("is not supported").
    import albumentations as A
    import numpy as np

    db, images, _ = _built_with_pixels(tmp_path, count=4, seed=5, classes=2)

    recipe = A.Compose([A.HorizontalFlip(), A.OneOf([A.MotionBlur(p=0.2),
                                                     A.MedianBlur(blur_limit=3, p=0.1)], p=0.5),
                        A.ToGray(method="pca", p=0.3), A.Normalize()])
    loader = dspipe.Loader(db, batch_size=4, device="cpu", output="numpy", transform=recipe)
    assert next(iter(loader))["image"].shape == (4, 3, 24, 32)
    # With every draw fixed, the batch is albumentations' output for the same pixels.
    for aug in (A.Compose([A.MedianBlur(blur_limit=(5, 5), p=1)]),
                A.Compose([A.MotionBlur(blur_limit=(7, 7), angle_range=(30, 30),
                                        direction_range=(0.5, 0.5), allow_shifted=False, p=1)]),
                A.Compose([A.ToGray(method="pca", p=1)])):
        loader = dspipe.Loader(db, batch_size=4, shuffle=False, device="cpu", output="numpy",
                               transform=aug)
        batch = next(iter(loader))["image"]
        for i in range(4):
            want = aug(image=images[i])["image"].transpose(2, 0, 1).astype(np.float32)
            assert np.array_equal(batch[i], want), aug


def test_coarse_dropout_holes_larger_than_the_image_are_refused_at_open(tmp_path):
    # Item 22: A.CoarseDropout sized for 512 px images on 64 px data failed at the first batch
    # with OpenCV's "Assertion failed ... roi".
    import albumentations as A

    src = tmp_path / "src"
    dspipe.synth(src, count=4, size=(64, 64), seed=2, classes=2)
    db = tmp_path / "train.lmdb"
    dspipe.build(src, db, progress=False)
    aug = A.Compose([A.HorizontalFlip(),
                     A.CoarseDropout(hole_height_range=(96, 128), hole_width_range=(96, 128),
                                     p=0.5),
                     A.Normalize()])
    with pytest.raises(ValueError) as e:
        dspipe.Loader(db, batch_size=2, device="cpu", transform=aug)
    msg = str(e.value)
    assert ("transform 2 (CoarseDropout): argument hole_height_range=(96.0, 128.0) asks for "
            "holes at least 96 px high, larger than the 64x64 image it gets") in msg, msg
    assert "albumentations 2.0.8 raises ValueError: low >= high" in msg, msg
    assert "Assertion failed" not in msg, msg
    # The same holes after an upscale fit: the loader opens and every sample is read.
    ok = A.Compose([A.Resize(256, 256), *aug.transforms])
    loader = dspipe.Loader(db, batch_size=2, device="cpu", transform=ok)
    assert sum(len(b["index"]) for b in loader) == 4


def test_failed_build_continues_with_the_call_its_message_names(tmp_path):
    # Item 11: the message said "rerun with resume=True (or on_error='skip')"; on_error="skip"
    # then said AlreadyExists, and resume=True with on_error="skip" said "options differ".
    import re

    src = tmp_path / "src"
    dspipe.synth(src, count=6, size=(16, 16), seed=4, classes=2)
    bad = src / "images" / "000002.png"
    bad.write_bytes(b"")
    out = tmp_path / "train.lmdb"
    with pytest.raises(dspipe.CorruptRecord) as e:
        dspipe.build(src, out, progress=False)
    msg = str(e.value)
    assert "build stopped after 2 records (kept)" in msg, msg
    assert ("to skip such files, rerun with resume=True, on_error='skip' and the same options "
            "(they are listed in rejected.tsv)") in msg, msg
    # on_error="skip" alone: the output is there; the message names resume=True.
    with pytest.raises(OSError) as e2:
        dspipe.build(src, out, on_error="skip", progress=False)
    assert re.search(r"pass resume=True to continue an interrupted build \(with the options it "
                     r"was started with; on_error may change\) or overwrite=True", str(e2.value))
    # The call the first message named.
    r = dspipe.build(src, out, resume=True, on_error="skip", progress=False)
    assert r["records"] == 5 and r["skipped"] == 1, r
    assert str(bad) in (out / "rejected.tsv").read_text()
    loader = dspipe.Loader(out, batch_size=5, device="cpu")
    assert len(next(iter(loader))["index"]) == 5


def test_garbled_messages_name_each_option_once_with_the_values(tmp_path):
    # Item 16: "size and size must both be 0 ... or both > 0"; "need 0 < crop_scale <=
    # crop_scale <= 1"; a state mismatch naming size twice; "mask size differs from the image
    # size" without the sizes; the key only as hex.
    import cv2
    import lmdb
    import numpy as np

    src = tmp_path / "src"
    dspipe.synth(src, count=4, size=(24, 32), seed=5, classes=2)
    db = tmp_path / "train.lmdb"
    dspipe.build(src, db, progress=False)
    with pytest.raises(ValueError) as e:
        dspipe.Loader(db, batch_size=2, device="cpu", size=(0, 8))
    assert ("the output size (size) is height 0, width 8: give both > 0, or both 0 for the "
            "dataset's own size") in str(e.value), str(e.value)
    with pytest.raises(ValueError) as e:
        dspipe.Loader(db, batch_size=2, device="cpu", crop_scale=(0.9, 0.1))
    assert ("the crop's area range crop_scale is (0.9, 0.1): need 0 < min <= max <= 1"
            in str(e.value)), str(e.value)

    a = dspipe.Loader(db, batch_size=2, device="cpu", size=(16, 16), crop_scale=(0.5, 1.0))
    state = a.state_dict()
    b = dspipe.Loader(db, batch_size=2, device="cpu", size=(8, 8))
    with pytest.raises(ValueError) as e:
        b.load_state_dict(state)
    msg = str(e.value)
    assert "size: state has (16, 16), this loader (8, 8)" in msg, msg
    assert msg.count("size:") == 1, msg
    assert "crop_scale: state has (0.5, 1), this loader (1, 1)" in msg, msg

    # A plain LMDB whose record 2 has a mask of another size.
    plain, masks = tmp_path / "plain.lmdb", tmp_path / "masks.lmdb"
    with lmdb.open(str(plain), map_size=1 << 24) as env, \
            lmdb.open(str(masks), map_size=1 << 24) as menv:
        with env.begin(write=True) as t, menv.begin(write=True) as mt:
            for i in range(4):
                t.put(str(i).encode(), cv2.imencode(".png", np.full((24, 32, 3), 9, np.uint8))[1])
                m = np.zeros((12, 16) if i == 2 else (24, 32), np.uint8)
                mt.put(str(i).encode(), cv2.imencode(".png", m)[1])
    loader = dspipe.Loader(plain, masks=str(masks), batch_size=1, shuffle=False, device="cpu",
                           normalize=False)
    with pytest.raises(dspipe.CorruptRecord) as e:
        for _ in loader:
            pass
    msg = str(e.value)
    assert f"record 2 (key 2) in {plain}" in msg, msg
    assert "the mask is 12x16 (height x width) but the image is 24x32" in msg, msg


def test_install_docs_colab_line_uses_ubuntu_package_names():
    # Item 20: the Colab source-build line used Debian's libjpeg62-turbo-dev; Colab runs Ubuntu
    # 22.04 (libjpeg-turbo8-dev), and the line missed two libraries the build needs.
    import re

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    doc = open(os.path.join(root, "docs", "INSTALL.md")).read()
    assert "Ubuntu 22.04" in doc
    cell = re.search(r"```sh\n(!apt-get[^`]*?)\n!pip install", doc)
    assert cell, "no apt-get cell in docs/INSTALL.md"
    colab = set(re.findall(r"\b([a-z0-9][a-z0-9.+-]*-dev)\b", cell.group(1)))
    deps = open(os.path.join(root, "scripts", "install-deps.sh")).read()
    def dev_packages(name):
        return set(re.findall(r"\b([a-z0-9][a-z0-9.+-]*-dev)\b", deps.split(f"\n{name}=(")[1].split(")")[0]))

    # The full list is "${TOOLS[@]}" plus the test and Python packages; libopencv-dev holds the
    # three module packages --tools installs instead of it.
    debian = dev_packages("TOOLS") | dev_packages("PKGS")
    debian -= {"libgtest-dev", "libgmock-dev", "libclang-rt-14-dev"}  # tests only
    debian -= {"libopencv-core-dev", "libopencv-imgproc-dev", "libopencv-imgcodecs-dev"}
    assert "libopencv-dev" in debian and "libtbb-dev" in debian, sorted(debian)
    ubuntu = {"libjpeg-turbo8-dev" if p == "libjpeg62-turbo-dev" else p for p in debian}
    assert colab == ubuntu, (sorted(colab - ubuntu), sorted(ubuntu - colab))


def test_imagefolder_classes_are_its_labels_and_an_empty_class_folder_is_refused(tmp_path):
    # Item 14: info()["classes"] was 0 for an ImageFolder with 5 class names (the notebook sizes
    # its model from it), and an empty class folder silently became a class.
    import cv2
    import numpy as np

    src = tmp_path / "flowers"
    names = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
    for k, name in enumerate(names):
        (src / name).mkdir(parents=True)
        for i in range(2):
            cv2.imwrite(str(src / name / f"{i}.png"), np.full((12, 16, 3), 30 * k + i, np.uint8))
    dspipe.build(src, tmp_path / "flowers.lmdb", progress=False)
    info = dspipe.info(tmp_path / "flowers.lmdb")
    assert info["classes"] == 5, info
    assert info["class_names"] == names, info

    (src / "empty_class").mkdir()
    with pytest.raises(dspipe.errors.CorruptRecord) as e:
        dspipe.build(src, tmp_path / "again.lmdb", progress=False)
    msg = str(e.value)
    assert f"{src}/empty_class: an empty class folder: it would be label 2" in msg, msg
    assert "remove the folder" in msg and "pass allow_empty_classes=True to keep it" in msg, msg
    assert not (tmp_path / "again.lmdb").exists()

    # Asked for (torchvision's allow_empty=True), it is a label with no samples, said once.
    r = dspipe.build(src, tmp_path / "allowed.lmdb", allow_empty_classes=True, progress=False)
    assert "1 empty class folder(s) kept as labels with no samples (allow_empty_classes): " \
        "2 (empty_class)" in "\n".join(r["warnings"]), r
    info = dspipe.info(tmp_path / "allowed.lmdb")
    assert info["classes"] == 6 and info["class_names"][2] == "empty_class", info
    labels = sorted({int(b) for batch in dspipe.Loader(tmp_path / "allowed.lmdb", batch_size=10,
                                                       device="cpu", shuffle=False,
                                                       output="numpy")
                     for b in batch["label"]})
    assert labels == [0, 1, 3, 4, 5], labels


def test_imagenet_normalize_on_gray_images_uses_the_first_values_as_albumentations(tmp_path):
    # Item 23: A.Normalize() (three ImageNet values) on a gray dataset was refused ("mean/std
    # have 3/3 values for 1 channels"); albumentations normalizes a 1-channel image with the
    # first value of each.
    A = pytest.importorskip("albumentations")
    import numpy as np

    dspipe.synth(tmp_path / "src", count=4, size=(16, 16), seed=2)
    db = tmp_path / "gray.lmdb"
    dspipe.build(tmp_path / "src", db, gray=True, progress=False)
    kw = dict(batch_size=4, device="cpu", shuffle=False, output="numpy")
    raw = next(iter(dspipe.Loader(db, normalize=False, **kw)))["image"]
    assert raw.shape == (4, 1, 16, 16)
    got = next(iter(dspipe.Loader(db, transform=A.Compose([A.Normalize()]), **kw)))["image"]
    for i in range(4):
        want = A.Normalize()(image=raw[i, 0].astype(np.uint8))["image"]
        assert np.allclose(got[i, 0], want, atol=1e-5), i


def test_after_a_corrupt_record_the_same_iterator_goes_on_with_the_epoch(dataset, tmp_path):
    # Item 9: after a CorruptRecord mid-epoch the generator was dead, a new loop started the
    # next epoch and died at the same record, and the message did not mention max_corrupt.
    import shutil

    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "bad.lmdb"
    shutil.copytree(dataset, path)
    env = lmdb.open(str(path), max_dbs=4)
    with env.begin(write=True, db=env.open_db(b"records")) as txn:
        key = (5).to_bytes(8, "big")
        txn.put(key, txn.get(key)[:40])  # a truncated record in the second batch
    env.close()
    loader = dspipe.Loader(str(path), batch_size=4, threads=2, device="cpu", shuffle=False)
    it = iter(loader)
    seen, errors = [], []
    while True:
        try:
            batch = next(it)
        except StopIteration:
            break
        except dspipe.CorruptRecord as e:
            errors.append(e)
            continue
        seen += [int(i) for i in batch["index"]]
    assert len(errors) == 1 and errors[0].key == "0000000000000005", errors
    msg = str(errors[0])
    assert "the batch holding it was dropped" in msg and "set max_corrupt=10" in msg, msg
    # ... and it names the file the record was built from (the dataset's source table).
    source = dspipe.sources(path)[5]
    assert source.endswith(".png") and errors[0].path == source, (errors[0].path, source)
    assert f"(record made from {source})" in msg, msg
    assert loader.stats()["corrupt"]["records"][0]["source"] == source
    assert seen == [i for i in range(26) if not 4 <= i < 8], seen  # the rest of the epoch
    # Through torch's DataLoader the same: the caller's catch leaves the iterator usable.
    torch = pytest.importorskip("torch")
    from dspipe.torch import IterableDataset

    ds = IterableDataset(str(path), batch_size=4, threads=2, device="cpu", shuffle=False)
    it = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0))
    n = 0
    while True:
        try:
            next(it)
            n += 1
        except StopIteration:
            break
        except dspipe.CorruptRecord:
            continue
    assert n == 6  # 7 batches, one dropped


def test_crop_non_empty_mask_if_exists_crops_in_any_position_of_a_pipeline(tmp_path):
    # Item 21: through the Loader it failed in every case of albumentations' suite ("the
    # transforms made 100x100 from 100x100, the batch is 10x10"); followed by HorizontalFlip the
    # crop was lost, followed by CenterCrop or Resize the output was not a crop of the input.
    A = pytest.importorskip("albumentations")
    import cv2
    import numpy as np

    src = tmp_path / "src"
    (src / "images").mkdir(parents=True)
    (src / "masks").mkdir()
    rng = np.random.default_rng(7)
    images = []
    for i in range(4):
        img = rng.integers(0, 256, (100, 100, 3), dtype=np.uint8)
        mask = np.zeros((100, 100), np.uint8)
        mask[20 + 10 * i:35 + 10 * i, 50:62] = 1 + i % 2
        cv2.imwrite(str(src / "images" / f"{i}.png"), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
        cv2.imwrite(str(src / "masks" / f"{i}.png"), mask)
        images.append((img, mask))
    db = tmp_path / "seg.lmdb"
    dspipe.build(src, db, progress=False)

    def window_of(big, small):  # (y, x) where small sits in big, or None
        h, w = small.shape[:2]
        for y in range(big.shape[0] - h + 1):
            for x in range(big.shape[1] - w + 1):
                if np.array_equal(big[y:y + h, x:x + w], small):
                    return y, x
        return None

    crop = A.CropNonEmptyMaskIfExists(height=10, width=10)
    cases = {"alone": ([crop], 10, lambda o: o),
             "then HorizontalFlip": ([crop, A.HorizontalFlip(p=1)], 10, lambda o: o[:, ::-1]),
             "then CenterCrop": ([crop, A.CenterCrop(6, 6)], 6, lambda o: o),
             "then Resize": ([crop, A.Resize(20, 20)], 20, None)}
    for name, (steps, side, undo) in cases.items():
        loader = dspipe.Loader(db, batch_size=4, device="cpu", shuffle=False, output="numpy",
                               normalize=False, transform=A.Compose(steps), seed=3)
        batch = next(iter(loader))
        assert batch["image"].shape == (4, 3, side, side), name
        assert batch["mask"].shape == (4, side, side), name
        if undo is None:
            continue
        for k, i in enumerate(batch["index"]):
            img, mask = images[int(i)]
            out = undo(batch["image"][k].transpose(1, 2, 0).astype(np.uint8))
            at = window_of(img, out)
            assert at is not None, f"{name}: sample {int(i)} is not a crop of its image"
            y, x = at
            assert np.array_equal(undo(batch["mask"][k]), mask[y:y + side, x:x + side]), name
            if name == "alone":
                assert batch["mask"][k].any(), f"{name}: the crop holds no foreground"


_SPAWNED_RANK = r"""
import sys
import dspipe
import torch.distributed as dist

db, store, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
early = dspipe.Loader(db, batch_size=2, device="cpu", shuffle=False)  # before the group
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
try:
    iter(early)
    print("NO ERROR")
except RuntimeError as e:
    print("ERROR", e)
late = dspipe.Loader(db, batch_size=2, device="cpu", shuffle=False)
print("LATE", late.rank, late.world_size, sorted(int(i) for b in late for i in b["index"]))
dist.destroy_process_group()
"""


def test_a_loader_made_before_init_process_group_is_an_error_at_the_first_pass(tmp_path):
    # Item 6: under mp.spawn a loader made before init_process_group used world_size 1 on
    # every rank, silently (each rank trained on all samples).
    pytest.importorskip("torch.distributed")
    import subprocess
    import sys

    dspipe.synth(tmp_path / "src", count=8, size=(16, 16), seed=1)
    db = tmp_path / "d.lmdb"
    dspipe.build(tmp_path / "src", db, progress=False)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen([sys.executable, "-c", _SPAWNED_RANK, str(db),
                               str(tmp_path / "store"), str(r)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    seen = []
    for r, out in enumerate(outs):
        assert procs[r].returncode == 0, out
        assert (f"was made before torch.distributed's init_process_group, so it reads as rank "
                f"0 of 1, but this process is rank {r} of 2 now") in out, out
        assert f"pass rank={r}, world_size=2" in out, out
        late = next(line for line in out.splitlines() if line.startswith("LATE"))
        assert late.startswith(f"LATE {r} 2 "), out
        seen += eval(late.split(" ", 3)[3])
    assert sorted(seen) == list(range(8))  # the loader made after the group: disjoint ranks


def test_ctrl_c_stops_a_build_resumably_and_raises_keyboard_interrupt(tmp_path, capfd):
    # Item 8: with progress=True the KeyboardInterrupt was swallowed by the progress callback
    # and the build ran to its end; with progress=False it surfaced only after the build.
    import signal
    import threading

    dspipe.synth(tmp_path / "src", count=40, size=(16, 16), seed=4)
    out = tmp_path / "d.lmdb"
    handled = threading.Event()

    def on_sigint(signum, frame):  # what Python's default handler does, and say so
        handled.set()
        raise KeyboardInterrupt

    def progress(done, total):  # a worker thread: the signal is handled on the main thread
        if done == 5:
            os.kill(os.getpid(), signal.SIGINT)
            assert handled.wait(timeout=60)  # the build's main thread ran the handler

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            dspipe.build(tmp_path / "src", out, progress=progress, commit_mb=0)
    finally:
        signal.signal(signal.SIGINT, old)
    err = capfd.readouterr().err
    assert "build interrupted at " in err, err
    assert "rerun with resume=True and the same options to continue it" in err, err
    assert not (out / "manifest.json").exists()
    r = dspipe.build(tmp_path / "src", out, resume=True, progress=False, commit_mb=0)
    assert r["records"] == 40 and r["resumed_from"] >= 5, r

    # An exception raised by the callback itself stops the build the same way and is raised.
    def failing(done, total):
        if done == 3:
            raise RuntimeError("the notebook's progress widget broke")

    with pytest.raises(RuntimeError, match="widget broke"):
        dspipe.build(tmp_path / "src", tmp_path / "e.lmdb", progress=failing)


def test_batches_kept_then_released_give_their_buffers_back(dataset):
    # Item 18: after keep = list(loader), 25 buffers (685 MB) stayed after del keep and three
    # more epochs: the pool never shrank.
    import gc

    loader = dspipe.Loader(dataset, batch_size=4, threads=2, device="cpu", prefetch=2)
    keep = list(loader)
    assert len(keep) == 7 and loader.pool_buffers() >= 7
    del keep
    gc.collect()
    assert loader.pool_buffers() <= 2 + 2  # prefetch + 2: what a for loop needs
    for _ in range(3):
        for b in loader:
            pass
    assert loader.pool_buffers() <= 2 + 2


def test_stage_table_counts_samples_folded_into_normalize_in_their_transform_row(tmp_path):
    # Item 19: the transform2 row counted 18 of 195 samples, because the samples whose
    # brightness step ran inside the normalize pass were timed (and counted) only there: the
    # transform looked as if it rarely fired.
    import albumentations as A

    src = tmp_path / "src"
    dspipe.synth(src, count=12, size=(24, 32), seed=3, classes=3)
    db = tmp_path / "train.lmdb"
    dspipe.build(src, db, progress=False)
    aug = A.Compose([A.HorizontalFlip(p=1), A.RandomBrightnessContrast(p=1), A.Normalize()])
    loader = dspipe.Loader(db, batch_size=4, shuffle=False, device="cpu", transform=aug)
    for _ in loader:
        pass
    stats = loader.stats()
    lut = next(v for k, v in stats.items() if k.startswith("transform")
               and v["label"] == "lut: RandomBrightnessContrast")
    assert lut["count"] + lut["folded"] == 12, lut  # every sample ran it (p=1)
    assert lut["folded"] == 12, lut  # all fused into the PNG decode (and its normalize)
    table = loader.report()["table"]
    assert ("lut: RandomBrightnessContrast (+12 of 12 samples fused into another stage, timed "
            "there)") in table, table


def test_a_batch_index_leads_back_to_its_source_file(tmp_path):
    # Item 16: "no way to map batch['index'] back to the source file".
    import numpy as np
    from PIL import Image

    src = tmp_path / "src"
    dspipe.synth(src, count=8, size=(16, 24), seed=4, classes=3)
    db = tmp_path / "train.lmdb"
    dspipe.build(src, db, progress=False, shuffle=True, seed=9)
    files = dspipe.sources(db)
    assert len(files) == 8 and len(set(files)) == 8
    loader = dspipe.Loader(db, batch_size=4, device="cpu", output="numpy", normalize=False,
                           seed=1)
    for batch in loader:
        for i, index in enumerate(batch["index"]):
            path = files[int(index)]
            assert path.startswith(str(src)), path
            want = np.asarray(Image.open(path).convert("RGB")).transpose(2, 0, 1)
            assert np.array_equal(batch["image"][i], want), path
