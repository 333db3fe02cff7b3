#!/usr/bin/env bash
# Resolve Debezium's embedded engine and PostgreSQL connector (3.6.1.Final, with the Kafka
# Connect runtime and JSON converter they bring) and compile tests/debezium/DebeziumCapture.java
# against them, for tests/interop/test_debezium.py: a real Debezium's change stream, with Kafka
# Connect's JSON wire format, fed to a Floe pipeline in debezium mode.
#
# Usage: scripts/setup-debezium.sh
#   FLOE_DEBEZIUM_HOME       install folder (default: $HOME/.cache/floe-debezium)
#   FLOE_MAVEN_REPO          Maven repository base URL (default: Maven Central)
#   FLOE_DEBEZIUM_JAVA_HOME  a JDK 17 or newer (Debezium 3 and Kafka Connect 4 are built for
#                            Java 17; default: /usr/lib/jvm/java-17-openjdk-amd64)
#
# Prints two key=value lines on stdout (the test reads them from FLOE_DEBEZIUM:
# export FLOE_DEBEZIUM="$(scripts/setup-debezium.sh)"):
#   java-home=<the JDK: run $java_home/bin/java>
#   classpath=<the jars and the compiled DebeziumCapture, for java -cp>
#
# The jars come from `mvn dependency:copy-dependencies` on a pom written here, with a
# throwaway local repository that is deleted afterwards: about 40 MB kept, ~10 s on a first
# run. Idempotent: a stamp beside the jars records the pinned dependency list, and one beside
# the classes the program's source and the JDK; matching stamps skip everything (well under
# a second). Needs mvn and a JDK.
set -euo pipefail

DEBEZIUM_VERSION="3.6.1.Final"
# The SLF4J line Debezium 3.6 logs through (its slf4j-api), with the simple binding.
SLF4J_VERSION="1.7.36"
DEPENDENCY_PLUGIN_VERSION="3.6.1"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SOURCE_DIR="$ROOT/tests/debezium"
MAVEN_REPO="${FLOE_MAVEN_REPO:-https://repo1.maven.org/maven2}"
DEBEZIUM_HOME="${FLOE_DEBEZIUM_HOME:-$HOME/.cache/floe-debezium}"
JAVA="${FLOE_DEBEZIUM_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}"
LIB="$DEBEZIUM_HOME/lib"
CLASSES="$DEBEZIUM_HOME/classes"

pom() {
  cat <<POM
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/setup-debezium.sh; only used to resolve Debezium's jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>floe.test</groupId>
  <artifactId>floe-debezium-capture</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.debezium</groupId>
      <artifactId>debezium-embedded</artifactId>
      <version>$DEBEZIUM_VERSION</version>
    </dependency>
    <dependency>
      <groupId>io.debezium</groupId>
      <artifactId>debezium-connector-postgres</artifactId>
      <version>$DEBEZIUM_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
}

settings() {
  cat <<SETTINGS
<?xml version="1.0" encoding="UTF-8"?>
<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror><id>floe-maven</id><mirrorOf>*</mirrorOf><url>$MAVEN_REPO</url></mirror>
  </mirrors>
</settings>
SETTINGS
}

report() {
  echo "java-home=$JAVA"
  echo "classpath=$LIB/*:$CLASSES"
}

[[ -x "$JAVA/bin/java" && -x "$JAVA/bin/javac" ]] \
  || { echo "setup-debezium.sh: no JDK at $JAVA (Debezium $DEBEZIUM_VERSION needs Java 17 or newer; set FLOE_DEBEZIUM_JAVA_HOME)" >&2; exit 1; }

lib_want="$(pom | sha1sum | cut -d' ' -f1) $DEPENDENCY_PLUGIN_VERSION $MAVEN_REPO"
classes_want="$(cat "$SOURCE_DIR/DebeziumCapture.java" "$SOURCE_DIR/simplelogger.properties" | sha1sum | cut -d' ' -f1) $JAVA $lib_want"
if [[ -f "$LIB/.stamp" && "$(cat "$LIB/.stamp")" == "$lib_want" \
   && -f "$CLASSES/.stamp" && "$(cat "$CLASSES/.stamp")" == "$classes_want" ]]; then
  report
  exit 0
fi

mkdir -p "$DEBEZIUM_HOME"
WORK="$(mktemp -d "$DEBEZIUM_HOME/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
LOG="$DEBEZIUM_HOME/setup.log"
: >"$LOG"

if [[ ! -f "$LIB/.stamp" || "$(cat "$LIB/.stamp")" != "$lib_want" ]]; then
  command -v mvn >/dev/null 2>&1 || { echo "setup-debezium.sh: mvn is not installed" >&2; exit 1; }
  pom >"$WORK/pom.xml"
  settings >"$WORK/settings.xml"
  if ! JAVA_HOME="$JAVA" mvn -B -q -f "$WORK/pom.xml" -s "$WORK/settings.xml" -Dmaven.repo.local="$WORK/repo" \
       "org.apache.maven.plugins:maven-dependency-plugin:$DEPENDENCY_PLUGIN_VERSION:copy-dependencies" \
       -DoutputDirectory="$WORK/lib" -DincludeScope=runtime >>"$LOG" 2>&1; then
    echo "setup-debezium.sh: resolving Debezium's jars failed (log: $LOG)" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
  echo "$lib_want" >"$WORK/lib/.stamp"
  rm -rf "$LIB"
  mv "$WORK/lib" "$LIB"
fi

mkdir -p "$WORK/classes"
if ! "$JAVA/bin/javac" -nowarn -encoding UTF-8 -cp "$LIB/*" -d "$WORK/classes" \
     "$SOURCE_DIR/DebeziumCapture.java" >>"$LOG" 2>&1; then
  echo "setup-debezium.sh: compiling DebeziumCapture.java failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi
cp "$SOURCE_DIR/simplelogger.properties" "$WORK/classes/"
echo "$classes_want" >"$WORK/classes/.stamp"
rm -rf "$CLASSES"
mv "$WORK/classes" "$CLASSES"
rm -f "$LOG"
report
