# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by dspipe (besides ValueError, FileNotFoundError and OSError)."""
from __future__ import annotations

import re

_KEY = re.compile(r"\bkey ([^\s:,()]+)")


class CorruptRecord(RuntimeError):
    """A record or a source file failed a check (checksum, header, decode, a truncated file).
    The message is the C++ one, options named as keyword arguments. ``key`` is the dataset
    key it is about (the loader, verify: unquoted, as the dataset names it), ``path`` the file
    (a build's source file, a fetched file); each is None when the error is not about one."""

    def __init__(self, message: str, key: str | None = None, path: str | None = None):
        super().__init__(message)
        if key is None:  # an error from a call that does not set it: the key its message names
            m = _KEY.search(message)
            key = m.group(1) if m and path is None else None
        self.key: str | None = key
        self.path: str | None = path


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


class CudaUnavailable(RuntimeError):
    """A CUDA device was asked for (device="cuda", "cuda:N", N) and cannot be used: the message
    says why (dspipe built without CUDA, no driver or device, torch built without CUDA) and what
    to pass instead."""
