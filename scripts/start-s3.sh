#!/usr/bin/env bash
# Start a MinIO S3 server on loopback for tests.
#
# Usage: scripts/start-s3.sh DIR PORT
#   Serves DIR/data on http://127.0.0.1:PORT (path-style addressing, region
#   us-east-1, web console off), with access key / secret key
#   floe-test-access / floe-test-secret-key (overridable with FLOE_S3_ACCESS_KEY /
#   FLOE_S3_SECRET_KEY), creates bucket "floe-test", and prints the server PID.
#   Log: DIR/minio.log; PID also in DIR/minio.pid. Stop it with `kill <pid>`.
#   Running it again while that server is up just prints its PID.
#   The root credentials may also call STS AssumeRole on the same endpoint.
set -euo pipefail

ACCESS_KEY="${FLOE_S3_ACCESS_KEY:-floe-test-access}"
SECRET_KEY="${FLOE_S3_SECRET_KEY:-floe-test-secret-key}"
REGION="us-east-1"
BUCKET="floe-test"
START_TIMEOUT=60

if [[ $# -ne 2 ]]; then
  echo "usage: $0 DIR PORT" >&2
  exit 2
fi
PORT="$2"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "start-s3.sh: bad port '$PORT'" >&2; exit 2; }
mkdir -p "$1/data"
DIR="$(cd "$1" && pwd -P)"
LOGFILE="$DIR/minio.log"
PIDFILE="$DIR/minio.pid"
ENDPOINT="http://127.0.0.1:$PORT"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MINIO="$("$HERE/setup-s3.sh")"

fail() {
  echo "start-s3.sh: $1" >&2
  [[ -f "$LOGFILE" ]] && tail -n 20 "$LOGFILE" >&2
  exit 1
}

live() { curl -fsS -o /dev/null --max-time 2 "$ENDPOINT/minio/health/live" 2>/dev/null; }

# Signed S3 request with curl's SigV4 support (curl >= 7.75).
s3() {  # s3 METHOD PATH [curl args...]
  local method="$1" path="$2"; shift 2
  curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -X "$method" \
    --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "$@" "$ENDPOINT$path"
}

pid=""
if [[ -f "$PIDFILE" ]]; then
  pid="$(cat "$PIDFILE")"
  if ! kill -0 "$pid" 2>/dev/null || ! live; then pid=""; fi
fi

if [[ -z "$pid" ]]; then
  if live; then
    fail "something else already answers on $ENDPOINT"
  fi
  MINIO_ROOT_USER="$ACCESS_KEY" MINIO_ROOT_PASSWORD="$SECRET_KEY" \
  MINIO_REGION="$REGION" MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CI_CD=on \
  MINIO_CALLHOME_ENABLE=off MINIO_PROMETHEUS_AUTH_TYPE=public \
    setsid nohup "$MINIO" server --quiet --anonymous --address "127.0.0.1:$PORT" "$DIR/data" \
    >"$LOGFILE" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDFILE"
  for _ in $(seq 1 $((START_TIMEOUT * 5))); do
    live && break
    kill -0 "$pid" 2>/dev/null || fail "minio exited during startup"
    sleep 0.2
  done
  live || { kill "$pid" 2>/dev/null || true; fail "minio did not answer on $ENDPOINT within ${START_TIMEOUT}s"; }
fi

# Create the bucket (200: created; 409: already exists/owned).
code="$(s3 PUT "/$BUCKET")" || fail "could not reach $ENDPOINT to create bucket $BUCKET"
case "$code" in
  200|409) ;;
  *) fail "creating bucket $BUCKET failed with HTTP $code" ;;
esac
code="$(s3 GET "/$BUCKET?max-keys=1")" || true
[[ "$code" == "200" ]] || fail "bucket $BUCKET is not there (HTTP $code)"

echo "$pid"
