#!/usr/bin/env bash
# Build the OpenTelemetry Collector the interop tests send through (test_otel_collector.py):
# the Collector's own builder (go.opentelemetry.io/collector/cmd/builder, pinned) over
# tests/otelcol/manifest.yaml (its components pinned to one release), modules from the Go
# module proxy.
#
# Usage: scripts/setup-otelcol.sh
#   FLOE_BIN_DIR   install folder (default: $HOME/.cache/floe-bin)
# Prints the path of the collector. Idempotent: a stamp records the digest of the manifest and
# the builder's version it was built from.
set -euo pipefail

BUILDER_VERSION="v0.165.0"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MANIFEST="$ROOT/tests/otelcol/manifest.yaml"
BIN_DIR="${FLOE_BIN_DIR:-$HOME/.cache/floe-bin}"
COLLECTOR="$BIN_DIR/otelcol-floe"
STAMP="$BIN_DIR/.otelcol-floe.sha256"
DIGEST="$( (cat "$MANIFEST"; echo "$BUILDER_VERSION") | sha256sum | cut -d' ' -f1)"

if [[ -x "$COLLECTOR" && -f "$STAMP" && "$(cat "$STAMP")" == "$DIGEST" ]]; then
  echo "$COLLECTOR"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "setup-otelcol.sh: go is not installed" >&2; exit 1; }
mkdir -p "$BIN_DIR"
rm -f "$STAMP"
WORK="$(mktemp -d -t floe-otelcol.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
LOG="$BIN_DIR/otelcol-build.log"
{
  GOBIN="$WORK/bin" go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
  cp "$MANIFEST" "$WORK/manifest.yaml"
  (cd "$WORK" && CGO_ENABLED=0 nice -n 10 ./bin/builder --config manifest.yaml)
} >"$LOG" 2>&1 || {
  echo "setup-otelcol.sh: building the collector failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
}
cp "$WORK/dist/otelcol-floe" "$COLLECTOR.tmp"
mv "$COLLECTOR.tmp" "$COLLECTOR"
echo "$DIGEST" > "$STAMP"
echo "$COLLECTOR"
