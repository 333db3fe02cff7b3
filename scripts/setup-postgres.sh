#!/usr/bin/env bash
# Make sure a PostgreSQL server (initdb, postgres, pg_ctl, psql) is installed.
#
# Usage: scripts/setup-postgres.sh
# Installs Debian's PostgreSQL packages when the binaries are missing
# (needs root, or passwordless sudo). Prints the PostgreSQL bin directory.
set -euo pipefail

# Debian 12 (bookworm) ships PostgreSQL 15; "postgresql" is its meta-package.
PG_PACKAGES=(postgresql postgresql-contrib)

pg_bindir() {
  local d
  if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
    d="$(dirname "$(readlink -f "$(command -v initdb)")")"
    if [[ -x "$d/pg_ctl" && -x "$d/postgres" ]]; then echo "$d"; return 0; fi
  fi
  # Debian keeps the server binaries out of PATH; take the newest version.
  d="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
  if [[ -n "$d" && -x "$d/initdb" && -x "$d/postgres" && -x "$d/pg_ctl" ]]; then
    echo "$d"; return 0
  fi
  return 1
}

if bindir="$(pg_bindir)"; then
  echo "$bindir"
  exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup-postgres.sh: PostgreSQL is missing and I am not root (no sudo either)" >&2; exit 1; }
  SUDO=(sudo -n)
fi

LOG="$(mktemp -t floe-setup-postgres.XXXXXX.log)"
export DEBIAN_FRONTEND=noninteractive
if ! { "${SUDO[@]}" apt-get update -q && \
       "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${PG_PACKAGES[@]}"; } >"$LOG" 2>&1; then
  echo "setup-postgres.sh: apt-get install ${PG_PACKAGES[*]} failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi

if ! bindir="$(pg_bindir)"; then
  echo "setup-postgres.sh: installed ${PG_PACKAGES[*]} but found no initdb/postgres (log: $LOG)" >&2
  exit 1
fi
rm -f "$LOG"
echo "$bindir"
