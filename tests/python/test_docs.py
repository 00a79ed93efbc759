# SPDX-License-Identifier: Apache-2.0
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


SKIP = re.compile(r"<!-- docs-test: skip \((.+)\) -->")


def doc_blocks(path: str) -> list[tuple[int, str, str, str | None]]:
    """(line, lang, code, skip reason or None) of each sh/bash/python block of a page."""
    text = open(path).read()
    out = []
    for m in re.finditer(r"^```(sh|bash|python)\n(.*?)^```", text, re.S | re.M):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = SKIP.fullmatch(before.strip())
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2),
                    marker.group(1) if marker else None))
    return out


def readme_blocks() -> list[tuple[int, str, str | None]]:
    """(line, code, skip reason or None) of each ```python block of the README (the runnable
    ones are type-checked with docs/PYTHON.md's)."""
    return [(line, code, reason) for line, lang, code, reason in doc_blocks(README)
            if lang == "python"]


def test_readme_has_python_examples_that_run():
    blocks = readme_blocks()
    assert any(reason is None for _, _, reason in blocks), "no README example runs"
    # Malformed or stray markers: test_doc_skip_markers_are_well_formed, for every page.


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


def test_every_public_header_has_a_cpp_reference_page():
    """docs/reference/cpp/NAME.md for each include/dspipe/NAME.h: it includes the header (the
    snippet), the overview table links it and the site's nav lists it; no page outlives its
    header (mkdocs' snippets check_paths fails the build on that too)."""
    headers = sorted(f[:-2] for f in os.listdir(os.path.join(ROOT, "include", "dspipe"))
                     if f.endswith(".h"))
    pages_dir = os.path.join(ROOT, "docs", "reference", "cpp")
    pages = sorted(f[:-3] for f in os.listdir(pages_dir) if f.endswith(".md"))
    assert pages == headers
    overview = open(os.path.join(ROOT, "docs", "reference", "cpp.md")).read()
    nav = open(os.path.join(ROOT, "mkdocs.yml")).read()
    for name in headers:
        page = open(os.path.join(pages_dir, name + ".md")).read()
        assert f'--8<-- "include/dspipe/{name}.h"' in page, name
        assert f"(cpp/{name}.md)" in overview, name
        assert f"reference/cpp/{name}.md" in nav, name


# ---- Every command block (```sh / ```bash) and Python example (```python) of README.md and
# docs/**/*.md runs, or says on the line above it why it cannot: `<!-- docs-test: skip (why) -->`.
# (docs/PYTHON.md's Python examples and the README's run above, in their own tests.) A page's
# runnable blocks run in order, in one fresh directory holding the datasets the pages name
# (train.lmdb, OUT.lmdb: small synthetic ones), Python with this interpreter, commands with
# bash -euo pipefail and the built dsconvert / dsbench first on PATH (DSPIPE_TOOLS_DIR, default
# build/tools; DSPIPE_TEST_DOC_COMMANDS=1, set by scripts/test.sh, makes them required).
def doc_pages() -> list[str]:
    """README.md and every page under docs/, its folders (guides/, reference/, ...) included."""
    pages = []
    for base, _, files in os.walk(os.path.join(ROOT, "docs")):
        rel = os.path.relpath(base, ROOT).replace(os.sep, "/")
        pages += [f"{rel}/{f}" for f in files if f.endswith(".md")]
    return ["README.md"] + sorted(pages)


def page_blocks(page: str) -> list[tuple[int, str, str, str | None]]:
    blocks = doc_blocks(os.path.join(ROOT, page))
    if page in ("README.md", "docs/PYTHON.md"):  # their Python runs in the tests above
        blocks = [b for b in blocks if b[1] != "python"]
    return blocks


def test_doc_skip_markers_are_well_formed():
    for page in doc_pages():
        text = open(os.path.join(ROOT, page)).read()
        lines = re.findall(r"^\s*(<!-- docs-test.*?)\s*$", text, re.M)
        stray = [m for m in lines if not SKIP.fullmatch(m)]
        assert not stray, f"{page}: {stray}"
        # Each marker sits right above a block it skips: a marker anywhere else (or malformed)
        # would leave its block running, or failing, without the reason.
        marked = len(lines)
        skips = sum(r is not None for _, _, _, r in doc_blocks(os.path.join(ROOT, page)))
        assert marked == skips, page


@pytest.mark.parametrize("page", [p for p in doc_pages() if page_blocks(p)])
def test_doc_page_blocks_run(tmp_path, page):
    blocks = page_blocks(page)
    runnable = [b for b in blocks if b[3] is None]
    for line, lang, _, reason in blocks:
        if reason is not None:
            print(f"{page}:{line} ({lang}) skipped: {reason}")
    if not runnable:
        pytest.skip(f"{page}: every block says why it cannot run here")
    tools = os.environ.get("DSPIPE_TOOLS_DIR", os.path.join(ROOT, "build", "tools"))
    bins = [os.path.join(tools, t) for t in ("dsconvert", "dsbench")]
    if any(lang != "python" for _, lang, _, _ in runnable):
        missing = [b for b in bins if not os.access(os.path.join(b, os.path.basename(b)), os.X_OK)]
        if missing:
            if os.environ.get("DSPIPE_TEST_DOC_COMMANDS") == "1":
                pytest.fail(f"{page}: command blocks need the built tools: {missing}")
            pytest.skip(f"{page}: no built tools in {tools} (set DSPIPE_TOOLS_DIR)")
    import dspipe

    code = "\n".join(c for _, _, c, _ in runnable)
    for name in ("train.lmdb", "OUT.lmdb"):
        if name in code:
            dspipe.synth(tmp_path / "src", count=12, size=(64, 64), seed=1, classes=3)
            dspipe.build(tmp_path / "src", tmp_path / name, store="encoded", progress=False)
    env = dict(os.environ, PATH=os.pathsep.join(bins + [os.environ.get("PATH", "")]))
    for line, lang, code, _ in runnable:
        where = f"{page}:{line}"
        script = tmp_path / ("block.py" if lang == "python" else "block.sh")
        script.write_text(code)
        cmd = [sys.executable, str(script)] if lang == "python" else \
            ["bash", "-euo", "pipefail", str(script)]
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"{where} ({lang}) failed:\n{code}\n{r.stdout}\n{r.stderr}"
