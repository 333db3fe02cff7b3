#!/usr/bin/env bash
# Build Prometheus 3 (the github.com/prometheus/prometheus Go module, pinned) from the Go module
# proxy: the real sender of remote write 2.0 the interop tests run (test_prometheus.py).
# Debian's Prometheus 2.42 (scripts/setup-prometheus.sh) speaks 1.0 only. Built with
# `remove_all_sd` (Prometheus's own tag: no cloud service discovery, which the tests do not use
# and which would double the build).
#
# Usage: scripts/setup-prometheus3.sh
#   FLOE_BIN_DIR   install folder (default: $HOME/.cache/floe-bin)
# Prints the path of the binary. Idempotent: a stamp records the version it was built from.
set -euo pipefail

VERSION="v0.316.0"
BIN_DIR="${FLOE_BIN_DIR:-$HOME/.cache/floe-bin}"
PROMETHEUS="$BIN_DIR/prometheus3"
STAMP="$BIN_DIR/.prometheus3.version"

if [[ -x "$PROMETHEUS" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
  echo "$PROMETHEUS"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "setup-prometheus3.sh: go is not installed" >&2; exit 1; }
mkdir -p "$BIN_DIR"
rm -f "$STAMP"
WORK="$(mktemp -d -t floe-prometheus3.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
LOG="$BIN_DIR/prometheus3-build.log"
if ! GOBIN="$WORK" CGO_ENABLED=0 nice -n 10 go install -trimpath -tags remove_all_sd \
    "github.com/prometheus/prometheus/cmd/prometheus@$VERSION" >"$LOG" 2>&1; then
  echo "setup-prometheus3.sh: building Prometheus failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi
cp "$WORK/prometheus" "$PROMETHEUS.tmp"
mv "$PROMETHEUS.tmp" "$PROMETHEUS"
echo "$VERSION" > "$STAMP"
echo "$PROMETHEUS"
