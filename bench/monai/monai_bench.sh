#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The same MONAI 1.6.1 training preprocessing (LoadImaged, EnsureChannelFirstd,
# ScaleIntensityRanged -175..250 HU, RandCropByPosNegLabeld 4 x 256x256, RandFlipd, RandRotate90d,
# RandGaussianNoised, RandScaleIntensityd) run by MONAI in its fastest documented set-ups and by
# dspipe's native MONAI transforms (docs/MONAI.md), side by side on the same 16-bit CT-like
# slices, interleaved by round. Prints samples/s, cache-fill / open time, peak RSS and PSS of
# all the processes of each contender, and dspipe / the best MONAI set-up.
#
#   bench/monai/monai_bench.sh [--dir /tmp/dspipe-monai-bench] [--count 96] [--rounds 3]
#                              [--epochs 3] [--batch 16] [--threads 2] [--build-dir build]
#                              [--venv /tmp/dspipe-monai-venv] [--python PY]
#                              [--store encoded|raw] [--monai-format auto|png|npy]
#                              [--contenders dspipe,monai-dl,...]
#
# 1. The MONAI venv --venv, made from bench/monai/requirements.txt when missing or when that
#    file changed (as bench/monai/compare_live.sh does; --venv /work/monai-venv reuses one).
# 2. dspipe from --build-dir (its python/_dspipe*.so) with python/dspipe, run by --python (else
#    build-pyvenv/bin/python, scripts/test.sh's venv, else python3: torch + numpy needed).
# 3. bench/monai/monai_bench.py (the driver; its docstring has the details): writes COUNT
#    512x512 uint16 slices + uint8 labels into DIR once (PNG folders, the same arrays as .npy,
#    DIR/ds.lmdb), then ROUNDS rounds of every contender, each in its own process
#    (worker_dspipe.py, worker_monai.py): dspipe (one Loader, THREADS threads) and MONAI's
#    CacheDataset (cache_rate=1) with DataLoader (THREADS persistent workers) and with
#    ThreadDataLoader (0 and THREADS workers), each as written and "-tuned" (MONAI's fast
#    training tutorial: cached FgBgToIndicesd, track_meta=False, copy_cache=False).
#    MONAI reads the PNGs with PILReader when its venv has Pillow, else the .npy files with
#    NumpyReader (--monai-format forces one); round 1 checks both sides load the written values.
# Exit status 1 when a contender fails or the pixel check fails; results in DIR/results/ and
# DIR/summary.json.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR=/tmp/dspipe-monai-bench VENV=/tmp/dspipe-monai-venv BUILD="$ROOT/build" PY=
ARGS=()
CMDLINE="$0 $*"
die() { echo "monai_bench.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --venv) VENV=$2; shift 2 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --count|--rounds|--epochs|--batch|--threads|--store|--monai-format|--contenders)
      [ $# -ge 2 ] || die "$1 needs a value"
      ARGS+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

# dspipe: the build's extension module beside the source package, in a folder of links.
SO=$(ls "$BUILD"/python/_dspipe*.so 2>/dev/null | head -1 || true)
[ -n "$SO" ] || die "no $BUILD/python/_dspipe*.so: build first (cmake --build $BUILD)"
if [ -z "$PY" ]; then
  if [ -x "$ROOT/build-pyvenv/bin/python" ]; then PY="$ROOT/build-pyvenv/bin/python"
  else PY=python3; fi
fi
mkdir -p "$DIR"
PYROOT="$DIR/pyroot"
rm -rf "$PYROOT"; mkdir -p "$PYROOT/dspipe"
for f in "$ROOT"/python/dspipe/*; do
  case "$f" in *__pycache__) continue ;; esac
  ln -s "$f" "$PYROOT/dspipe/"
done
ln -sf "$SO" "$PYROOT/dspipe/"
export PYTHONPATH="$PYROOT${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import dspipe, torch, numpy" 2>/dev/null ||
  die "$PY cannot import dspipe (from $SO), torch and numpy: pass --python"

# The MONAI venv.
REQ="$ROOT/bench/monai/requirements.txt"
[ -f "$REQ" ] || die "$REQ missing"
if ! "$VENV/bin/python" -c "import monai, torch, numpy" 2>/dev/null \
    || { [ -f "$VENV/.requirements" ] && ! cmp -s "$REQ" "$VENV/.requirements"; }; then
  echo "monai_bench.sh: installing $REQ into $VENV" >&2
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q -r "$REQ"
  cp "$REQ" "$VENV/.requirements"
fi
echo "MONAI venv: $VENV ($("$VENV/bin/python" -c 'import monai, torch, numpy; print("monai", monai.__version__, "torch", torch.__version__, "numpy", numpy.__version__)'))"
echo "dspipe: $SO, $("$PY" -c 'import dspipe, torch, numpy; print("version", dspipe.__version__, "torch", torch.__version__, "numpy", numpy.__version__)') ($PY)"

exec "$PY" "$ROOT/bench/monai/monai_bench.py" --dir "$DIR" \
  --monai-python "$VENV/bin/python" --command-line "$CMDLINE" ${ARGS[@]+"${ARGS[@]}"}
