#!/usr/bin/env bash
# Streaming from S3 vs local disk, side by side in one run (issue 23; docs/STORAGE.md
# "Streaming").
#
#   bench/stream/stream_bench.sh [--dir DIR] [--count 324] [--shards 12] [--rounds 3]
#                                [--epochs 3] [--threads 2] [--build-dir build]
#
# 1. DIR/src: COUNT synthetic 512x512 PNG image + mask pairs (`dsconvert synth`), built into
#    DIR/ds with --shards SHARDS (reused when present).
# 2. SeaweedFS (`weed` from scripts/install-seaweedfs.sh) on free ports of 127.0.0.1, data in
#    DIR/weed (fresh every run), one identity; bucket `bkt`; `dsconvert push DIR/ds
#    s3://bkt/ds/`. Killed by pid at exit.
# 3. build/bench/stream/stream_bench DIR/ds s3://bkt/ds/ DIR/cache: the local loader (epoch 1
#    cold), the streamed one with no limit, and with a 25% limit, interleaved by round (see
#    stream_bench.cc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR=/tmp/dspipe-stream-bench
COUNT=324 SHARDS=12 ROUNDS=3 EPOCHS=3 THREADS=2 BUILD="$ROOT/build"
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --count) COUNT=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift 2 ;;
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
  -iam=false -master.telemetry=false -volume.max=4 -master.volumeSizeLimitMB=64 \
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
"$BENCH" "$DIR/ds" s3://bkt/ds/ "$DIR/cache" --rounds "$ROUNDS" --epochs "$EPOCHS" \
  --threads "$THREADS" --ahead "${AHEAD:-2}" --json "$DIR/summary.json"
