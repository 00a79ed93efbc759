#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# NIfTI volumes to LMDB (issue 36): `dsconvert build` against the nibabel + lmdb script a user
# writes, side by side in one run, then the loader on the volume build beside a build of the
# same slices exported as 16-bit PNG files. docs/MEASUREMENTS.md "Volume conversion in detail" has the figures.
#
#   bench/volumes/volume_bench.sh [--dir /tmp/dspipe-volume-bench] [--volumes 20] [--slices 100]
#                                 [--size 512] [--rounds 3] [--stores raw,encoded]
#                                 [--dsconvert-threads 0,1] [--loader-rounds 3]
#                                 [--loader-threads 2] [--loader-batches 150] [--loader-warmup 10]
#                                 [--no-loader]
#                                 [--build-dir build] [--venv /tmp/dspipe-volume-venv]
#
# 1. The venv --venv, made from bench/volumes/requirements.txt (nibabel, numpy, lmdb, zstandard,
#    Pillow) when missing or when that file changed.
# 2. bench/volumes/make_task.py writes DIR/task-VOLUMESxSIZExSLICES once (reused after): a
#    Decathlon-like imagesTr/ + labelsTr/ of CT-like int16 volumes (LPS, 0.78 x 0.78 x 2.5 mm)
#    and uint8 label maps, .nii.gz written by nibabel.
# 3. bench/volumes/volume_bench.py: ROUNDS rounds, the contenders in rotated order each round:
#    `dsconvert build TASK OUT -q --threads N` for each N of --dsconvert-threads (0 = all
#    cores) and `nib_to_lmdb.py TASK OUT` (nibabel: load, as_closest_canonical, axial slices,
#    lmdb puts), for each store: raw (`--store raw --compression none` against the script's raw
#    numpy bytes: int16 image + uint8 label per record) and encoded (dsconvert's default: int16
#    as zstd-3 samples, the label as a level-1 PNG, against the script doing the same with
#    zstandard and Pillow). Every record of the two outputs is compared afterwards.
# 4. The loader: the slices exported as 16-bit PNG (HU + 1024) and uint8 mask files
#    (export_png.py, once), built with `dsconvert build`, then dsbench rounds over the volume
#    builds and that one. Results: DIR/table.md, DIR/summary.json, logs in DIR/logs/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR=/tmp/dspipe-volume-bench VENV=/tmp/dspipe-volume-venv BUILD="$ROOT/build"
VOLUMES=20 SLICES=100 SIZE=512
ARGS=()
CMDLINE="$0 $*"
die() { echo "volume_bench.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --venv) VENV=$2; shift 2 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --volumes) VOLUMES=$2; shift 2 ;;
    --slices) SLICES=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --rounds|--stores|--dsconvert-threads|--loader-rounds|--loader-threads|--loader-batches|\
    --loader-warmup)
      [ $# -ge 2 ] || die "$1 needs a value"
      ARGS+=("$1" "$2"); shift 2 ;;
    --no-loader) ARGS+=("$1"); shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
DSC="$BUILD/tools/dsconvert/dsconvert"
DSB="$BUILD/tools/dsbench/dsbench"
for f in "$DSC" "$DSB"; do
  [ -x "$f" ] || die "$f missing: build first (cmake --build $BUILD --target dsconvert dsbench)"
done

REQ="$ROOT/bench/volumes/requirements.txt"
if ! "$VENV/bin/python" -c "import nibabel, numpy, lmdb, zstandard, PIL" 2>/dev/null \
    || ! cmp -s "$REQ" "$VENV/.requirements"; then
  echo "volume_bench.sh: installing $REQ into $VENV" >&2
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q -r "$REQ"
  cp "$REQ" "$VENV/.requirements"
fi
PY="$VENV/bin/python"
mkdir -p "$DIR"
TASK="$DIR/task-${VOLUMES}x${SIZE}x${SLICES}"
"$PY" "$ROOT/bench/volumes/make_task.py" "$TASK" --volumes "$VOLUMES" --slices "$SLICES" \
  --size "$SIZE"
exec "$PY" "$ROOT/bench/volumes/volume_bench.py" --dir "$DIR" --task "$TASK" \
  --dsconvert "$DSC" --dsbench "$DSB" --command-line "$CMDLINE" ${ARGS[@]+"${ARGS[@]}"}
