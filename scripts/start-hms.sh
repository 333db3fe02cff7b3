#!/usr/bin/env bash
# Start a throwaway Apache Hive Metastore (standalone HMS 4.0.1) for tests.
#
# Usage: scripts/start-hms.sh DIR PORT
#   Serves Thrift on 127.0.0.1:PORT (binary transport, no SASL/auth) in the
#   background, backed by an embedded Derby database in DIR/metastore_db (created
#   with the metastore's schema tool on first start, then reused), default
#   warehouse file:DIR/warehouse (managed and external tables alike); waits until
#   the port accepts connections, then prints the URI: thrift://127.0.0.1:PORT
#   Config: DIR/conf/metastore-site.xml. Log: DIR/hms.log (schema tool:
#   DIR/schematool.log). PID in DIR/hms.pid; stop it with `kill $(cat DIR/hms.pid)`.
#   Running it again while that server is up just prints the URI.
#   FLOE_HMS_JAVA_OPTS: heap and other JVM options (default: -Xmx512m).
#   Jars come from scripts/setup-hms.sh (FLOE_HMS_HOME, FLOE_MAVEN_REPO).
#   Takes ~11 s on first start (schema creation), ~4.5 s later; ~230 MB RSS.
#
# HMS 4 behaviour that clients see (defaults, deliberately left on):
#   - the Thrift methods get_table and get_table_objects_by_name are gone
#     (HIVE-26537): use get_table_req / get_table_objects_by_name_req. Spark 3.5's
#     built-in Hive 2.3.9 client needs `scripts/setup-hms.sh --spark-compat`.
#   - MANAGED_TABLE creations from clients that send no capabilities (Spark,
#     Iceberg) are stored as EXTERNAL_TABLE with EXTERNAL=TRUE,
#     TRANSLATED_TO_EXTERNAL=TRUE and external.table.purge=TRUE.
set -euo pipefail

START_TIMEOUT=120

if [[ $# -ne 2 ]]; then
  echo "usage: $0 DIR PORT" >&2
  exit 2
fi
PORT="$2"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "start-hms.sh: bad port '$PORT'" >&2; exit 2; }
mkdir -p "$1"
DIR="$(cd "$1" && pwd -P)"
LOGFILE="$DIR/hms.log"
PIDFILE="$DIR/hms.pid"
CONF="$DIR/conf"
DB="$DIR/metastore_db"
WAREHOUSE="$DIR/warehouse"
URI="thrift://127.0.0.1:$PORT"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIB="$("$HERE/setup-hms.sh")"
HMS_HOME="$(dirname "$LIB")"

fail() {
  echo "start-hms.sh: $1" >&2
  [[ -f "$LOGFILE" ]] && tail -n 40 "$LOGFILE" >&2
  exit 1
}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

if [[ -f "$PIDFILE" ]]; then
  pid="$(cat "$PIDFILE")"
  if kill -0 "$pid" 2>/dev/null && listening; then
    echo "$URI"
    exit 0
  fi
  # A stale server (or one that is still dying): stop it so it frees Derby's lock.
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"
fi
listening && fail "something else already listens on 127.0.0.1:$PORT"

mkdir -p "$CONF" "$WAREHOUSE"

xml_prop() { printf '  <property><name>%s</name><value>%s</value></property>\n' "$1" "$2"; }
{
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo '<!-- Written by scripts/start-hms.sh; rewritten at each start. -->'
  echo '<configuration>'
  xml_prop javax.jdo.option.ConnectionURL "jdbc:derby:;databaseName=$DB;create=true"
  xml_prop javax.jdo.option.ConnectionDriverName org.apache.derby.jdbc.EmbeddedDriver
  xml_prop javax.jdo.option.ConnectionUserName APP
  xml_prop javax.jdo.option.ConnectionPassword mine
  xml_prop metastore.thrift.bind.host 127.0.0.1
  xml_prop metastore.thrift.port "$PORT"
  xml_prop metastore.thrift.uris "$URI"
  xml_prop metastore.warehouse.dir "file:$WAREHOUSE"
  # No metastore.warehouse.external.dir: with it set, HMS 4 rejects EXTERNAL
  # tables (e.g. Iceberg's) located under the managed root, and databases and
  # external tables would default to a second tree.
  # The schema tool creates every table (incl. the ACID/notification ones);
  # the server checks the recorded version instead of creating tables.
  xml_prop metastore.schema.verification true
  xml_prop datanucleus.schema.autoCreateAll false
  xml_prop metastore.expression.proxy org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy
  xml_prop metastore.task.threads.always org.apache.hadoop.hive.metastore.events.EventCleanerTask
  # No authorization of notification-log reads (Spark/Iceberg clients are anonymous).
  xml_prop hive.metastore.event.db.notification.api.auth false
  echo '</configuration>'
} >"$CONF/metastore-site.xml"

cat >"$CONF/metastore-log4j2.properties" <<'EOF'
# Written by scripts/start-hms.sh: everything to stdout, which goes to DIR/hms.log.
status = WARN
name = FloeHms
appenders = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_OUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %5p [%t] %c{2}: %m%n
loggers = DataNucleus, Datastore, JPOX
logger.DataNucleus.name = DataNucleus
logger.DataNucleus.level = ERROR
logger.Datastore.name = Datastore
logger.Datastore.level = ERROR
logger.JPOX.name = JPOX
logger.JPOX.level = ERROR
rootLogger.level = INFO
rootLogger.appenderRefs = root
rootLogger.appenderRef.root.ref = console
EOF

# Java 17: Hive 4 and Hadoop still reach into JDK internals.
JAVA_OPTS=(
  ${FLOE_HMS_JAVA_OPTS:--Xmx512m}
  -XX:+UseSerialGC -XX:TieredStopAtLevel=1
  -Djava.net.preferIPv4Stack=true
  -Dlog4j.configurationFile="$CONF/metastore-log4j2.properties"
  -Dderby.stream.error.file="$DIR/derby.log"
  --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
)
CP="$CONF:$LIB/*"
export METASTORE_HOME="$HMS_HOME"  # the schema tool reads its scripts from here
export HADOOP_USER_NAME="${HADOOP_USER_NAME:-$(id -un)}"
cd "$DIR"

# First start: create the schema (the tool also refuses to run on an existing one).
if [[ ! -f "$DB/service.properties" ]]; then
  rm -rf "$DB"
  if ! java "${JAVA_OPTS[@]}" -cp "$CP" org.apache.hadoop.hive.metastore.tools.schematool.MetastoreSchemaTool \
       -initSchema -dbType derby >"$DIR/schematool.log" 2>&1; then
    rm -rf "$DB"
    tail -n 40 "$DIR/schematool.log" >&2
    fail "the schema tool failed (log: $DIR/schematool.log)"
  fi
fi

setsid nohup java "${JAVA_OPTS[@]}" -Dproc_metastore -cp "$CP" \
  org.apache.hadoop.hive.metastore.HiveMetaStore -p "$PORT" >"$LOGFILE" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$PIDFILE"
for _ in $(seq 1 $((START_TIMEOUT * 5))); do
  listening && break
  kill -0 "$pid" 2>/dev/null || fail "the metastore exited during startup (log: $LOGFILE)"
  sleep 0.2
done
listening || { kill "$pid" 2>/dev/null || true; fail "the metastore did not listen on 127.0.0.1:$PORT within ${START_TIMEOUT}s"; }

echo "$URI"
