#!/usr/bin/env bash
# Build the Prometheus remote-write client the interop tests send with (tests/remote_write:
# a small program of ours on Prometheus's own prompb package and golang/snappy, pinned in its
# go.mod/go.sum and fetched from the Go module proxy).
#
# Usage: scripts/setup-remote-write.sh
#   FLOE_BIN_DIR   install folder (default: $HOME/.cache/floe-bin)
# Prints the path of the client. Idempotent: a stamp records the digest of the sources it was
# built from.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/tests/remote_write"
BIN_DIR="${FLOE_BIN_DIR:-$HOME/.cache/floe-bin}"
CLIENT="$BIN_DIR/floe-rw-client"
STAMP="$BIN_DIR/.floe-rw-client.sha256"
DIGEST="$(cat "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum" | sha256sum | cut -d' ' -f1)"

if [[ -x "$CLIENT" && -f "$STAMP" && "$(cat "$STAMP")" == "$DIGEST" ]]; then
  echo "$CLIENT"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "setup-remote-write.sh: go is not installed" >&2; exit 1; }
mkdir -p "$BIN_DIR"
rm -f "$STAMP"
LOG="$(mktemp -t floe-setup-rw.XXXXXX.log)"
if ! (cd "$SRC" && GOFLAGS="-mod=readonly" CGO_ENABLED=0 nice -n 10 go build -trimpath -o "$CLIENT" .) >"$LOG" 2>&1; then
  echo "setup-remote-write.sh: go build failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi
echo "$DIGEST" > "$STAMP"
echo "$CLIENT"
