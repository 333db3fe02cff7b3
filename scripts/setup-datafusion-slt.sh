#!/usr/bin/env bash
# Fetch (or reuse) DataFusion's own sqllogictest files — the `test_files` directory that the
# datafusion-sqllogictest crate publishes on crates.io — for `floe bench datafusion-slt`,
# which runs them through Floe's engine (a peer's test suite, issue 38). The version is the
# DataFusion Floe builds on; the download is checked against its pinned SHA-256.
#
# Usage: scripts/setup-datafusion-slt.sh
#   FLOE_DATAFUSION_SLT_CACHE   where the files live (default: $HOME/.cache/floe-datafusion-slt)
# Prints the directory of the .slt files on stdout. Idempotent.
set -euo pipefail

VERSION="54.1.0"
SHA256="7d11faf3e95b017819a10800dc6d612c1f003696dea201700796b9268704f591"
URL="https://static.crates.io/crates/datafusion-sqllogictest/datafusion-sqllogictest-${VERSION}.crate"

CACHE="${FLOE_DATAFUSION_SLT_CACHE:-$HOME/.cache/floe-datafusion-slt}"
DIR="$CACHE/$VERSION"
if [[ -f "$DIR/.floe-sha256" ]] && [[ "$(cat "$DIR/.floe-sha256")" == "$SHA256" ]]; then
  echo "$DIR/test_files"
  exit 0
fi

TMP="$(mktemp -d -t floe-setup-dfslt.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
curl -fsSL --retry 3 -o "$TMP/crate.tar.gz" "$URL" \
  || { echo "setup-datafusion-slt.sh: could not download $URL" >&2; exit 1; }
echo "$SHA256  $TMP/crate.tar.gz" | sha256sum -c --quiet - \
  || { echo "setup-datafusion-slt.sh: $URL does not have the pinned SHA-256" >&2; exit 1; }
tar -xzf "$TMP/crate.tar.gz" -C "$TMP" "datafusion-sqllogictest-${VERSION}/test_files"
rm -rf "$DIR"
mkdir -p "$DIR"
mv "$TMP/datafusion-sqllogictest-${VERSION}/test_files" "$DIR/test_files"
echo "$SHA256" >"$DIR/.floe-sha256"
echo "$DIR/test_files"
