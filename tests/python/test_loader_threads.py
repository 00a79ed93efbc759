# SPDX-License-Identifier: Apache-2.0
"""One dspipe.Loader used from two Python threads (issue 39 item 6): next_raw from both used to
crash the interpreter (SIGSEGV); the loader serializes its calls now, so every sample comes out
once and state_dict() never reads a position torn mid-batch."""
from __future__ import annotations

import threading

import dspipe


def test_next_raw_from_two_threads_delivers_every_sample_once(tmp_path):
    src = tmp_path / "src"
    dspipe.synth(src, count=37, size=(24, 32), seed=5, classes=3)
    out = tmp_path / "ds.lmdb"
    dspipe.build(src, out, progress=False)
    for _ in range(3):
        loader = dspipe.Loader(out, batch_size=4, device="cpu", output="numpy", threads=2)
        loader.set_epoch(0)
        delivered: list[int] = []
        errors: list[str] = []
        done = threading.Event()
        lock = threading.Lock()

        def consume() -> None:
            try:
                while True:
                    b = loader.next_raw()
                    if b is None or b.epoch != 0:
                        return
                    idx = b.indices()
                    with lock:
                        delivered.extend(idx)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        def watch() -> None:
            while not done.is_set():
                st = loader.state_dict()
                if st["epoch"] == 0 and st["position"] % 4 != 0 and st["position"] != 37:
                    errors.append(f"torn position {st['position']}")

        threads = [threading.Thread(target=consume) for _ in range(2)]
        watcher = threading.Thread(target=watch)
        watcher.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        watcher.join()
        assert errors == []
        assert sorted(delivered) == list(range(37))
