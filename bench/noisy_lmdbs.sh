# SPDX-License-Identifier: Apache-2.0
# Sourced (not run) by bench/cache/cache_bench.sh, bench/cache/epochs_bench.sh and
# bench/cold/cold_bench.sh: the binaries they run, the noisy-PNG dataset and LMDBs they share,
# and the cache dir on /dev/shm. Each script sets ROOT (the repository) and PY first.

# bench_tools NAME BUILD: DSC and DSB become BUILD's dsconvert and dsbench; exits naming NAME
# (the script) when one is missing.
bench_tools() {
  DSC="$2/tools/dsconvert/dsconvert"
  DSB="$2/tools/dsbench/dsbench"
  local b
  for b in "$DSC" "$DSB"; do
    [ -x "$b" ] || { echo "$1: $b missing; build dsconvert and dsbench first" >&2; exit 1; }
  done
}

# bench_noisy_lmdbs DIR COUNT STORE...: DIR/src holds COUNT noisy 512x512 RGB PNG images + PNG
# masks (bench/make_noisy_pngs.py; reused when present with the same COUNT, else remade, which
# drops the LMDBs made from the old one), and DIR/S.lmdb exists for each STORE S: enc (--store
# encoded) or raw (--store raw, zstd). Needs DSC (bench_tools).
bench_noisy_lmdbs() {
  local dir=$1 count=$2 s store
  shift 2
  if [ ! -f "$dir/src/.complete" ] || [ "$(cat "$dir/src/.complete")" != "$count" ]; then
    rm -rf "$dir/src" "$dir/enc.lmdb" "$dir/raw.lmdb"
    "$PY" "$ROOT/bench/make_noisy_pngs.py" "$dir/src" "$count"
    echo "$count" > "$dir/src/.complete"
  fi
  for s in "$@"; do
    store=encoded
    [ "$s" = raw ] && store=raw
    [ -f "$dir/$s.lmdb/data.mdb" ] ||
      "$DSC" build "$dir/src" "$dir/$s.lmdb" --store "$store" -q --overwrite
  done
}

# bench_shm_cache NAME PREFIX: CACHE becomes a fresh dir /dev/shm/PREFIX-XXXXXX, removed when
# the script exits; exits naming NAME when /dev/shm is not a tmpfs.
bench_shm_cache() {
  [ "$(stat -f -c %T /dev/shm)" = tmpfs ] || { echo "$1: /dev/shm is not a tmpfs" >&2; exit 1; }
  CACHE="$(mktemp -d "/dev/shm/$2-XXXXXX")"
  trap 'rm -rf "$CACHE"' EXIT
}
