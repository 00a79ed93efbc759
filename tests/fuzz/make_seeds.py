#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Regenerates the small seed corpus in tests/fuzz/seeds (python3-opencv, numpy, zstd CLI).

Usage: /usr/bin/python3 tests/fuzz/make_seeds.py   (writes tests/fuzz/seeds/<harness>/<name>)
Each seed is a valid input for its harness, so fuzzing starts from the paths real data takes.
seeds/*/finding_* are fuzzer findings kept as they were found (this script leaves them).
"""
import json
import os
import struct
import subprocess
import zlib

import cv2
import numpy as np


# A tiny TIFF writer for seeds only (cv2 writes at most 4 contiguous channels): uncompressed,
# little-endian, one strip per plane or square tiles; all samples one type; extra samples
# unspecified. dspipe reads TIFF with libtiff (lib/codec/tiff.h); this only writes.
def tiff_bytes(img, planar=False, tile=None, sample_format=None, photometric=None):
    """img: HxWxC numpy array of uint8 / uint16 / int16 / float32."""
    if img.ndim == 2: img = img[:, :, None]
    h, w, c = img.shape
    bps = img.dtype.itemsize * 8
    fmt = sample_format or {"u": 1, "i": 2, "f": 3}[img.dtype.kind]
    photo = photometric if photometric is not None else (2 if c >= 3 else 1)
    img = img.astype(img.dtype.newbyteorder("<"))
    chunks = []
    if tile is None:
        if planar: chunks = [img[:, :, k].tobytes() for k in range(c)]
        else: chunks = [img.tobytes()]
    else:
        t = tile
        planes = [img[:, :, k:k+1] for k in range(c)] if planar else [img]
        for p in planes:
            for ty in range(0, h, t):
                for tx in range(0, w, t):
                    blk = np.zeros((t, t, p.shape[2]), img.dtype)
                    part = p[ty:ty+t, tx:tx+t]
                    blk[:part.shape[0], :part.shape[1]] = part
                    chunks.append(blk.tobytes())
    data = b""; offsets = []
    base = 8
    for ch in chunks:
        offsets.append(base + len(data)); data += ch
    ifd_at = base + len(data)
    if ifd_at % 2: data += b"\0"; ifd_at += 1
    entries = []; extra = b""
    n_entries = (11 if tile is None else 12) + (1 if c > (3 if photo == 2 else 1) else 0)
    extra_at = ifd_at + 2 + 12 * n_entries + 4
    def arr(tag, typ, vals):
        nonlocal extra
        size = {3: 2, 4: 4}[typ]
        if len(vals) * size <= 4:
            v = b"".join(struct.pack("<H" if typ == 3 else "<I", x) for x in vals).ljust(4, b"\0")
            entries.append(struct.pack("<HHI", tag, typ, len(vals)) + v)
        else:
            at = extra_at + len(extra)
            extra += b"".join(struct.pack("<H" if typ == 3 else "<I", x) for x in vals)
            if len(extra) % 2: extra += b"\0"
            entries.append(struct.pack("<HHII", tag, typ, len(vals), at))
    arr(256, 4, [w]); arr(257, 4, [h]); arr(258, 3, [bps] * c); arr(259, 3, [1])
    arr(262, 3, [photo])
    if tile is None:
        arr(273, 4, offsets); arr(277, 3, [c]); arr(278, 4, [h]); arr(279, 4, [len(x) for x in chunks])
    else:
        arr(277, 3, [c]); arr(322, 4, [tile]); arr(323, 4, [tile]); arr(324, 4, offsets)
        arr(325, 4, [len(x) for x in chunks])
    arr(284, 3, [2 if planar else 1])
    if c > (3 if photo == 2 else 1): arr(338, 3, [0] * (c - (3 if photo == 2 else 1)))
    arr(339, 3, [fmt] * c)
    entries.sort(key=lambda e: struct.unpack("<H", e[:2])[0])
    assert len(entries) == n_entries, (len(entries), n_entries)
    ifd = struct.pack("<H", len(entries)) + b"".join(entries) + struct.pack("<I", 0)
    return b"II*\0" + struct.pack("<I", ifd_at) + data + ifd + extra

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
CODEC = {"none": 0, "raw": 1, "zstd": 2, "png": 3, "jpeg": 4, "encoded": 5}


def put(harness, name, data):
    os.makedirs(os.path.join(HERE, harness), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(HERE, harness, name), "wb") as f:
        f.write(data)


def enc(ext, img, params=()):
    ok, buf = cv2.imencode(ext, img, list(params))
    assert ok
    return buf.tobytes()


def record(img_codec, image, ch, h, w, label=-1, mask_codec="none", mask=b"", image_type=0,
           mask_type=0):
    # Version 2 (typed samples): the types in the codec bytes' high nibbles.
    v = 2 if image_type or mask_type or ch not in (1, 3) else 1
    hdr = b"DSR1" + bytes([v, CODEC[img_codec] | image_type << 4,
                           CODEC[mask_codec] | (mask_type << 4 if mask else 0), ch])
    hdr += struct.pack("<IIiII", h, w, label, len(image), len(mask))
    crc = zlib.crc32(mask, zlib.crc32(image, zlib.crc32(hdr)))
    return hdr + struct.pack("<I", crc) + image + mask


rng = np.random.default_rng(7)
rgb = rng.integers(0, 255, (6, 5, 3), dtype=np.uint8)
gray = rng.integers(0, 4, (6, 5), dtype=np.uint8)
png_rgb = enc(".png", rgb)
png_gray = enc(".png", gray)
png16 = enc(".png", (gray.astype(np.uint16) * 300))
png_rgba = enc(".png", np.dstack([rgb, np.full((6, 5), 255, np.uint8)]))
jpg = enc(".jpg", rgb, (cv2.IMWRITE_JPEG_QUALITY, 50))
jpg_gray = enc(".jpg", gray * 60)
bmp = enc(".bmp", rgb)
raw = rgb[:, :, ::-1].tobytes()
zst = subprocess.run(["zstd", "-q", "-c", "-3"], input=raw, capture_output=True,
                     check=True).stdout

# decode: first byte picks the operation (bit0 mask-on-refusal, bit1 gray, bits2+ op).
for op in (0, 4, 8, 6):
    put("decode", f"png_rgb_{op}", bytes([op]) + png_rgb)
    put("decode", f"jpg_{op}", bytes([op]) + jpg)
for name, data in (("png_gray", png_gray), ("png16", png16), ("png_rgba", png_rgba),
                   ("jpg_gray", jpg_gray), ("bmp", bmp)):
    put("decode", name, bytes([8]) + data)
put("decode", "truncated_png", bytes([1]) + png_rgb[:-12])
# Typed decodes (op 12: bits 2+ = 3): a 16-bit gray PNG, a 4-channel 16-bit TIFF, a float TIFF;
# op 13: as a mask (16-bit ids kept).
g16 = gray.astype(np.uint16) * 1000
stack16 = np.dstack([g16, g16 + 1, g16 + 2, g16 + 3])
f32 = gray.astype(np.float32) * -1.5
put("decode", "typed_png16", bytes([12]) + enc(".png", g16))
put("decode", "typed_tiff16x4", bytes([12]) + enc(".tiff", stack16))
put("decode", "typed_tiff_f32", bytes([12]) + enc(".tiff", f32))
put("decode", "typed_mask16", bytes([13]) + enc(".png", g16))
# 16-bit RGB and RGBA PNGs: the fast path (typed, op 12), and as a mask (op 13: not the fast
# path, which takes gray masks only).
rgb16 = np.dstack([g16, g16 + 7, g16 + 11])
put("decode", "typed_png16_rgb", bytes([12]) + enc(".png", rgb16))
put("decode", "typed_png16_rgba", bytes([12]) + enc(".png", np.dstack([rgb16, g16 + 5])))
put("decode", "typed_mask16_rgb", bytes([13]) + enc(".png", rgb16))
# libtiff's path (lib/codec/tiff.h): 5 planar uint16 channels, and 6 float32 channels in
# tiles that overhang the image; typed (op 12), and planar 16-bit RGB as 8-bit (op 0).
u16x5 = np.dstack([g16 + 7 * k for k in range(5)])
f32x6 = np.dstack([f32 + 0.5 * k for k in range(6)])
put("decode", "typed_tiff16x5_planar", bytes([12]) + tiff_bytes(u16x5, planar=True))
put("decode", "typed_tiff_f32x6_tiled", bytes([12]) + tiff_bytes(f32x6, tile=16))
put("decode", "tiff16x3_planar", bytes([0]) + tiff_bytes(u16x5[:, :, :3], planar=True))
# op 14: the typed decode and the pages stacked as channels (one page here; the fuzzer links more).
put("decode", "pages_tiff16x5", bytes([14]) + tiff_bytes(u16x5))

# The other formats on the decode allow-list (lib/codec/limits_check.h), genuine and with a
# header over the DecodeLimits, and formats OpenCV reads that dspipe refuses.
def tiff_header(w, h):
    """A little-endian 8-bit gray TIFF with one 16-byte strip at offset 200 declaring w x h."""
    tags = [(256, 4, w), (257, 4, h), (258, 3, 8), (259, 3, 1), (262, 3, 1), (273, 4, 200),
            (277, 3, 1), (278, 4, h), (279, 4, 16)]
    out = b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", len(tags))
    for tag, typ, value in tags:
        out += struct.pack("<HHI", tag, typ, 1)
        out += struct.pack("<HH", value, 0) if typ == 3 else struct.pack("<I", value)
    out += struct.pack("<I", 0)
    return out + b"\x55" * (216 - len(out))


tiff = enc(".tiff", rgb)
webp = enc(".webp", rgb)
ppm = enc(".ppm", rgb)
pgm = enc(".pgm", gray * 60)
others = (("tiff", tiff), ("tiff_small", tiff_header(4, 4)), ("webp", webp), ("ppm", ppm),
          ("pgm", pgm), ("bomb_tiff_huge", tiff_header(60000, 60000)),
          ("bomb_pnm_huge", b"P6\n# c\n60000 60000\n255\n" + bytes(16)),
          ("refused_hdr", enc(".hdr", rgb.astype(np.float32) / 255)),
          ("refused_ras", enc(".ras", rgb)))
for name, data in others:
    put("decode", name, bytes([8]) + data)

# record: every codec, with and without masks.
put("record", "raw", record("raw", raw, 3, 6, 5, label=2))
put("record", "zstd", record("zstd", zst, 3, 6, 5))
put("record", "png_mask", record("png", png_rgb, 3, 6, 5, mask_codec="png", mask=png_gray))
put("record", "jpeg", record("jpeg", jpg, 3, 6, 5, label=0))
put("record", "encoded_gray", record("encoded", bmp, 1, 6, 5))
put("record", "encoded_tiff", record("encoded", tiff, 3, 6, 5))
put("record", "encoded_webp_pgm_mask", record("encoded", webp, 3, 6, 5, mask_codec="encoded",
                                               mask=pgm))
put("record", "bomb_tiff_huge", record("encoded", tiff_header(60000, 60000), 1, 6, 5))
# Version 2: a uint16 PNG with uint16 ids, raw uint16 x4, a float TIFF.
put("record", "v2_png16_mask16", record("png", enc(".png", g16), 1, 6, 5, mask_codec="png",
                                        mask=enc(".png", g16), image_type=1, mask_type=1))
put("record", "v2_raw16x4", record("raw", stack16.astype("<u2").tobytes(), 4, 6, 5,
                                   image_type=1))
put("record", "v2_tiff_f32", record("encoded", enc(".tiff", f32), 1, 6, 5, image_type=3))
put("record", "bomb_pnm_huge_mask", record("png", png_rgb, 3, 6, 5, mask_codec="encoded",
                                              mask=b"P5 20000 20000 255\n" + bytes(16)))

# manifest: a lone LMDB, one shard of a set, and a sharded top manifest.json.
base = {"format": "dspipe", "format_version": 1, "complete": True, "count": 4,
        "store": "encoded", "channels": 3, "height": 6, "width": 5, "has_masks": True,
        "has_labels": False, "num_classes": 4, "class_names": [],
        "stats": {"mean": [1.0, 2.0, 3.0], "std": [4.0, 5.0, 6.0]}}
put("manifest", "lone.json", json.dumps(base))
put("manifest", "shard.json", json.dumps(dict(base, shard={"index": 1, "begin": 2, "end": 4})))
put("manifest", "sharded.json", json.dumps(dict(base, shards=[
    {"name": "shard-00000.lmdb", "begin": 0, "end": 2},
    {"name": "shard-00001.lmdb", "begin": 2, "end": 4}])))

put("manifest", "files.json", json.dumps(dict(base, shards=[
    {"name": "shard-00000.lmdb", "begin": 0, "end": 2},
    {"name": "shard-00001.lmdb", "begin": 2, "end": 4}], files=[
    {"path": "shard-00000.lmdb/data.mdb", "size": 8192, "sha256": "ab" * 32},
    {"path": "shard-00001.lmdb/data.mdb", "size": 8192, "sha256": "CD" * 32}])))
put("manifest", "empty_shards.json", json.dumps(dict(base, count=0, shards=[])))  # a finding
put("manifest", "huge_version.json", json.dumps(base).replace('"format_version": 1',
                                                               '"format_version": 7.7e79'))  # too

# build_state: mode byte 0/1 = the "build" state, 2 = the "cursor".
state = {"options": {"source": "/x", "store": "encoded"},
         "plan": [["/nonexistent/a.png", "", -1, ""], ["/nonexistent/b.png", "m.png", 3, "bad"]],
         "meta": {"kind": "folder", "has_masks": False, "has_labels": False, "class_names": []}}
put("build_state", "state0", b"\x00" + json.dumps(state).encode())
put("build_state", "state1", b"\x01" + json.dumps(state).encode())
cursor = {"next_pos": 0, "next_index": 0, "sum": [0, 0, 0], "sumsq": [0, 0, 0], "pixels": 0,
          "stat_images": 0, "mask_max": -1, "height": -1, "width": -1, "image_bytes": 0,
          "mask_bytes": 0, "codecs": {}, "rejected": []}
put("build_state", "cursor0", b"\x02" + json.dumps(cursor).encode())
put("build_state", "cursor1", b"\x02" + json.dumps(dict(cursor, next_pos=1, next_index=1,
                                                        codecs={"png": 1})).encode())
# A typed build's cursor (issue 35): types, min / max, value counts for the percentiles.
put("build_state", "cursor_typed", b"\x02" + json.dumps(dict(
    cursor, next_pos=1, next_index=1, sum=[10.0] + [0.0] * 15, sumsq=[50.0] + [0.0] * 15,
    min=[1.0] + [0.0] * 15, max=[4000.0] + [0.0] * 15, hist=[[[1, 3], [4000, 1]]], image_type=1,
    channels=1, type_from="/x/a.png", mask_type=1, pixels=4, stat_images=1)).encode())


def entries(pairs):
    out = b""
    for k, v in pairs:
        out += bytes([len(k)]) + struct.pack("<H", len(v)) + k + v
    return out


# plain_lmdb: [klen:1][vlen:2 LE][key][value]...
put("plain_lmdb", "digits", entries([(b"0", png_rgb), (b"1", jpg), (b"10", bmp), (b"2", png_gray)]))
put("plain_lmdb", "names", entries([(b"img_a", jpg), (b"img_b", png_rgba)]))
put("plain_lmdb", "records_key", entries([(b"records", png_rgb), (b"meta", b"{}")]))

# csv: image,mask[,label] with and without a header row.
put("csv", "header.csv", "image,mask,label\nimages/a.png,masks/a.png,1\nb.jpg,,2\n")
put("csv", "plain.csv", "a.png,m.png\n/abs/b.png,n.png\n")
put("csv", "quoted.csv", '"x,y.png","m ""q"".png",0\r\nz.png\r\n')

# png_fast: PNG files the fast path takes (8-bit gray, RGB, RGBA; gray+alpha built by hand, as
# OpenCV writes none), several zlib levels so stored, fixed and dynamic blocks all appear.
rng = np.random.RandomState(5)
for (h, w) in ((5, 7), (16, 3)):
    for ch in (1, 3, 4):
        img = rng.randint(0, 256, size=(h, w, ch), dtype=np.uint8)
        img[h // 2:] = img[h // 2:] // 32  # a smoother half: other filters win there
        for level in (0, 3, 9):
            put("png_fast", f"c{ch}_{w}x{h}_l{level}",
                enc(".png", img if ch > 1 else img[:, :, 0], (cv2.IMWRITE_PNG_COMPRESSION, level)))


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


ga = rng.randint(0, 256, size=(4, 6 * 2), dtype=np.uint8)
rows = b"".join(bytes([f]) + ga[y].tobytes() for y, f in enumerate((1, 2, 3, 4)))
put("png_fast", "gray_alpha_filters", b"\x89PNG\r\n\x1a\n" +
    chunk(b"IHDR", struct.pack(">IIBBBBB", 6, 4, 8, 4, 0, 0, 0)) +
    chunk(b"gAMA", struct.pack(">I", 45455)) + chunk(b"IDAT", zlib.compress(rows)) +
    chunk(b"IEND", b""))


# archive: small archives of each kind the archive source reads (the harness names them .tar;
# libarchive finds the format from the bytes): folder, CSV and ImageFolder layouts, odd members.
import io  # noqa: E402
import tarfile  # noqa: E402
import zipfile  # noqa: E402


def tar_bytes(members, mode="w"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.PAX_FORMAT) as t:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = data
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zip_bytes(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, _ in members:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


small_png = enc(".png", np.full((4, 4, 3), 90, np.uint8))
small_mask = enc(".png", np.zeros((4, 4), np.uint8))
folder = [("images/", "", "dir"), ("images/a.png", small_png, "file"),
          ("masks/a.png", small_mask, "file")]
put("archive", "folder.tar", tar_bytes(folder))
put("archive", "folder.tar.gz", tar_bytes([("data/" + n, d, k) for n, d, k in folder], "w:gz"))
put("archive", "folder.zip", zip_bytes([m for m in folder if m[2] == "file"]))
put("archive", "csv.tar", tar_bytes([("list.csv", b"img/a.png,msk/a.png,1\n../b.png,msk/a.png\n",
                                      "file"), ("img/a.png", small_png, "file"),
                                     ("msk/a.png", small_mask, "file")]))
put("archive", "classes.tar", tar_bytes([("cat/a.png", small_png, "file"),
                                         ("dog/b.png", small_png, "file"),
                                         ("dog/link.png", "../cat/a.png", "link"),
                                         ("../up.png", small_png, "file")]))
zst = subprocess.run(["zstd", "-q", "-c"], input=tar_bytes(folder), stdout=subprocess.PIPE,
                     check=True).stdout
put("archive", "folder.tar.zst", zst)

# jpeg_region: 6 parameter bytes (crop x, y, w, h /255, output side - 1, flags: bit0 gray,
# bit1 scale 8/8 + differential check) then a JPEG: 4:2:0, progressive, restart markers (every
# 2 MCUs, every MCU), gray.
yy, xx = np.mgrid[0:37, 0:45]
smooth = np.dstack([xx * 5, yy * 6, (xx + yy) * 3]).astype(np.uint8)
smooth = np.clip(smooth.astype(int) + np.random.default_rng(11).integers(-20, 20, smooth.shape), 0,
                 255).astype(np.uint8)
region_files = {
    "baseline": enc(".jpg", smooth, (cv2.IMWRITE_JPEG_QUALITY, 90)),
    "progressive": enc(".jpg", smooth, (cv2.IMWRITE_JPEG_PROGRESSIVE, 1)),
    "restart": enc(".jpg", smooth, (cv2.IMWRITE_JPEG_RST_INTERVAL, 2)),
    "gray": enc(".jpg", smooth[:, :, 0]),
    # A restart marker after every MCU: crops are decoded from their MCUs alone.
    "restart_mcu": enc(".jpg", smooth, (cv2.IMWRITE_JPEG_RST_INTERVAL, 1)),
    "restart_mcu_gray": enc(".jpg", smooth[:, :, 0], (cv2.IMWRITE_JPEG_RST_INTERVAL, 1)),
}
for name, data in region_files.items():
    put("jpeg_region", f"{name}_roi", bytes([60, 90, 128, 100, 15, 2]) + data)
    put("jpeg_region", f"{name}_scaled", bytes([10, 0, 250, 250, 7, 0]) + data)
    put("jpeg_region", f"{name}_gray", bytes([200, 200, 255, 255, 40, 3]) + data)

# transform_spec: 3 bytes (height-1, width-1 mod 32; bit0 RGB, bit1 mask, bits2+ sample index)
# then the spec's JSON text: each container, nesting, geometric/photometric/crop leaves, and
# the OneOf(CropNonEmptyMaskIfExists, Resize) that found the ROI bug.
def leaf(name, **kw):
    return dict({"__class_fullname__": name}, **kw)


def box(name, ts, **kw):
    return dict({"__class_fullname__": name, "transforms": ts}, **kw)


spec_seeds = {
    "flip": [leaf("HorizontalFlip", p=1)],
    "geometric": [leaf("SmallestMaxSize", max_size=20), leaf("RandomCrop", height=16, width=16),
                  leaf("Affine", rotate=[-15, 15], scale=[0.9, 1.1], p=1),
                  leaf("RandomRotate90", p=1)],
    "containers": [box("OneOf", [leaf("HorizontalFlip"), leaf("Rotate", limit=20)], p=1),
                   box("SomeOf", [leaf("VerticalFlip"), leaf("Transpose")], n=1, p=0.7),
                   box("Sequential", [leaf("CLAHE"), leaf("ColorJitter")], p=1)],
    "photometric": [leaf("RandomBrightnessContrast", p=1), leaf("GaussNoise", p=1),
                    leaf("GaussianBlur", p=1), leaf("CoarseDropout", fill_mask=255, p=1),
                    leaf("ToGray", p=1), leaf("Normalize")],
    "crop_mask_resize": [box("OneOf", [leaf("CropNonEmptyMaskIfExists", height=8, width=8),
                                       leaf("Resize", height=12, width=10)], p=1),
                         leaf("Resize", height=9, width=11, p=1)],
    "resized_crop": [leaf("RandomResizedCrop", size=[12, 14], p=1),
                     leaf("PadIfNeeded", min_height=16, min_width=16),
                     leaf("ShiftScaleRotate", p=1), leaf("ElasticTransform", p=1)],
    # Issue 40's additions: the blurs, ToGray's PCA, RGBShift, OneOrOther, ToFloat and the
    # tutorial ending ToTensorV2, as A.to_dict writes them.
    "tutorial_tail": [leaf("MedianBlur", blur_limit=[3, 7], p=1),
                      leaf("MotionBlur", blur_limit=[3, 7], angle_range=[0.0, 360.0],
                           direction_range=[-1.0, 1.0], allow_shifted=True, p=1),
                      leaf("ToGray", method="pca", num_output_channels=3, p=1),
                      leaf("RGBShift", r_shift_limit=[-20.0, 20.0], g_shift_limit=[-20.0, 20.0],
                           b_shift_limit=[-20.0, 20.0], p=1),
                      box("OneOrOther", [leaf("HorizontalFlip"), leaf("VerticalFlip")], p=1),
                      leaf("ToFloat", max_value=None, p=1),
                      leaf("ToTensorV2", transpose_mask=True, p=1)],
    # A MONAI bundle's train#preprocessing section (the second front end of the same parser).
    "monai_ct": [{"_target_": "LoadImaged", "keys": ["image", "label"]},
                 {"_target_": "ScaleIntensityRanged", "keys": "image", "a_min": -175,
                  "a_max": 250, "b_min": 0.0, "b_max": 1.0, "clip": True},
                 {"_target_": "RandCropByPosNegLabeld", "keys": ["image", "label"],
                  "label_key": "label", "spatial_size": [8, 8], "pos": 1, "neg": 1,
                  "num_samples": 2},
                 {"_target_": "RandFlipd", "keys": ["image", "label"], "prob": 0.5,
                  "spatial_axis": 0},
                 {"_target_": "RandRotate90d", "keys": ["image", "label"], "prob": 0.5},
                 {"_target_": "RandAffined", "keys": ["image", "label"], "prob": 1.0,
                  "rotate_range": [0.3], "mode": ["bilinear", "nearest"]},
                 {"_target_": "RandGaussianNoised", "keys": "image", "prob": 0.5, "std": 0.1},
                 {"_target_": "AsDiscreted", "keys": "label", "to_onehot": 3}],
    "nested": {"__version__": "2.0.8", "transform": box("Compose", [box("Compose", [
        box("OneOf", [box("SomeOf", [leaf("HorizontalFlip", p=1)], n=1, p=0.5)], p=1)])])},
}
for name, spec in spec_seeds.items():
    put("transform_spec", name, bytes([15, 20, 3]) + json.dumps(spec).encode())
put("transform_spec", "gray_nomask", bytes([9, 7, 4]) + json.dumps(spec_seeds["geometric"]).encode())
# At the nesting limit (64 container levels, compact JSON) and one past it; deep brackets.
deep = leaf("HorizontalFlip", p=1)
for _ in range(64):
    deep = box("Compose", [deep])
put("transform_spec", "nested_64", bytes([15, 20, 3]) + json.dumps(deep, separators=(",", ":")).encode())
put("transform_spec", "nested_65", bytes([15, 20, 3]) + json.dumps(
    box("Compose", [deep]), separators=(",", ":")).encode())
put("transform_spec", "brackets", bytes([1, 1, 0]) + b"[" * 300 + b"]" * 300)

# DICOM series (fuzz_dicom): files joined by the harness's marker; written by hand (explicit or
# implicit VR little endian, native or RLE pixels) so the seeds need no DICOM library.
def dicom_element(group, elem, vr, value, explicit=True):
    if isinstance(value, str):
        value = value.encode()
    if len(value) % 2:
        value += b"\0" if vr in ("UI", "OB") else b" "
    tag = struct.pack("<HH", group, elem)
    if not explicit:
        return tag + struct.pack("<I", len(value)) + value
    if vr in ("OB", "OW", "SQ", "UN"):
        return tag + vr.encode() + b"\0\0" + struct.pack("<I", len(value)) + value
    return tag + vr.encode() + struct.pack("<H", len(value)) + value


def rle_frame(plane16):
    # DICOM RLE: a 64-byte header of segment offsets, then one PackBits segment per byte plane
    # (most significant first); literal runs of at most 128 bytes.
    raw = plane16.astype("<u2").tobytes()
    segs = []
    for byte in (1, 0):
        b = raw[byte::2]
        out = b""
        for i in range(0, len(b), 128):
            run = b[i:i + 128]
            out += bytes([len(run) - 1]) + run
        if len(out) % 2:
            out += b"\0"
        segs.append(out)
    offs = [64, 64 + len(segs[0])]
    header = struct.pack("<16I", len(segs), *offs, *([0] * 13))
    return header + segs[0] + segs[1]


def dicom_file(k, rows=4, cols=4, z=None, slope=1, inter=-1024, explicit=True, rle=False,
               signed=False, bits=16, stored=12, series="1.2.3"):
    ts = "1.2.840.10008.1.2.5" if rle else ("1.2.840.10008.1.2.1" if explicit else
                                              "1.2.840.10008.1.2")
    el = lambda g, e, vr, v: dicom_element(g, e, vr, v, explicit)
    us = lambda v: struct.pack("<H", v)
    plane = (np.arange(rows * cols).reshape(rows, cols) * 37 + 100 * k) % (1 << (stored - 1))
    pixels = plane.astype("<u2" if bits == 16 else "u1").tobytes()
    if rle:
        frame = rle_frame(plane)
        item = lambda b: struct.pack("<HHI", 0xFFFE, 0xE000, len(b)) + b
        value = item(b"") + item(frame) + struct.pack("<HHI", 0xFFFE, 0xE0DD, 0)
        pix = struct.pack("<HH", 0x7FE0, 0x0010) + b"OB\0\0" + struct.pack("<I", 0xFFFFFFFF) + value
    else:
        pix = el(0x7FE0, 0x0010, "OW" if bits == 16 else "OB", pixels)
    meta = b"".join([
        dicom_element(0x0002, 0x0001, "OB", b"\0\1"),
        dicom_element(0x0002, 0x0002, "UI", "1.2.840.10008.5.1.4.1.1.2"),
        dicom_element(0x0002, 0x0003, "UI", f"1.2.3.4.{k}"),
        dicom_element(0x0002, 0x0010, "UI", ts)])
    body = b"".join([
        el(0x0008, 0x0016, "UI", "1.2.840.10008.5.1.4.1.1.2"),
        el(0x0008, 0x0018, "UI", f"1.2.3.4.{k}"),
        el(0x0008, 0x0060, "CS", "CT"),
        el(0x0018, 0x0050, "DS", "2.5"),
        el(0x0020, 0x000E, "UI", series),
        el(0x0020, 0x0032, "DS", f"-10\\-20\\{2.5 * k if z is None else z}"),
        el(0x0020, 0x0037, "DS", "1\\0\\0\\0\\1\\0"),
        el(0x0028, 0x0002, "US", us(1)),
        el(0x0028, 0x0004, "CS", "MONOCHROME2"),
        el(0x0028, 0x0010, "US", us(rows)),
        el(0x0028, 0x0011, "US", us(cols)),
        el(0x0028, 0x0030, "DS", "0.7\\0.7"),
        el(0x0028, 0x0100, "US", us(bits)),
        el(0x0028, 0x0101, "US", us(stored)),
        el(0x0028, 0x0102, "US", us(stored - 1)),
        el(0x0028, 0x0103, "US", us(1 if signed else 0)),
        el(0x0028, 0x1052, "DS", str(inter)),
        el(0x0028, 0x1053, "DS", str(slope)),
        pix])
    return (b"\0" * 128 + b"DICM" + dicom_element(0x0002, 0x0000, "UL", struct.pack("<I", len(meta)))
            + meta + body)


NEXT = b"\0DSPIPE-NEXT\0"
put("dicom", "ct3_explicit", NEXT.join(dicom_file(k) for k in (2, 0, 1)))
put("dicom", "ct3_implicit", NEXT.join(dicom_file(k, explicit=False) for k in range(3)))
put("dicom", "ct2_rle", NEXT.join(dicom_file(k, rle=True) for k in range(2)))
put("dicom", "signed_8bit", NEXT.join(dicom_file(k, bits=8, stored=8, signed=True, inter=0)
                                      for k in range(2)))
put("dicom", "fractional", NEXT.join(dicom_file(k, slope=0.5, inter=0.25) for k in range(3)))
put("dicom", "one_slice", dicom_file(0, rows=3, cols=5))
put("dicom", "gap", NEXT.join(dicom_file(k, z=z) for k, z in ((0, 0), (1, 2.5), (2, 7.5))))
put("dicom", "two_series", NEXT.join(dicom_file(k, series=s) for k, s in ((0, "1.2"), (1, "1.3"))))

# nifti: small single-file NIfTI-1 (348-byte header) and NIfTI-2 (540) volumes, written by
# hand (the layout of nifti1.h / nifti2.h): the data types dspipe reads, sform / qform / no
# transform, scaling, 4D channels, big-endian, an extension. The harness writes each as .nii,
# gzip-wrapped .nii.gz and as it is under a .gz name.
def nifti1(arr, dtype_code, affine=None, qform=False, slope=0.0, inter=0.0, endian="<", ext=b""):
    a = np.asarray(arr)
    dims = list(a.shape) + [1] * (7 - a.ndim)
    vox = 352 + len(ext)
    h = bytearray(348)
    e = endian
    struct.pack_into(e + "i", h, 0, 348)
    struct.pack_into(e + "8h", h, 40, a.ndim, *dims)
    struct.pack_into(e + "hh", h, 70, dtype_code, a.dtype.itemsize * 8)
    struct.pack_into(e + "8f", h, 76, 1.0, 0.8, 0.8, 2.5, 1, 1, 1, 1)
    struct.pack_into(e + "fff", h, 108, vox, slope, inter)
    h[123] = 2 | 8  # mm, s
    if affine is not None and not qform:
        struct.pack_into(e + "hh", h, 252, 0, 1)
        for r in range(3):
            struct.pack_into(e + "4f", h, 280 + 16 * r, *affine[r])
    elif qform:  # identity rotation, qfac -1 in pixdim[0]: an LPS-like flip of k
        struct.pack_into(e + "hh", h, 252, 1, 0)
        struct.pack_into(e + "f", h, 76, -1.0)
        struct.pack_into(e + "6f", h, 256, 0, 0, 1, 10, -20, 30)  # 180 deg about z
    h[344:348] = b"n+1\0"
    flag = b"\1\0\0\0" if ext else b"\0\0\0\0"
    return bytes(h) + flag + ext + a.astype(a.dtype.newbyteorder(e)).tobytes(order="F")


def nifti2(arr, dtype_code, affine=None, slope=0.0, inter=0.0):
    a = np.asarray(arr)
    dims = list(a.shape) + [1] * (7 - a.ndim)
    h = bytearray(540)
    struct.pack_into("<i", h, 0, 540)
    h[4:12] = b"n+2\0\r\n\x1a\n"
    struct.pack_into("<hh", h, 12, dtype_code, a.dtype.itemsize * 8)
    struct.pack_into("<8q", h, 16, a.ndim, *dims)
    struct.pack_into("<8d", h, 104, 1.0, 0.7, 0.7, 5.0, 1, 1, 1, 1)
    struct.pack_into("<qdd", h, 168, 544, slope, inter)
    if affine is not None:
        struct.pack_into("<ii", h, 344, 0, 2)
        for r in range(3):
            struct.pack_into("<4d", h, 400 + 32 * r, *affine[r])
    struct.pack_into("<i", h, 500, 2 | 8)
    return bytes(h) + b"\0\0\0\0" + a.tobytes(order="F")


DT = {"uint8": 2, "int16": 4, "int32": 8, "float32": 16, "float64": 64, "int8": 256,
      "uint16": 512, "uint32": 768}
lps = [[-0.8, 0, 0, 10], [0, -0.8, 0, 20], [0, 0, 2.5, -30]]
ras = [[0.7, 0, 0, -5], [0, 0.7, 0, -6], [0, 0, 5.0, 7]]
perm = [[0, 0, 1.5, 0], [0.9, 0, 0, 0], [0, 0.9, 0, 0]]  # i runs S, j R, k A
nrng = np.random.default_rng(36)
ct = nrng.integers(-1024, 3000, (5, 4, 3)).astype(np.int16)
lab = nrng.integers(0, 4, (5, 4, 3)).astype(np.uint8)
put("nifti", "n1_int16_lps", nifti1(ct, DT["int16"], lps))
put("nifti", "n1_uint8_label", nifti1(lab, DT["uint8"], lps))
put("nifti", "n1_uint16_ct_qform", nifti1((ct + 1024).astype(np.uint16), DT["uint16"], qform=True,
                                         slope=1.0, inter=-1024.0))
put("nifti", "n1_float32_4d", nifti1(nrng.random((3, 2, 2, 3)).astype(np.float32), DT["float32"],
                                     ras))
put("nifti", "n1_float64_label_perm", nifti1(lab.astype(np.float64), DT["float64"], perm))
put("nifti", "n1_int32_noxform", nifti1(ct.astype(np.int32) * 3, DT["int32"]))
put("nifti", "n1_int8", nifti1((lab.astype(np.int8) - 2), DT["int8"], ras))
put("nifti", "n1_uint32_scaled", nifti1(lab.astype(np.uint32), DT["uint32"], ras, slope=0.5))
put("nifti", "n1_int16_bigendian", nifti1(ct, DT["int16"], lps, endian=">"))
put("nifti", "n1_int16_extension", nifti1(ct, DT["int16"], lps, ext=struct.pack(
    "<ii", 32, 6) + b"comment text here\0\0\0\0\0\0\0"))
put("nifti", "n1_2d", nifti1(ct[:, :, 0], DT["int16"], lps))
put("nifti", "n2_int16_ras", nifti2(ct, DT["int16"], ras))
put("nifti", "n2_float32_scaled", nifti2(nrng.random((4, 3, 2)).astype(np.float32), DT["float32"],
                                         lps, slope=2.0, inter=1.0))
put("nifti", "n2_uint16_label", nifti2(lab.astype(np.uint16) * 100, DT["uint16"], perm))
# The first finding (its input was not kept): a NIfTI-2 dim[0] that is negative as an int64
# made nifti_clib's nifti_convert_n2hdr2nim read far off the stack. Rebuilt here from its bytes.
neg = bytearray(nifti2(ct, DT["int16"], ras))
struct.pack_into("<q", neg, 16, -0x0058A6EE50FFFFFD)  # 0xffa75911af000003
put("nifti", "n2_negative_dim0", bytes(neg))
