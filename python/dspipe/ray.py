# SPDX-License-Identifier: Apache-2.0
"""Sharded conversion on Ray: one Ray task per shard, then one assemble.

    import ray, dspipe.ray
    ray.init(num_cpus=2)                       # or ray.init(address="auto") on a cluster
    dspipe.ray.convert("data/src", "data/train", shards=8, num_cpus_per_task=2,
                       store="raw", shuffle=True, seed=0)

Each task runs `dspipe.build(src, out, shards=N, shard_index=i, resume=True)` (the C++ builder,
the same code as `dsconvert build --shards N --shard-index i`) in a Ray worker; the shards are
the ones a single `--shards N` build writes. A task that fails (worker killed, node lost, an
OSError on the storage) is retried by Ray and resumes its shard from the last committed batch.
When every shard is finished, one more task runs `dspipe.assemble(out)`, which writes
out/manifest.json (counts and mean/std combined from the shards' sums).

SRC and OUT must be one path that every node sees (shared storage: NFS, a cluster file system,
or one machine); see docs/SCALE.md for the limits. Requires `pip install dspipe[ray]`.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Any, Callable

import dspipe
from . import _dspipe, _options
from ._progress import Progress

try:
    import ray
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("dspipe.ray needs Ray: pip install 'dspipe[ray]'") from e

__all__ = ["convert"]

# The builder's refusal of a source changed since the build started (--resume).
_SOURCE_CHANGED = re.compile(r"the source changed since the build of .*")

# build() options that decide the shard layout; convert() sets them itself.
_RESERVED = {"shards", "shard_index", "resume", "progress"}


@ray.remote(num_cpus=0)
class _ProgressBoard:
    """Per-shard progress reported by the tasks, read by the driver (one bar for all)."""

    def __init__(self) -> None:
        self.shards: dict[int, dict] = {}

    def started(self, shard: int, pid: int, node: str) -> int:
        s = self.shards.setdefault(shard, {"attempts": 0, "done": 0, "total": 0})
        s.update(attempts=s["attempts"] + 1, pid=pid, node=node, finished=False)
        return s["attempts"]

    def update(self, shard: int, done: int, total: int) -> None:
        s = self.shards[shard]
        s["done"], s["total"] = done, total

    def finished(self, shard: int, result: dict) -> None:
        s = self.shards[shard]
        s.update(finished=True, result=result, done=s["total"])

    def snapshot(self) -> dict[int, dict]:
        return self.shards


def _build_shard(src: str, out: str, num_shards: int, index: int, board: Any,
                 report_every_s: float, options: dict) -> dict:
    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    ray.get(board.started.remote(index, os.getpid(), node))
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= report_every_s:
            last[0] = now
            board.update.remote(index, done, total)  # fire and forget: never blocks the build

    # resume=True on every attempt: a fresh shard starts, an interrupted one continues, a
    # finished one is left as it is (and a shard of another build is refused, naming options).
    r = dspipe.build(src, out, shards=num_shards, shard_index=index, resume=True,
                     progress=progress, **options)
    r["shard"] = index
    ray.get(board.finished.remote(index, r))
    return r


def _assemble(out: str) -> dict:
    return dspipe.assemble(out)


def convert(src: str | os.PathLike, out: str | os.PathLike, shards: int | None = None,
            num_cpus_per_task: float = 1, memory: int | None = None, max_retries: int = 3,
            overwrite: bool = False, progress: bool | Callable[[dict], Any] = True,
            report_every_s: float = 0.5, fresh_worker_per_task: bool = False,
            staging: str | os.PathLike | None = None, push_part_mb: int = 16,
            **build_options: Any) -> dict:
    """Converts SRC into OUT (a sharded dataset, as `dsconvert build --shards shards`) with
    one Ray task per shard, then assembles OUT/manifest.json. Needs ray.init() first (or starts a
    local Ray with Ray's defaults).

    num_cpus_per_task: CPUs each task declares; also its builder threads unless `threads` is
    given. memory: bytes each task declares (None: Ray's default, no reservation).
    max_retries: retries of a failed task (worker or node died, OSError); each resumes its shard.
    overwrite: delete OUT's shards and manifest first; otherwise an earlier (interrupted) run
    with the same options is continued, and a source changed since that run (a file added,
    removed or rewritten) is a ValueError naming the first such file, never the old dataset. progress: True = one bar (tqdm when installed, else
    plain lines) with the records of all shards and the rate; False = quiet; or a callable
    given a dict {"done", "total", "rate", "shards": {i: {"attempts", "done", "total", "pid",
    "node", "finished"}}} about every report_every_s seconds. fresh_worker_per_task: run each
    shard in a new worker process (Ray's max_calls=1), which frees its memory before the next
    shard; costs a worker start (about 1-2 s) per shard. build_options: dspipe.build()'s
    (store, shuffle, seed, on_error, check, resize, gray, sync, commit_mb, threads).

    out may be an s3://bucket/prefix/ URL (docs/STORAGE.md): the shards are built and assembled
    in `staging` (default: a directory in the temp dir named after the URL, so a rerun resumes;
    like a local `out`, every Ray node must see it), then pushed as `dsconvert push` does
    (multipart parts of push_part_mb MiB, every part checked, manifest.json last, a re-push
    uploads nothing), then staging is removed; the result gains "pushed" (the push's counts).

    Returns {"records", "shards", "skipped", "report_path", "seconds", "attempts":
    {shard: n}, "resumed": {shard: resumed_from}} (attempts > 1: the shard was retried).
    """
    if "num_shards" in build_options:  # the old name: DeprecationWarning, then shards
        given = {"num_shards": build_options.pop("num_shards")}
        if shards is not None:
            given["shards"] = shards
        shards = _options.renamed("dspipe.ray.convert", given)["shards"]
    bad = _RESERVED & build_options.keys()
    if bad:
        raise ValueError(f"dspipe.ray.convert sets {sorted(bad)} itself; pass shards")
    if "overwrite" in build_options:
        raise ValueError("pass overwrite to convert(), not as a build option")
    if not isinstance(shards, int) or shards < 2:
        raise ValueError(f"shards must be an int >= 2, got {shards!r}")
    url = os.fspath(out) if dspipe._dspipe.url_scheme(str(out)) == "s3" else None
    if url is not None:
        out = staging if staging is not None else os.path.join(
            tempfile.gettempdir(), "dspipe-ray-" + hashlib.sha256(url.encode()).hexdigest()[:16])
    src, out = os.path.abspath(os.fspath(src)), os.path.abspath(os.fspath(out))
    if not os.path.exists(src):
        raise FileNotFoundError(f"{src}: no such source")
    if overwrite and os.path.isdir(out):
        names = os.listdir(out)
        if any(not (n.startswith("shard-") or n in ("manifest.json", "rejected.tsv")) for n in names):
            raise FileExistsError(f"{out} holds files that are not a dspipe dataset; "
                                  "refusing to delete it")
        shutil.rmtree(out)
    options = dict(build_options)
    options.setdefault("threads", max(1, int(num_cpus_per_task)))
    if not ray.is_initialized():
        ray.init()

    t0 = time.monotonic()
    board = _ProgressBoard.remote()
    resources: dict[str, Any] = {"num_cpus": num_cpus_per_task}
    if memory is not None:
        resources["memory"] = memory
    task = ray.remote(max_calls=1 if fresh_worker_per_task else 0)(_build_shard).options(
        max_retries=max_retries, retry_exceptions=[OSError], **resources)
    refs = [task.remote(src, out, shards, i, board, report_every_s, options)
            for i in range(shards)]

    bar = None
    if progress is True:
        bar = Progress(f"ray convert {out} ({shards} shards)")
    first_done = None
    pending = list(refs)
    try:
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=report_every_s)
            if progress is False:
                continue
            board_now = ray.get(board.snapshot.remote())
            done = sum(s["done"] for s in board_now.values())
            # Shards not started yet count with the share they will have.
            known = [s["total"] for s in board_now.values() if s["total"]]
            total = sum(known) + (round(sum(known) / len(known) * (shards - len(known)))
                                  if known else 0)  # shards differ by at most one sample
            if first_done is None and board_now:
                first_done, t_first = done, time.monotonic()
            rate = ((done - first_done) / (time.monotonic() - t_first)
                    if first_done is not None and time.monotonic() > t_first else 0.0)
            if bar is not None:
                bar(done, total)
            elif callable(progress):
                progress({"done": done, "total": total, "rate": rate, "shards": board_now})
        try:
            results = ray.get(refs)  # raises the first task's error (after its retries)
        except Exception as e:
            # A source changed since OUT was (partly) built: every task's resume refuses it, and
            # the result would be the old dataset. Say so, in one line, instead of Ray's dump.
            changed = _SOURCE_CHANGED.search(str(e))
            if changed is None:
                raise
            raise ValueError(f"dspipe.ray.convert: {changed.group(0).rstrip()}; pass "
                             f"overwrite=True to convert {src} into {out} anew") from None
    finally:
        if bar is not None:
            bar.close()
    board_now = ray.get(board.snapshot.remote())
    if os.path.isdir(out):  # the driver sees the shared storage: no worker to start
        joined = dspipe.assemble(out)
    else:
        joined = ray.get(ray.remote(_assemble).options(num_cpus=0).remote(out))
    ray.kill(board)
    result = {"records": joined["records"], "shards": joined["shards"],
              "skipped": joined["skipped"], "report_path": joined["report_path"],
              "seconds": time.monotonic() - t0,
              "task_seconds": {r["shard"]: r["seconds"] for r in results},
              "attempts": {i: s["attempts"] for i, s in sorted(board_now.items())},
              "resumed": {r["shard"]: r["resumed_from"] for r in results}}
    if url is not None:
        result["pushed"] = _dspipe.push(out, url, push_part_mb << 20, 8)
        shutil.rmtree(out)
        result["report_path"] = ""  # it was in staging
        result["seconds"] = time.monotonic() - t0
    return result


if __name__ == "__main__":  # pragma: no cover
    print("usage: import dspipe.ray; dspipe.ray.convert(src, out, shards)", file=sys.stderr)
    sys.exit(2)
