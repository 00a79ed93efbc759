# SPDX-License-Identifier: Apache-2.0
"""The dspipe Python package end to end, on small synthetic datasets built here.

Run by scripts/test.sh in a fresh venv (see README "In a notebook"); GPU tests skip with the
reason on machines without a usable CUDA device.
"""
from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import textwrap

import numpy as np
import pytest

import dspipe

torch = pytest.importorskip("torch")

from conftest import COUNT, H, W, cpu_loader  # noqa: E402 (the dataset fixture too)


def epoch_batches(loader):
    return [{k: (v.clone() if v is not None else None) for k, v in b.items()} for b in loader]


def test_end_to_end_api(dataset, tmp_path):
    assert dspipe.verify(dataset) == {"records": COUNT, "bad": 0}
    info = dspipe.info(dataset)
    assert info["count"] == COUNT and info["shape"] == (3, H, W) and info["storage"] == "raw"
    assert info["classes"] == 3 and len(info["mean"]) == 3 and len(info["std"]) == 3
    assert "records" in dspipe.describe(dataset) or str(COUNT) in dspipe.describe(dataset)

    loader = dspipe.Loader(dataset, batch_size=8, shuffle=True, seed=0, threads=2,
                           prefetch=2, device="auto", dtype="float32", normalize=True,
                           hflip=0.5, vflip=0.0, drop_last=True, rank=None, world_size=None)
    assert len(loader) == COUNT // 8
    seen = 0
    for epoch in range(2):
        loader.set_epoch(epoch)
        for batch in loader:
            x, y = batch["image"], batch["mask"]
            assert x.dtype == torch.float32 and x.shape == (8, 3, H, W)
            assert y.dtype == torch.int64 and y.shape == (8, H, W)
            assert batch["label"].dtype == torch.int64 and batch["index"].shape == (8,)
            assert int(y.max()) <= 2
            seen += 1
    assert seen == 2 * (COUNT // 8)
    stats = loader.stats()
    assert stats["decode"]["count"] > 0 and stats["wait"]["count"] == seen
    r = loader.report(file=open(os.devnull, "w"))
    assert "decode" in r["table"] and r["headline"]

    # normalize=False: float pixel values; float16; numpy output.
    raw = next(iter(cpu_loader(dataset, normalize=False, shuffle=False)))["image"]
    assert float(raw.min()) >= 0 and float(raw.max()) <= 255 and float(raw.max()) > 1
    half = next(iter(cpu_loader(dataset, dtype="float16")))["image"]
    assert half.dtype == torch.float16
    nb = next(iter(cpu_loader(dataset, output="numpy", shuffle=False)))
    assert isinstance(nb["image"], np.ndarray) and nb["image"].dtype == np.float32
    assert nb["mask"].dtype == np.int64


def test_zero_copy_torch_numpy_dlpack(dataset):
    for output in ("torch", "numpy", "dlpack"):
        loader = cpu_loader(dataset, output=output)
        raw = loader.next_raw()
        batch = loader.convert(raw)
        if output == "torch":
            img, mask = batch["image"].data_ptr(), batch["mask"].data_ptr()
        elif output == "numpy":
            img = batch["image"].__array_interface__["data"][0]
            mask = batch["mask"].__array_interface__["data"][0]
        else:
            img = torch.from_dlpack(batch["image"]).data_ptr()
            mask = torch.from_dlpack(batch["mask"]).data_ptr()
        assert img == raw.images_ptr, output
        assert mask == raw.masks_ptr, output


def test_tensor_outlives_loader_and_batch(dataset):
    loader = cpu_loader(dataset, shuffle=False)
    b = next(iter(loader))
    image, mask = b["image"], b["mask"]
    expect_image, expect_mask = image.clone(), mask.clone()
    del b, loader
    gc.collect()
    # The loader is gone; the buffer lives as long as the tensors made from it.
    fresh = next(iter(cpu_loader(dataset, shuffle=False)))
    assert torch.equal(image, expect_image) and torch.equal(mask, expect_mask)
    assert torch.equal(image, fresh["image"])


def test_held_batches_never_block_and_memory_stays_bounded(dataset):
    loader = cpu_loader(dataset, prefetch=2, hflip=0.5)
    held, copies = [], []
    while len(held) < 50:  # 50 batches held alive, across epochs
        for b in loader:
            held.append(b)
            copies.append(b["image"].clone())
            if len(held) == 50:
                break
    assert len({b["image"].data_ptr() for b in held}) == 50  # no buffer handed out twice
    for b, c in zip(held, copies):
        assert torch.equal(b["image"], c)
    slots, buffers = loader.slots_allocated(), loader.pool_buffers()
    assert slots >= 50
    held.clear()
    copies.clear()
    gc.collect()
    for epoch in range(20):  # released: nothing more is allocated
        loader.set_epoch(epoch)
        for b in loader:
            pass
        del b
    assert loader.slots_allocated() == slots
    assert loader.pool_buffers() <= min(buffers, 2 + 2)  # released: back to prefetch + 2


def test_state_dict_resume_equals_uninterrupted_run(dataset):
    kw = dict(shuffle=True, seed=5, hflip=0.5, vflip=0.5)
    full = cpu_loader(dataset, **kw)
    full.set_epoch(1)
    expected = epoch_batches(full)

    first = cpu_loader(dataset, **kw)
    first.set_epoch(1)
    it = iter(first)
    for _ in range(3):
        next(it)
    sd = first.state_dict()
    assert sd["version"] == 2 and sd["epoch"] == 1 and sd["position"] == 12
    resumed = cpu_loader(dataset, **kw)
    resumed.load_state_dict(sd)
    rest = epoch_batches(resumed)
    assert len(rest) == len(expected) - 3
    for got, want in zip(rest, expected[3:]):
        assert torch.equal(got["index"], want["index"])
        assert torch.equal(got["image"], want["image"])
        assert torch.equal(got["mask"], want["mask"])

    other = cpu_loader(dataset, batch_size=5, **kw)
    with pytest.raises(ValueError, match="batch_size: state has 4, this loader 5"):
        other.load_state_dict(sd)
    with pytest.raises(ValueError, match="version"):
        resumed.load_state_dict({**sd, "version": 99})


def test_three_ranks_cover_every_sample_once(dataset, monkeypatch):
    seen = []
    for rank in range(3):
        loader = cpu_loader(dataset, rank=rank, world_size=3, remainder="uneven", seed=9)
        for b in loader:
            seen += b["index"].tolist()
    assert sorted(seen) == list(range(COUNT))
    # Defaults from the environment (torch.distributed is not initialized here).
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = cpu_loader(dataset)
    assert (loader.rank, loader.world_size) == (2, 3)


def test_order_shards_and_blocks_cover_every_sample_once(dataset, tmp_path):
    sharded = tmp_path / "sharded"
    dspipe.build(os.path.dirname(dataset) + "/src", sharded, store="raw", shards=6,
                 on_error="skip", progress=False)
    for order in ("shards", "blocks"):
        for epoch in range(2):
            seen = []
            for rank in range(3):
                loader = cpu_loader(sharded, rank=rank, world_size=3, remainder="uneven",
                                    order=order, block_size=5, seed=4)
                loader.set_epoch(epoch)
                for b in loader:
                    seen += b["index"].tolist()
                assert loader.state_dict()["options"]["sampler.order"] == order
            assert sorted(seen) == list(range(COUNT)), (order, epoch)
    with pytest.raises(Exception, match="6 shards for 7 ranks"):
        cpu_loader(sharded, rank=0, world_size=7, order="shards")
    with pytest.raises(ValueError, match=r"order='random'\): expected one of 'global', 'blocks'"):
        cpu_loader(sharded, order="random")


def test_cache_reads_a_ram_disk_copy_with_the_same_batches(dataset):
    # A real tmpfs dir: the copy, the same batches as in place, the same state identity.
    root = tempfile.mkdtemp(prefix="dspipe-pytest-cache-", dir="/dev/shm")
    try:
        kw = dict(shuffle=True, seed=2)
        in_place = cpu_loader(dataset, **kw)
        cached = cpu_loader(dataset, cache=root, **kw)
        assert in_place._core.dataset()["path"] == dataset
        # Not cached yet: read in place while the copy is made in the background; the loader
        # takes the copy at the first epoch boundary after it has committed.
        cached.wait_for_cache_copy()
        cached.set_epoch(0)
        assert cached._core.dataset()["path"].startswith(root + "/")
        assert "(cache, since epoch 0)" in cached.reading_from
        for got, want in zip(epoch_batches(cached), epoch_batches(in_place), strict=True):
            assert torch.equal(got["index"], want["index"])
            assert torch.equal(got["image"], want["image"])
        ours, theirs = cached.state_dict(), in_place.state_dict()
        assert ours["dataset"]["sha256"] == theirs["dataset"]["sha256"]
        assert ours["options"] == theirs["options"]
        # Too small a capacity: read in place.
        small = cpu_loader(dataset, cache=root + "/other", cache_limit=1024, **kw)
        assert small._core.dataset()["path"] == dataset
        assert not os.path.exists(root + "/other")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_errors(dataset, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.lmdb"):
        dspipe.Loader(tmp_path / "nope.lmdb")
    with pytest.raises(ValueError, match="batch_size"):
        cpu_loader(dataset, batch_size=0)
    with pytest.raises(ValueError, match="dtype"):
        cpu_loader(dataset, dtype="int8")
    with pytest.raises(ValueError, match="store"):
        dspipe.build(tmp_path, tmp_path / "x.lmdb", store="zip")


@pytest.fixture()
def corrupt_dataset(dataset, tmp_path):
    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "bad.lmdb"
    shutil.copytree(dataset, path)
    env = lmdb.open(str(path), max_dbs=4)
    records = env.open_db(b"records")
    key = (3).to_bytes(8, "big")
    with env.begin(write=True, db=records) as txn:
        value = txn.get(key)
        assert value is not None
        txn.put(key, value[: len(value) // 2])  # a truncated record
    env.close()
    return str(path)


def test_corrupt_dataset_names_the_key(corrupt_dataset):
    with pytest.raises(dspipe.CorruptDataset) as e:
        dspipe.verify(corrupt_dataset)
    assert e.value.keys == ["0000000000000003"] and e.value.bad == 1
    assert "0000000000000003" in str(e.value)
    loader = cpu_loader(corrupt_dataset, shuffle=False)
    with pytest.raises(dspipe.CorruptRecord) as e:
        for _ in loader:
            pass
    assert e.value.key == "0000000000000003", str(e.value)


def test_skipped_corrupt_records_are_listed_by_key(dataset, tmp_path):
    lmdb = pytest.importorskip("lmdb")
    path = tmp_path / "flipped.lmdb"
    shutil.copytree(dataset, path)
    env = lmdb.open(str(path), max_dbs=4)
    records = env.open_db(b"records")
    with env.begin(write=True, db=records) as txn:
        for i in (7, 3):
            key = i.to_bytes(8, "big")
            value = bytearray(txn.get(key))
            value[0] ^= 0x04  # one bit of the record magic
            txn.put(key, bytes(value))
    env.close()
    loader = cpu_loader(str(path), shuffle=False, max_corrupt=2)
    indices = [int(i) for b in loader for i in b["index"]]
    assert 3 not in indices and 7 not in indices and len(indices) == COUNT - 2
    corrupt = loader.stats()["corrupt"]
    assert corrupt["count"] == 2 and not corrupt["truncated"]
    assert [r["key"] for r in corrupt["records"]] == ["0000000000000003", "0000000000000007"]
    assert [r["index"] for r in corrupt["records"]] == [3, 7]
    assert all(r["key"] in r["reason"] and r["epoch"] == 0 for r in corrupt["records"])


def run_python(code, *args, **kw):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=300, **kw)


def test_keyboard_interrupt_stops_iteration(dataset):
    code = """
        import sys, dspipe
        loader = dspipe.Loader(sys.argv[1], batch_size=4, threads=2, device="cpu")
        first = True
        while True:
            for b in loader:
                if first:
                    print("ready", flush=True)
                    first = False
    """
    # A shell that starts a job in the background (CI may) leaves SIGINT ignored, and an ignored
    # signal stays ignored across exec: Python would then never install its Ctrl-C handler.
    # The child gets the default disposition back, as in a terminal or a notebook kernel.
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), dataset],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout.readline().strip() == "ready"  # iterating now
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0
    assert "KeyboardInterrupt" in err, err


def test_loader_after_fork_raises(dataset):
    loader = cpu_loader(dataset)
    next(iter(loader))
    pid = os.fork()
    if pid == 0:  # the child: must raise the clear error, not hang or crash
        code = 1
        try:
            next(iter(loader))
        except RuntimeError as e:
            code = 0 if "forked process" in str(e) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_python_m_dspipe():
    r = subprocess.run([sys.executable, "-m", "dspipe"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"dspipe {dspipe.__version__}" in r.stdout
    assert "CUDA: " in r.stdout and "oneTBB: default concurrency" in r.stdout
    assert "build options: cuda_compiled=" in r.stdout
    if not dspipe.cuda_status()["usable"]:
        assert "CUDA: not usable: " + dspipe.cuda_status()["reason"] in r.stdout


def test_cli_entry_points_installed(dataset):
    scripts = sysconfig.get_path("scripts")
    dsconvert = os.path.join(scripts, "dsconvert")
    dsbench = os.path.join(scripts, "dsbench")
    r = subprocess.run([dsconvert, "info", dataset], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert str(COUNT) in r.stdout
    r = subprocess.run([dsbench, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_torch_iterable_dataset(dataset):
    from dspipe.torch import IterableDataset

    ds = IterableDataset(dataset, batch_size=4, threads=2, device="cpu", shuffle=False)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    indices = [i for b in dl for i in b["index"].tolist()]
    assert indices == list(range(COUNT))


needs_gpu = pytest.mark.skipif(
    not (dspipe.cuda_status()["usable"] and torch.cuda.is_available()),
    reason="no usable CUDA device: " + dspipe.cuda_status()["reason"])


@needs_gpu
def test_gpu_auto_device_zero_copy_and_stream(dataset):
    dev = torch.cuda.current_device()
    loader = dspipe.Loader(dataset, batch_size=4, threads=2, device="auto")
    assert loader.on_device
    raw = loader.next_raw()
    b = loader.convert(raw)
    assert b["image"].device == torch.device("cuda", dev)
    assert b["image"].data_ptr() == raw.images_ptr
    assert torch.cuda.current_device() == dev
    cpu = next(iter(cpu_loader(dataset, shuffle=True)))
    assert torch.allclose(b["image"].cpu(), cpu["image"], atol=1e-5)
    s = torch.cuda.Stream()
    dl = dspipe.Loader(dataset, batch_size=4, threads=2, device="cuda", output="dlpack")
    with torch.cuda.stream(s):
        x = torch.from_dlpack(next(iter(dl))["image"])  # __dlpack__(stream=s) waits on it
        assert float(x.abs().sum()) > 0
