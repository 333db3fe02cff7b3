#!/usr/bin/env bash
# Create (or reuse) the virtualenv of the benchmark peer: the newest DuckDB release from PyPI
# (2.0), in a venv of its own because the interop venv keeps DuckDB 1.4.4, whose extension
# wheels (iceberg, avro, httpfs, tpcds) PyPI has and 2.0's it does not.
#
# Usage: scripts/setup-duckdb.sh
#   FLOE_DUCKDB_VENV   where the venv lives (default: $HOME/.cache/floe-duckdb)
#   PYTHON             interpreter to build the venv from (default: python3)
# Prints the venv's python on stdout. Idempotent: a stamp file records the pins.
set -euo pipefail

DUCKDB_VERSION="2.0.1"
PYARROW_VERSION="26.0.1"
PINS=("duckdb==${DUCKDB_VERSION}" "pyarrow==${PYARROW_VERSION}")

VENV="${FLOE_DUCKDB_VENV:-$HOME/.cache/floe-duckdb}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.floe-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

if [[ -x "$VENV/bin/python" && -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$WANT" ]] \
   && "$VENV/bin/python" -c 'import duckdb' 2>/dev/null; then
  echo "$VENV/bin/python"
  exit 0
fi

LOG="$(mktemp -t floe-setup-duckdb.XXXXXX.log)"
fail() {
  echo "setup-duckdb.sh: $1 (log: $LOG)" >&2
  tail -n 40 "$LOG" >&2 || true
  exit 1
}
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 || fail "could not create venv at $VENV with $PYTHON"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install --quiet "${PINS[@]}" >>"$LOG" 2>&1 || fail "pip install failed"
"$VENV/bin/python" -c "import duckdb, pyarrow; assert duckdb.__version__ == '${DUCKDB_VERSION}', duckdb.__version__" \
  >>"$LOG" 2>&1 || fail "DuckDB ${DUCKDB_VERSION} does not import"
printf '%s\n' "$WANT" >"$STAMP"
rm -f "$LOG"
echo "$VENV/bin/python"
