#!/usr/bin/env bash
# Fetch Prometheus's PromQL test scripts: the `promql/promqltest/testdata/*.test` files of the
# github.com/prometheus/prometheus Go module, from the Go module proxy (pinned below; the
# module's zip carries them). Floe's PromQL engine is judged by them
# (crates/promql/tests/promqltest.rs).
#
# Usage: scripts/setup-promql-tests.sh
# Prints the directory holding the .test files. Idempotent: `go mod download` keeps the module
# in the Go module cache and does nothing when it is there.
set -euo pipefail

MODULE="github.com/prometheus/prometheus"
# Prometheus 3.3.0's module version: the release whose semantics (left-open range windows,
# delayed name removal in its tests) the engine follows.
VERSION="v0.303.0"

command -v go >/dev/null 2>&1 || { echo "setup-promql-tests.sh: go is not installed" >&2; exit 1; }
LOG="$(mktemp -t floe-setup-promql.XXXXXX.log)"
if ! DIR="$(GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" 2>"$LOG" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" || [[ -z "$DIR" ]]; then
  echo "setup-promql-tests.sh: go mod download $MODULE@$VERSION failed (log: $LOG)" >&2
  tail -n 20 "$LOG" >&2
  exit 1
fi
rm -f "$LOG"
TESTDATA="$DIR/promql/promqltest/testdata"
ls "$TESTDATA"/*.test >/dev/null 2>&1 || { echo "setup-promql-tests.sh: no .test files in $TESTDATA" >&2; exit 1; }
echo "$TESTDATA"
