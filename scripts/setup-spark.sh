#!/usr/bin/env bash
# Download the Iceberg jars Spark needs to talk to a REST catalog and S3FileIO.
#
# Usage: scripts/setup-spark.sh
#   FLOE_JARS          target folder (default: $HOME/.cache/floe-jars)
#   FLOE_MAVEN_REPO    Maven repository base URL (default: Maven Central)
#
# Prints the jar paths, comma-separated (ready for spark.jars), on stdout.
# Idempotent: jars already present with a matching SHA-1 are not downloaded again.
# PySpark itself comes from scripts/setup-python.sh (pyspark 3.5.x, Scala 2.12).
set -euo pipefail

# 1.10.1, not 1.10.2: Maven Central has no iceberg-aws-bundle 1.10.2.
ICEBERG_VERSION="1.10.1"
SPARK_MINOR="3.5"
SCALA_BINARY="2.12"

MAVEN_REPO="${FLOE_MAVEN_REPO:-https://repo1.maven.org/maven2}"
JARS_DIR="${FLOE_JARS:-$HOME/.cache/floe-jars}"

ARTIFACTS=(
  "org.apache.iceberg:iceberg-spark-runtime-${SPARK_MINOR}_${SCALA_BINARY}:${ICEBERG_VERSION}"
  "org.apache.iceberg:iceberg-aws-bundle:${ICEBERG_VERSION}"
)
# Downloaded beside them but not printed: the first Iceberg runtime whose REST client plans
# scans on the server (tests/interop/test_scan_planning.py starts its own Spark with it).
PLANNING_RUNTIME="org.apache.iceberg:iceberg-spark-runtime-${SPARK_MINOR}_${SCALA_BINARY}:1.11.0"

mkdir -p "$JARS_DIR"

sha1_of() { sha1sum "$1" | cut -d' ' -f1; }

fetch() {  # fetch URL DEST
  curl -fsSL --retry 3 --retry-delay 2 --connect-timeout 20 --max-time 600 -o "$2" "$1"
}

paths=()
for coord in "${ARTIFACTS[@]}" "$PLANNING_RUNTIME"; do
  IFS=: read -r group artifact version <<<"$coord"
  jar="${artifact}-${version}.jar"
  dest="$JARS_DIR/$jar"
  url="$MAVEN_REPO/${group//.//}/$artifact/$version/$jar"
  # A ".sha1" file beside the jar means it was downloaded and verified before.
  if [[ -f "$dest" && -f "$dest.sha1" && "$(sha1_of "$dest")" == "$(cat "$dest.sha1")" ]]; then
    paths+=("$dest")
    continue
  fi
  tmp="$(mktemp "$JARS_DIR/.${jar}.XXXXXX")"
  trap 'rm -f "$tmp" "$tmp.sha1"' EXIT
  if ! fetch "$url.sha1" "$tmp.sha1"; then
    echo "setup-spark.sh: could not download $url.sha1" >&2
    exit 1
  fi
  want="$(tr -d ' \r\n' <"$tmp.sha1" | cut -c1-40)"
  if ! fetch "$url" "$tmp"; then
    echo "setup-spark.sh: could not download $url" >&2
    exit 1
  fi
  got="$(sha1_of "$tmp")"
  if [[ "$got" != "$want" ]]; then
    echo "setup-spark.sh: SHA-1 mismatch for $url (want $want, got $got)" >&2
    exit 1
  fi
  chmod 644 "$tmp"
  mv -f "$tmp" "$dest"
  printf '%s' "$want" >"$dest.sha1"
  rm -f "$tmp.sha1"
  trap - EXIT
  paths+=("$dest")
done

unset 'paths[-1]'  # the planning runtime
(IFS=,; echo "${paths[*]}")
