# SPDX-License-Identifier: Apache-2.0
"""dspipe.fetch and dspipe.fetch_dataset against tests/fetch/server.py, a real HTTP server on
127.0.0.1 started here (it misbehaves on command; see its docstring). Every wait is on a line
from the server or the child, or a process exit."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dspipe

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fetch", "server.py")


class Server:
    """server.py serving root/<name> at /files/<name>; commands over its stdin."""

    def __init__(self, root):
        self.p = subprocess.Popen([sys.executable, SERVER, str(root)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.startswith("PORT "), line
        self.port = int(line.split()[1])
        self.pending = []

    def url(self, name, query=""):
        return f"http://127.0.0.1:{self.port}/files/{name}" + (f"?{query}" if query else "")

    def command(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def auth(self, prefix, param, value):
        """Requests under prefix need param=value in their query, else 403 (a new value: the
        old URL expired)."""
        self.command(f"auth {prefix} {param} {value}")
        for line in self.p.stdout:
            if line.startswith("AUTH"):
                return
            if line.startswith("REQ "):
                self.pending.append(json.loads(line[4:]))  # requests() returns them too
        raise AssertionError("server.py exited")

    def wait_for(self, prefix):
        for line in self.p.stdout:
            if line.startswith(prefix):
                return line
        raise AssertionError("server.py exited")

    def requests(self):
        self.command("sync")
        reqs, self.pending = self.pending, []
        for line in self.p.stdout:
            if line.startswith("SYNC"):
                return reqs
            if line.startswith("REQ "):
                reqs.append(json.loads(line[4:]))
        raise AssertionError("server.py exited")

    def close(self):
        self.p.stdin.close()  # the server exits when its stdin closes
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


@pytest.fixture()
def served(tmp_path):
    root = tmp_path / "srv"
    root.mkdir()
    data = np.random.default_rng(5).integers(0, 256, 700_000, dtype=np.uint8).tobytes()
    (root / "f.bin").write_bytes(data)
    server = Server(root)
    yield server, root, data
    server.close()


def test_url_scheme_is_the_one_classifier():
    # dspipe.ray.convert tells an s3:// destination by it, as the C++ code does (case-insensitive).
    scheme = dspipe._dspipe.url_scheme
    assert scheme("S3://b/k") == "s3" and scheme("s3://b/prefix/") == "s3"
    assert scheme("HTTP://x") == "http" and scheme("https://x/y?q") == "https"
    assert scheme("file:///tmp/x") == "file" and scheme("gs://b/k") == "other"
    for path in ("/local/path", "relative/dir", "out", "/tmp/s3://b", "my s3://b"):
        assert scheme(path) == "path", path


def test_fetch_verifies_and_reports(served, tmp_path):
    server, _, data = served
    sha = hashlib.sha256(data).hexdigest()
    seen = []
    r = dspipe.fetch(server.url("f.bin", "cut=300000"), tmp_path / "out" / "f.bin", sha256=sha,
                     progress=lambda done, total: seen.append((done, total)))
    assert (tmp_path / "out" / "f.bin").read_bytes() == data
    assert r["sha256"] == sha and r["bytes"] == len(data) and r["attempts"] == 2
    assert seen[-1] == (len(data), len(data))
    assert not (tmp_path / "out" / "f.bin.part").exists()
    # A second call finds it in place.
    assert dspipe.fetch(server.url("f.bin"), tmp_path / "out" / "f.bin", sha256=sha,
                        progress=False)["already_present"]
    # Errors carry the C++ message: a hash that never matches, a missing file, a bad argument.
    with pytest.raises(RuntimeError, match="sha256"):
        dspipe.fetch(server.url("f.bin", "corrupt=2"), tmp_path / "g.bin", sha256=sha,
                     progress=False)
    assert not (tmp_path / "g.bin").exists()
    with pytest.raises(FileNotFoundError, match="404"):
        dspipe.fetch(server.url("nope.bin"), tmp_path / "h.bin", progress=False)
    # An exception in the progress callable stops the fetch and is raised as itself.
    def boom(done, total):
        raise LookupError("stop here")
    with pytest.raises(LookupError, match="stop here"):
        dspipe.fetch(server.url("f.bin"), tmp_path / "j.bin", progress=boom)
    with pytest.raises(ValueError, match="64 hex"):
        dspipe.fetch(server.url("f.bin"), tmp_path / "i.bin", sha256="abc", progress=False)


def test_ctrl_c_leaves_the_part_and_the_next_call_resumes(served, tmp_path):
    server, _, data = served
    dest = tmp_path / "out" / "f.bin"
    # The server sends 100000 bytes and holds the rest; the child says when they are on disk.
    code = """
        import sys, dspipe
        said = False
        def progress(done, total):
            global said
            if done >= 100000 and not said:
                said = True
                print("have", flush=True)
        dspipe.fetch(sys.argv[1], sys.argv[2], progress=progress, stall_seconds=3600)
    """
    url = server.url("f.bin", "pause=100000")
    # The child gets the default SIGINT disposition, as in a terminal (a background CI shell
    # may leave it ignored, and Python would then not raise KeyboardInterrupt).
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), url, str(dest)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout.readline().strip() == "have"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    server.command("release")
    assert p.returncode != 0
    assert "KeyboardInterrupt" in err, err
    assert not dest.exists()
    assert os.path.getsize(str(dest) + ".part") == 100000
    r = dspipe.fetch(url, dest, sha256=hashlib.sha256(data).hexdigest(), progress=False)
    assert r["resumed_from"] == 100000
    assert dest.read_bytes() == data


def test_fetch_dataset_loads_like_the_local_one(tmp_path):
    root = tmp_path / "srv"
    dspipe.synth(tmp_path / "src", count=20, size=(32, 48), seed=1, classes=3)
    dspipe.build(tmp_path / "src", root / "ds", store="raw", shards=2, progress=False)
    shutil.copytree(root / "ds", root / "old")
    manifest = json.loads((root / "old" / "manifest.json").read_text())
    del manifest["files"]  # as written before the list existed
    (root / "old" / "manifest.json").write_text(json.dumps(manifest))
    server = Server(root)
    try:
        seen = []
        r = dspipe.fetch_dataset(server.url("ds/"), tmp_path / "out" / "ds",
                                 progress=lambda done, total: seen.append((done, total)))
        total = sum(os.path.getsize(root / "ds" / f["path"])
                    for f in json.loads((root / "ds" / "manifest.json").read_text())["files"])
        assert r["bytes"] == total and not r["already_present"]
        assert seen[-1] == (total, total)
        assert all(b[0] <= a[0] for a, b in zip(seen[1:], seen)), "one aggregate bar"
        assert dspipe.verify(tmp_path / "out" / "ds") == {"records": 20, "bad": 0}

        def epoch(path):
            loader = dspipe.Loader(str(path), batch_size=5, threads=2, shuffle=False,
                                   device="cpu")
            return [b["image"].numpy().copy() for b in loader]

        for a, b in zip(epoch(root / "ds"), epoch(tmp_path / "out" / "ds"), strict=True):
            assert np.array_equal(a, b)
        # verify checks the listed files: a hash that does not match is named.
        manifest = json.loads((root / "ds" / "manifest.json").read_text())
        manifest["files"][1]["sha256"] = "0" * 64
        (tmp_path / "out" / "ds" / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(dspipe.CorruptDataset) as e:
            dspipe.verify(tmp_path / "out" / "ds")
        assert e.value.bad == 0 and e.value.bad_files == 1 and e.value.keys == []
        assert "file shard-00001.lmdb/data.mdb: sha256" in str(e.value), str(e.value)
        with pytest.raises(RuntimeError, match="files"):
            dspipe.fetch_dataset(server.url("old/"), tmp_path / "out" / "old", progress=False)
        assert not (tmp_path / "out" / "old").exists()
    finally:
        server.close()


def test_loader_over_a_url_goes_through_the_cache(tmp_path, monkeypatch):
    root = tmp_path / "srv"
    dspipe.synth(tmp_path / "src", count=20, size=(32, 48), seed=1, classes=3)
    dspipe.build(tmp_path / "src", root / "ds", store="raw", shards=2, progress=False)
    monkeypatch.setenv("DSPIPE_CACHE_DIR", str(tmp_path / "cache"))
    server = Server(root)
    try:
        def epoch(path, **kw):
            loader = dspipe.Loader(path, batch_size=5, threads=2, shuffle=False,
                                   device="cpu", **kw)
            return loader, [b["image"].numpy().copy() for b in loader]

        _, local = epoch(str(root / "ds"))
        url = server.url("ds/")
        loader, remote = epoch(url, cache="auto")
        for a, b in zip(local, remote, strict=True):
            assert np.array_equal(a, b)
        assert loader.state_dict()["dataset"]["count"] == 20
        files = json.loads((root / "ds" / "manifest.json").read_text())["files"]
        fetched = {q["path"] for q in server.requests()}
        assert fetched == {"/files/ds/manifest.json"} | {"/files/ds/" + f["path"] for f in files}
        # The default cache ("off") takes a URL as "auto": the entry is reused, no data fetched.
        _, again = epoch(url)
        assert len(again) == len(local)
        assert {q["path"] for q in server.requests()} == {"/files/ds/manifest.json"}
        # A URL the cache cannot take is an error naming it and the way out; no data fetched.
        with pytest.raises(RuntimeError) as e:
            dspipe.Loader(url, device="cpu", cache=str(tmp_path / "cache2"), cache_limit=1000)
        assert url in str(e.value) and "dsconvert fetch" in str(e.value)
        assert {q["path"] for q in server.requests()} == {"/files/ds/manifest.json"}
        # A token URL of the same dataset: the same entry (the key has no query), and the token
        # is in neither the repr nor the checkpoint fingerprint.
        server.auth("/files/ds/", "token", "LOADERTOKEN")
        loader, again = epoch(server.url("ds/", "token=LOADERTOKEN"))
        assert len(again) == len(local)
        assert {q["path"] for q in server.requests()} == {"/files/ds/manifest.json"}
        assert "LOADERTOKEN" not in str(loader.state_dict())
        assert "LOADERTOKEN" not in repr(loader) and url + "?..." in repr(loader), repr(loader)
    finally:
        server.close()


def test_a_signed_url_is_never_shown_and_a_re_signed_one_resumes(served, tmp_path):
    server, _, data = served
    server.auth("/files/f.bin", "X-Amz-Signature", "PYSIGOLD")
    dest = tmp_path / "out" / "f.bin"
    with pytest.raises(OSError) as e:  # cut after 300000 bytes, no retries: DEST.part stays
        dspipe.fetch(server.url("f.bin", "X-Amz-Signature=PYSIGOLD&cut=300000"), dest,
                     retries=0, progress=False)
    assert "PYSIGOLD" not in str(e.value) and "f.bin?..." in str(e.value), str(e.value)
    assert "PYSIGOLD" not in (tmp_path / "out" / "f.bin.part.json").read_text()
    server.auth("/files/f.bin", "X-Amz-Signature", "PYSIGNEW")  # the old signature expired
    with pytest.raises(OSError, match="may have expired") as e:
        dspipe.fetch(server.url("f.bin", "X-Amz-Signature=PYSIGOLD"), dest, progress=False)
    assert "PYSIGOLD" not in str(e.value)
    r = dspipe.fetch(server.url("f.bin", "X-Amz-Signature=PYSIGNEW"), dest, progress=False)
    assert dest.read_bytes() == data
    assert r["resumed_from"] == 300000 and r["attempts"] == 1
    assert [q["range"] for q in server.requests()] == [None, "bytes=300000-", "bytes=300000-"]
