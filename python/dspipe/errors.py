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
    """``dspipe.verify`` found bad records or files. ``problems`` lists them ("file ...: reason"
    for a file whose size or sha256 differs from the manifest's list, first, then "key ...:
    reason"), ``keys`` the bad records' keys, ``bad`` counts all bad records (``problems`` is
    capped by max_listed), ``bad_files`` the files that do not match."""

    def __init__(self, path: str, records: int, bad: int, problems: list[str],
                 bad_files: int = 0):
        self.path, self.records, self.bad, self.problems = path, records, bad, list(problems)
        self.bad_files = bad_files
        self.keys = [m.group(1) for m in map(_KEY.search, problems) if m]
        shown = "; ".join(problems[:10])
        total = bad + bad_files
        more = f" (and {total - min(total, 10)} more)" if total > 10 else ""
        files = f", {bad_files} listed files do not match" if bad_files else ""
        super().__init__(f"{path}: {bad} of {records} records are corrupt{files}: {shown}{more}")
