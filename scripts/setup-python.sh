#!/usr/bin/env bash
# Create (or reuse) the Python virtualenv used by Floe's interop tests.
#
# Usage: scripts/setup-python.sh
#   FLOE_VENV   where the venv lives (default: $HOME/.cache/floe-venv)
#   PYTHON      interpreter to build the venv from (default: python3, needs >= 3.10)
#
# Idempotent: a stamp file inside the venv records the pins; when it matches,
# the script exits at once. Prints the venv path on stdout.
set -euo pipefail

PYICEBERG_VERSION="0.12.0"
DUCKDB_VERSION="1.4.4"
# DuckDB extension wheels published on PyPI; <duckdb version>.<build date>.
DUCKDB_EXT_VERSION="1.4.4.20260205"
PYSPARK_VERSION="3.5.9"
PYTEST_VERSION="9.2.0"
REQUESTS_VERSION="2.34.2"
PSYCOPG_VERSION="3.3.9"
# boto3 follows the botocore range aiobotocore (under s3fs) accepts.
BOTO3_VERSION="1.43.117"
# PyIceberg's fsspec file IO, the one that carries its S3 remote signer.
S3FS_VERSION="2026.9.0"
AIOBOTOCORE_VERSION="3.10.0"
# Arrow Flight SQL client (the Go driver, through the ADBC driver manager).
ADBC_VERSION="1.13.0"
# Not used directly, but pyiceberg and the tests depend on it: pin it too.
PYARROW_VERSION="26.0.1"
# Kafka producer (with librdkafka inside the wheel) for the stream pipeline tests.
CONFLUENT_KAFKA_VERSION="2.16.1"
CRYPTOGRAPHY_VERSION="50.0.2"
# OpenAPI-driven fuzzing of the HTTP APIs (test_fuzz_api.py), and the validator that checks
# the document it reads. 4.32.5 resolves beside the pins above (pytest 9.2.0 included).
SCHEMATHESIS_VERSION="4.32.5"
OPENAPI_SPEC_VALIDATOR_VERSION="0.9.0"
# OpenTelemetry's own exporters (OTLP over HTTP protobuf, HTTP JSON and gRPC) for the
# observability tests. The JSON exporter (a beta) pins the exporters' common package of
# 1.45.1's line, so the protobuf exporters are taken from that line too.
OTEL_SDK_VERSION="1.45.2"
OTEL_EXPORTER_VERSION="1.45.1"
OTEL_JSON_EXPORTER_VERSION="0.66b1"
# Selenium drives Debian's headless Chromium (scripts/setup-chromium.sh) in the console tests.
SELENIUM_VERSION="4.50.0"

PINS=(
  "pyiceberg[pyarrow,sql-sqlite,pyiceberg-core]==${PYICEBERG_VERSION}"
  "duckdb==${DUCKDB_VERSION}"
  "duckdb-ext-iceberg==${DUCKDB_EXT_VERSION}"
  "duckdb-ext-avro==${DUCKDB_EXT_VERSION}"
  "duckdb-ext-httpfs==${DUCKDB_EXT_VERSION}"
  # TPC-DS data and the 99 queries for `floe bench tpcds` and its CI test (DuckDB 1.4.4's
  # extension: 2.0's extensions are not on PyPI).
  "duckdb-ext-tpcds==${DUCKDB_EXT_VERSION}"
  "pyspark==${PYSPARK_VERSION}"
  "pytest==${PYTEST_VERSION}"
  "requests==${REQUESTS_VERSION}"
  "psycopg[binary]==${PSYCOPG_VERSION}"
  "boto3==${BOTO3_VERSION}"
  "s3fs==${S3FS_VERSION}"
  "aiobotocore==${AIOBOTOCORE_VERSION}"
  "adbc-driver-manager==${ADBC_VERSION}"
  "adbc-driver-flightsql==${ADBC_VERSION}"
  "pyarrow==${PYARROW_VERSION}"
  "confluent-kafka[avro,json,protobuf,schemaregistry]==${CONFLUENT_KAFKA_VERSION}"
  "cryptography==${CRYPTOGRAPHY_VERSION}"
  "schemathesis==${SCHEMATHESIS_VERSION}"
  "openapi-spec-validator==${OPENAPI_SPEC_VALIDATOR_VERSION}"
  "opentelemetry-api==${OTEL_SDK_VERSION}"
  "opentelemetry-sdk==${OTEL_SDK_VERSION}"
  "opentelemetry-exporter-otlp-proto-http==${OTEL_EXPORTER_VERSION}"
  "opentelemetry-exporter-otlp-proto-grpc==${OTEL_EXPORTER_VERSION}"
  "opentelemetry-exporter-otlp-json-http==${OTEL_JSON_EXPORTER_VERSION}"
  "selenium==${SELENIUM_VERSION}"
)

VENV="${FLOE_VENV:-$HOME/.cache/floe-venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.floe-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

if [[ -x "$VENV/bin/python" && -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$WANT" ]] \
   && "$VENV/bin/python" -c '' 2>/dev/null; then
  echo "$VENV"
  exit 0
fi

LOG="$(mktemp -t floe-setup-python.XXXXXX.log)"
fail() {
  echo "setup-python.sh: $1 (log: $LOG)" >&2
  tail -n 40 "$LOG" >&2 || true
  exit 1
}

command -v "$PYTHON" >/dev/null 2>&1 || fail "$PYTHON not found"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null \
  || fail "$PYTHON is older than 3.10"

if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c '' 2>/dev/null; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1; then
    # Debian's own python3 needs python3-venv for ensurepip.
    rm -rf "$VENV"
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv; } >>"$LOG" 2>&1 \
        || fail "could not install python3-venv"
      "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 || fail "could not create venv at $VENV with $PYTHON"
    else
      fail "could not create venv at $VENV with $PYTHON"
    fi
  fi
fi

rm -f "$STAMP"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install --quiet "${PINS[@]}" >>"$LOG" 2>&1 \
  || fail "pip install failed"

# Sanity check: everything imports and the DuckDB extension files are present.
"$VENV/bin/python" - >>"$LOG" 2>&1 <<'EOF' || fail "installed packages failed the import check"
import importlib.metadata as md
import duckdb, pyiceberg, pyspark, pytest, requests, psycopg, boto3, pyarrow
import schemathesis, openapi_spec_validator
for ext in ("iceberg", "avro", "httpfs", "tpcds"):
    files = [f for f in (md.files(f"duckdb-ext-{ext}") or [])
             if f.name == f"{ext}.duckdb_extension"]
    assert files and files[0].locate().is_file(), f"{ext}.duckdb_extension missing"
EOF

printf '%s\n' "$WANT" >"$STAMP"
"$VENV/bin/python" -m pip freeze >"$VENV/.floe-freeze.txt" 2>/dev/null || true
rm -f "$LOG"
echo "$VENV"
