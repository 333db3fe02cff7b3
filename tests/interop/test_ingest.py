"""HTTP ingestion (POST /ingest/v1/{warehouse}/{namespace}/{table}): NDJSON, JSON arrays and
Arrow IPC streams appended through a write-ahead log, read back by PyIceberg; clear 400, 403,
413 and 415 answers; and every acknowledged row exactly once after Floe is killed again and
again while a client writes."""

from __future__ import annotations

import io
import json
import random
import threading
import time

import pyarrow as pa
import pytest
import requests
from conftest import start_floe, stop_floe
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType
from test_governance import make_principal

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "score", DoubleType(), required=False),
)


def post(floe, table: str, body: bytes, content_type: str, token: str | None = None, **params) -> requests.Response:
    headers = {"Content-Type": content_type, "Authorization": f"Bearer {token or floe.token()}"}
    return requests.post(
        f"{floe.base}/ingest/v1/{floe.warehouse}/{table.replace('.', '/')}",
        data=body,
        headers=headers,
        params=params,
        timeout=90,
    )


def ndjson(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def ids_of(floe, table: str) -> list[int]:
    loaded = floe.pyiceberg().load_table(table)
    return sorted(loaded.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist())


def test_ndjson_json_and_arrow_reach_the_table(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("ing")
    catalog.create_table("ing.events", schema=SCHEMA)

    answer = post(floe, "ing.events", ndjson([{"id": 1, "name": "a", "score": 1.5}, {"id": 2, "name": "b"}]), "application/x-ndjson", wait="commit")
    assert answer.status_code == 200, answer.text
    assert answer.json()["committed"] is True and answer.json()["rows"] == 2

    answer = post(floe, "ing.events", json.dumps([{"id": 3}, {"id": 4, "score": 4.0}]).encode(), "application/json", wait="commit")
    assert answer.status_code == 200, answer.text

    sink = io.BytesIO()
    batch = pa.table({"id": pa.array([5, 6], pa.int32()), "name": ["e", "f"]})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_table(batch)
    answer = post(floe, "ing.events", sink.getvalue(), "application/vnd.apache.arrow.stream", wait="commit")
    assert answer.status_code == 200, answer.text

    # Without waiting: durable at once, committed within the interval.
    answer = post(floe, "ing.events", ndjson([{"id": 7}]), "application/x-ndjson")
    assert answer.status_code == 202, answer.text
    deadline = time.time() + 30
    while ids_of(floe, "ing.events") != [1, 2, 3, 4, 5, 6, 7]:
        assert time.time() < deadline, ids_of(floe, "ing.events")
        time.sleep(0.2)

    table = floe.pyiceberg().load_table("ing.events")
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows[0] == {"id": 1, "name": "a", "score": 1.5}
    assert rows[1] == {"id": 2, "name": "b", "score": None}
    assert rows[4]["name"] == "e"
    summary = table.current_snapshot().summary.additional_properties
    assert any(k.startswith("floe.ingest.") and k.endswith(".sequence") for k in summary), summary

    # Per-table series need a token with manage-pipelines on the server (root's here) ...
    metrics = floe.api("GET", "/metrics").text
    label = f'{{table="{floe.warehouse}.ing.events"}}'
    assert f"floe_ingest_rows_total{label} 7" in metrics, metrics[-2000:]
    assert f"floe_ingest_committed_rows_total{label} 7" in metrics
    assert f"floe_ingest_pending_entries{label} 0" in metrics
    # ... and an anonymous scraper learns no table names.
    assert "ing.events" not in requests.get(f"{floe.base}/metrics", timeout=10).text

    status = floe.api("GET", "/api/v1/ingest/status")
    assert status.status_code == 200, status.text
    events = [t for t in status.json()["tables"] if t["table"] == "events"][0]
    assert events["namespace"] == ["ing"] and events["pending-entries"] == 0
    assert events["accepted-rows"] == 7 and events["committed-rows"] == 7
    assert events["committed-sequence"] == events["next-sequence"] - 1

    # A table created on request, its schema inferred from the rows.
    answer = post(floe, "ing.made", ndjson([{"id": 1, "tag": "x", "value": 2.5}]), "application/x-ndjson", wait="commit", create="true")
    assert answer.status_code == 200, answer.text
    made = floe.pyiceberg().load_table("ing.made")
    assert [f.name for f in made.schema().fields] == ["id", "tag", "value"]
    assert made.scan().to_arrow().to_pylist() == [{"id": 1, "tag": "x", "value": 2.5}]


def test_new_fields_become_columns(floe):
    """Fields the table lacks are added as optional columns (typed from their values) in one
    schema change; earlier rows read them as null; PyIceberg sees the evolved schema."""
    catalog = floe.pyiceberg()
    catalog.create_namespace("ing")
    catalog.create_table("ing.evolving", schema=SCHEMA)
    first = post(floe, "ing.evolving", ndjson([{"id": 1, "name": "a"}]), "application/x-ndjson", wait="commit")
    assert first.status_code == 200, first.text
    rows = [{"id": 2, "country": "NL", "clicks": 3}, {"id": 3, "country": None, "clicks": 4, "premium": True}]
    second = post(floe, "ing.evolving", ndjson(rows), "application/x-ndjson", wait="commit")
    assert second.status_code == 200, second.text
    table = floe.pyiceberg().load_table("ing.evolving")
    fields = {f.name: str(f.field_type) for f in table.schema().fields}
    assert fields == {"id": "long", "name": "string", "score": "double", "country": "string", "clicks": "long", "premium": "boolean"}
    got = sorted(table.scan(selected_fields=("id", "country", "clicks", "premium")).to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": 1, "country": None, "clicks": None, "premium": None},
        {"id": 2, "country": "NL", "clicks": 3, "premium": None},
        {"id": 3, "country": None, "clicks": 4, "premium": True},
    ]
    # The SQL engine reads the evolved table too.
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT sum(clicks) AS c FROM ing.evolving", "warehouse": floe.warehouse})
    assert answer.json()["rows"] == [{"c": 7}]
    # Nested objects and lists become struct and list columns, and later gain fields inside.
    third = post(floe, "ing.evolving", ndjson([{"id": 4, "geo": {"lat": 1.5}, "tags": ["a"]}]), "application/x-ndjson", wait="commit")
    assert third.status_code == 200, third.text
    fourth = post(floe, "ing.evolving", ndjson([{"id": 5, "geo": {"lat": 2.5, "lon": 3.5}}]), "application/x-ndjson", wait="commit")
    assert fourth.status_code == 200, fourth.text
    table = floe.pyiceberg().load_table("ing.evolving")
    got = sorted(table.scan(selected_fields=("id", "geo", "tags")).to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got[-2:] == [
        {"id": 4, "geo": {"lat": 1.5, "lon": None}, "tags": ["a"]},
        {"id": 5, "geo": {"lat": 2.5, "lon": 3.5}, "tags": None},
    ]


def test_bad_requests_are_refused_clearly(tmp_path):
    floe = start_floe(tmp_path, extra_args=("--ingest-max-body-mb", "1"))
    try:
        catalog = floe.pyiceberg()
        catalog.create_namespace("ing")
        catalog.create_table("ing.events", schema=SCHEMA)

        answer = post(floe, "ing.events", b"id,name\n1,a\n", "text/csv")
        assert answer.status_code == 415, answer.text
        assert "application/x-ndjson" in answer.text

        answer = post(floe, "ing.events", b'{"id": 1}\n{"id": 2, "colour": "red"}\n', "application/x-ndjson", evolve="false")
        assert answer.status_code == 400, answer.text
        assert "line 2" in answer.text and "colour" in answer.text

        answer = post(floe, "ing.events", b'{"id": 1}\n{"id": \n', "application/x-ndjson")
        assert answer.status_code == 400 and "line 2" in answer.text, answer.text

        answer = post(floe, "ing.events", b'[{"id": "not a number"}]', "application/json")
        assert answer.status_code == 400 and "element 0" in answer.text, answer.text

        answer = post(floe, "ing.events", ndjson([{"id": i, "name": "x" * 100} for i in range(20000)]), "application/x-ndjson")
        assert answer.status_code == 413, answer.text
        assert "--ingest-max-body-mb" in answer.text

        answer = post(floe, "ing.missing", ndjson([{"id": 1}]), "application/x-ndjson")
        assert answer.status_code == 404, answer.text

        on_table = {"type": "table", "warehouse": floe.warehouse, "namespace": ["ing"], "name": "events"}
        reader = make_principal(floe, "ingest-reader", [("read-data", on_table)])
        token = floe.token(*reader)
        answer = post(floe, "ing.events", ndjson([{"id": 1}]), "application/x-ndjson", token=token)
        assert answer.status_code == 403, answer.text
        assert floe.api("GET", "/api/v1/ingest/status", token=token).status_code == 403

        # Nothing refused reached the table, and its schema is unchanged.
        assert ids_of(floe, "ing.events") == []
        assert [f.name for f in floe.pyiceberg().load_table("ing.events").schema().fields] == ["id", "name", "score"]
    finally:
        stop_floe(floe)


def test_acknowledged_rows_survive_kill_9_exactly_once(tmp_path):
    """A client posts batches of unique ids while Floe is killed with SIGKILL and restarted
    over and over; every acknowledged id ends up in the table exactly once, and no id twice."""
    args = ("--ingest-commit-interval-ms", "150")
    floe = start_floe(tmp_path, extra_args=args)
    floe.pyiceberg().create_namespace("ing")
    floe.pyiceberg().create_table("ing.crash", schema=SCHEMA)
    acknowledged: list[int] = []
    attempted: list[int] = []
    state = {"floe": floe, "stop": False}
    lock = threading.Lock()

    def produce():
        next_id = 0
        while not state["stop"]:
            batch = list(range(next_id, next_id + 50))
            next_id += 50
            with lock:
                current = state["floe"]
            try:
                answer = post(current, "ing.crash", ndjson([{"id": i, "name": f"n{i}"} for i in batch]), "application/x-ndjson")
            except requests.RequestException:
                attempted.extend(batch)
                time.sleep(0.05)
                continue
            attempted.extend(batch)
            if answer.status_code in (200, 202):
                acknowledged.extend(batch)
            else:
                time.sleep(0.05)

    producer = threading.Thread(target=produce)
    producer.start()
    rng = random.Random(7)
    try:
        for _ in range(6):
            time.sleep(rng.uniform(0.3, 1.2))
            with lock:
                state["floe"].process.kill()
                state["floe"].process.wait()
                state["floe"] = start_floe(tmp_path, extra_args=args)
        time.sleep(0.5)
    finally:
        state["stop"] = True
        producer.join()
    floe = state["floe"]
    try:
        assert len(acknowledged) > 500, len(acknowledged)
        # One last batch waited for: everything before it is committed by then.
        final = post(floe, "ing.crash", ndjson([{"id": -1}]), "application/x-ndjson", wait="commit")
        assert final.status_code == 200, final.text
        ids = ids_of(floe, "ing.crash")
        assert len(ids) == len(set(ids)), "an id was written twice"
        present = set(ids)
        missing = [i for i in acknowledged if i not in present]
        assert not missing, f"{len(missing)} acknowledged ids lost, e.g. {missing[:5]}"
        assert present <= set(attempted) | {-1}
    finally:
        stop_floe(floe)
