# SPDX-License-Identifier: Apache-2.0
"""Progress for long calls: tqdm.auto when tqdm is installed, plain lines on stderr otherwise."""
from __future__ import annotations

import sys
import time


class Progress:
    """Callable(done, total) for the C++ progress hooks (called with the GIL held)."""

    def __init__(self, desc: str, enabled: bool = True, unit: str = "file"):
        self.desc, self.enabled, self.unit = desc, enabled, unit
        self._bar = None
        self._last = 0.0
        self._plain = False
        self._first: tuple[float, int] | None = None  # (time, done) of the first call: the rate
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm  # optional
        except ImportError:
            self._plain = True
        else:
            self._bar = tqdm(desc=desc, unit=unit, unit_scale=unit == "B")

    def __call__(self, done: int, total: int) -> None:
        if self._bar is not None:
            if self._bar.total != total:
                self._bar.total = total
            self._bar.n = done
            self._bar.refresh()
        elif self._plain:
            now = time.monotonic()
            if self._first is None:
                self._first = (now, done)
            if done == total or now - self._last >= 1.0:
                self._last = now
                t0, d0 = self._first
                if self.unit == "B":
                    mib = 1 << 20
                    rate = f" {(done - d0) / mib / (now - t0):.1f} MiB/s" if now > t0 else ""
                    print(f"{self.desc}: {done / mib:.1f}/{total / mib:.1f} MiB{rate}",
                          file=sys.stderr, flush=True)
                else:
                    rate = f" {(done - d0) / (now - t0):.0f}/s" if now > t0 else ""
                    print(f"{self.desc}: {done}/{total}{rate}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
