#!/usr/bin/env bash
# Install Apache Flink's Python API (PyFlink, which carries Flink itself) in a venv of its own,
# and the jars it needs to use Floe as an Iceberg REST catalog, for the Flink interop tests.
#
# Usage: scripts/setup-flink.sh
#   FLOE_FLINK_HOME      install folder (default: $HOME/.cache/floe-flink)
#   FLOE_MAVEN_REPO      Maven repository base URL (default: Maven Central)
#   FLOE_FLINK_JAVA_HOME a Java 11, 17 or 21 JDK (default: /usr/lib/jvm/java-17-openjdk-amd64)
#   PYTHON               interpreter to build the venv from (default: python3; PyFlink 2.0
#                        supports 3.9 to 3.12)
#
# Prints four key=value lines on stdout, in this order (tests/interop/test_flink.py reads them
# from FLOE_FLINK: export FLOE_FLINK="$(scripts/setup-flink.sh)"):
#   python=<the venv's python, with pyflink>
#   pipeline-jars=<iceberg-flink-runtime jar; Flink's `pipeline.jars` takes it as a file:// URL>
#   hadoop-classpath=<hadoop-client-api and -runtime jars, colon-separated, for HADOOP_CLASSPATH>
#   java-home=<the JDK, for JAVA_HOME>
#
# PyFlink pins py4j, pyarrow < 21, protobuf and Apache Beam, which clash with the interop
# venv (scripts/setup-python.sh), hence a venv of its own: about 400 MB to download and 820 MB
# installed (about a minute on a first run with an empty pip cache). Iceberg's Flink runtime
# reaches Hadoop's Configuration and file system classes even for a REST catalog on a local
# warehouse, and Flink ships no Hadoop: both Hadoop jars go on HADOOP_CLASSPATH before the JVM
# starts (in pipeline.jars, CREATE CATALOG still fails with NoClassDefFoundError).
# Idempotent: a stamp in FLOE_FLINK_HOME records the pins; a matching stamp skips everything.
set -euo pipefail

FLINK_VERSION="2.0.2"
ICEBERG_VERSION="1.10.1"
# The Hadoop line Flink 2.0 is built and tested with.
HADOOP_VERSION="3.4.1"

MAVEN_REPO="${FLOE_MAVEN_REPO:-https://repo1.maven.org/maven2}"
FLINK_HOME="${FLOE_FLINK_HOME:-$HOME/.cache/floe-flink}"
JAVA="${FLOE_FLINK_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}"
PYTHON="${PYTHON:-python3}"
VENV="$FLINK_HOME/venv"
JARS="$FLINK_HOME/jars"
STAMP="$FLINK_HOME/.stamp"

ARTIFACTS=(
  "org.apache.iceberg:iceberg-flink-runtime-${FLINK_VERSION%.*}:${ICEBERG_VERSION}"
  "org.apache.hadoop:hadoop-client-api:${HADOOP_VERSION}"
  "org.apache.hadoop:hadoop-client-runtime:${HADOOP_VERSION}"
)
# What `pip install apache-flink==2.0.2` resolved to, pinned.
PINS=(
  "apache-flink==${FLINK_VERSION}" "apache-flink-libraries==${FLINK_VERSION}"
  apache-beam==2.61.0 attrs==26.1.0 avro==1.12.2 certifi==2026.10.19.post1
  charset-normalizer==3.5.3 cloudpickle==2.2.1 crcmod==1.7 dill==0.3.1.1 dnspython==2.9.2
  docopt==0.6.2 fastavro==1.13.1 fasteners==0.20 find_libpython==0.5.1 grpcio==1.65.5
  hdfs==2.7.3 httplib2==0.22.0 idna==3.20 jsonpickle==3.4.2 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 numpy==2.1.3 objsize==0.7.1 orjson==3.13.0
  packaging==26.4 pandas==2.2.3 pemja==0.5.7 proto-plus==1.28.2 protobuf==5.29.6
  py4j==0.10.9.7 pyarrow==16.1.0 pyarrow-hotfix==0.7 pydot==1.4.2 PyJWT==2.15.1
  pymongo==4.20.1 pyparsing==3.3.3 python-dateutil==2.9.0.post0 pytz==2026.6 PyYAML==6.0.4
  redis==5.3.1 referencing==0.37.0 regex==2026.11.19 requests==2.34.2 rpds-py==2026.9.1
  ruamel.yaml==0.19.1 six==1.17.0 sortedcontainers==2.4.0 typing_extensions==4.16.0
  tzdata==2026.6 urllib3==2.8.0 zstandard==0.25.0
)
WANT_STAMP="$(printf '%s\n' "$JAVA" "${ARTIFACTS[@]}" "${PINS[@]}")"

jar_of() {  # jar_of GROUP:ARTIFACT:VERSION
  local group artifact version
  IFS=: read -r group artifact version <<<"$1"
  echo "$JARS/$artifact-$version.jar"
}

report() {
  local hadoop
  hadoop="$(jar_of "${ARTIFACTS[1]}"):$(jar_of "${ARTIFACTS[2]}")"
  echo "python=$VENV/bin/python"
  echo "pipeline-jars=$(jar_of "${ARTIFACTS[0]}")"
  echo "hadoop-classpath=$hadoop"
  echo "java-home=$JAVA"
}

if [[ ! -x "$JAVA/bin/java" ]]; then
  echo "setup-flink.sh: no JDK at $JAVA (Flink $FLINK_VERSION runs on Java 11, 17 or 21; set FLOE_FLINK_JAVA_HOME)" >&2
  exit 1
fi

installed() {
  [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_STAMP" ]] && "$VENV/bin/python" -c '' 2>/dev/null || return 1
  local coord
  for coord in "${ARTIFACTS[@]}"; do [[ -f "$(jar_of "$coord")" ]] || return 1; done
}

if installed; then
  report
  exit 0
fi

LOG="$(mktemp -t floe-setup-flink.XXXXXX.log)"
fail() {
  echo "setup-flink.sh: $1 (log: $LOG)" >&2
  tail -n 40 "$LOG" >&2 || true
  exit 1
}

fetch() {  # fetch URL DEST
  curl -fsSL --retry 3 --retry-delay 2 --connect-timeout 20 --max-time 600 -o "$2" "$1"
}

rm -f "$STAMP"
mkdir -p "$JARS"
for coord in "${ARTIFACTS[@]}"; do
  IFS=: read -r group artifact version <<<"$coord"
  dest="$(jar_of "$coord")"
  url="$MAVEN_REPO/${group//.//}/$artifact/$version/$(basename "$dest")"
  # A ".sha1" file beside the jar means it was downloaded and verified before.
  if [[ -f "$dest" && -f "$dest.sha1" && "$(sha1sum "$dest" | cut -d' ' -f1)" == "$(cat "$dest.sha1")" ]]; then
    continue
  fi
  tmp="$(mktemp "$dest.XXXXXX")"
  trap 'rm -f "$tmp" "$tmp.sha1"' EXIT
  fetch "$url.sha1" "$tmp.sha1" || fail "could not download $url.sha1"
  fetch "$url" "$tmp" || fail "could not download $url"
  want="$(tr -d ' \r\n' <"$tmp.sha1" | cut -c1-40)"
  got="$(sha1sum "$tmp" | cut -d' ' -f1)"
  [[ "$want" == "$got" ]] || fail "SHA-1 mismatch for $url (want $want, got $got)"
  chmod 644 "$tmp"
  mv -f "$tmp" "$dest"
  printf '%s' "$want" >"$dest.sha1"
  rm -f "$tmp.sha1"
  trap - EXIT
done

command -v "$PYTHON" >/dev/null 2>&1 || fail "$PYTHON not found"
"$PYTHON" -c 'import sys; assert (3, 9) <= sys.version_info[:2] <= (3, 12)' 2>/dev/null \
  || fail "PyFlink $FLINK_VERSION needs Python 3.9 to 3.12 ($PYTHON is $("$PYTHON" -V 2>&1); set PYTHON)"
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c '' 2>/dev/null; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" >>"$LOG" 2>&1 || fail "could not create venv at $VENV with $PYTHON"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$VENV/bin/python" -m pip install --quiet "${PINS[@]}" >>"$LOG" 2>&1 || fail "pip install failed"
"$VENV/bin/python" -c 'import pyflink.table, pyflink.version' >>"$LOG" 2>&1 \
  || fail "pyflink does not import"

printf '%s' "$WANT_STAMP" >"$STAMP"
rm -f "$LOG"
report
