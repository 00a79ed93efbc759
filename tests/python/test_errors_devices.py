# SPDX-License-Identifier: Apache-2.0
"""Errors in the caller's language, CorruptRecord subjects, devices and pinned memory, and the
DLPack arrays (issue 20, items 4, 6, 7, 8)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dspipe
from conftest import COUNT, H, W, cpu_loader

torch = pytest.importorskip("torch")
NO_CUDA = not (dspipe.cuda_status()["usable"] and torch.cuda.is_available())


# Item 8: Python errors cited CLI flags (--resume, --on-error skip, --overwrite).
def test_errors_name_keyword_arguments_not_flags(dataset, tmp_path):
    src = os.path.dirname(dataset) + "/src"
    with pytest.raises(OSError) as e:
        dspipe.build(src, dataset, progress=False)  # exists
    msg = str(e.value)
    assert "pass resume=True to continue" in msg and "overwrite=True to replace" in msg, msg
    assert "--" not in msg, msg
    with pytest.raises(ValueError, match="resume and overwrite exclude each other"):
        dspipe.build(src, tmp_path / "x", resume=True, overwrite=True, progress=False)
    with pytest.raises(ValueError, match=r"shard_index must be 0\.\.2 and needs shards > 1"):
        dspipe.build(src, tmp_path / "x", shards=3, shard_index=5, progress=False)
    with pytest.raises(ValueError, match=r"threads must be >= 0"):
        cpu_loader(dataset, threads=-1)
    with pytest.raises(ValueError, match=r"batch_size must be >= 1"):
        cpu_loader(dataset, batch_size=0)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\), got 2"):
        cpu_loader(dataset, rank=2, world_size=2)
    with pytest.raises(ValueError,
                       match=r"crop_scale is \(0\.9, 0\.1\): need 0 < min <= max <= 1"):
        cpu_loader(dataset, crop_scale=(0.9, 0.1))
    # A broken source: the build stops naming the file, in Python's words.
    bad = tmp_path / "bad-src"
    shutil.copytree(src, bad)
    png = bad / "images" / "000004.png"
    png.write_bytes(png.read_bytes()[:100])
    with pytest.raises(dspipe.CorruptRecord) as c:
        dspipe.build(bad, tmp_path / "bad.lmdb", check="decode", progress=False)
    msg = str(c.value)
    assert ("rerun with resume=True, on_error='skip' and the same options" in msg
            and "--" not in msg), msg
    assert c.value.path == str(png) and c.value.key is None
    r = dspipe.build(bad, tmp_path / "bad.lmdb", check="decode", on_error="skip", overwrite=True,
                     progress=False)
    assert r["skipped"] == 1


# Item 8: CorruptRecord.key for loader errors; plain-LMDB keys unquoted ("'5'" before).
def test_corrupt_record_keys_are_unquoted_plain_keys(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    cv2 = pytest.importorskip("cv2")
    env = lmdb.open(str(tmp_path / "plain.lmdb"), map_size=1 << 24)
    img = cv2.imencode(".png", np.full((H, W, 3), 7, np.uint8))[1].tobytes()
    with env.begin(write=True) as txn:
        for i in range(8):
            txn.put(str(i).encode(), img if i != 5 else img[:60])  # record 5 is truncated
    env.close()
    loader = cpu_loader(tmp_path / "plain.lmdb", shuffle=False, mean=0, std=1)
    with pytest.raises(dspipe.CorruptRecord) as e:
        for _ in loader:
            pass
    assert e.value.key == "5" and e.value.path is None, (e.value.key, str(e.value))
    skipping = cpu_loader(tmp_path / "plain.lmdb", shuffle=False, mean=0, std=1, max_corrupt=1)
    assert sum(len(b["index"]) for b in skipping) == 7
    assert [r["key"] for r in skipping.stats()["corrupt"]["records"]] == ["5"]


# Item 6: device="cuda" without CUDA surfaced torch's AssertionError.
@pytest.mark.skipif(not NO_CUDA, reason="needs a machine without a usable CUDA device")
def test_cuda_without_cuda_is_a_clear_dspipe_error(dataset):
    for device in ("cuda", "cuda:0", 0):
        with pytest.raises(dspipe.CudaUnavailable) as e:
            dspipe.Loader(dataset, device=device)
        msg = str(e.value)
        assert f"device={device!r}" in msg and "Pass device='cpu'" in msg, msg
        assert dspipe.cuda_status()["reason"] in msg or "torch" in msg, msg
    assert isinstance(e.value, RuntimeError)
    loader = dspipe.Loader(dataset, device="auto", batch_size=4, threads=2)
    assert not loader.on_device
    for _ in loader:
        pass
    r = loader.report(file=open(os.devnull, "w"))
    assert "GPU" not in r["headline"] and not any("GPU" in s for s in r["suggestions"]), r


# Item 7: pin_memory (DataLoader's name) for the CPU path; without CUDA a no-op + one log line.
@pytest.mark.skipif(not NO_CUDA, reason="the no-CUDA behaviour")
def test_pin_memory_without_cuda_is_a_noop_with_one_log_line(dataset):
    code = """
        import sys, dspipe, torch
        a = dspipe.Loader(sys.argv[1], batch_size=4, threads=2, device="cpu",
                          pin_memory=True, shuffle=False)
        b = dspipe.Loader(sys.argv[1], batch_size=4, threads=2, device="cpu",
                          pin_memory=True, shuffle=False)
        c = dspipe.Loader(sys.argv[1], batch_size=4, threads=2, device="cpu", shuffle=False)
        for x, y, z in zip(a, b, c):
            assert torch.equal(x["image"], z["image"]) and torch.equal(y["mask"], z["mask"])
        assert not a.next_raw().pinned
        print("ok")
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), dataset],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "pin_memory" in ln]
    assert len(lines) == 1 and "no usable CUDA device" in lines[0], r.stderr


@pytest.mark.skipif(NO_CUDA, reason="no usable CUDA device: " + dspipe.cuda_status()["reason"])
def test_pin_memory_batches_are_pinned_and_copy_asynchronously(dataset):
    ref = [b["image"].clone() for b in cpu_loader(dataset, shuffle=False, dtype="float16")]
    stream = torch.cuda.Stream()
    got = []
    with torch.cuda.stream(stream):  # the stream current at creation orders the releases
        loader = cpu_loader(dataset, shuffle=False, pin_memory=True, dtype="float16")
        for b in loader:
            assert b["image"].is_pinned() and b["mask"].is_pinned()
            got.append(b["image"].to("cuda", non_blocking=True))
            del b  # released while the copy may still run: the buffer waits for the stream
    torch.cuda.synchronize()
    for g, r in zip(got, ref, strict=True):
        assert torch.equal(g.cpu(), r)
    assert dspipe.Loader(dataset, device="cpu").next_raw().pinned  # default: torch sees CUDA


# Item 4: DLPackArray.shape / .dtype raised AttributeError.
def test_dlpack_array_shape_dtype_device_and_array(dataset):
    b = next(iter(cpu_loader(dataset, output="dlpack", mask_dtype="uint8", shuffle=False)))
    img, mask = b["image"], b["mask"]
    assert img.shape == (4, 3, H, W) and img.dtype == "float32" and img.device == "cpu"
    assert mask.shape == (4, H, W) and mask.dtype == "uint8"
    a = np.asarray(img)
    assert a.shape == img.shape and a.dtype == np.float32
    assert a.__array_interface__["data"][0] == torch.from_dlpack(img).data_ptr()  # no copy
    assert np.asarray(mask).dtype == np.uint8
    assert not hasattr(img, "__cuda_array_interface__")
    t = torch.from_dlpack(img)
    assert tuple(t.shape) == img.shape
    half = next(iter(cpu_loader(dataset, output="dlpack", dtype="float16")))["image"]
    assert half.dtype == "float16" and np.asarray(half).dtype == np.float16
    assert "DLPackArray(shape=(4, 3, 32, 48)" in repr(img)
    assert COUNT > 0
