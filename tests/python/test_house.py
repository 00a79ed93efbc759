# SPDX-License-Identifier: Apache-2.0
"""What a company needs to adopt the library: a licence, a changelog, one version number."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def test_the_licence_notice_and_changelog_are_there():
    licence = _read("LICENSE")
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence
    assert "Apache License, Version 2.0" in _read("NOTICE")
    assert "## Unreleased" in _read("CHANGELOG.md")
    pyproject = _read("pyproject.toml")
    assert 'license = {text = "Apache-2.0"}' in pyproject
    assert '"LICENSE", "NOTICE"' in pyproject  # wheel.license-files


def test_the_version_is_written_once():
    # CMakeLists.txt's project(VERSION) is the one place; pyproject.toml reads it from there.
    cmake = re.search(r"project\(dspipe VERSION ([0-9.]+)", _read("CMakeLists.txt"))
    assert cmake, "CMakeLists.txt has no project(dspipe VERSION ...)"
    pyproject = _read("pyproject.toml")
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r'^version\s*=', pyproject, re.M), "pyproject.toml writes a version"
    import dspipe
    assert dspipe.__version__ == cmake.group(1)


def test_every_source_file_says_its_licence():
    # The SPDX line is the first line (after a #! line) of every C/C++/CUDA, Python, shell and
    # CMake file in the tree, templates configured from them (`.cmake.in`) included, so a file
    # copied out of it still says under which licence.
    import subprocess
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if files.returncode != 0:
        import pytest
        pytest.skip("not a git checkout (the wheel's tests run outside the tree)")
    kinds = (".cc", ".h", ".c", ".cu", ".cuh", ".py", ".pyi", ".sh", ".cmake", ".cmake.in")
    missing = []
    checked = 0
    for name in files.stdout.split():
        if not (name.endswith(kinds) or os.path.basename(name) == "CMakeLists.txt"
                or name == ".ci/run"):
            continue
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            head = [f.readline() for _ in range(2)]
        first = head[1] if head[0].startswith("#!") else head[0]
        checked += 1
        if "SPDX-License-Identifier: Apache-2.0" not in first:
            missing.append(name)
    assert checked > 400
    assert not missing, f"{len(missing)} files lack the SPDX line, e.g. {missing[:5]}"


def test_the_readme_is_short_and_its_main_job_installs_only_what_it_builds():
    # The README is the front page: at most 150 lines, the details are in docs/. Its first
    # command installs with --tools (the library and the two tools' packages only, measured by
    # bench/first_command/fresh_debian.sh), and that list is the full list's build part: a
    # package the full list has for the library but --tools lacks breaks the main job.
    readme = _read("README.md")
    assert len(readme.splitlines()) <= 150, f"README.md has {len(readme.splitlines())} lines"
    main_job = re.search(r"\*\*Run the main job\*\*.*?```sh\n(.*?)\n```", readme, re.S)
    assert main_job and main_job.group(1).startswith(
        "bash scripts/install-deps.sh --tools && cmake --preset tools"), main_job
    script = _read("scripts/install-deps.sh")

    def packages(name):
        return re.search(name + r"=\(\n(.*?)\n\)", script, re.S).group(1).split()
    tools, full = set(packages("TOOLS")), packages("PKGS")
    assert full[0] == '"${TOOLS[@]}"', "install-deps.sh's full list no longer extends --tools"
    assert {"libopencv-core-dev", "libopencv-imgproc-dev", "libopencv-imgcodecs-dev"} <= tools
    test_only = {"git", "ccache", "lmdb-utils", "zstd", "libopencv-dev", "libgtest-dev",
                 "libgmock-dev", "imagemagick", "clang-14", "libclang-rt-14-dev"}
    extra = set(full[1:])
    assert not extra & tools, f"listed twice: {sorted(extra & tools)}"
    assert extra - test_only == {p for p in extra if p.startswith("python3")}, \
        "a package in install-deps.sh's full list only, not in --tools (or in test_only)"
