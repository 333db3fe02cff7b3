#!/usr/bin/env bash
# Download Trino's server (core) and its Iceberg connector, for the Trino interop tests.
#
# Usage: scripts/setup-trino.sh
#   FLOE_TRINO_HOME    install folder (default: $HOME/.cache/floe-trino)
#   FLOE_MAVEN_REPO    Maven repository base URL (default: Maven Central)
#   FLOE_JAVA25_HOME   a Java 24+ JDK (default: /usr/lib/jvm/temurin-25-jdk-amd64)
#
# Prints two lines on stdout: the Trino server folder (bin/launcher inside) and the JDK's
# JAVA_HOME. Trino 476 is the newest server published on Maven Central; it needs Java 24.0.1
# or later. Instead of the 821 MB full tarball this takes trino-server-core (194 MB: the
# server without plugins) and the Iceberg connector's plugin zip (346 MB), both SHA-1
# checked, and keeps only the Iceberg plugin (about 480 MB on disk).
# Idempotent: a stamp in FLOE_TRINO_HOME records the version; a matching stamp skips the
# downloads.
set -euo pipefail

TRINO_VERSION="476"
MAVEN_REPO="${FLOE_MAVEN_REPO:-https://repo1.maven.org/maven2}"
TRINO_HOME="${FLOE_TRINO_HOME:-$HOME/.cache/floe-trino}"
JAVA25="${FLOE_JAVA25_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}"
SERVER="$TRINO_HOME/trino-server-$TRINO_VERSION"
STAMP="$TRINO_HOME/.stamp"
WANT_STAMP="trino-server-core $TRINO_VERSION + trino-iceberg $TRINO_VERSION"

if [[ ! -x "$JAVA25/bin/java" ]]; then
  echo "setup-trino.sh: no JDK at $JAVA25 (Trino $TRINO_VERSION needs Java 24.0.1 or later; set FLOE_JAVA25_HOME)" >&2
  exit 1
fi

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_STAMP" && -x "$SERVER/bin/launcher" ]]; then
  echo "$SERVER"
  echo "$JAVA25"
  exit 0
fi

fetch() {  # fetch URL DEST
  curl -fsSL --retry 3 --retry-delay 2 --connect-timeout 20 --max-time 1200 -o "$2" "$1"
}

verified() {  # verified GROUP ARTIFACT EXT DEST: downloads and checks the SHA-1
  local url="$MAVEN_REPO/${1//.//}/$2/$TRINO_VERSION/$2-$TRINO_VERSION.$3"
  fetch "$url.sha1" "$4.sha1" || { echo "setup-trino.sh: could not download $url.sha1" >&2; exit 1; }
  fetch "$url" "$4" || { echo "setup-trino.sh: could not download $url" >&2; exit 1; }
  local want got
  want="$(tr -d ' \r\n' <"$4.sha1" | cut -c1-40)"
  got="$(sha1sum "$4" | cut -d' ' -f1)"
  if [[ "$want" != "$got" ]]; then
    echo "setup-trino.sh: SHA-1 mismatch for $url (want $want, got $got)" >&2
    exit 1
  fi
}

mkdir -p "$TRINO_HOME"
WORK="$(mktemp -d "$TRINO_HOME/.setup-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
verified io.trino trino-server-core tar.gz "$WORK/core.tar.gz"
verified io.trino trino-iceberg zip "$WORK/iceberg.zip"
tar -xzf "$WORK/core.tar.gz" -C "$WORK"
rm -f "$WORK/core.tar.gz"
unpacked="$WORK/trino-server-core-$TRINO_VERSION"
[[ -d "$unpacked" ]] || unpacked="$(find "$WORK" -mindepth 1 -maxdepth 1 -type d -name 'trino-server*' | head -1)"
# Only the Iceberg connector: the core's own plugins (geospatial, Python functions, …) are
# not needed to start or to query.
rm -rf "$unpacked/plugin"
mkdir -p "$unpacked/plugin"
(cd "$WORK" && unzip -q iceberg.zip -d plugin-unzipped)
rm -f "$WORK/iceberg.zip"
inner="$(find "$WORK/plugin-unzipped" -mindepth 1 -maxdepth 1 -type d | head -1)"
mv "$inner" "$unpacked/plugin/iceberg"
rm -rf "$SERVER"
mv "$unpacked" "$SERVER"
printf '%s' "$WANT_STAMP" >"$STAMP"
echo "$SERVER"
echo "$JAVA25"
