"""Upsert tables (issue 39): a table with a key takes rows that replace the rows of their keys
and deletes by key, committed as data files plus position deletes in one snapshot. Floe's SQL,
PyIceberg and DuckDB read the newest row per key; the key index survives a restart (caught up
from its checkpoint), another writer's commits and a compaction (caught up from the snapshot it
described), and a damaged checkpoint (built again from the table); bad requests are refused by
name."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import pytest
from confluent_kafka import Producer
from conftest import restart_floe, start_floe, stop_floe
from test_compaction import run_job
from test_ingest import ndjson, post
from test_pipelines import broker  # noqa: F401 (the mock broker fixture)

NDJSON = "application/x-ndjson"


def upsert(floe, table: str, rows: list[dict], **params):
    answer = post(floe, table, ndjson(rows), NDJSON, wait="commit", **params)
    assert answer.status_code == 200, answer.text
    assert answer.json()["committed"] is True, answer.text
    return answer


def keyed_table(floe, name: str, format_version: str = "2"):
    """An upsert table `name` (key `id`; `name` and `score` columns) made through PyIceberg."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    keyed = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "score", LongType(), required=False),
        identifier_field_ids=[1],
    )
    properties = {"format-version": format_version, "write.upsert.enabled": "true"}
    return floe.pyiceberg().create_table(name, schema=keyed, properties=properties)


def floe_rows(floe, table: str) -> list[tuple]:
    statement = f"SELECT id, name, score FROM {table} ORDER BY id"
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return [(r["id"], r["name"], r["score"]) for r in answer.json()["rows"]]


def pyiceberg_rows(floe, table: str) -> list[tuple]:
    rows = floe.pyiceberg().load_table(table).scan().to_arrow().to_pylist()
    return sorted((r["id"], r["name"], r["score"]) for r in rows)


def duckdb_rows(floe, table: str) -> list[tuple]:
    from test_duckdb import attach

    con = attach(floe)
    try:
        return sorted(con.execute(f"SELECT id, name, score FROM floe.{table}").fetchall())
    finally:
        con.close()


def every_reader(floe, table: str) -> list[tuple]:
    """The rows as Floe's SQL reads them, checked equal to PyIceberg's and DuckDB's."""
    seen = floe_rows(floe, table)
    assert pyiceberg_rows(floe, table) == seen
    assert duckdb_rows(floe, table) == seen
    return seen


def test_the_newest_row_per_key_wins_in_every_reader(floe, tmp_path):
    floe.pyiceberg().create_namespace("up")
    table = "up.users"
    upsert(
        floe,
        table,
        [{"id": i, "name": f"n{i}", "score": float(i)} for i in range(1, 6)],
        create="true",
        key="id",
    )
    loaded = floe.pyiceberg().load_table(table)
    assert loaded.properties.get("write.upsert.enabled") == "true"
    assert list(loaded.schema().identifier_field_ids) == [loaded.schema().find_field("id").field_id]
    assert loaded.schema().find_field("id").required

    # Two updates, a new key, and one key changed twice in the request: its last row wins.
    upsert(
        floe,
        table,
        [
            {"id": 2, "name": "two", "score": 20.0},
            {"id": 4, "name": "first", "score": 0.0},
            {"id": 6, "name": "n6", "score": 6.0},
            {"id": 3, "name": "three", "score": 30.0},
            {"id": 4, "name": "four", "score": 40.0},
        ],
    )
    # Deletes by key: one present, one never written.
    upsert(floe, table, [{"id": 5}, {"id": 99}], op="delete")
    expected = [
        (1, "n1", 1.0),
        (2, "two", 20.0),
        (3, "three", 30.0),
        (4, "four", 40.0),
        (6, "n6", 6.0),
    ]
    assert every_reader(floe, table) == expected

    snapshot = floe.pyiceberg().load_table(table).current_snapshot()
    assert snapshot.summary.operation.value == "delete"  # deletes only: as Java's RowDelta names it
    assert snapshot.summary["added-position-deletes"] == "1"

    # A key deleted and written again in one request comes back; one written and deleted
    # is gone.
    upsert(floe, table, [{"id": 1}], op="delete")
    upsert(floe, table, [{"id": 1, "name": "again", "score": 1.5}, {"id": 7, "name": "n7", "score": 7.0}])
    upsert(floe, table, [{"id": 7}], op="delete")
    expected[0] = (1, "again", 1.5)
    assert every_reader(floe, table) == expected

    # After a restart the key index is made again (from its checkpoint, or from the table's key
    # column less its position deletes), and the next upsert replaces the right rows.
    restart_floe(floe, tmp_path)
    # Rows of two data files replaced: one delete file naming both, in path order.
    upsert(floe, table, [{"id": 2, "name": "two again", "score": 2.5}, {"id": 1, "name": "one more", "score": 1.25}])
    expected[0] = (1, "one more", 1.25)
    expected[1] = (2, "two again", 2.5)
    assert every_reader(floe, table) == expected
    summary = floe.pyiceberg().load_table(table).current_snapshot().summary
    assert (summary["added-delete-files"], summary["added-position-deletes"]) == ("1", "2"), summary

    # Compaction folds the deletes into new files; the index follows the new files.
    result = run_job(floe, "up", "users", "compact")
    assert result["groups-committed"] >= 1, result
    assert floe_rows(floe, table) == expected
    upsert(floe, table, [{"id": 3, "name": "after compaction", "score": 3.5}])
    expected[2] = (3, "after compaction", 3.5)
    assert every_reader(floe, table) == expected


def test_a_key_of_two_columns_and_deletes_by_whole_rows(floe):
    floe.pyiceberg().create_namespace("up")
    table = "up.tenants"
    rows = [{"tenant": t, "id": i, "name": f"{t}-{i}", "score": 0.0} for t in (1, 2) for i in (1, 2)]
    upsert(floe, table, rows, create="true", key="tenant,id")
    # The same key, named in the other order; (1, 2) and (2, 1) are different keys.
    upsert(floe, table, [{"tenant": 1, "id": 2, "name": "changed", "score": 1.0}], key="id,tenant")
    upsert(floe, table, [{"tenant": 2, "id": 1, "name": "whole row", "score": 9.0}], op="delete")
    statement = "SELECT tenant, id, name FROM up.tenants ORDER BY tenant, id"
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert [tuple(r.values()) for r in answer.json()["rows"]] == [(1, 1, "1-1"), (1, 2, "changed"), (2, 2, "2-2")]
    loaded = floe.pyiceberg().load_table(table)
    assert sorted(loaded.schema().identifier_field_names()) == ["id", "tenant"]
    assert loaded.current_snapshot().summary.operation.value == "delete"
    assert loaded.current_snapshot().summary["total-records"] == "5"


def test_upsert_requests_are_refused_by_name(floe):
    floe.pyiceberg().create_namespace("up")
    upsert(floe, "up.plain", [{"id": 1, "name": "a"}], create="true")
    upsert(floe, "up.keyed", [{"id": 1, "name": "a"}], create="true", key="id")

    def refused(table, rows, **params):
        answer = post(floe, table, ndjson(rows), NDJSON, wait="commit", **params)
        assert answer.status_code == 400, answer.text
        return answer.json()["error"]["message"]

    assert "not an upsert table" in refused("up.plain", [{"id": 1}], op="delete")
    assert "not an upsert table" in refused("up.plain", [{"id": 1}], key="id")
    assert "has the key id, not name" in refused("up.keyed", [{"id": 1, "name": "b"}], key="name")
    assert "not a column" not in refused("up.keyed", [{"name": "whole row, no key"}], op="delete")
    assert "not an operation" in refused("up.keyed", [{"id": 1}], op="merge")
    # A key must be given and cannot be null.
    refused("up.keyed", [{"name": "no key"}])
    refused("up.keyed", [{"id": None, "name": "null key"}])
    refused("up.keyed", [{"name": "no key"}], op="delete")
    # A floating-point key is no Iceberg key.
    assert "key" in refused("up.floats", [{"x": 1.5}], create="true", key="x")
    assert "not a column" in refused("up.missing", [{"x": 1}], create="true", key="y")
    assert "needs key=" in refused("up.new", [{"id": 1}], create="true", op="delete")
    # SQL's INSERT INTO would put rows beside the rows of their keys.
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "INSERT INTO up.keyed VALUES (1, 'dup')", "warehouse": floe.warehouse})
    assert answer.status_code == 400 and "upsert table" in answer.text, answer.text
    # A format v1 table holds no deletes.
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    keyed = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        identifier_field_ids=[1],
    )
    floe.pyiceberg().create_table("up.v1", schema=keyed, properties={"format-version": "1", "write.upsert.enabled": "true"})
    assert "format v1" in refused("up.v1", [{"id": 1, "name": "a"}])
    # Nothing refused reached the table.
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT id, name FROM up.keyed", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [{"id": 1, "name": "a"}]


def kafka_rows(floe, table: str, columns: str) -> list[tuple]:
    answer = floe.api("POST", "/api/v1/sql", json={"sql": f"SELECT {columns} FROM {table} ORDER BY id", "warehouse": floe.warehouse})
    if answer.status_code != 200:
        return []
    return [tuple(r.values()) for r in answer.json()["rows"]]


def wait_for(floe, table: str, columns: str, expected: list[tuple], timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while (seen := kafka_rows(floe, table, columns)) != expected:
        assert time.time() < deadline, (seen[:20], expected[:20])
        time.sleep(0.3)


def test_a_kafka_topic_materializes_as_an_upsert_table_through_kill_9(tmp_path, broker):
    from test_duckdb import attach
    from test_pipelines import PARTITIONS, spec

    floe = start_floe(tmp_path)
    try:
        floe.pyiceberg().create_namespace("stream")
        body = {**spec(floe, broker), "name": "users", "table": "users", "mode": "upsert", "key": ["id"]}
        assert floe.api("POST", "/api/v1/pipelines", json={**body, "key": []}).status_code == 400
        created = floe.api("POST", "/api/v1/pipelines", json=body)
        assert created.status_code == 201, created.text
        producer = Producer({"bootstrap.servers": broker})

        def send(i, value):
            payload = None if value is None else json.dumps({"id": i, "version": value, "name": f"u{i}"})
            producer.produce("events", key=str(i), value=payload, partition=i % PARTITIONS)

        for i in range(300):
            send(i, 0)
        producer.flush()
        wait_for(floe, "stream.users", "id, version", [(i, 0) for i in range(300)])
        # kill -9 with updates and tombstones on their way; the rest sent after the restart.
        for i in range(0, 300, 3):
            send(i, 1)
        producer.flush()
        floe.process.kill()
        floe.process.wait()
        for i in range(0, 300, 10):
            send(i, None)
        send(0, 2)
        producer.flush()
        restart_floe(floe, tmp_path, pause=0.5)
        expected = [(0, 2)] + [(i, 1 if i % 3 == 0 else 0) for i in range(1, 300) if i % 10]
        wait_for(floe, "stream.users", "id, version", expected)
        rows = floe.pyiceberg().load_table("stream.users").scan(selected_fields=("id", "version")).to_arrow().to_pylist()
        assert sorted((r["id"], r["version"]) for r in rows) == expected
        con = attach(floe)
        assert con.execute("SELECT id, version FROM floe.stream.users ORDER BY id").fetchall() == expected
        loaded = floe.pyiceberg().load_table("stream.users")
        assert loaded.properties.get("write.upsert.enabled") == "true"
        # A tombstone without a key is a dead letter; the pipeline goes on.
        producer.produce("events", key=None, value=None, partition=1)
        send(1, 5)
        producer.flush()
        expected[1] = (1, 5)
        wait_for(floe, "stream.users", "id, version", expected)
    finally:
        stop_floe(floe)


def debezium_event(op: str, before: dict | None, after: dict | None, lsn: int) -> str:
    """A change event as Debezium's PostgreSQL connector writes it with Kafka Connect's JSON
    converter and schemas enabled (the schema abbreviated)."""
    row_schema = {"type": "struct", "optional": True, "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "name"},
        {"type": "string", "optional": True, "field": "email"},
    ]}
    return json.dumps({
        "schema": {"type": "struct", "name": "dbserver1.public.customers.Envelope", "fields": [
            {**row_schema, "field": "before"}, {**row_schema, "field": "after"},
            {"type": "struct", "field": "source", "fields": []},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ]},
        "payload": {
            "before": before,
            "after": after,
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "db": "shop",
                       "schema": "public", "table": "customers", "txId": 700 + lsn, "lsn": 24000000 + lsn, "snapshot": "false"},
            "op": op,
            "ts_ms": 1733500000000 + lsn,
            "transaction": None,
        },
    })


def test_a_debezium_stream_materializes_as_the_source_table(tmp_path, broker):
    from test_pipelines import PARTITIONS, spec

    floe = start_floe(tmp_path)
    try:
        floe.pyiceberg().create_namespace("stream")
        body = {**spec(floe, broker), "name": "customers", "table": "customers", "mode": "debezium", "key": ["id"]}
        created = floe.api("POST", "/api/v1/pipelines", json=body)
        assert created.status_code == 201, created.text
        producer = Producer({"bootstrap.servers": broker})

        def row(i, name):
            return {"id": i, "name": name, "email": f"{name}@example.com"}

        def send(i, value):
            key = json.dumps({"schema": {"type": "struct", "fields": [{"type": "int32", "field": "id"}]}, "payload": {"id": i}})
            producer.produce("events", key=key, value=value, partition=i % PARTITIONS)

        lsn = iter(range(1, 1000))
        for i in (1, 2, 3):
            send(i, debezium_event("r", None, row(i, f"c{i}"), next(lsn)))
        send(4, debezium_event("c", None, row(4, "d"), next(lsn)))
        send(2, debezium_event("u", row(2, "c2"), row(2, "b2"), next(lsn)))
        send(3, debezium_event("d", {"id": 3, "name": None, "email": None}, None, next(lsn)))
        send(3, None)  # the tombstone that follows a delete
        send(4, debezium_event("u", row(4, "d"), row(4, "d2"), next(lsn)))
        send(5, debezium_event("c", None, row(5, "e"), next(lsn)))
        send(5, debezium_event("d", row(5, "e"), None, next(lsn)))
        send(5, None)
        send(6, debezium_event("t", None, None, next(lsn)))  # a truncate: a dead letter
        producer.flush()
        expected = [(1, "c1", "c1@example.com"), (2, "b2", "b2@example.com"), (4, "d2", "d2@example.com")]
        wait_for(floe, "stream.customers", "id, name, email", expected)
        columns = [f.name for f in floe.pyiceberg().load_table("stream.customers").schema().fields]
        # The row's columns, not the envelope's (inferred from JSON rows, named in order).
        assert sorted(columns) == ["email", "id", "name"], columns
        deadline = time.time() + 30
        while floe.api("GET", "/api/v1/pipelines/customers/status").json()["stats"]["dead-letters"] != 1:
            assert time.time() < deadline
            time.sleep(0.3)
    finally:
        stop_floe(floe)


DEBEZIUM_AVRO = {
    "type": "record",
    "name": "Envelope",
    "namespace": "dbserver1.public.customers",
    "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": "id", "type": "int"},
            {"name": "name", "type": ["null", "string"], "default": None},
        ]}], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
                                    "fields": [{"name": "lsn", "type": ["null", "long"], "default": None}]}},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}

ACCOUNT_AVRO = {
    "type": "record",
    "name": "Account",
    "namespace": "bank",
    "fields": [{"name": "id", "type": "long"}, {"name": "balance", "type": "long"}],
}


def test_avro_values_upsert_and_tombstones_delete(tmp_path, broker):
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from test_pipelines import PARTITIONS, spec
    from test_registry import registry

    floe = start_floe(tmp_path)
    try:
        floe.pyiceberg().create_namespace("stream")
        client = registry(floe)
        producer = Producer({"bootstrap.servers": broker})
        context = SerializationContext("events", MessageField.VALUE)

        # Avro values keyed by the id as text; tombstones delete.
        accounts = AvroSerializer(client, json.dumps(ACCOUNT_AVRO))
        body = {**spec(floe, broker), "name": "accounts", "table": "accounts", "format": "avro", "mode": "upsert", "key": ["id"]}
        assert floe.api("POST", "/api/v1/pipelines", json=body).status_code == 201
        for version in range(3):
            for i in range(30):
                producer.produce("events", key=str(i), value=accounts({"id": i, "balance": 100 * version + i}, context), partition=i % PARTITIONS)
        for i in range(0, 30, 5):
            producer.produce("events", key=str(i), value=None, partition=i % PARTITIONS)
        producer.flush()
        expected = [(i, 200 + i) for i in range(30) if i % 5]
        wait_for(floe, "stream.accounts", "id, balance", expected)
        assert floe.api("DELETE", "/api/v1/pipelines/accounts").status_code in (200, 204)
    finally:
        stop_floe(floe)


def test_a_debezium_avro_stream_materializes_its_after_rows(tmp_path, broker):
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from test_pipelines import PARTITIONS, spec
    from test_registry import registry

    floe = start_floe(tmp_path)
    try:
        floe.pyiceberg().create_namespace("stream")
        client = registry(floe)
        producer = Producer({"bootstrap.servers": broker})
        envelope = AvroSerializer(client, json.dumps(DEBEZIUM_AVRO))
        context = SerializationContext("events", MessageField.VALUE)
        body = {**spec(floe, broker), "name": "cdc", "table": "customers", "format": "avro", "mode": "debezium", "key": ["id"]}
        assert floe.api("POST", "/api/v1/pipelines", json=body).status_code == 201

        def send(i, op, before, after, lsn):
            event = {"before": before, "after": after, "source": {"lsn": lsn}, "op": op, "ts_ms": 1733500000000 + lsn}
            producer.produce("events", key=json.dumps({"id": i}), value=envelope(event, context), partition=i % PARTITIONS)

        send(1, "r", None, {"id": 1, "name": "a"}, 1)
        send(2, "c", None, {"id": 2, "name": "b"}, 2)
        send(1, "u", {"id": 1, "name": "a"}, {"id": 1, "name": "a2"}, 3)
        send(2, "d", {"id": 2, "name": None}, None, 4)
        producer.produce("events", key=json.dumps({"id": 2}), value=None, partition=2 % PARTITIONS)
        send(3, "c", None, {"id": 3, "name": None}, 5)
        producer.flush()
        wait_for(floe, "stream.customers", "id, name", [(1, "a2"), (3, None)])
        columns = sorted(f.name for f in floe.pyiceberg().load_table("stream.customers").schema().fields)
        assert columns == ["id", "name"], columns
    finally:
        stop_floe(floe)


def test_a_format_v3_upsert_table_takes_deletion_vectors(floe):
    """Format v3: a data file's deletes are one deletion vector, replaced (old positions and
    new) each time more of its rows go."""
    floe.pyiceberg().create_namespace("up")
    keyed_table(floe, "up.v3", format_version="3")
    upsert(floe, "up.v3", [{"id": i, "name": f"n{i}", "score": i} for i in range(10)])
    upsert(floe, "up.v3", [{"id": 1, "name": "one", "score": 1}])
    upsert(floe, "up.v3", [{"id": 2, "name": "two", "score": 2}, {"id": 11, "name": "n11", "score": 11}])
    upsert(floe, "up.v3", [{"id": 3}, {"id": 11}], op="delete")
    expected = [(i, {1: "one", 2: "two"}.get(i, f"n{i}")) for i in range(10) if i != 3]
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT id, name FROM up.v3 ORDER BY id", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert [tuple(r.values()) for r in answer.json()["rows"]] == expected
    # One live vector per data file: the first file's three deleted rows in one vector.
    table = floe.pyiceberg().load_table("up.v3")
    summary = table.current_snapshot().summary
    assert summary["total-position-deletes"] == "4", summary
    assert summary["total-delete-files"] == "2", summary


def test_acknowledged_upserts_survive_kill_9_in_order(floe, tmp_path):
    """Upserts acknowledged over HTTP (durable in the log, not yet committed) when Floe is
    killed are committed after the restart in the order they were taken: every key ends at
    the last version acknowledged for it, once."""
    floe.pyiceberg().create_namespace("up")
    table = "up.versions"
    upsert(floe, table, [{"id": i, "version": 0} for i in range(50)], create="true", key="id")
    last = {i: 0 for i in range(50)}
    for version in range(1, 21):
        keys = [i for i in range(50) if (i + version) % 3 == 0]
        rows = [{"id": i, "version": version} for i in keys]
        answer = post(floe, table, ndjson(rows), NDJSON)
        assert answer.status_code in (200, 202), answer.text
        for i in keys:
            last[i] = version
    floe.process.kill()
    floe.process.wait()
    restart_floe(floe, tmp_path, pause=0.5)
    expected = sorted(last.items())
    deadline = time.time() + 60
    while True:
        answer = floe.api("POST", "/api/v1/sql", json={"sql": f"SELECT id, version FROM {table} ORDER BY id", "warehouse": floe.warehouse})
        seen = [tuple(r.values()) for r in answer.json()["rows"]] if answer.status_code == 200 else []
        if seen == expected:
            break
        assert time.time() < deadline, (seen[:10], expected[:10])
        time.sleep(0.3)


def index_counts(floe) -> dict[str, int]:
    """How this node's upsert key indexes were made ready since it started, by how."""
    text = floe.api("GET", "/metrics").text
    counts = {}
    for line in text.splitlines():
        if line.startswith('floe_upsert_key_indexes_total{how="'):
            counts[line.split('"')[1]] = int(float(line.rsplit(" ", 1)[1]))
    assert set(counts) == {"built", "loaded", "caught-up"}, text
    return counts


def checkpoint_of(floe) -> Path:
    """The one key index checkpoint of the node's default warehouse (in Floe's own directory,
    .floe/key-index/, named by the table's location), once it is written."""
    deadline = time.time() + 20
    while True:
        found = list(Path(floe.data_dir).rglob(".floe/key-index/*.bin"))
        if found:
            assert len(found) == 1, found
            return found[0]
        assert time.time() < deadline, "no key index checkpoint was written"
        time.sleep(0.2)


@pytest.mark.parametrize("format_version", ["2", "3"])
def test_the_key_index_is_caught_up_not_built_again(floe, tmp_path, format_version):
    floe.pyiceberg().create_namespace("up")
    table = "up.accounts"
    keyed_table(floe, table, format_version)
    model = {i: (f"n{i}", i) for i in range(1, 41)}

    def apply(rows=(), deletes=()):
        if rows:
            upsert(floe, table, [{"id": i, "name": n, "score": s} for i, (n, s) in rows])
            model.update(dict(rows))
        if deletes:
            upsert(floe, table, [{"id": i} for i in deletes], op="delete")
            for i in deletes:
                model.pop(i, None)

    def agrees():
        assert every_reader(floe, table) == sorted((i, n, s) for i, (n, s) in model.items())

    upsert(floe, table, [{"id": i, "name": n, "score": s} for i, (n, s) in model.items()])
    # The first commit after the index is made writes its checkpoint (in the background), in
    # Floe's own directory: not below the table's location, where vended credentials reach.
    checkpoint = checkpoint_of(floe)
    assert checkpoint.read_bytes().startswith(b"FLOEKIX1")
    location = urllib.parse.urlparse(floe.pyiceberg().load_table(table).location()).path
    assert not str(checkpoint).startswith(location)
    # Commits after the checkpoint: replaced rows (new position deletes), deleted keys, new keys.
    apply(rows=[(i, (f"v2-{i}", i * 10)) for i in range(1, 41, 3)])
    apply(deletes=[2, 5])
    apply(rows=[(41, ("n41", 41))])
    agrees()

    # A restart: the index is the checkpoint caught up (what was committed since read from the
    # delete files and new data files), not every key read again.
    restart_floe(floe, tmp_path)
    apply(rows=[(1, ("after restart", 1)), (4, ("four", 4)), (41, ("again", 410))])
    apply(deletes=[3])
    assert index_counts(floe) == {"built": 0, "loaded": 1, "caught-up": 0}
    agrees()

    caught_up = 0
    if format_version == "2":  # PyIceberg writes no v3 table
        # Another writer rewrites a data file (PyIceberg deletes copy-on-write): the index
        # forgets the file it no longer lists and reads the one written in its place.
        floe.pyiceberg().load_table(table).delete("id = 7")
        model.pop(7)
        apply(rows=[(8, ("after pyiceberg", 8)), (42, ("n42", 42))])
        caught_up += 1
        assert index_counts(floe) == {"built": 0, "loaded": 1, "caught-up": caught_up}
        agrees()

    # Compaction folds every file and delete: caught up again.
    result = run_job(floe, "up", "accounts", "compact")
    assert result["groups-committed"] >= 1, result
    apply(rows=[(9, ("after compaction", 9))], deletes=[10])
    caught_up += 1
    assert index_counts(floe) == {"built": 0, "loaded": 1, "caught-up": caught_up}
    agrees()

    # A damaged checkpoint is never used: the index is built from the table, answers unchanged.
    damaged = bytearray(checkpoint.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    checkpoint.write_bytes(bytes(damaged))
    restart_floe(floe, tmp_path)
    apply(rows=[(11, ("after damage", 11))], deletes=[12])
    assert index_counts(floe) == {"built": 1, "loaded": 0, "caught-up": 0}
    agrees()


def test_orphan_cleanup_keeps_and_a_purge_removes_the_key_index_checkpoint(tmp_path):
    floe = start_floe(tmp_path, extra_args=("--orphan-min-age-floor-secs", "0"))
    try:
        floe.pyiceberg().create_namespace("up")
        keyed_table(floe, "up.kept")
        upsert(floe, "up.kept", [{"id": i, "name": f"n{i}", "score": i} for i in range(10)])
        checkpoint = checkpoint_of(floe)
        cleanup = floe.api(
            "POST",
            "/api/v1/maintenance/remove-orphan-files",
            json={"warehouse": floe.warehouse, "namespace": ["up"], "table": "kept", "dry-run": False, "older-than-ms": 0},
        )
        assert cleanup.status_code == 200, cleanup.text
        assert checkpoint.exists()
        floe.pyiceberg().purge_table("up.kept")
        deadline = time.time() + 20
        while checkpoint.exists():
            assert time.time() < deadline, "a purge left the key index checkpoint"
            time.sleep(0.2)
    finally:
        stop_floe(floe)
