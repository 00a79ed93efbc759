#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Per transform, single thread, one 512x512 RGB uint8 image: dspipe (transform_bench: plan +
# fused execute into a slot, as a loader worker) against albumentations 2.0.8's own call
# (`t(image=img)`), interleaved rounds, median; the ratio albumentations us / dspipe us is the
# speed-up (issue 21's target: >= 1.0x for every transform).
#
#   bench/transforms/per_transform.sh [--dir DIR] [--rounds 3] [--seconds 0.3] [--mask]
#                                     [--build-dir build] [--python PY]
#
# Needs `cmake --build BUILD --target transform_bench` and a Python with albumentations 2.0.8
# (--python, else DIR/venv is made as bench/transforms/recipe_bench.sh does).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR=/tmp/dspipe-per-transform ROUNDS=3 SECONDS_EACH=0.3 BUILD="$ROOT/build" PY="" MASK=0
die() { echo "per_transform: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift ;;
    --rounds) ROUNDS="$2"; shift ;;
    --seconds) SECONDS_EACH="$2"; shift ;;
    --mask) MASK=1 ;;
    --build-dir) BUILD="$(cd "$2" && pwd)"; shift ;;
    --python) PY="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
BENCH="$BUILD/bench/transforms/transform_bench"
[ -x "$BENCH" ] || die "$BENCH not found: cmake --build $BUILD --target transform_bench"
mkdir -p "$DIR"
if [ -z "$PY" ]; then
  PY="$DIR/venv/bin/python"
  if ! "$PY" -c "import albumentations" 2>/dev/null; then
    /usr/bin/python3 -m venv --system-site-packages "$DIR/venv"
    "$DIR/venv/bin/pip" install -q albumentations==2.0.8 numpy==1.26.4
  fi
fi
ALBU="$ROOT/bench/transforms/albu_transforms.py"
"$PY" "$ALBU" --write-specs "$DIR/specs.json" --image "$DIR/image.png" --mask "$DIR/mask.png"
mask_args=()
[ "$MASK" = 1 ] && mask_args=(--mask "$DIR/mask.png")
rm -f "$DIR"/*.r*.json
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS"
  "$BENCH" --specs "$DIR/specs.json" --image "$DIR/image.png" "${mask_args[@]}" \
    --seconds "$SECONDS_EACH" --json "$DIR/dspipe.r$r.json" >/dev/null
  "$PY" "$ALBU" --specs "$DIR/specs.json" --image "$DIR/image.png" "${mask_args[@]}" \
    --seconds "$SECONDS_EACH" --json "$DIR/albu.r$r.json" >/dev/null
done
"$PY" - "$DIR" "$ROUNDS" "$MASK" <<'PYEOF'
import glob, json, os, statistics, sys
d, rounds, mask = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
runs = {k: [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, f"{k}.r*.json")))]
        for k in ("dspipe", "albu")}
names = list(runs["dspipe"][0])
rows = ["| transform | albumentations us | dspipe us | speed-up |", "|---|---|---|---|"]
ratios = {}
for n in names:
    a = statistics.median(r[n] for r in runs["albu"])
    b = statistics.median(r[n] for r in runs["dspipe"])
    ratios[n] = a / b
    rows.append(f"| {n} | {a:.0f} | {b:.0f} | {a / b:.2f}x |")
low = min(ratios, key=ratios.get)
note = (f"512x512 RGB uint8{' + mask' if mask else ''}, single thread, median of {rounds} "
        f"interleaved rounds; {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.1f}; "
        f"lowest speed-up {ratios[low]:.2f}x ({low})")
print("\n".join(rows) + "\n\n" + note)
with open(os.path.join(d, "table.md"), "w") as f:
    f.write("\n".join(rows) + "\n\n" + note + "\n")
with open(os.path.join(d, "summary.json"), "w") as f:
    json.dump({"speedup": ratios, "note": note}, f, indent=1)
PYEOF
