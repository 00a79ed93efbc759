"""Exceptions raised by dspipe (besides ValueError, FileNotFoundError and OSError)."""
from __future__ import annotations

import re

_KEY = re.compile(r"\bkey ([^\s:,()]+)")


class CorruptRecord(RuntimeError):
    """A record failed a check (checksum, header, decode). The message is the C++ one; ``key``
    is the dataset key it names (None when the message names none)."""

    @property
    def key(self) -> str | None:
        m = _KEY.search(str(self))
        return m.group(1) if m else None


class CorruptDataset(RuntimeError):
    """``dspipe.verify`` found bad records. ``problems`` lists them ("key ...: reason"),
    ``keys`` their keys, ``bad`` counts all of them (``problems`` is capped by max_listed)."""

    def __init__(self, path: str, records: int, bad: int, problems: list[str]):
        self.path, self.records, self.bad, self.problems = path, records, bad, list(problems)
        self.keys = [m.group(1) for m in map(_KEY.search, problems) if m]
        shown = "; ".join(problems[:10])
        more = f" (and {bad - min(bad, 10)} more)" if bad > 10 else ""
        super().__init__(f"{path}: {bad} of {records} records are corrupt: {shown}{more}")
