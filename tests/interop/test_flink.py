"""Apache Flink 2.0 (PyFlink, with Iceberg's Flink runtime 1.10.1) on Floe's REST catalog with
OAuth2 client credentials: Flink SQL creates a namespace and tables; a streaming INSERT commits a
snapshot per checkpoint; an upsert table (Iceberg v2 equality deletes, the way Flink writes CDC)
reads back as the latest row per key in Floe's SQL, DuckDB and Spark, and in PyIceberg once
Floe's compaction has applied the deletes; Floe compacts an append table and an upsert table while
a Flink job keeps writing to both, and Flink's next checkpoint commits on top of each compaction.

Flink comes from scripts/setup-flink.sh (a venv of its own and three jars; FLOE_FLINK holds the
lines it prints). Each test runs one PyFlink program (FLINK_PROGRAM) in that venv while this side
watches through Floe's catalog, SQL and maintenance APIs, PyIceberg and Spark."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from conftest import IN_CI, start_floe, stop_floe
from test_compaction import run_job
from test_duckdb import attach
from test_governance import make_principal

pytestmark = pytest.mark.flink

# The Flink side, run by the Flink venv's python with a job file: one local mini-cluster,
# parallelism 1, a checkpoint every second. Each step runs to its end: {"sql"} a statement;
# {"sql", "refused"} one expected to fail (reports the error); {"query"} reports its rows;
# {"changelog", "columns", "rows"} writes rows with their kinds (+I, +U, -D) into a table, as a
# CDC source does.
FLINK_PROGRAM = r'''
import json
import sys

from pyflink.common import Configuration, Row, RowKind, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment

job = json.load(open(sys.argv[1]))
config = Configuration()
config.set_string("pipeline.jars", job["pipeline-jars"])
config.set_string("parallelism.default", "1")
config.set_string("execution.checkpointing.interval", "1 s")
env = StreamExecutionEnvironment.get_execution_environment(config)
tables = StreamTableEnvironment.create(env)
# A changelog stream has no key of its own, so Flink would put a materializer before the sink,
# and it drops deletes of keys this job never wrote. The table's key is all Iceberg needs.
tables.get_config().set("table.exec.sink.upsert-materialize", "NONE")
KINDS = {"+I": RowKind.INSERT, "+U": RowKind.UPDATE_AFTER, "-D": RowKind.DELETE}
TYPES = {"BIGINT": Types.LONG(), "STRING": Types.STRING(), "DOUBLE": Types.DOUBLE()}


def report(value):
    print("RESULT " + json.dumps(value), flush=True)


for step in job["steps"]:
    if "query" in step:
        with tables.execute_sql(step["query"]).collect() as rows:
            report([list(row) for row in rows])
    elif "changelog" in step:
        rows = []
        for kind, *values in step["rows"]:
            row = Row(*values)
            row.set_row_kind(KINDS[kind])
            rows.append(row)
        names = [name for name, _ in step["columns"]]
        types = [TYPES[kind] for _, kind in step["columns"]]
        stream = env.from_collection(rows, type_info=Types.ROW_NAMED(names, types))
        tables.from_changelog_stream(stream).execute_insert(step["changelog"]).wait()
    elif step.get("refused"):
        try:
            tables.execute_sql(step["sql"]).wait()
            report(None)
        except Exception as error:
            report(str(error))
    else:
        tables.execute_sql(step["sql"]).wait()
'''

CHECKPOINT = "flink.max-committed-checkpoint-id"


def flink_install() -> dict[str, str]:
    """What scripts/setup-flink.sh printed: python, pipeline-jars, hadoop-classpath, java-home."""
    printed = os.environ.get("FLOE_FLINK")
    if not printed:
        if IN_CI:
            pytest.fail("FLOE_FLINK must be set in CI (scripts/setup-flink.sh prints it)")
        pytest.skip("FLOE_FLINK is not set (scripts/setup-flink.sh prints it)")
    return dict(line.split("=", 1) for line in printed.splitlines() if line)


class Flink:
    """Runs FLINK_PROGRAM against Floe, with the catalog `floe` created first."""

    def __init__(self, install: dict[str, str], floe, credential: str, tmp):
        self.install = install
        self.floe = floe
        self.credential = credential
        self.tmp = tmp
        self.runs = 0
        (tmp / "flink_program.py").write_text(FLINK_PROGRAM)

    def catalog_ddl(self, name: str = "floe", credential: str | None = None) -> str:
        return f"""CREATE CATALOG {name} WITH (
            'type'='iceberg', 'catalog-type'='rest', 'uri'='{self.floe.catalog_uri}',
            'warehouse'='{self.floe.warehouse}', 'rest.auth.type'='oauth2',
            'credential'='{credential or self.credential}', 'oauth2-server-uri'='{self.floe.token_uri}',
            'scope'='catalog')"""

    def start(self, *steps: dict) -> subprocess.Popen:
        self.runs += 1
        job = self.tmp / f"job-{self.runs}.json"
        job.write_text(json.dumps({
            "pipeline-jars": f"file://{self.install['pipeline-jars']}",
            "steps": [{"sql": self.catalog_ddl()}, *steps],
        }))
        env = dict(
            os.environ,
            JAVA_HOME=self.install["java-home"],
            # PyFlink puts these on the JVM's class path; from pipeline.jars, Iceberg's catalog
            # would not find Hadoop's classes.
            HADOOP_CLASSPATH=self.install["hadoop-classpath"],
            JVM_ARGS="-Xmx1g",
            FLINK_LOG_DIR=str(self.tmp),
        )
        env.pop("PYTHONPATH", None)
        with open(self.log(), "wb") as log:
            return subprocess.Popen(
                [self.install["python"], str(self.tmp / "flink_program.py"), str(job)],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )

    def log(self):
        return self.tmp / f"job-{self.runs}.log"

    def finish(self, process: subprocess.Popen) -> list:
        """Waits for the program; what its steps reported."""
        try:
            process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        text = self.log().read_text(errors="replace")
        assert process.returncode == 0, f"PyFlink failed:\n{text[-6000:]}"
        return [json.loads(line[len("RESULT "):]) for line in text.splitlines() if line.startswith("RESULT ")]

    def run(self, *steps: dict) -> list:
        return self.finish(self.start(*steps))


@pytest.fixture(scope="module")
def flink_floe(tmp_path_factory):
    install = flink_install()
    floe = start_floe(tmp_path_factory.mktemp("flink-floe"))
    # Only requested compactions: none queued by Flink's many small commits.
    quiet = {"on": {"type": "warehouse", "warehouse": floe.warehouse}, "policy": {"small-file-trigger": 1000}}
    assert floe.api("PUT", "/api/v1/maintenance/policies", json=quiet).status_code == 200
    # Flink signs in as a service principal of its own, holding what a writer needs.
    on_warehouse = {"type": "warehouse", "warehouse": floe.warehouse}
    client_id, secret = make_principal(floe, "flink", [
        (privilege, on_warehouse)
        for privilege in ("create-namespace", "list-namespaces", "create-table", "list-tables", "write-data")
    ])
    yield Flink(install, floe, f"{client_id}:{secret}", tmp_path_factory.mktemp("flink")), floe
    stop_floe(floe)


def floe_rows(floe, sql: str) -> list[list]:
    answer = floe.api("POST", "/api/v1/sql", json={"sql": sql, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return [list(r.values()) for r in answer.json()["rows"]]


def table_metadata(floe, namespace: str, table: str) -> dict:
    answer = floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces/{namespace}/tables/{table}")
    assert answer.status_code == 200, answer.text
    return answer.json()["metadata"]


def history(metadata: dict) -> list[dict]:
    """The current snapshot and its ancestors, oldest first."""
    by_id = {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}
    chain, current = [], metadata.get("current-snapshot-id")
    while current in by_id:
        chain.append(by_id[current])
        current = by_id[current].get("parent-snapshot-id")
    return chain[::-1]


def test_flink_creates_tables_and_its_streaming_insert_commits_every_checkpoint(flink_floe):
    flink, floe = flink_floe
    refused, read_back = flink.run(
        {"sql": flink.catalog_ddl("stranger", "flink-impostor:not-a-secret"), "refused": True},
        {"sql": "CREATE DATABASE floe.fl"},
        {"sql": "CREATE TABLE floe.fl.events (id BIGINT, kind STRING, payload STRING) PARTITIONED BY (kind)"},
        # 300 rows at 60 a second: about five checkpoints' worth.
        {"sql": """CREATE TEMPORARY TABLE gen (id BIGINT, payload STRING) WITH ('connector'='datagen',
                   'rows-per-second'='60', 'fields.id.kind'='sequence', 'fields.id.start'='1',
                   'fields.id.end'='300', 'fields.payload.length'='8')"""},
        {"sql": """INSERT INTO floe.fl.events
                   SELECT id, CASE WHEN id % 2 = 0 THEN 'even' ELSE 'odd' END, payload FROM gen"""},
        {"query": "SELECT id, kind FROM floe.fl.events"},
    )
    # The credentials are checked: Floe's token endpoint refuses a wrong client.
    assert refused is not None and "NotAuthorizedException" in refused, refused

    # Floe's catalog sees what Flink created, partition spec included.
    assert ["fl"] in floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces").json()["namespaces"]
    listed = floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces/fl/tables").json()
    assert [i["name"] for i in listed["identifiers"]] == ["events"]
    metadata = table_metadata(floe, "fl", "events")
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    assert [f["name"] for f in schema["fields"]] == ["id", "kind", "payload"]
    spec = next(s for s in metadata["partition-specs"] if s["spec-id"] == metadata["default-spec-id"])
    assert [(f["name"], f["transform"]) for f in spec["fields"]] == [("kind", "identity")]

    # One append per checkpoint, each naming the checkpoint it committed.
    snapshots = history(metadata)
    assert len(snapshots) >= 2, snapshots
    assert all(s["summary"]["operation"] == "append" for s in snapshots)
    assert all(s["summary"]["engine-name"] == "flink" for s in snapshots)
    checkpoints = [int(s["summary"][CHECKPOINT]) for s in snapshots]
    assert checkpoints == sorted(set(checkpoints)), checkpoints
    assert len({s["summary"]["flink.job-id"] for s in snapshots}) == 1
    assert snapshots[-1]["summary"]["total-records"] == "300"

    # Every row arrived once, as Floe's SQL and Flink's own read see it.
    assert floe_rows(floe, "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM fl.events") == [[300, 300, 1, 300]]
    assert floe_rows(floe, "SELECT kind, count(*) FROM fl.events GROUP BY kind ORDER BY kind") == [["even", 150], ["odd", 150]]
    assert sorted(read_back) == [[i, "even" if i % 2 == 0 else "odd"] for i in range(1, 301)]

    # Each commit was Flink's principal's, as Floe's audit trail records it.
    commit = "POST /catalog/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    records = floe.api("GET", "/api/v1/audit?principal=flink&limit=1000").json()["records"]
    commits = [r for r in records if r["action"] == commit and r["status"] == 200
               and r["resource"].endswith("/namespaces/fl/tables/events")]
    assert len(commits) == len(snapshots), records


def spark_session(floe):
    jars = os.environ.get("FLOE_SPARK_JARS")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[1]")
        .appName("floe-flink-interop")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.catalog.floe", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.floe.type", "rest")
        .config("spark.sql.catalog.floe.uri", floe.catalog_uri)
        .config("spark.sql.catalog.floe.warehouse", floe.warehouse)
        .config("spark.sql.catalog.floe.credential", floe.client_properties()["credential"])
        .config("spark.sql.catalog.floe.oauth2-server-uri", floe.token_uri)
        # Read the table as it is now, after Floe's compaction too.
        .config("spark.sql.catalog.floe.cache-enabled", "false")
        .getOrCreate()
    )


@pytest.mark.spark
def test_flinks_upserts_read_back_as_the_latest_row_per_key(flink_floe):
    flink, floe = flink_floe
    if not os.environ.get("FLOE_SPARK_JARS"):
        if IN_CI:
            pytest.fail("FLOE_SPARK_JARS must be set in CI (scripts/setup-spark.sh prints it)")
        pytest.skip("FLOE_SPARK_JARS is not set")
    columns = [["id", "BIGINT"], ["owner", "STRING"], ["balance", "DOUBLE"]]
    (read_back,) = flink.run(
        {"sql": "CREATE DATABASE floe.cdc"},
        {"sql": """CREATE TABLE floe.cdc.accounts (id BIGINT, owner STRING, balance DOUBLE,
                   PRIMARY KEY (id) NOT ENFORCED) WITH ('format-version'='2', 'write.upsert.enabled'='true')"""},
        {"sql": "INSERT INTO floe.cdc.accounts VALUES (1, 'ana', 10.0), (2, 'bo', 20.0), (3, 'cy', 30.0), (4, 'di', 40.0)"},
        # Upserts: key 2 gets a new balance, key 5 is new.
        {"sql": "INSERT INTO floe.cdc.accounts VALUES (2, 'bo', 25.0), (5, 'ed', 50.0)"},
        # A changelog as CDC sends it: a delete, an update, and a key inserted then updated
        # within one checkpoint.
        {"changelog": "floe.cdc.accounts", "columns": columns, "rows": [
            ["-D", 3, "cy", 30.0], ["+U", 1, "ana", 15.0], ["+I", 6, "fa", 60.0], ["+U", 6, "fa", 65.0],
        ]},
        {"query": "SELECT id, owner, balance FROM floe.cdc.accounts"},
    )
    expected = [[1, "ana", 15.0], [2, "bo", 25.0], [4, "di", 40.0], [5, "ed", 50.0], [6, "fa", 65.0]]
    assert sorted(read_back) == expected

    # Flink wrote equality deletes by key (a key an earlier commit wrote) and a position delete
    # (key 6, written and rewritten within one checkpoint); no data file was rewritten.
    metadata = table_metadata(floe, "cdc", "accounts")
    assert metadata["format-version"] == 2
    snapshots = history(metadata)
    assert [s["summary"]["operation"] for s in snapshots] == ["overwrite"] * 3
    summary = snapshots[-1]["summary"]
    assert int(summary["total-equality-deletes"]) >= 3 and int(summary["total-position-deletes"]) >= 1, summary
    files = dict(floe_rows(floe, 'SELECT content, count(*) FROM cdc."accounts$files" GROUP BY content'))
    assert files[0] == 3 and files[2] >= 3 and files.get(1, 0) >= 1, files

    # Floe's SQL, DuckDB (when the key column is read) and Spark apply them.
    query = "SELECT id, owner, balance FROM cdc.accounts ORDER BY id"
    in_catalog = query.replace("cdc.", "floe.cdc.")  # DuckDB's and Spark's name for it
    assert floe_rows(floe, query) == expected
    assert [list(r) for r in attach(floe).execute(in_catalog).fetchall()] == expected
    spark = spark_session(floe)
    try:
        assert [list(r) for r in spark.sql(in_catalog).collect()] == expected

        # PyIceberg 0.12 cannot apply equality deletes, and says so rather than answer wrongly.
        table = floe.pyiceberg().load_table("cdc.accounts")
        with pytest.raises(ValueError, match="equality deletes"):
            table.scan().to_arrow()

        # Floe's compaction applies every delete: a replace snapshot with no delete files left.
        result = run_job(floe, "cdc", "accounts", "compact")
        assert result["groups-committed"] == 1 and result["rows-written"] == len(expected), result
        assert result["removed-delete-files"] == files[2] + files.get(1, 0), result
        summary = history(table_metadata(floe, "cdc", "accounts"))[-1]["summary"]
        assert summary["operation"] == "replace" and summary["total-delete-files"] == "0", summary

        table = floe.pyiceberg().load_table("cdc.accounts")
        arrow = table.scan(selected_fields=("id", "owner", "balance")).to_arrow().sort_by("id")
        assert [list(r.values()) for r in arrow.to_pylist()] == expected
        assert floe_rows(floe, query) == expected
        assert [list(r) for r in spark.sql(in_catalog).collect()] == expected
    finally:
        spark.stop()


def compaction_that_commits(floe, namespace: str, table: str) -> dict:
    """Floe leaves a group for a later run when a delete committed meanwhile may apply to its
    files, which an upsert writer committing every second can cause: ask again, a few times."""
    for _ in range(5):
        result = run_job(floe, namespace, table, "compact")
        if result["groups-committed"]:
            return result
    pytest.fail(f"no compaction of {namespace}.{table} committed: {result}")


def test_floe_compacts_while_flink_writes_and_flinks_next_checkpoint_commits(flink_floe):
    flink, floe = flink_floe
    # One job, one source of 500 rows at 25 a second (about 20 checkpoints), two tables: every
    # row appended to `clicks`, and upserted into `latest` by id % 50 (the newest id per key).
    job = flink.start(
        {"sql": "CREATE DATABASE floe.busy"},
        {"sql": "CREATE TABLE floe.busy.clicks (id BIGINT, page STRING)"},
        {"sql": """CREATE TABLE floe.busy.latest (k BIGINT, id BIGINT, PRIMARY KEY (k) NOT ENFORCED)
                   WITH ('format-version'='2', 'write.upsert.enabled'='true')"""},
        {"sql": """CREATE TEMPORARY TABLE gen (id BIGINT, page STRING) WITH ('connector'='datagen',
                   'rows-per-second'='25', 'fields.id.kind'='sequence', 'fields.id.start'='1',
                   'fields.id.end'='500', 'fields.page.length'='6')"""},
        {"sql": """EXECUTE STATEMENT SET BEGIN
                   INSERT INTO floe.busy.clicks SELECT id, page FROM gen;
                   INSERT INTO floe.busy.latest SELECT id % 50, id FROM gen;
                   END"""},
    )
    compactions = {}
    try:
        # A few checkpoints in: several small files in each table.
        deadline = time.time() + 180
        for table in ("clicks", "latest"):
            while True:
                answer = floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces/busy/tables/{table}")
                if answer.status_code == 200 and len(history(answer.json()["metadata"])) >= 3:
                    break
                assert job.poll() is None, flink.log().read_text(errors="replace")[-6000:]
                assert time.time() < deadline, f"Flink committed no three checkpoints to {table} in time"
                time.sleep(0.2)
        for table in ("clicks", "latest"):
            compactions[table] = compaction_that_commits(floe, "busy", table)
            assert compactions[table]["rewritten-files"] >= 3, compactions[table]
        assert job.poll() is None, "the Flink job ended before the compactions committed"
    except BaseException:
        job.kill()
        raise
    flink.finish(job)

    for table, result in compactions.items():
        snapshots = history(table_metadata(floe, "busy", table))
        ids = [s["snapshot-id"] for s in snapshots]
        assert result["snapshot-id"] in ids, f"{table}: the compaction is not an ancestor of the current snapshot"
        at = ids.index(result["snapshot-id"])
        assert snapshots[at]["summary"]["operation"] == "replace"
        flinks = [s for s in snapshots if s["summary"]["operation"] != "replace"]
        assert all(s["summary"]["flink.job-id"] == flinks[0]["summary"]["flink.job-id"] for s in flinks), table
        # Flink's next checkpoint committed on top of the compaction, and every one after it.
        before, after = snapshots[:at], snapshots[at + 1:]
        assert after, f"{table}: Flink committed nothing after the compaction"
        assert after[0]["parent-snapshot-id"] == result["snapshot-id"]
        checkpoints = [int(s["summary"][CHECKPOINT]) for s in flinks]
        assert checkpoints == sorted(set(checkpoints)), (table, checkpoints)
        assert int(after[0]["summary"][CHECKPOINT]) > int(before[-1]["summary"][CHECKPOINT])

    # Every row once: nothing lost to the compactions, nothing committed twice, and every key
    # holds its newest id (an upsert the compaction raced is not undone).
    assert floe_rows(floe, "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM busy.clicks") == [[500, 500, 1, 500]]
    assert floe_rows(floe, "SELECT k, id FROM busy.latest ORDER BY k") == [[k, 450 + k if k else 500] for k in range(50)]


def test_flink_reads_floes_upsert_table_as_the_newest_row_per_key(flink_floe):
    """Floe's upserts (issue 39: data files plus position deletes in one snapshot, format v2)
    read back by Flink's Iceberg source as the newest row per key."""
    from test_upsert import keyed_table, upsert

    flink, floe = flink_floe
    catalog = floe.pyiceberg()
    catalog.create_namespace("flup")
    keyed_table(floe, "flup.users")
    upsert(floe, "flup.users", [{"id": i, "name": f"n{i}", "score": i} for i in range(6)])
    upsert(floe, "flup.users", [{"id": 1, "name": "one", "score": 10}, {"id": 7, "name": "n7", "score": 7}])
    upsert(floe, "flup.users", [{"id": 2}, {"id": 7}], op="delete")
    expected = sorted([[i, {1: "one"}.get(i, f"n{i}"), {1: 10}.get(i, i)] for i in range(6) if i != 2])
    assert floe_rows(floe, "SELECT id, name, score FROM flup.users ORDER BY id") == expected
    [read] = flink.run({"query": "SELECT id, name, score FROM floe.flup.users"})
    assert sorted(read) == expected
