#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Times the README's first command ("Run the main job") on a fresh Debian 12: a debootstrap'd
# bookworm (the default variant: what `debootstrap` calls a base system, without compilers),
# entered with chroot, given this checkout's files (tracked and untracked, not ignored), then
# the command exactly as the README writes it, with each of its four parts timed.
#   sudo bash bench/first_command/fresh_debian.sh [DIR]
# DIR (default /var/tmp/dspipe-fresh) is a new directory or an earlier run's; about 1.5 GB of
# disk. Needs root (debootstrap, chroot, mount), debootstrap (installed when missing) and the
# Debian mirror.
# The base system is kept in DIR/base after the first run (a copy is used each time), so only
# the first run pays for debootstrap. docs/MEASUREMENTS.md "The README's first command" has the
# figures.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR=${1:-/var/tmp/dspipe-fresh}
[ "$(id -u)" = 0 ] || { echo "fresh_debian.sh: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap > /dev/null || apt-get install -y -qq debootstrap > /dev/null
# DIR is this script's own: new, empty, or marked by an earlier run; anything else is refused
# (it deletes DIR/base and DIR/run).
if [ -e "$DIR" ] && [ ! -f "$DIR/.dspipe-fresh" ] && [ -n "$(ls -A "$DIR")" ]; then
  echo "fresh_debian.sh: $DIR exists and was not made by this script; pass a new directory" >&2
  exit 2
fi
mkdir -p "$DIR"
touch "$DIR/.dspipe-fresh"
if [ ! -f "$DIR/base/etc/debian_version" ]; then
  rm -rf "$DIR/base"
  debootstrap bookworm "$DIR/base" http://deb.debian.org/debian > "$DIR/debootstrap.log"
  # The release's updates and security suites too, as a Debian 12 cloud image has them.
  printf '%s\n' "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" \
    > "$DIR/base/etc/apt/sources.list"
fi
ROOTFS="$DIR/run"
cleanup() { umount "$ROOTFS/proc" "$ROOTFS/dev" 2> /dev/null || true; }
trap cleanup EXIT
cleanup
# Never delete through a mount that did not come off (the bind-mounted /dev is the host's).
for m in proc dev; do
  if mountpoint -q "$ROOTFS/$m"; then
    echo "fresh_debian.sh: $ROOTFS/$m is still mounted (umount it first)" >&2
    exit 1
  fi
done
rm -rf --one-file-system "$ROOTFS"
cp -a "$DIR/base" "$ROOTFS"
cp /etc/resolv.conf "$ROOTFS/etc/"
mount -t proc proc "$ROOTFS/proc"
mount --bind /dev "$ROOTFS/dev"
mkdir -p "$ROOTFS/root/dspipe"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) |
  tar -C "$ROOTFS/root/dspipe" -xf -
# The README's command, split at its `&&`s so each part is timed.
CMD=$(awk '/^\*\*Run the main job\*\*/{f=1} f&&/^```sh/{getline; print; exit}' "$ROOT/README.md")
[ -n "$CMD" ] || { echo "fresh_debian.sh: no main-job command in README.md" >&2; exit 1; }
echo "command: $CMD"
cat > "$ROOTFS/root/timed.sh" << 'INNER'
#!/bin/bash
set -euo pipefail
cd /root/dspipe
IFS=$'\n' read -r -d '' -a parts < <(sed 's/ && /\n/g' /root/command; printf '\0')
start=$(date +%s.%N); prev=$start
for p in "${parts[@]}"; do
  bash -c "$p" > "/root/part.log" 2>&1 || { tail -n 30 /root/part.log; echo "FAILED: $p"; exit 1; }
  now=$(date +%s.%N)
  awk -v a="$prev" -v b="$now" -v p="$p" 'BEGIN{printf "%7.1f s  %s\n", b - a, p}'
  prev=$now
done
awk -v a="$start" -v b="$prev" 'BEGIN{printf "%7.1f s  total\n", b - a}'
times
INNER
printf '%s\n' "$CMD" > "$ROOTFS/root/command"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
chroot "$ROOTFS" bash /root/timed.sh
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
