"""Issue 35, first step: a 12-bit CT slice saved as a 16-bit PNG is never reduced to 8 bits
without the user asking (it used to keep the high byte: 16 of 4096 gray levels, no word)."""
from __future__ import annotations

import pytest

import dspipe


def _ct_folder(root, count=3):
    import cv2
    import numpy as np

    src = root / "ct"
    (src / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        hu = rng.integers(0, 4096, size=(32, 32), dtype=np.uint16)  # 12-bit values
        assert cv2.imwrite(str(src / "images" / f"slice{i:03d}.png"), hu)
    return src


def test_a_16bit_ct_folder_is_refused_naming_the_file_and_depth_8(tmp_path):
    src = _ct_folder(tmp_path)
    out = tmp_path / "ct.lmdb"
    with pytest.raises(dspipe.errors.CorruptRecord) as e:
        dspipe.build(src, out, gray=True, progress=False)
    msg = str(e.value)
    assert f"{src}/images/slice000.png: a 16-bit image (1 channel)" in msg, msg
    assert "16 of its 4096 gray levels" in msg, msg
    assert "pass depth=8 (and overwrite=True over this stopped build)" in msg, msg
    assert "BuildOptions::" not in msg, msg
    assert not (out / "manifest.json").exists()
    # The call the message names succeeds.
    r = dspipe.build(src, out, gray=True, depth=8, overwrite=True, progress=False)
    assert r["records"] == 3, r


def test_depth_8_stores_the_high_byte_when_asked(tmp_path):
    import cv2
    import numpy as np

    src = _ct_folder(tmp_path)
    out = tmp_path / "ct8.lmdb"
    dspipe.build(src, out, gray=True, depth=8, progress=False)
    info = dspipe.info(out)
    assert info["count"] == 3 and info["channels"] == 1, info
    loader = dspipe.Loader(str(out), batch_size=3, shuffle=False, device="cpu",
                           normalize=False)
    batch = next(iter(loader))
    images = np.asarray(batch["image"]).reshape(3, 32, 32)
    for i in range(3):
        hu = cv2.imread(str(src / "images" / f"slice{i:03d}.png"), cv2.IMREAD_UNCHANGED)
        assert np.array_equal(images[int(batch["index"][i])], (hu >> 8).astype(np.uint8))
    with pytest.raises(ValueError, match="depth must be 0"):
        dspipe.build(src, tmp_path / "bad.lmdb", depth=16, progress=False)


def test_gray_slices_in_a_3_channel_dataset_are_said_with_the_fix(tmp_path):
    # The 8-bit gray slices of a CT export, built with the defaults: the one channel was copied
    # into three without a word.
    import cv2
    import numpy as np

    src = tmp_path / "gray"
    (src / "images").mkdir(parents=True)
    for i in range(3):
        assert cv2.imwrite(str(src / "images" / f"s{i}.png"), np.full((16, 16), 40 * i, np.uint8))
    r = dspipe.build(src, tmp_path / "rgb.lmdb", progress=False)
    assert len(r["warnings"]) == 1, r
    assert "all 3 images are gray (1 channel) and the dataset has 3 channels" in r["warnings"][0]
    assert "gray=True" in r["warnings"][0]
    r = dspipe.build(src, tmp_path / "gray.lmdb", gray=True, progress=False)
    assert r["warnings"] == [], r
    assert dspipe.info(tmp_path / "gray.lmdb")["channels"] == 1
