"""A real Debezium's change stream materializes in Floe as the source table: Debezium 3.6's
PostgreSQL connector (pgoutput, snapshot then streaming), run in Debezium's embedded engine by
tests/debezium/DebeziumCapture.java, captures a table of a fresh PostgreSQL cluster (a key of two
columns) through a snapshot, inserts, updates (one row changed twice in one transaction),
deletes, a key deleted and written again in one transaction, and an update of a primary key
value. Its records, turned into bytes by Kafka Connect's JsonConverter with
schemas enabled (a Connect worker's defaults), go to a Kafka topic in the order Debezium emitted
them, tombstones included; a Floe pipeline in debezium mode reads the topic, and Floe's SQL and
PyIceberg then read the table PostgreSQL holds, row for row.

A second table holds the types whose default encodings say nothing without Connect's `schema`:
`numeric` (Connect's Decimal: base64 of the unscaled bytes), `timestamp` (MicroTimestamp: epoch
microseconds) and `date` (days since the epoch). Floe reads the schema, so they land as decimal,
timestamp and date columns with their values, and every column has its source type and order.

Debezium comes from scripts/setup-debezium.sh (its jars and the compiled capture program;
FLOE_DEBEZIUM holds the lines it prints); PostgreSQL from scripts/start-postgres.sh, a cluster
of this module's own with logical decoding on."""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from conftest import IN_CI
from test_pipelines import broker  # noqa: F401 (the mock broker fixture)

ROOT = Path(__file__).resolve().parents[2]
TOPIC_PREFIX = "pg"

# Debezium's defaults but for where it keeps offsets (in memory: every run starts with a
# snapshot), its slot's name, and which tables it captures (and so publishes: `filtered`).
CONNECTOR = {
    "name": "floe-capture",
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "offset.storage": "org.apache.kafka.connect.storage.MemoryOffsetBackingStore",
    "database.user": "postgres",
    "database.password": "",
    "database.dbname": "floe",
    "topic.prefix": TOPIC_PREFIX,
    "plugin.name": "pgoutput",
    "snapshot.mode": "initial",
    "slot.name": "floe_capture",
    "publication.autocreate.mode": "filtered",
    "table.include.list": "public.accounts,public.readings",
}

# The source tables. `accounts` holds the types Floe reads from Debezium's JSON as they are;
# `readings` those Debezium encodes for Connect's schema to explain (numeric, timestamp, date).
SCHEMA = """
CREATE TABLE accounts (
    region text NOT NULL,
    id integer NOT NULL,
    name text,
    score double precision,
    active boolean,
    seen timestamptz,
    PRIMARY KEY (region, id)
);
CREATE TABLE readings (
    id integer PRIMARY KEY,
    amount numeric(12, 2),
    taken timestamp,
    day date
);
"""
ACCOUNT_COLUMNS = ["region", "id", "name", "score", "active", "seen"]
SNAPSHOT_ACCOUNTS = 40
READING_COLUMNS = ["id", "amount", "taken", "day"]


def debezium_install() -> dict[str, str]:
    """What scripts/setup-debezium.sh printed: java-home, classpath."""
    printed = os.environ.get("FLOE_DEBEZIUM")
    if not printed:
        if IN_CI:
            pytest.fail("FLOE_DEBEZIUM must be set in CI (scripts/setup-debezium.sh prints it)")
        pytest.skip("FLOE_DEBEZIUM is not set (scripts/setup-debezium.sh prints it)")
    return dict(line.split("=", 1) for line in printed.splitlines() if line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_postgres(folder: Path) -> tuple[str, int]:
    """A fresh cluster (logical decoding on) in `folder`: its URL and port."""
    port = free_port()
    started = subprocess.run([ROOT / "scripts" / "start-postgres.sh", folder, str(port)],
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    return started.stdout.strip(), port


def stop_postgres(folder: Path) -> None:
    pid_file = folder / "data" / "postmaster.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text().splitlines()[0])
    try:
        os.kill(pid, signal.SIGINT)  # fast shutdown
    except ProcessLookupError:
        return
    deadline = time.time() + 30
    while pid_file.exists() and time.time() < deadline:
        time.sleep(0.1)


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


class Changes:
    """Runs statements on the source and counts the change records Debezium owes for them:
    one per inserted or updated row, a delete and its tombstone per deleted row, and a delete,
    its tombstone and a create per row whose primary key changed."""

    PER_ROW = {"insert": 1, "update": 1, "delete": 2, "update-key": 3}

    def __init__(self, conn):
        self.conn = conn
        self.records = 0

    def run(self, kind: str, statement: str) -> None:
        cursor = self.conn.execute(statement)
        assert cursor.rowcount > 0, statement
        self.records += self.PER_ROW[kind] * cursor.rowcount


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Debezium's records of both tables, in the order it emitted them, and the tables'
    rows in PostgreSQL at the end."""
    import psycopg

    install = debezium_install()
    work = tmp_path_factory.mktemp("debezium")
    pg_dir = work / "pg"
    url, port = start_postgres(pg_dir)
    capture = None
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SCHEMA)
            # The snapshot: rows there before Debezium starts.
            conn.execute(f"""
                INSERT INTO accounts
                SELECT CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, i, 'name ' || i, i * 1.25,
                       i % 3 = 0, timestamptz '2024-05-01 10:00:00.123456+02' + i * interval '1 hour 1.5 s'
                FROM generate_series(1, {SNAPSHOT_ACCOUNTS}) AS i""")
            conn.execute("UPDATE accounts SET active = NULL, seen = NULL WHERE id = 7")
            conn.execute("""
                INSERT INTO readings VALUES
                (1, 12.50, '2024-05-01 10:00:00.123456', '1990-01-02'),
                (2, -0.05, '1999-12-31 23:59:59.999999', '2000-02-29'),
                (3, 99999.99, '2024-05-02 11:00:00', '2024-05-02')""")
            snapshot = conn.execute("SELECT (SELECT count(*) FROM accounts) + (SELECT count(*) FROM readings)").fetchone()[0]

            props = work / "connector.properties"
            settings = {**CONNECTOR, "database.hostname": "127.0.0.1", "database.port": str(port)}
            props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            out = work / "records.jsonl"
            with open(work / "capture.log", "wb") as log:
                # Stopped by closing its input once it has the records the statements owe.
                capture = subprocess.Popen(
                    [f"{install['java-home']}/bin/java", "-cp", install["classpath"], "DebeziumCapture",
                     str(props), str(out), "100000", "60000"],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)

            def wait_for_records(count: int, timeout: float) -> None:
                deadline = time.time() + timeout
                while lines_in(out) < count:
                    assert capture.poll() is None, (work / "capture.log").read_text()[-4000:]
                    assert time.time() < deadline, f"{lines_in(out)} of {count} records after {timeout} s"
                    time.sleep(0.2)

            # Debezium made its slot before reading the snapshot, so from here on every statement
            # reaches it as a change.
            wait_for_records(snapshot, 90)
            changes = Changes(conn)
            changes.run("insert", "INSERT INTO accounts SELECT 'eu', i, 'new ' || i, i / 8.0, true, "
                                  "timestamptz '2024-06-01 00:00:00Z' + i * interval '1 minute' FROM generate_series(100, 109) AS i")
            changes.run("update", "UPDATE accounts SET score = score * 2, seen = seen + interval '1 day' WHERE id % 5 = 0")
            changes.run("update", "UPDATE accounts SET name = NULL WHERE region = 'us' AND id = 9")
            changes.run("delete", "DELETE FROM accounts WHERE id IN (3, 4, 101)")
            # A new primary key value: Debezium emits a delete of the old key, its tombstone and
            # a create of the new one.
            changes.run("update-key", "UPDATE accounts SET id = 700 WHERE region = 'us' AND id = 7")
            with conn.transaction():
                # One non-key column changed twice in one transaction: the second value wins.
                changes.run("update", "UPDATE accounts SET name = 'first' WHERE region = 'eu' AND id = 2")
                changes.run("update", "UPDATE accounts SET name = 'second', score = -1.5 WHERE region = 'eu' AND id = 2")
            with conn.transaction():
                # A key deleted and written again in one transaction.
                changes.run("delete", "DELETE FROM accounts WHERE region = 'us' AND id = 11")
                changes.run("insert", "INSERT INTO accounts VALUES ('us', 11, 'again', 0.0, false, '2024-01-01 00:00:00Z')")
            changes.run("insert", "INSERT INTO readings VALUES (4, 0.01, '1970-01-01 00:00:00', '1970-01-01'), (5, 7, NULL, NULL)")
            changes.run("update", "UPDATE readings SET amount = 1234567.89, taken = '2030-06-15 12:34:56.5' WHERE id = 1")
            changes.run("delete", "DELETE FROM readings WHERE id = 2")
            expected = snapshot + changes.records
            wait_for_records(expected, 60)
            capture.stdin.close()
            assert capture.wait(timeout=60) == 0, (work / "capture.log").read_text()[-4000:]
            rows = {
                "accounts": conn.execute(f"SELECT {', '.join(ACCOUNT_COLUMNS)} FROM accounts ORDER BY region, id").fetchall(),
                "readings": conn.execute(f"SELECT {', '.join(READING_COLUMNS)} FROM readings ORDER BY id").fetchall(),
            }
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(records) == expected, f"{len(records)} records, {expected} expected"
    finally:
        if capture is not None and capture.poll() is None:
            capture.terminate()
            try:
                capture.wait(timeout=30)
            except subprocess.TimeoutExpired:
                capture.kill()
        stop_postgres(pg_dir)
    yield {"records": records, "rows": rows}


def records_of(captured, table: str) -> list[dict]:
    return [r for r in captured["records"] if r["topic"] == f"{TOPIC_PREFIX}.public.{table}"]


def payload(record: dict) -> dict | None:
    """A record value's Debezium event (None for a tombstone)."""
    return None if record["value"] is None else json.loads(record["value"])["payload"]


def key_of(record: dict) -> dict:
    return json.loads(record["key"])["payload"]


def run_pipeline(floe, broker, table: str, key: list[str], records: list[dict]) -> None:
    """A debezium-mode pipeline from topic `events` into cdc.<table>, and `records` produced to
    the topic's partition 0 as Kafka Connect would: key and value bytes as converted, in order."""
    from test_pipelines import spec

    floe.pyiceberg().create_namespace("cdc")
    body = {**spec(floe, broker), "name": table, "namespace": ["cdc"], "table": table, "mode": "debezium", "key": key}
    created = floe.api("POST", "/api/v1/pipelines", json=body)
    assert created.status_code == 201, created.text
    producer = Producer({"bootstrap.servers": broker})
    for record in records:
        producer.produce("events", partition=0,
                         key=None if record["key"] is None else record["key"].encode(),
                         value=None if record["value"] is None else record["value"].encode())
    producer.flush()


def committed_offset(floe, table: str) -> int:
    """The next offset of `events` partition 0 that cdc.<table>'s snapshot summary carries."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        snapshot = floe.pyiceberg().load_table(f"cdc.{table}").current_snapshot()
    except NoSuchTableError:
        return -1
    return -1 if snapshot is None else int(snapshot.summary.additional_properties.get(f"floe.source.{table}.events.0", -1))


def floe_accounts(floe) -> list[tuple]:
    statement = f"SELECT {', '.join(ACCOUNT_COLUMNS)} FROM cdc.accounts ORDER BY region, id"
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    if answer.status_code != 200:
        return []
    rows = []
    for row in answer.json()["rows"]:
        seen = row["seen"] and datetime.datetime.fromisoformat(row["seen"])
        rows.append((row["region"], row["id"], row["name"], row["score"], row["active"], seen))
    return rows


def test_a_debezium_postgres_stream_materializes_as_the_source_table(captured, floe, broker):
    records = records_of(captured, "accounts")
    events = [payload(r) for r in records]
    # What Debezium 3.6 emitted: the snapshot's reads, then creates, updates and deletes, each
    # delete followed by its tombstone (same key, no value); the primary key update as a delete
    # of the old key, its tombstone and a create of the new key.
    assert {e["source"]["connector"] for e in events if e} == {"postgresql"}
    assert {e["source"]["version"] for e in events if e} == {"3.6.1.Final"}
    ops = [e and e["op"] for e in events]
    assert ops[:SNAPSHOT_ACCOUNTS] == ["r"] * SNAPSHOT_ACCOUNTS, ops
    assert set(ops[SNAPSHOT_ACCOUNTS:]) == {"c", "u", "d", None}, ops
    for i, op in enumerate(ops):
        if op == "d":
            assert ops[i + 1] is None and key_of(records[i + 1]) == key_of(records[i])
    moved = next(i for i, op in enumerate(ops) if op == "d" and key_of(records[i]) == {"region": "us", "id": 7})
    assert ops[moved:moved + 3] == ["d", None, "c"]
    assert key_of(records[moved + 2]) == {"region": "us", "id": 700}

    run_pipeline(floe, broker, "accounts", ["region", "id"], records)
    expected = captured["rows"]["accounts"]
    deadline = time.time() + 60
    while committed_offset(floe, "accounts") != len(records) or (seen := floe_accounts(floe)) != expected:
        assert time.time() < deadline, (committed_offset(floe, "accounts"), len(records),
                                        floe_accounts(floe)[:10], expected[:10])
        time.sleep(0.3)
    assert seen == expected

    table = floe.pyiceberg().load_table("cdc.accounts")
    read = sorted(tuple(r[c] for c in ACCOUNT_COLUMNS) for r in table.scan().to_arrow().to_pylist())
    assert read == expected
    schema = table.schema()
    # The row's columns, typed and ordered as Connect's schema says (the source table's).
    assert [(f.name, str(f.field_type)) for f in schema.fields] == [
        ("region", "string"), ("id", "int"), ("name", "string"), ("score", "double"), ("active", "boolean"),
        ("seen", "timestamptz"),
    ]
    assert sorted(schema.find_column_name(i) for i in schema.identifier_field_ids) == ["id", "region"]
    assert table.properties.get("write.upsert.enabled") == "true"
    status = floe.api("GET", "/api/v1/pipelines/accounts/status").json()
    assert status["stats"]["dead-letters"] == 0, status


# Debezium's defaults encode these types in forms that say nothing without Kafka Connect's
# `schema` (which names the logical type), e.g. for readings row 1 (12.50,
# '2024-05-01 10:00:00.123456', '1990-01-02'):
#   amount numeric(12,2): {"type":"bytes","name":"org.apache.kafka.connect.data.Decimal",
#       "parameters":{"scale":"2","connect.decimal.precision":"12"}}, payload "BOI=" (base64 of
#       the unscaled value 1250)
#   taken timestamp: {"type":"int64","name":"io.debezium.time.MicroTimestamp"}, payload
#       1714557600123456
#   day date: {"type":"int32","name":"io.debezium.time.Date"}, payload 7306
# Floe reads the schema: decimal(12,2), timestamp and date columns holding those values.
def test_debezium_numeric_timestamp_and_date_keep_their_values(captured, floe, broker):
    records = records_of(captured, "readings")
    run_pipeline(floe, broker, "readings", ["id"], records)
    deadline = time.time() + 60
    while committed_offset(floe, "readings") != len(records):
        assert time.time() < deadline, (committed_offset(floe, "readings"), len(records))
        time.sleep(0.3)
    table = floe.pyiceberg().load_table("cdc.readings")
    read = sorted(tuple(r[c] for c in READING_COLUMNS) for r in table.scan().to_arrow().to_pylist())
    expected = captured["rows"]["readings"]
    assert read == expected
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types == {"id": "int", "amount": "decimal(12, 2)", "taken": "timestamp", "day": "date"}, types
