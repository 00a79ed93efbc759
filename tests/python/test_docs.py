"""Every Python example of docs/PYTHON.md runs (in order, as one script, in a fresh directory)
and type-checks with `mypy --strict`. https://example.com/files/ in the examples is
tests/fetch/server.py serving that directory's data/ on 127.0.0.1."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOC = os.path.join(ROOT, "docs", "PYTHON.md")
URL = "https://example.com/files/"


def examples() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", open(DOC).read(), re.S | re.M)
    assert len(blocks) >= 6, "docs/PYTHON.md examples"
    return "\n".join(f"# ---- example {i + 1}\n{b}" for i, b in enumerate(blocks))


def test_docs_examples_run(tmp_path):
    from test_fetch import Server

    (tmp_path / "data").mkdir()
    server = Server(tmp_path / "data")
    try:
        script = tmp_path / "examples.py"
        script.write_text(examples().replace(URL, server.url("")))
        r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=600)
    finally:
        server.close()
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "verdict:" in out and "torch.Size([4, 1, 32, 32])" in out, out
    assert "pass resume=True to continue" in out and "overwrite=True" in out, out
    assert re.search(r"^3$", out, re.M), "len() of the resumed epoch"
    assert re.search(r"^48$", out, re.M), "the URL's samples"


def test_docs_examples_type_check(tmp_path):
    if os.environ.get("DSPIPE_TEST_MYPY") != "1":
        pytest.importorskip("mypy")
    script = tmp_path / "examples.py"
    script.write_text(examples())
    config = tmp_path / "mypy.ini"
    # torch and the untyped lmdb / cv2 are Any here: the check is about dspipe's API.
    config.write_text("[mypy]\nstrict = True\n"
                      "[mypy-torch.*]\nfollow_imports = skip\nfollow_untyped_imports = True\n"
                      "[mypy-lmdb.*,cv2.*]\nignore_missing_imports = True\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config),
                        "--cache-dir", str(tmp_path / "cache"), str(script)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
