#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dspipe's native MONAI transforms against a live MONAI, in one command (docs/MONAI.md).
#
#   bench/monai/compare_live.sh [--venv DIR] [--python PY] [--keep] [-- PYTEST_ARGS...]
#
# 1. The MONAI venv --venv (default /tmp/dspipe-monai-venv; e.g. --venv /work/monai-venv to
#    reuse one), made from bench/monai/requirements.txt when missing or when that file changed.
# 2. tests/python/monai_golden/make_golden.py in that venv writes fresh golden outputs into a
#    temporary .npz (the same cases and inputs as the checked-in golden.npz).
#    tests/python/monai_golden/make_spacing_golden.py likewise (Spacingd, for volume builds'
#    --spacing).
# 3. tests/python/test_monai_golden.py against it (DSPIPE_MONAI_GOLDEN) and
#    tests/python/test_volume_spacing.py against the other (DSPIPE_MONAI_SPACING_GOLDEN), with the
#    Python that imports dspipe: --python, else build-pyvenv/bin/python (scripts/test.sh's), else
#    python3.
#    PYTEST_ARGS after `--` go to pytest (e.g. -- -k Normalize -x).
# --keep leaves the .npz files in place (their folder is printed); `cmp` with the checked-in ones
# tells whether the installed MONAI / torch still give the same bytes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV=/tmp/dspipe-monai-venv PY= KEEP=0 PYTEST_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --venv) VENV=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --) shift; PYTEST_ARGS=("$@"); break ;;
    *) echo "compare_live.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$PY" ]; then
  if [ -x "$ROOT/build-pyvenv/bin/python" ]; then PY="$ROOT/build-pyvenv/bin/python"
  else PY=python3; fi
fi
"$PY" -c "import dspipe, pytest, numpy" 2>/dev/null || {
  echo "compare_live.sh: $PY cannot import dspipe, pytest and numpy: pass --python (the" \
       "venv of scripts/test.sh, build-pyvenv/bin/python, has them) or set PYTHONPATH" >&2
  exit 2
}

REQ="$ROOT/bench/monai/requirements.txt"
if ! "$VENV/bin/python" -c "import monai, torch, numpy" 2>/dev/null \
    || { [ -f "$VENV/.requirements" ] && ! cmp -s "$REQ" "$VENV/.requirements"; }; then
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q -r "$REQ"
  cp "$REQ" "$VENV/.requirements"
fi

TMP=$(mktemp -d /tmp/dspipe-monai-golden.XXXXXX)
[ "$KEEP" = 1 ] || trap 'rm -rf "$TMP"' EXIT
GOLDEN="$TMP/golden.npz"
"$VENV/bin/python" "$ROOT/tests/python/monai_golden/make_golden.py" "$GOLDEN"
if cmp -s "$GOLDEN" "$ROOT/tests/python/monai_golden/golden.npz"; then
  echo "compare_live.sh: the same bytes as the checked-in golden.npz"
else
  echo "compare_live.sh: differs from the checked-in golden.npz (another MONAI / torch / numpy?)"
fi
SPACING="$TMP/spacing.npz"
"$VENV/bin/python" "$ROOT/tests/python/monai_golden/make_spacing_golden.py" "$SPACING"
if cmp -s "$SPACING" "$ROOT/tests/python/monai_golden/spacing.npz"; then
  echo "compare_live.sh: the same bytes as the checked-in spacing.npz"
else
  echo "compare_live.sh: differs from the checked-in spacing.npz (another MONAI / torch / numpy?)"
fi
[ "$KEEP" = 1 ] && echo "compare_live.sh: kept $TMP"
cd "$ROOT"
DSPIPE_MONAI_GOLDEN="$GOLDEN" DSPIPE_MONAI_SPACING_GOLDEN="$SPACING" "$PY" -m pytest -q \
  -p no:cacheprovider tests/python/test_monai_golden.py tests/python/test_volume_spacing.py \
  ${PYTEST_ARGS[@]+"${PYTEST_ARGS[@]}"}
