#!/usr/bin/env bash
# Build the S3-compatible object store used by the tests: MinIO server, from the
# Go module proxy (MinIO publishes no semver tags, so the pin is a pseudo-version
# of a commit on its default branch).
#
# Usage: scripts/setup-s3.sh
#   FLOE_BIN_DIR   install folder (default: $HOME/.cache/floe-bin); not FLOE_BIN, which
#                  names the floe binary in the test scripts
# Prints the path of the minio binary. Idempotent: a stamp beside the binary
# records the pinned version; a matching stamp skips the (slow) build.
# The build is niced and single-threaded so it does not starve other work;
# expect several minutes on 2 cores.
set -euo pipefail

MINIO_MODULE="github.com/minio/minio"
# Last commit on minio/minio master as served by the Go module proxy (2026-02-12).
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"

BIN_DIR="${FLOE_BIN_DIR:-$HOME/.cache/floe-bin}"
MINIO="$BIN_DIR/minio"
STAMP="$BIN_DIR/.minio-version"

if [[ -x "$MINIO" && -f "$STAMP" && "$(cat "$STAMP")" == "$MINIO_MODULE@$MINIO_VERSION" ]]; then
  echo "$MINIO"
  exit 0
fi

command -v go >/dev/null 2>&1 || { echo "setup-s3.sh: go is not installed" >&2; exit 1; }
mkdir -p "$BIN_DIR"
rm -f "$STAMP"
LOG="$(mktemp -t floe-setup-s3.XXXXXX.log)"
JOBS="${GOMAXPROCS:-1}"
if ! GOBIN="$BIN_DIR" GOMAXPROCS="$JOBS" GOFLAGS="${GOFLAGS:-} -buildvcs=false" CGO_ENABLED=0 \
     nice -n 19 go install -p "$JOBS" -trimpath -ldflags "-s -w" "$MINIO_MODULE@$MINIO_VERSION" >"$LOG" 2>&1; then
  echo "setup-s3.sh: go install $MINIO_MODULE@$MINIO_VERSION failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi
if ! "$MINIO" --version >>"$LOG" 2>&1; then
  echo "setup-s3.sh: built $MINIO but it does not run (log: $LOG)" >&2
  exit 1
fi
echo "$MINIO_MODULE@$MINIO_VERSION" >"$STAMP"
rm -f "$LOG"
echo "$MINIO"
