#!/usr/bin/env bash
# Download Apache Hive's standalone metastore (HMS) 4.0.1 and the runtime jars it
# needs to serve Thrift with an embedded Derby database (Hadoop client jars,
# Derby, DataNucleus, log4j2).
#
# Usage: scripts/setup-hms.sh
#   FLOE_HMS_HOME      install folder (default: $HOME/.cache/floe-hms)
#   FLOE_MAVEN_REPO    Maven repository base URL (default: Maven Central)
#
# Prints the folder holding the jars (FLOE_HMS_HOME/lib) on stdout; the Java
# classpath is "$dir/*". Beside it, FLOE_HMS_HOME/scripts/metastore/upgrade/derby
# holds the schema scripts the schema tool runs (METASTORE_HOME=FLOE_HMS_HOME).
# Idempotent: a stamp in FLOE_HMS_HOME records the pinned dependency list; a
# matching stamp skips all downloads (well under a second).
# The jars come from `mvn dependency:copy-dependencies` on a pom written here, with
# a throwaway local repository that is deleted afterwards; the Derby schema
# scripts are not in any jar, so they are taken from the metastore's -bin.tar.gz
# on the same repository (SHA-1 checked; only those scripts are kept). About 105 MB
# is kept in all; a first run takes ~25 s. Needs mvn, curl, tar and a JDK (17).
#
# Usage: scripts/setup-hms.sh --spark-compat SPARK_JARS_DIR
#   Spark 3.5's built-in Hive 2.3.9 metastore client, which Iceberg's HiveCatalog
#   uses too, calls the Thrift methods get_table and get_table_objects_by_name,
#   which HMS 4 removed (HIVE-26537): every table lookup then fails with
#   "Invalid method name: 'get_table'". This builds a one-class override jar:
#   HiveMetaStoreClient from hive-metastore-2.3.9-sources.jar (same repository,
#   SHA-1 checked) with getTable/tableExists/getTableObjectsByName switched to
#   get_table_req / get_table_objects_by_name_req (both served since Hive 2.3),
#   compiled against SPARK_JARS_DIR (pyspark's jars/ folder, which must hold
#   hive-metastore-2.3.9.jar). Prints the jar's path; put it first on the
#   driver's classpath: spark.driver.extraClassPath=<jar>.
#   Idempotent: an existing jar built from the same inputs is reused. Also needs
#   unzip and perl.
set -euo pipefail

HIVE_VERSION="4.0.1"
# The versions the metastore 4.0.1 is built against (its parent pom).
HADOOP_VERSION="3.3.6"
DERBY_VERSION="10.14.2.0"
LOG4J2_VERSION="2.18.0"
DEPENDENCY_PLUGIN_VERSION="3.6.1"

MAVEN_REPO="${FLOE_MAVEN_REPO:-https://repo1.maven.org/maven2}"
HMS_HOME="${FLOE_HMS_HOME:-$HOME/.cache/floe-hms}"
LIB="$HMS_HOME/lib"
STAMP="$HMS_HOME/.stamp"

# Hadoop pieces the metastore never uses here (no YARN, Kerberos server, web UI);
# leaving them out keeps lib/ small. HDFS is not used either, but the metastore
# loads a few HDFS classes on every request (e.g. SnapshotException, from
# hadoop-hdfs), so hadoop-hdfs and hadoop-hdfs-client come in below, alone.
HADOOP_EXCLUSIONS=(
  "org.slf4j:slf4j-log4j12" "org.slf4j:slf4j-reload4j" "ch.qos.reload4j:reload4j" "log4j:log4j"
  "org.apache.zookeeper:zookeeper" "org.apache.curator:*" "org.apache.kerby:*"
  "org.eclipse.jetty:*" "com.sun.jersey:*" "com.github.pjfanning:jersey-json" "javax.servlet.jsp:*"
  "org.apache.avro:avro" "com.jcraft:jsch" "dnsjava:dnsjava" "io.netty:*"
  "org.apache.hadoop:hadoop-yarn-api" "org.apache.hadoop:hadoop-yarn-client" "org.apache.hadoop:hadoop-yarn-common"
  "org.apache.hadoop:hadoop-hdfs"
  "org.xerial.snappy:snappy-java" "com.google.inject:*" "com.google.inject.extensions:*"
  "org.bouncycastle:*" "com.nimbusds:*"
)

exclusions_xml() {
  local e g a
  echo "<exclusions>"
  for e in "$@"; do
    g="${e%%:*}"; a="${e#*:}"
    echo "<exclusion><groupId>$g</groupId><artifactId>$a</artifactId></exclusion>"
  done
  echo "</exclusions>"
}

pom() {
  cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/setup-hms.sh; only used to resolve the metastore's jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>floe.test</groupId>
  <artifactId>floe-hms-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.hive</groupId>
      <artifactId>hive-standalone-metastore-server</artifactId>
      <version>$HIVE_VERSION</version>
      $(exclusions_xml "com.microsoft.sqlserver:*" "com.oracle.database.jdbc:*" "com.mysql:*" \
          "org.mariadb.jdbc:*" "org.postgresql:*" "org.apache.datasketches:*" "org.apache.orc:*" \
          "org.pac4j:*" "com.nimbusds:*" "org.apache.hadoop:*")
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-common</artifactId>
      <version>$HADOOP_VERSION</version>
      $(exclusions_xml "${HADOOP_EXCLUSIONS[@]}")
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-hdfs-client</artifactId>
      <version>$HADOOP_VERSION</version>
      $(exclusions_xml "*:*")
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-hdfs</artifactId>
      <version>$HADOOP_VERSION</version>
      $(exclusions_xml "*:*")
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-mapreduce-client-core</artifactId>
      <version>$HADOOP_VERSION</version>
      $(exclusions_xml "*:*")
    </dependency>
    <dependency>
      <groupId>org.apache.derby</groupId>
      <artifactId>derby</artifactId>
      <version>$DERBY_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J2_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
}

settings() {
  cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors>
    <mirror><id>floe-maven</id><mirrorOf>*</mirrorOf><url>$MAVEN_REPO</url></mirror>
  </mirrors>
</settings>
EOF
}

BIN_TGZ_PATH="org/apache/hive/hive-standalone-metastore-server/$HIVE_VERSION/hive-standalone-metastore-server-$HIVE_VERSION-bin.tar.gz"
SCRIPTS_IN_TGZ="apache-hive-metastore-$HIVE_VERSION-bin/scripts/metastore/upgrade/derby"

fetch() {  # fetch URL DEST
  curl -fsSL --retry 3 --retry-delay 2 --connect-timeout 20 --max-time 600 -o "$2" "$1"
}

# --- Spark 3.5 client shim (see the usage above) ---------------------------------
spark_compat() {  # spark_compat SPARK_JARS_DIR
  local jars="$1" version="2.3.9" out dir src url stamp_want sha_want sha_got
  [[ -f "$jars/hive-metastore-$version.jar" ]] \
    || { echo "setup-hms.sh: $jars has no hive-metastore-$version.jar" >&2; exit 1; }
  command -v javac >/dev/null 2>&1 || { echo "setup-hms.sh: javac (a JDK) is not installed" >&2; exit 1; }
  command -v jar >/dev/null 2>&1 || { echo "setup-hms.sh: jar (a JDK) is not installed" >&2; exit 1; }
  dir="$HMS_HOME/spark-compat"
  out="$dir/hive-metastore-$version-hms4-compat.jar"
  stamp_want="$(sha1sum "$jars/hive-metastore-$version.jar" | cut -d' ' -f1) $(sha1sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)"
  if [[ -f "$out" && -f "$out.stamp" && "$(cat "$out.stamp")" == "$stamp_want" ]]; then
    echo "$out"
    return
  fi
  mkdir -p "$dir"
  work="$(mktemp -d "$dir/.build.XXXXXX")"  # global: the EXIT trap runs after return
  trap 'rm -rf "$work"' EXIT
  url="$MAVEN_REPO/org/apache/hive/hive-metastore/$version/hive-metastore-$version-sources.jar"
  fetch "$url.sha1" "$work/src.jar.sha1" || { echo "setup-hms.sh: could not download $url.sha1" >&2; exit 1; }
  fetch "$url" "$work/src.jar" || { echo "setup-hms.sh: could not download $url" >&2; exit 1; }
  sha_want="$(tr -d ' \r\n' <"$work/src.jar.sha1" | cut -c1-40)"
  sha_got="$(sha1sum "$work/src.jar" | cut -d' ' -f1)"
  [[ "$sha_got" == "$sha_want" ]] \
    || { echo "setup-hms.sh: SHA-1 mismatch for $url (want $sha_want, got $sha_got)" >&2; exit 1; }
  src="org/apache/hadoop/hive/metastore/HiveMetaStoreClient.java"
  (cd "$work" && unzip -q src.jar "$src") || { echo "setup-hms.sh: $url has no $src" >&2; exit 1; }
  # Three call sites; each substitution must match exactly once.
  perl -0777 -i -pe '
    my $n = 0;
    $n += s/client\.get_table\(dbname, name\)/client.get_table_req(new GetTableRequest(dbname, name)).getTable()/g;
    $n += s/client\.get_table\(databaseName, tableName\)/client.get_table_req(new GetTableRequest(databaseName, tableName)).getTable()/g;
    $n += s/List<Table> tabs = client\.get_table_objects_by_name\(dbName, tableNames\);/GetTablesRequest tablesReq = new GetTablesRequest(dbName);\n    tablesReq.setTblNames(tableNames);\n    List<Table> tabs = client.get_table_objects_by_name_req(tablesReq).getTables();/g;
    die "setup-hms.sh: expected 3 substitutions in HiveMetaStoreClient.java, made $n\n" unless $n == 3;
  ' "$work/$src"
  grep -q 'client\.get_table(' "$work/$src" && { echo "setup-hms.sh: get_table calls left in $src" >&2; exit 1; }
  mkdir -p "$work/classes"
  if ! javac -nowarn --release 8 -encoding UTF-8 -cp "$jars/*" -d "$work/classes" "$work/$src" >"$work/javac.log" 2>&1; then
    cat "$work/javac.log" >&2
    echo "setup-hms.sh: compiling the patched HiveMetaStoreClient failed" >&2
    exit 1
  fi
  jar cf "$work/compat.jar" -C "$work/classes" .
  mv -f "$work/compat.jar" "$out"
  echo "$stamp_want" >"$out.stamp"
  echo "$out"
}

if [[ $# -gt 0 ]]; then
  if [[ "$1" == "--spark-compat" && $# -eq 2 ]]; then
    spark_compat "$2"
    exit 0
  fi
  echo "usage: $0 [--spark-compat SPARK_JARS_DIR]" >&2
  exit 2
fi

want="$(pom | sha1sum | cut -d' ' -f1) $DEPENDENCY_PLUGIN_VERSION $MAVEN_REPO"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -d "$LIB" && -d "$HMS_HOME/scripts" ]]; then
  echo "$LIB"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || { echo "setup-hms.sh: mvn is not installed" >&2; exit 1; }
command -v curl >/dev/null 2>&1 || { echo "setup-hms.sh: curl is not installed" >&2; exit 1; }
command -v java >/dev/null 2>&1 || { echo "setup-hms.sh: java is not installed" >&2; exit 1; }

mkdir -p "$HMS_HOME"
rm -f "$STAMP"
WORK="$(mktemp -d "$HMS_HOME/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
pom >"$WORK/pom.xml"
settings >"$WORK/settings.xml"
LOG="$HMS_HOME/setup.log"
if ! mvn -B -q -f "$WORK/pom.xml" -s "$WORK/settings.xml" -Dmaven.repo.local="$WORK/repo" \
     "org.apache.maven.plugins:maven-dependency-plugin:$DEPENDENCY_PLUGIN_VERSION:copy-dependencies" \
     -DoutputDirectory="$WORK/lib" -DincludeScope=runtime >"$LOG" 2>&1; then
  echo "setup-hms.sh: resolving the metastore's jars failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi

url="$MAVEN_REPO/$BIN_TGZ_PATH"
fetch "$url.sha1" "$WORK/bin.tgz.sha1" || { echo "setup-hms.sh: could not download $url.sha1" >&2; exit 1; }
fetch "$url" "$WORK/bin.tgz" || { echo "setup-hms.sh: could not download $url" >&2; exit 1; }
sha_want="$(tr -d ' \r\n' <"$WORK/bin.tgz.sha1" | cut -c1-40)"
sha_got="$(sha1sum "$WORK/bin.tgz" | cut -d' ' -f1)"
if [[ "$sha_got" != "$sha_want" ]]; then
  echo "setup-hms.sh: SHA-1 mismatch for $url (want $sha_want, got $sha_got)" >&2
  exit 1
fi
tar -xzf "$WORK/bin.tgz" -C "$WORK" "$SCRIPTS_IN_TGZ" \
  || { echo "setup-hms.sh: $url has no $SCRIPTS_IN_TGZ" >&2; exit 1; }
rm -f "$WORK/bin.tgz"

rm -rf "$LIB" "$HMS_HOME/scripts"
mv "$WORK/lib" "$LIB"
mkdir -p "$HMS_HOME/scripts/metastore/upgrade"
mv "$WORK/$SCRIPTS_IN_TGZ" "$HMS_HOME/scripts/metastore/upgrade/derby"
echo "$want" >"$STAMP"
echo "$LIB"
