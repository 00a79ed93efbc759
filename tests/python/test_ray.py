# SPDX-License-Identifier: Apache-2.0
"""dspipe.ray on a local Ray (2 CPUs): the sharded conversion equals a single-machine --shards
build, a task killed mid-shard is retried and resumes, and ranks split the result exactly.

Deterministic kills: every Ray worker installs the builder's test seam at start-up
(runtime_env worker_process_setup_hook -> dspipe._dspipe._stop_after_commits_for_test(1)), so
each shard task (one fresh worker per task) stops itself (SIGSTOP) right after its first durable
commit.
The driver's progress callback (the Conductor below) sees the stopped worker's pid and either
kills it (SIGKILL: the attempt named in the test) or lets it continue (SIGCONT). No sleeps, no
timing: the stop is the condition.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile

import pytest

import dspipe

if os.environ.get("DSPIPE_TEST_RAY") == "1":  # scripts/test.sh installs Ray: never skip there
    import ray
else:
    ray = pytest.importorskip("ray")
lmdb = pytest.importorskip("lmdb")

import dspipe.ray  # noqa: E402  (needs ray)

COUNT, SHARDS = 48, 4
BUILD = dict(store="raw", shuffle=True, seed=5, commit_mb=0, sync=False)
# One worker process per task: the stop-after-first-commit hook fires once per process.
RAY = dict(fresh_worker_per_task=True, report_every_s=0.05)


@pytest.fixture(scope="module")
def local_ray():
    def stop_after_first_commit() -> None:  # runs in each worker (pickled by value: a local)
        import dspipe._dspipe

        dspipe._dspipe._stop_after_commits_for_test(1)

    tmp = tempfile.mkdtemp(prefix="/tmp/dsray")  # short: Ray's socket paths must stay < 108
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=tmp, runtime_env={"worker_process_setup_hook": stop_after_first_commit})
    yield
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("raysrc")
    dspipe.synth(root / "src", count=COUNT, size=(24, 32), seed=9, classes=3)
    ref = root / "ref"
    r = dspipe.build(root / "src", ref, shards=SHARDS, progress=False, **BUILD)
    assert r["records"] == COUNT
    return str(root / "src"), str(ref)


def proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


class Conductor:
    """Progress callback: SIGKILLs the stopped attempts in `kill` ((shard, attempt) pairs),
    SIGCONTs every other stopped worker."""

    def __init__(self, kill=()):
        self.kill, self.handled, self.killed, self.reports = set(kill), set(), [], 0

    def __call__(self, report: dict) -> None:
        self.reports += 1
        assert report["done"] <= report["total"] or report["total"] == 0
        for shard, s in report["shards"].items():
            key = (int(shard), s["attempts"])
            if key in self.handled or s.get("finished") or proc_state(s["pid"]) != "T":
                continue
            self.handled.add(key)
            if key in self.kill:
                os.kill(s["pid"], signal.SIGKILL)
                self.killed.append(key)
            else:
                os.kill(s["pid"], signal.SIGCONT)


def shard_records(path: str) -> dict:
    """{shard dir: [(key, value), ...]} of a sharded dataset, read with python-lmdb."""
    out = {}
    for name in sorted(os.listdir(path)):
        if not name.startswith("shard-"):
            continue
        env = lmdb.open(os.path.join(path, name), readonly=True, lock=False, max_dbs=2)
        with env.begin() as txn:
            out[name] = list(txn.cursor(db=env.open_db(b"records", txn=txn)))
        env.close()
    return out


def manifest(path: str) -> dict:
    """The manifest without its "files" list: LMDB files holding the same records are not
    byte-identical across builds, so their sha256 differ (the list is checked by verify)."""
    with open(os.path.join(path, "manifest.json")) as f:
        m = json.load(f)
    m.pop("files", None)
    return m


def expect_equal_to_reference(out: str, ref: str) -> None:
    assert manifest(out) == manifest(ref)  # counts, ranges, bytes, codecs, mean/std exactly
    assert dspipe.verify(out)["bad"] == 0  # raises on a listed file whose size or sha256 differ
    got, want = shard_records(out), shard_records(ref)
    with open(os.path.join(out, "manifest.json")) as f:
        assert [e["path"] for e in json.load(f)["files"]] == [n + "/data.mdb" for n in sorted(got)]
    assert list(got) == list(want)
    for name in want:  # the same samples per shard, byte for byte (so the same CRCs)
        assert got[name] == want[name], name
    assert sum(len(v) for v in got.values()) == COUNT
    assert dspipe.verify(out) == {"records": COUNT, "bad": 0}


def test_ray_convert_equals_single_machine_sharded_build(local_ray, source, tmp_path):
    src, ref = source
    conductor = Conductor()
    r = dspipe.ray.convert(src, tmp_path / "out", shards=SHARDS, num_cpus_per_task=1,
                           progress=conductor, **RAY, **BUILD)
    assert r["records"] == COUNT and r["shards"] == SHARDS and r["skipped"] == 0
    assert r["attempts"] == {i: 1 for i in range(SHARDS)}
    assert len(conductor.handled) == SHARDS  # every task stopped once and was continued
    expect_equal_to_reference(str(tmp_path / "out"), ref)
    info = dspipe.info(tmp_path / "out")
    assert info["count"] == COUNT and len(info["mean"]) == 3


def test_task_killed_mid_shard_is_retried_and_resumes(local_ray, source, tmp_path):
    src, ref = source
    conductor = Conductor(kill={(1, 1)})
    r = dspipe.ray.convert(src, tmp_path / "out", shards=SHARDS, num_cpus_per_task=1,
                           progress=conductor, **RAY, **BUILD)
    assert conductor.killed == [(1, 1)]
    assert r["attempts"][1] == 2 and all(r["attempts"][i] == 1 for i in (0, 2, 3))
    # The retry continued after the records the killed attempt had committed.
    begin = COUNT * 1 // SHARDS
    assert begin < r["resumed"][1] < COUNT * 2 // SHARDS
    expect_equal_to_reference(str(tmp_path / "out"), ref)  # every sample written exactly once


def test_convert_continues_an_interrupted_run_and_refuses_bad_arguments(local_ray, source,
                                                                        tmp_path):
    src, ref = source
    out = tmp_path / "out"
    dspipe.build(src, out, shards=SHARDS, shard_index=2, progress=False, **BUILD)
    with pytest.raises(Exception, match="shard-00000.lmdb is missing"):
        dspipe.assemble(out)
    r = dspipe.ray.convert(src, out, shards=SHARDS, progress=Conductor(), **RAY, **BUILD)
    assert r["records"] == COUNT
    expect_equal_to_reference(str(out), ref)
    with pytest.raises(ValueError, match="shard_index"):
        dspipe.ray.convert(src, out, shards=SHARDS, shard_index=1)
    with pytest.raises(ValueError, match="shards must be an int >= 2, got 1"):
        dspipe.ray.convert(src, out, shards=1)
    # The old keyword still works for a release, with a warning naming the new one.
    with pytest.warns(DeprecationWarning, match=r"num_shards=\) is deprecated: write shards="):
        with pytest.raises(ValueError, match="shards must be an int >= 2, got 1"):
            dspipe.ray.convert(src, out, num_shards=1)
    with pytest.raises(TypeError, match="write shards= only"):
        dspipe.ray.convert(src, out, 2, num_shards=2)


def test_convert_says_so_when_the_source_changed_instead_of_returning_the_old_dataset(
        local_ray, source, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(source[0], src)
    out = tmp_path / "out"
    r = dspipe.ray.convert(src, out, shards=SHARDS, progress=Conductor(), **RAY, **BUILD)
    assert r["records"] == COUNT
    # Files added to SRC: converting again used to return the old dataset as complete.
    first = sorted(os.listdir(src / "images"))[0]
    shutil.copy(src / "images" / first, src / "images" / ("zz-added" + os.path.splitext(first)[1]))
    shutil.copy(src / "masks" / (os.path.splitext(first)[0] + ".png"), src / "masks" / "zz-added.png")
    with pytest.raises(ValueError, match=r"images/zz-added\S* is new.*overwrite=True"):
        dspipe.ray.convert(src, out, shards=SHARDS, progress=Conductor(), **RAY, **BUILD)
    r = dspipe.ray.convert(src, out, shards=SHARDS, overwrite=True, progress=Conductor(),
                           **RAY, **BUILD)
    assert r["records"] == COUNT + 1


def test_ray_convert_of_volumes_equals_the_sharded_build(local_ray, tmp_path):
    """A Decathlon-like task of NIfTI volumes (issue 36): the Ray conversion passes the volume
    options through and its shards, volumes table and per-slice tables equal a single-machine
    --shards build."""
    nib = pytest.importorskip("nibabel")  # the CI venv installs it (scripts/test.sh)
    import numpy as np

    src = tmp_path / "Task"
    (src / "imagesTr").mkdir(parents=True)
    (src / "labelsTr").mkdir()
    rng = np.random.default_rng(3)
    for i in range(5):
        affine = np.diag([-0.8, -0.8, 2.5, 1.0])  # LPS: flipped to RAS when sliced
        nib.save(nib.Nifti1Image(rng.integers(-1024, 3000, (12, 10, 4 + i)).astype(np.int16),
                                 affine), str(src / "imagesTr" / f"v{i}.nii.gz"))
        label = rng.integers(0, 3, (12, 10, 4 + i)).astype(np.uint8)
        label[:, :, 0] = 0  # an empty slice per volume: --skip-empty leaves it out
        nib.save(nib.Nifti1Image(label, affine), str(src / "labelsTr" / f"v{i}.nii.gz"))
    options = dict(BUILD, skip_empty=True, context=1, spacing=(0.5, 1.0))
    ref = tmp_path / "ref"
    want = dspipe.build(src, ref, shards=2, progress=False, **options)
    assert want["records"] == sum(3 + i for i in range(5)) and want["empty_slices"] == 5
    out = tmp_path / "out"
    r = dspipe.ray.convert(src, out, shards=2, progress=Conductor(), **RAY, **options)
    assert r["records"] == want["records"] and r["shards"] == 2
    got_m, want_m = manifest(str(out)), manifest(str(ref))
    # float32 samples: the shards' statistics are summed in another order than one process
    # sums them (the last bits of std differ); everything else exactly, the volumes table too.
    got_stats, want_stats = got_m.pop("stats"), want_m.pop("stats")
    assert got_m == want_m
    assert got_m["volumes"]["resampled_spacing"] == [0.5, 1.0]
    assert got_stats.keys() == want_stats.keys()
    for key, value in want_stats.items():
        if isinstance(value, list) and value and isinstance(value[0], float):
            assert got_stats[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert got_stats[key] == value, key
    assert shard_records(str(out)) == shard_records(str(ref))
    got, table = dspipe.slice_table(out), dspipe.slice_table(ref)
    for key in ("volume", "slice", "foreground"):
        assert np.array_equal(got[key], table[key]), key
    assert dspipe.verify(out)["bad"] == 0


@pytest.mark.parametrize("drop_last", [False, True])
def test_three_ranks_read_every_sample_once_per_epoch(source, drop_last):
    _, ref = source  # the same layout dspipe.ray.convert writes (tests above)
    batch = 5
    for epoch in range(3):
        seen = []
        for rank in range(3):
            loader = dspipe.Loader(ref, batch_size=batch, shuffle=True, seed=1, rank=rank,
                                   world_size=3, remainder="uneven", drop_last=drop_last,
                                   device="cpu", output="numpy", threads=1)
            loader.set_epoch(epoch)
            mine = [int(i) for b in loader for i in b["index"]]
            per_rank = COUNT // 3  # 16 each: 3 full batches + 1 (dropped with drop_last)
            assert len(mine) == (per_rank - per_rank % batch if drop_last else per_rank)
            seen += mine
        assert len(seen) == len(set(seen))  # never twice in an epoch
        if not drop_last:
            assert sorted(seen) == list(range(COUNT))  # every sample exactly once
        else:
            assert len(seen) == COUNT - 3 * (COUNT // 3 % batch)
