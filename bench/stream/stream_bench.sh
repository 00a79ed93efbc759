#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Streaming from S3 vs local disk, side by side in one run (issue 23; docs/STORAGE.md
# "Streaming").
#
#   bench/stream/stream_bench.sh [--dir DIR] [--count 324] [--shards 12] [--rounds 3]
#                                [--epochs 3] [--threads 2] [--build-dir build]
#                                [--compare [--venv DIR/venv-cmp]]
#
# 1. DIR/src: COUNT synthetic 512x512 PNG image + mask pairs (`dsconvert synth`), built into
#    DIR/ds with --shards SHARDS (reused when present).
# 2. SeaweedFS (`weed` from scripts/install-seaweedfs.sh) on free ports of 127.0.0.1, data in
#    DIR/weed (fresh every run), one identity; bucket `bkt`; `dsconvert push DIR/ds
#    s3://bkt/ds/`. Killed by pid at exit.
# 3. build/bench/stream/stream_bench DIR/ds s3://bkt/ds/ DIR/cache: the local loader (epoch 1
#    cold), the streamed one with no limit, and with a 25% limit, interleaved by round (see
#    stream_bench.cc).
# 4. --compare: LitData and MosaicML Streaming beside it (bench/stream/py_stream.py, in the venv
#    --venv, made from bench/stream/requirements.txt when missing): DIR/src written once into
#    each one's format with chunks / shards of (source bytes / SHARDS), uploaded to the same
#    server (s3://bkt/lit/, s3://bkt/mds/). Then ROUNDS rounds, each: stream_bench --rounds 1
#    (as in 3.), LitData, MosaicML Streaming, every one from an empty cache, THREADS threads /
#    workers, batch 8, decode + flip + normalize in its workers. Prints images/s per epoch
#    (median, min-max) and the ratios dspipe / each; dspipe's first epoch here includes its
#    open (the manifest's fetch), as theirs includes the dataset's construction (the index).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR=/tmp/dspipe-stream-bench
COUNT=324 SHARDS=12 ROUNDS=3 EPOCHS=3 THREADS=2 BUILD="$ROOT/build" COMPARE=0 VENV=
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --compare) COMPARE=1; shift ;;
    --venv) VENV=$2; shift 2 ;;
    *) echo "stream_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
DSC="$BUILD/tools/dsconvert/dsconvert"
BENCH="$BUILD/bench/stream/stream_bench"
WEED="${DSPIPE_WEED:-$ROOT/build-tools/seaweedfs/bin/weed}"
for f in "$DSC" "$BENCH"; do
  [ -x "$f" ] || { echo "stream_bench.sh: $f missing: build first (ninja -C $BUILD)" >&2; exit 2; }
done
[ -x "$WEED" ] || { echo "stream_bench.sh: no weed: run scripts/install-seaweedfs.sh" >&2; exit 2; }
mkdir -p "$DIR"
if [ ! -f "$DIR/ds/manifest.json" ]; then
  rm -rf "$DIR/src" "$DIR/ds"
  "$DSC" synth "$DIR/src" --count "$COUNT" --size 512x512 --seed 3 --threads "$THREADS"
  "$DSC" build "$DIR/src" "$DIR/ds" --shards "$SHARDS" --threads "$THREADS" -q
fi

# SeaweedFS on free ports.
ports=($(/usr/bin/python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(8)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
))
rm -rf "$DIR/weed"; mkdir -p "$DIR/weed/data"
export AWS_ACCESS_KEY_ID=AKIDSTREAMBENCH AWS_SECRET_ACCESS_KEY=stream-bench-secret
export AWS_REGION=us-east-1 AWS_ENDPOINT_URL_S3="http://127.0.0.1:${ports[0]}"
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL || true
cat > "$DIR/weed/s3.json" <<JSON
{"identities":[{"name":"bench","credentials":[{"accessKey":"$AWS_ACCESS_KEY_ID","secretKey":"$AWS_SECRET_ACCESS_KEY"}],"actions":["Admin","Read","Write","List","Tagging"]}]}
JSON
"$WEED" server -dir="$DIR/weed/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
  -master.port="${ports[1]}" -master.port.grpc="${ports[2]}" -volume.port="${ports[3]}" \
  -volume.port.grpc="${ports[4]}" -filer -filer.port="${ports[5]}" \
  -filer.port.grpc="${ports[6]}" -filer.localSocket="$DIR/weed/filer.sock" -s3 \
  -s3.port="${ports[0]}" -s3.port.grpc="${ports[7]}" -s3.port.iceberg=0 -s3.port.lance=0 \
  -s3.localSocket="$DIR/weed/s3.sock" -s3.config="$DIR/weed/s3.json" \
  -iam=false -master.telemetry=false -volume.max=16 -volume.minFreeSpace=256MiB \
  -master.volumeSizeLimitMB=64 \
  > "$DIR/weed/weed.log" 2>&1 &
WEED_PID=$!
cleanup() {
  kill -9 "$WEED_PID" 2>/dev/null || true
  wait "$WEED_PID" 2>/dev/null || true
  for p in "${ports[2]}" "${ports[4]}" "${ports[6]}" "${ports[7]}"; do
    rm -f /tmp/seaweedfs-*-grpc-"$p".sock
  done
}
trap cleanup EXIT
sign=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY"
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
up=0
for _ in $(seq 1 1200); do  # 120 s
  kill -0 "$WEED_PID" 2>/dev/null || { cat "$DIR/weed/weed.log" >&2; exit 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' "${sign[@]}" "$AWS_ENDPOINT_URL_S3/" || true)
  if [ "$code" = 200 ]; then up=1; break; fi
  sleep 0.1
done
[ "$up" = 1 ] || { echo "stream_bench.sh: SeaweedFS did not answer in 120 s" >&2; exit 1; }
curl -sf -X PUT "${sign[@]}" "$AWS_ENDPOINT_URL_S3/bkt" > /dev/null
"$DSC" push "$DIR/ds" s3://bkt/ds/ -q
if [ "$COMPARE" = 0 ]; then
  "$BENCH" "$DIR/ds" s3://bkt/ds/ "$DIR/cache" --rounds "$ROUNDS" --epochs "$EPOCHS" \
    --threads "$THREADS" --ahead "${AHEAD:-2}" --server-pid "$WEED_PID" \
    --json "$DIR/summary.json"
  exit 0
fi

# --compare: LitData and MosaicML Streaming, interleaved with dspipe round by round.
VENV=${VENV:-$DIR/venv-cmp}
REQ="$ROOT/bench/stream/requirements.txt"
if ! cmp -s "$REQ" "$VENV/.requirements" 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q -r "$REQ"
  cp "$REQ" "$VENV/.requirements"
fi
PYS=("$VENV/bin/python" "$ROOT/bench/stream/py_stream.py")
CMP="$DIR/cmp"
mkdir -p "$CMP"
chunk=$(( $(du -sb "$DIR/src" | cut -f1) / SHARDS ))
"${PYS[@]}" prepare "$DIR/src" "$CMP" --chunk-bytes "$chunk"
rm -f "$CMP"/result-*.json
for r in $(seq 1 "$ROUNDS"); do
  echo "== compare round $r/$ROUNDS"
  "$BENCH" "$DIR/ds" s3://bkt/ds/ "$DIR/cache" --rounds 1 --epochs "$EPOCHS" \
    --threads "$THREADS" --ahead "${AHEAD:-2}" --server-pid "$WEED_PID" \
    --json "$CMP/result-dspipe-$r.json" \
    2> "$CMP/dspipe-$r.log"
  for fw in litdata mosaic; do
    # A new cache path each round: MosaicML Streaming keys its shared memory on the path.
    # Exit 3: the round failed and the JSON says why (counted and reported below).
    rc=0
    ref="$CMP/lit"; [ "$fw" = mosaic ] && ref="$CMP/mds"
    "${PYS[@]}" run "$fw" "$CMP/cache-$fw-$r" --reference "$ref" --epochs "$EPOCHS" \
      --workers "$THREADS" --batch 8 --json "$CMP/result-$fw-$r.json" 2> "$CMP/$fw-$r.log" \
      || rc=$?
    if [ "$rc" = 3 ]; then
      tail -1 "$CMP/$fw-$r.log"
    elif [ "$rc" != 0 ]; then
      tail -20 "$CMP/$fw-$r.log" >&2; exit 1
    fi
    rm -rf "$CMP/cache-$fw-$r"
  done
done
/usr/bin/python3 - "$CMP" "$ROUNDS" "$EPOCHS" <<'PY'
import json, statistics, sys
cmp, rounds, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rate = {"dspipe": [], "litdata": [], "mosaic": []}  # [round][epoch] images/s, None: failed
failed = []
for r in range(1, rounds + 1):
    d = json.load(open(f"{cmp}/result-dspipe-{r}.json"))
    s = d["stream_rounds"][0]
    first = d["count"] / (s["open_s"] + d["count"] / s["images_per_s"][0])
    rate["dspipe"].append([first] + s["images_per_s"][1:])
    for fw in ("litdata", "mosaic"):
        res = json.load(open(f"{cmp}/result-{fw}-{r}.json"))
        if "failed" in res:  # a failed round counts in no figure, and is reported
            failed.append(f"{fw} round {r}, epoch {len(res['epochs']) + 1}: {res['failed']}; "
                          f"damaged in its cache: {'; '.join(res['damaged']) or 'none'}")
            rate[fw].append(None)
        else:
            rate[fw].append([e["images_per_s"] for e in res["epochs"]])
def cell(v):
    v = [x for x in v if x is not None]
    return f"{statistics.median(v):8.1f} ({min(v):.1f}-{max(v):.1f}) n={len(v)}" if v else "failed"
print(f"\nimages/s from S3, median (min-max) over the rounds that finished; epoch 1 from an empty cache incl. open")
print(f"{'':10}" + "".join(f"{fw:30}" for fw in rate))
for e in range(epochs):
    print(f"epoch {e + 1:<4}" + "".join(
        f"{cell([x[e] if x else None for x in rate[fw]]):30}" for fw in rate))
out = {}
for fw in ("litdata", "mosaic"):
    for name, es in (("first epoch", [0]), ("later epochs", list(range(1, epochs)))):
        v = [rate["dspipe"][r][e] / rate[fw][r][e] for r in range(rounds) for e in es if rate[fw][r]]
        if not v:
            print(f"dspipe / {fw:8} {name:13} no round finished")
            continue
        out[f"{fw} {name}"] = statistics.median(v)
        print(f"dspipe / {fw:8} {name:13} {statistics.median(v):6.2f}x (per round {min(v):.2f}-{max(v):.2f})")
print(f"failed rounds: {len(failed)}" + "".join(f"\n  {f}" for f in failed))
json.dump({"rates": rate, "ratios": out, "failed": failed}, open(f"{cmp}/summary.json", "w"))
PY
