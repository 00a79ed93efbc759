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


def test_tutorial_pipeline_ending_in_totensorv2_runs_as_albumentations_gives_it(tmp_path):
    # Item 10: every tutorial recipe ends in Normalize (or ToFloat) and ToTensorV2.
    import albumentations as A
    import numpy as np
    from albumentations.pytorch import ToTensorV2

    src = tmp_path / "src"
    dspipe.synth(src, count=6, size=(24, 32), seed=3, classes=3)
    db = tmp_path / "train.lmdb"
    dspipe.build(src, db, progress=False)
    plain = dspipe.Loader(db, batch_size=6, shuffle=False, device="cpu", output="numpy",
                          normalize=False)
    raw = next(iter(plain))
    images = raw["image"].transpose(0, 2, 3, 1).astype(np.uint8)  # the stored pixels, HWC
    masks = raw["mask"].astype(np.uint8)

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
    assert "the mask is 16x12 (width x height) but the image is 32x24" in msg, msg


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
    debian = set(re.findall(r"\b([a-z0-9][a-z0-9.+-]*-dev)\b", deps.split("PKGS=(")[1].split(")")[0]))
    debian -= {"libgtest-dev", "libgmock-dev", "libclang-rt-14-dev"}  # tests only
    ubuntu = {"libjpeg-turbo8-dev" if p == "libjpeg62-turbo-dev" else p for p in debian}
    assert colab == ubuntu, (sorted(colab - ubuntu), sorted(ubuntu - colab))
