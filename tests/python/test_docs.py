"""Every Python example of docs/PYTHON.md runs (in order, as one script, in a fresh directory)
and type-checks with `mypy --strict`. https://example.com/files/ in the examples is
tests/fetch/server.py serving that directory's data/ on 127.0.0.1.

The README's ```python blocks run too, each alone in a fresh directory. A block that cannot run
here (a GPU, Colab, a cluster's shared storage) says so on the line above it,
`<!-- docs-test: skip (why) -->`, and is reported as skipped with that reason; an unmarked block
must run."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOC = os.path.join(ROOT, "docs", "PYTHON.md")
README = os.path.join(ROOT, "README.md")
URL = "https://example.com/files/"


def examples() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", open(DOC).read(), re.S | re.M)
    assert len(blocks) >= 6, "docs/PYTHON.md examples"
    return "\n".join(f"# ---- example {i + 1}\n{b}" for i, b in enumerate(blocks))


def readme_blocks() -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason or None) of each ```python block of the README (the runnable
    ones are type-checked with docs/PYTHON.md's)."""
    text = open(README).read()
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = re.fullmatch(r"<!-- docs-test: skip \((.+)\) -->", before.strip())
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1),
                    marker.group(1) if marker else None))
    return out


def test_readme_has_python_examples_that_run():
    blocks = readme_blocks()
    assert any(reason is None for _, _, reason in blocks), "no README example runs"
    # A marker that is not exactly the skip form would silently run (or fail) the block: refuse.
    stray = re.findall(r"<!-- docs-test.*", open(README).read())
    assert len(stray) == sum(reason is not None for _, _, reason in blocks), stray


@pytest.mark.parametrize("line,code,reason", readme_blocks(),
                         ids=[f"README.md:{b[0]}" for b in readme_blocks()])
def test_readme_examples_run(tmp_path, line, code, reason):
    if reason is not None:
        pytest.skip(f"README.md:{line}: {reason}")
    script = tmp_path / "example.py"
    script.write_text(code)
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"README.md:{line}\n" + r.stdout + r.stderr
    if "report()" in code:
        assert "verdict:" in r.stdout, r.stdout


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
    readme = [f"# ---- README.md:{line}\n{code}" for line, code, reason in readme_blocks()
              if reason is None]
    script.write_text(examples() + "\n" + "\n".join(readme))
    config = tmp_path / "mypy.ini"
    # torch and the untyped lmdb / cv2 are Any here: the check is about dspipe's API.
    config.write_text("[mypy]\nstrict = True\n"
                      "[mypy-torch.*]\nfollow_imports = skip\nfollow_untyped_imports = True\n"
                      "[mypy-lmdb.*,cv2.*]\nignore_missing_imports = True\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config),
                        "--cache-dir", str(tmp_path / "cache"), str(script)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
