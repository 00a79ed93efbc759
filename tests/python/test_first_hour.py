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

