#!/usr/bin/env bash
# Runs Apache Iceberg's CatalogTests / ViewCatalogTests (via the Java RESTCatalog client)
# against a LIVE Floe server. The server must already be running; this script does not start it.
#
# Environment (all optional, passed through to the test JVM):
#   FLOE_CATALOG_URI     REST base URI            (default http://127.0.0.1:8181/catalog)
#   FLOE_WAREHOUSE       warehouse for /v1/config (default "default")
#   FLOE_CLIENT_ID / FLOE_CLIENT_SECRET   OAuth2 client credentials (token at <uri>/v1/oauth/tokens)
#   FLOE_LOCATION_BASE   in-warehouse base for tests that request explicit locations
#   FLOE_CLEANUP=false   do not wipe the catalog around each test
#   CATALOG_*            raw RESTCatalog properties (RCK convention, e.g. CATALOG_IO__IMPL)
#   FLOE_MVN_OFFLINE     auto (default): offline when ~/.m2 has the artifacts; 1: always; 0: never
#   MVN_NICE             nice level for Maven (default 19)
#
# Extra arguments go to Maven, e.g.:
#   scripts/run-java-conformance.sh -Dtest='FloeCatalogTest#testCreateNamespace'
#   scripts/run-java-conformance.sh -Dtest=FloeViewCatalogTest
#   scripts/run-java-conformance.sh -Diceberg.version=1.10.2
#   scripts/run-java-conformance.sh -Ps3          # S3FileIO for s3:// warehouses
#
# Reports: tests/java-conformance/target/surefire-reports/ (XML + per-class output files).
# Exit status: Maven's (non-zero on any test failure/error or build problem).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="$ROOT/tests/java-conformance"
REPORTS="$PROJECT/target/surefire-reports"
cd "$PROJECT"

command -v mvn >/dev/null || { echo "run-java-conformance: mvn not found (need Maven 3.8+ and Java 17+)" >&2; exit 2; }

NICE=(nice -n "${MVN_NICE:-19}")
MVN_ARGS=(-B -q -Dstyle.color=never)
# Any -Dtest=... selection should not fail the other class for "no tests matched".
for arg in "$@"; do
  case "$arg" in -Dtest=*) MVN_ARGS+=(-Dsurefire.failIfNoSpecifiedTests=false) ;; esac
done

# Offline when the local repository already holds what the last run used.
M2="${MAVEN_REPO_LOCAL:-$HOME/.m2/repository}"
ICEBERG_VERSION="$(sed -n 's:.*<iceberg.version>\(.*\)</iceberg.version>.*:\1:p' pom.xml | head -1)"
offline=0
case "${FLOE_MVN_OFFLINE:-auto}" in
  1|true|yes) offline=1 ;;
  0|false|no) offline=0 ;;
  *)
    if [ -f "$M2/org/apache/iceberg/iceberg-core/$ICEBERG_VERSION/iceberg-core-$ICEBERG_VERSION-tests.jar" ] \
       && [ -d "$M2/org/apache/maven/surefire/surefire-junit-platform" ]; then
      offline=1
    fi
    ;;
esac

# Clear stale reports so the summary below only counts this run.
rm -rf "$REPORTS"

LOG="$(mktemp "${TMPDIR:-/tmp}/floe-java-conformance.XXXXXX.log")"
trap 'rm -f "$LOG"' EXIT

run_mvn() {
  set +e
  # strip the ANSI resets Maven prints even in batch mode, so lines start clean
  "${NICE[@]}" mvn "${MVN_ARGS[@]}" "$@" 2>&1 | sed -u 's/\x1b\[[0-9;]*m//g' | tee "$LOG"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

rc=0
if [ "$offline" = 1 ]; then
  run_mvn -o test "$@" || rc=$?
  # A different -Diceberg.version / -P profile may need downloads: retry online once.
  if [ "$rc" != 0 ] && grep -qiE 'offline mode|has not been downloaded from it before|Cannot access .* in offline' "$LOG"; then
    echo "run-java-conformance: artifacts missing from $M2, retrying online" >&2
    rm -rf "$REPORTS"
    rc=0
    run_mvn test "$@" || rc=$?
  fi
else
  run_mvn test "$@" || rc=$?
fi

# Summary from the surefire XML reports (Maven -q hides its own "Tests run" lines).
if compgen -G "$REPORTS/TEST-*.xml" >/dev/null; then
  awk '
    /<testsuite / {
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^tests=/)    { v = $i; gsub(/[^0-9]/, "", v); t += v }
        if ($i ~ /^failures=/) { v = $i; gsub(/[^0-9]/, "", v); f += v }
        if ($i ~ /^errors=/)   { v = $i; gsub(/[^0-9]/, "", v); e += v }
        if ($i ~ /^skipped=/)  { v = $i; gsub(/[^0-9]/, "", v); s += v }
      }
    }
    END { printf "conformance: %d passed, %d failed, %d skipped\n", t - f - e - s, f + e, s }
  ' "$REPORTS"/TEST-*.xml
  echo "run-java-conformance: reports in ${REPORTS#"$ROOT"/}" >&2
fi

exit "$rc"
