# SPDX-License-Identifier: Apache-2.0
"""Peak memory of this process and all its descendants, sampled from /proc in a thread.

Used by both contenders' workers (bench/monai/worker_*.py), so both are measured the same way;
stdlib only (the MONAI venv need not have psutil).

Every 50 ms: the sum of VmRSS (/proc/PID/statm) over this process and its descendants.
Every 250 ms: the sum of Pss (/proc/PID/smaps_rollup) over the same processes. RSS counts a page
shared between processes (a forked DataLoader worker's copy-on-write view of the parent's
CacheDataset, torch's libraries) once per process; PSS splits it between them, so the PSS sum is
the memory the processes together really hold. The descendants are found by scanning
/proc/*/stat for parent ids every 100 ms (DataLoader workers are persistent: they live from
the first epoch to the end).
Reported: the peaks of both sums, the process count at the RSS peak, and this process's own
VmHWM (the kernel's exact peak of its RSS alone) as a check on the sampling.
"""
from __future__ import annotations

import os
import threading

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _descendants(root: int) -> list[int]:
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'.
        parent[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    found, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


class PeakMemory:
    """with PeakMemory() as m: ...; m.result() -> dict of peaks in MiB."""

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.pid = os.getpid()
        self.peak_rss = self.peak_pss = 0
        self.procs_at_peak = 1
        self.max_procs = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def _run(self) -> None:
        pids: list[int] = [self.pid]
        tick = 0
        while True:
            if tick % 2 == 0:
                pids = [self.pid] + _descendants(self.pid)
                self.max_procs = max(self.max_procs, len(pids))
            rss = sum(_rss(p) for p in pids)
            if rss > self.peak_rss:
                self.peak_rss, self.procs_at_peak = rss, len(pids)
            if tick % 5 == 0:
                self.peak_pss = max(self.peak_pss, sum(_pss(p) for p in pids))
            tick += 1
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()

    def result(self) -> dict:
        hwm = 0
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
        mib = 1 << 20
        return {"peak_rss_sum_mib": self.peak_rss / mib, "peak_pss_sum_mib": self.peak_pss / mib,
                "procs_at_rss_peak": self.procs_at_peak, "max_procs": self.max_procs,
                "main_vmhwm_mib": hwm / mib}
