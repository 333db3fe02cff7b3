#!/usr/bin/env bash
# Start a throwaway PostgreSQL cluster for tests.
#
# Usage: scripts/start-postgres.sh DIR PORT
#   Initialises a cluster in DIR/data (unless already there), starts it in the
#   background listening only on 127.0.0.1:PORT over TCP (no Unix socket), trust
#   auth, fsync off, logical decoding on (wal_level logical, replication
#   connections from 127.0.0.1 trusted: Debezium's connector streams from it);
#   creates database "floe"; waits until it accepts
#   connections, then prints its URL: postgres://postgres@127.0.0.1:PORT/floe
#   Server log: DIR/postgres.log. The server PID is the first line of
#   DIR/data/postmaster.pid; stop it with `kill -INT <pid>` (fast shutdown).
#   Running it again for a cluster that is already up just prints the URL.
#   As root, the server runs as the system user $FLOE_PG_USER (default floe-pg,
#   created if missing), since postgres refuses to run as root.
set -euo pipefail

DB_NAME="floe"
DB_SUPERUSER="postgres"
RUN_AS="${FLOE_PG_USER:-floe-pg}"
START_TIMEOUT=60

if [[ $# -ne 2 ]]; then
  echo "usage: $0 DIR PORT" >&2
  exit 2
fi
PORT="$2"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "start-postgres.sh: bad port '$PORT'" >&2; exit 2; }
mkdir -p "$1"
DIR="$(cd "$1" && pwd -P)"
PGDATA="$DIR/data"
LOGFILE="$DIR/postgres.log"
URL="postgres://${DB_SUPERUSER}@127.0.0.1:${PORT}/${DB_NAME}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$("$HERE/setup-postgres.sh")"

fail() {
  echo "start-postgres.sh: $1" >&2
  [[ -f "$LOGFILE" ]] && tail -n 20 "$LOGFILE" >&2
  exit 1
}

AS=()
if [[ "$(id -u)" -eq 0 ]]; then
  if ! id -u "$RUN_AS" >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$RUN_AS" || fail "could not create user $RUN_AS"
  fi
  AS=(runuser -u "$RUN_AS" --)
  chown "$RUN_AS:" "$DIR"
  [[ -d "$PGDATA" ]] && chown -R "$RUN_AS:" "$PGDATA"
  # The server user must be able to reach DIR: give search (x) permission to
  # any ancestor that denies it (e.g. pytest's 0700 /tmp/pytest-of-root).
  d="$DIR"
  while [[ "$d" != "/" ]]; do
    d="$(dirname "$d")"
    if ! "${AS[@]}" test -x "$d"; then chmod o+x "$d"; fi
  done
fi

cd "$DIR"  # a cwd the server user can read

psql_() { "${AS[@]}" "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U "$DB_SUPERUSER" "$@"; }

if [[ -f "$PGDATA/postmaster.pid" ]] && "${AS[@]}" "$BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
  running_port="$(sed -n 4p "$PGDATA/postmaster.pid")"
  [[ "$running_port" == "$PORT" ]] || fail "the cluster in $PGDATA is already running on port $running_port, not $PORT"
else
  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    rm -rf "$PGDATA"
    "${AS[@]}" "$BIN/initdb" -D "$PGDATA" -U "$DB_SUPERUSER" -A trust -E UTF8 --locale=C \
      --no-sync >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; fail "initdb failed in $PGDATA"; }
    {
      echo "# added by start-postgres.sh"
      echo "listen_addresses = '127.0.0.1'"
      echo "unix_socket_directories = ''"
      echo "fsync = off"
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
      echo "max_connections = 200"
      echo "wal_level = logical"
      echo "max_replication_slots = 10"
      echo "max_wal_senders = 10"
    } >>"$PGDATA/postgresql.conf"
    # trust for TCP from loopback only, replication connections included.
    printf 'host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n' >"$PGDATA/pg_hba.conf"
  fi
  # Always (re)start on the requested port.
  "${AS[@]}" "$BIN/pg_ctl" -D "$PGDATA" -l "$LOGFILE" -o "-p $PORT" -w -t "$START_TIMEOUT" -s start \
    >/dev/null 2>&1 || fail "postgres did not start on 127.0.0.1:$PORT (log: $LOGFILE)"
fi

# Wait until it accepts connections (pg_ctl -w already did, but be certain).
for _ in $(seq 1 $((START_TIMEOUT * 5))); do
  "${AS[@]}" "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U "$DB_SUPERUSER" && break
  sleep 0.2
done
"${AS[@]}" "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U "$DB_SUPERUSER" \
  || fail "postgres is not accepting connections on 127.0.0.1:$PORT"

if [[ "$(psql_ -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != "1" ]]; then
  psql_ -d postgres -c "CREATE DATABASE \"$DB_NAME\"" || fail "could not create database $DB_NAME"
fi

echo "$URL"
