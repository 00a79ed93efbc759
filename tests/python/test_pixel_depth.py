# SPDX-License-Identifier: Apache-2.0
"""Issue 35: a 12-bit CT slice saved as a 16-bit PNG is kept as it is (it used to keep the high
byte: 16 of 4096 gray levels, no word), and reduced to 8 bits only when the user asks."""
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


def _instance_masks(src, count=3):
    import cv2
    import numpy as np

    (src / "masks").mkdir()
    rng = np.random.default_rng(1)
    for i in range(count):
        ids = rng.integers(0, 5001, size=(32, 32), dtype=np.uint16)  # instance ids to 5000
        assert cv2.imwrite(str(src / "masks" / f"slice{i:03d}.png"), ids)


@pytest.mark.parametrize("storage", ["encoded", "raw"])
def test_a_12bit_ct_slice_comes_out_as_its_source_values(tmp_path, storage):
    import cv2
    import numpy as np

    src = _ct_folder(tmp_path)
    _instance_masks(src)
    out = tmp_path / f"ct-{storage}.lmdb"
    r = dspipe.build(src, out, store=storage, progress=False)
    assert r["records"] == 3 and r["warnings"] == [], r
    info = dspipe.info(out)
    assert info["sample_type"] == "uint16" and info["mask_type"] == "uint16", info
    assert info["channels"] == 1 and info["classes"] > 4000, info
    slices = [cv2.imread(str(src / "images" / f"slice{i:03d}.png"), cv2.IMREAD_UNCHANGED)
              for i in range(3)]
    masks = [cv2.imread(str(src / "masks" / f"slice{i:03d}.png"), cv2.IMREAD_UNCHANGED)
             for i in range(3)]
    # The build's statistics are numpy's over the same pixels, in source units.
    pixels = np.stack(slices).astype(np.float64)
    assert info["mean"][0] == pytest.approx(pixels.mean(), rel=1e-6)
    assert info["std"][0] == pytest.approx(pixels.std(), rel=1e-6)
    assert info["min"] == [pixels.min()] and info["max"] == [pixels.max()], info
    # nnU-Net's CT normalization inputs, exactly numpy's (linear interpolation).
    assert info["percentile_00_5"] == [np.percentile(pixels, 0.5)], info
    assert info["percentile_99_5"] == [np.percentile(pixels, 99.5)], info
    loader = dspipe.Loader(str(out), batch_size=3, shuffle=False, device="cpu",
                           normalize=False)
    batch = next(iter(loader))
    images = np.asarray(batch["image"])
    assert images.dtype == np.float32 and images.shape == (3, 1, 32, 32), images.shape
    ids = np.asarray(batch["mask"])
    for i in range(3):
        k = int(batch["index"][i])
        assert np.array_equal(images[i, 0], slices[k].astype(np.float32)), k
        assert np.array_equal(ids[i], masks[k].astype(np.int64)), k
    # Normalized: with the manifest's mean/std, in source units.
    loader = dspipe.Loader(str(out), batch_size=3, shuffle=False, device="cpu")
    batch = next(iter(loader))
    k = int(batch["index"][0])
    want = (slices[k].astype(np.float32) - np.float32(info["mean"][0])) / np.float32(info["std"][0])
    assert np.allclose(np.asarray(batch["image"])[0, 0], want, atol=1e-5)


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


def test_transparent_pixels_are_refused_unless_drop_alpha_is_asked(tmp_path):
    # 8-bit RGBA PNGs (cut-outs over a transparent background) lost their alpha without a word.
    import cv2
    import numpy as np

    src = tmp_path / "cutouts"
    (src / "images").mkdir(parents=True)
    bgra = np.zeros((16, 20, 4), np.uint8)
    bgra[..., :3] = np.arange(16 * 20 * 3, dtype=np.uint32).reshape(16, 20, 3) % 251
    bgra[..., 3] = 255
    assert cv2.imwrite(str(src / "images" / "a_opaque.png"), bgra)
    bgra[4:, 7:, 3] = 0  # the background
    assert cv2.imwrite(str(src / "images" / "b_cutout.png"), bgra)
    with pytest.raises(dspipe.CorruptRecord) as e:
        dspipe.build(src, tmp_path / "refused.lmdb", progress=False)
    msg = str(e.value)
    assert "b_cutout.png: an alpha channel with transparent pixels (the first at row 4, " \
        "column 7)" in msg, msg
    assert "pass drop_alpha=True to store the colour channels" in msg, msg
    assert e.value.path.endswith("b_cutout.png")

    out = tmp_path / "rgb.lmdb"
    dspipe.build(src, out, drop_alpha=True, progress=False)
    batch = next(iter(dspipe.Loader(out, batch_size=2, shuffle=False, device="cpu",
                                    normalize=False, output="numpy")))
    want = np.ascontiguousarray(bgra[..., 2::-1]).transpose(2, 0, 1).astype(np.float32)
    assert batch["image"].shape == (2, 3, 16, 20)
    assert (batch["image"] == want).all()  # the colour channels, alpha 255 or not


def test_float32_datasets_have_percentiles_within_a_bin_of_numpys(tmp_path):
    # A float32 dataset (microscopy, resampled CT) had no percentiles, so nnU-Net's
    # normalization could not be set from dspipe.info.
    import cv2
    import numpy as np

    src = tmp_path / "mr"
    (src / "images").mkdir(parents=True)
    rng = np.random.default_rng(3)
    slices = [rng.normal(250.0, 90.0, (24, 40)).astype(np.float32) for _ in range(4)]
    for i, s in enumerate(slices):
        assert cv2.imwrite(str(src / "images" / f"s{i}.tiff"), s)
    dspipe.build(src, tmp_path / "mr.lmdb", progress=False)
    info = dspipe.info(tmp_path / "mr.lmdb")
    assert info["sample_type"] == "float32", info
    pixels = np.stack(slices).astype(np.float64)
    for key, q in (("percentile_00_5", 0.5), ("percentile_99_5", 99.5)):
        want = np.percentile(pixels, q)
        assert info[key][0] == pytest.approx(want, rel=2.0 ** -11), (key, info[key], want)


def _write_tiff(path, pixels):
    """An uncompressed, contiguous, one-strip TIFF of an H x W x C uint8 array (C > 4: gray plus
    C - 1 unspecified extra samples), the layout a multispectral camera writes. OpenCV cannot
    write more than 4 channels, and no TIFF writer is among the test dependencies; these are the
    baseline TIFF 6.0 fields, nothing more."""
    import struct

    h, w, c = pixels.shape
    data = pixels.tobytes()
    bits_at = 8 + len(data)  # BitsPerSample's c values, then ExtraSamples' c - 1
    extra_at = bits_at + 2 * c
    ifd_at = extra_at + 2 * (c - 1) + (extra_at + 2 * (c - 1)) % 2
    entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, c, bits_at), (259, 3, 1, 1),
               (262, 3, 1, 1), (273, 4, 1, 8), (277, 3, 1, c), (278, 4, 1, h),
               (279, 4, 1, len(data)), (284, 3, 1, 1), (338, 3, c - 1, extra_at)]
    out = bytearray(b"II*\0" + struct.pack("<I", ifd_at) + data)
    out += struct.pack(f"<{c}H", *([8] * c)) + struct.pack(f"<{c - 1}H", *([0] * (c - 1)))
    out += b"\0" * (ifd_at - len(out))
    out += struct.pack("<H", len(entries))
    for tag, typ, count, value in entries:
        packed = struct.pack("<H", value) + b"\0\0" if typ == 3 and count == 1 else \
            struct.pack("<I", value)
        out += struct.pack("<HHI", tag, typ, count) + packed
    out += struct.pack("<I", 0)
    path.write_bytes(bytes(out))


def test_an_8bit_image_of_6_channels_keeps_every_channel(tmp_path):
    import numpy as np

    src = tmp_path / "ms"
    (src / "images").mkdir(parents=True)
    rng = np.random.default_rng(2)
    images = [rng.integers(0, 256, size=(24, 20, 6), dtype=np.uint8) for _ in range(2)]
    for i, img in enumerate(images):
        _write_tiff(src / "images" / f"{i}.tiff", img)
    out = tmp_path / "ms.lmdb"
    r = dspipe.build(src, out, progress=False)
    assert r["records"] == 2, r
    info = dspipe.info(out)
    assert info["sample_type"] == "uint8" and info["channels"] == 6, info
    pixels = np.stack(images).astype(np.float64)
    assert info["mean"] == pytest.approx(list(pixels.mean(axis=(0, 1, 2))), rel=1e-9)
    loader = dspipe.Loader(str(out), batch_size=2, shuffle=False, device="cpu",
                           normalize=False)
    batch = next(iter(loader))
    got = np.asarray(batch["image"])
    assert got.dtype == np.float32 and got.shape == (2, 6, 24, 20), got.shape
    for i in range(2):
        k = int(batch["index"][i])
        assert np.array_equal(got[i], images[k].transpose(2, 0, 1).astype(np.float32)), k
