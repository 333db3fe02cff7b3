"""Decoding untrusted bytes never takes the server down: Arrow IPC streams whose compressed
buffers declare 2^40 bytes uncompressed (LZ4 and ZSTD), batches of 2^31 rows, garbage and
truncated streams, sent to /ingest/v1 by a principal holding write-data on one table and to
Flight SQL (DoPut and GetFlightInfo, with forged statement handles) by a principal holding
nothing. Each is refused with 400/413 (INVALID_ARGUMENT/RESOURCE_EXHAUSTED), the server stays
up and answers queries, and the victim table is unchanged.

And HTTP-ingested rows acknowledged before a schema change: a renamed column keeps its values,
and an entry the table can no longer take (a required column added) is moved to the dead-letter
directory while the log goes on."""

from __future__ import annotations

import base64
import io
import json
import time

import pyarrow as pa
import pyarrow.flight as flight
import pytest
import requests
from conftest import start_floe, stop_floe
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType
from test_governance import make_principal

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
)
ARROW = "application/vnd.apache.arrow.stream"
FORGED = 1 << 40
# The most rows pyarrow writes in one batch; at 8 bytes a value, 16 GiB.
HUGE_ROWS = (1 << 31) - 1


def stream(table: pa.Table, compression: str | None = None) -> bytes:
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def batch_body(data: bytes) -> int:
    """Where the body of a stream's first record batch starts: after the schema message (whose
    body is empty) and the batch's metadata, each framed as a continuation marker and a
    length."""
    at = 0
    for _ in range(2):
        assert data[at:at + 4] == b"\xff\xff\xff\xff", "a continuation marker"
        at += 8 + int.from_bytes(data[at + 4:at + 8], "little", signed=True)
    return at


def forged_prefix(compression: str) -> bytes:
    """A one-column stream of 100,000 zeros, compressed; the values buffer's 8-byte
    uncompressed length (the first 8 bytes of the batch's body: a column without nulls has an
    empty validity buffer) set to 2^40."""
    data = bytearray(stream(pa.table({"id": pa.array([0] * 100_000, pa.int64())}), compression))
    body = batch_body(bytes(data))
    declared = int.from_bytes(data[body:body + 8], "little", signed=True)
    assert declared == 800_000, f"the values buffer comes first, {declared}"
    data[body:body + 8] = FORGED.to_bytes(8, "little", signed=True)
    return bytes(data)


def nulls(rows: int) -> pa.RecordBatch:
    """A column of nulls of no buffers at all: nothing but its row count betrays it."""
    return pa.record_batch([pa.Array.from_buffers(pa.null(), rows, [None], null_count=rows)], names=["id"])


def huge_rows() -> bytes:
    return stream(pa.Table.from_batches([nulls(HUGE_ROWS)]))


def post(floe, table: str, body: bytes, token: str, content_type: str = ARROW, **params) -> requests.Response:
    return requests.post(
        f"{floe.base}/ingest/v1/{floe.warehouse}/{table.replace('.', '/')}",
        data=body,
        headers={"Content-Type": content_type, "Authorization": f"Bearer {token}"},
        params=params,
        timeout=60,
    )


def assert_alive(floe, victim: str, rows: int) -> None:
    assert requests.get(f"{floe.base}/health", timeout=10).status_code == 200
    answer = floe.api("POST", "/api/v1/sql", json={"sql": f"SELECT count(*) AS n FROM {victim}", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [{"n": rows}]


@pytest.fixture
def victim(tmp_path):
    floe = start_floe(tmp_path, extra_args=("--decode-memory-mb", "64"))
    catalog = floe.pyiceberg()
    catalog.create_namespace("atk")
    table = catalog.create_table("atk.victim", schema=SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    yield floe
    stop_floe(floe)


def test_forged_ipc_streams_to_ingest_are_refused_and_the_server_stays_up(victim):
    floe = victim
    on_victim = {"type": "table", "warehouse": floe.warehouse, "namespace": ["atk"], "name": "victim"}
    writer = floe.token(*make_principal(floe, "loader", [("write-data", on_victim)]))
    snapshot = floe.pyiceberg().load_table("atk.victim").current_snapshot().snapshot_id

    for compression in ("lz4", "zstd"):
        answer = post(floe, "atk.victim", forged_prefix(compression), writer)
        assert answer.status_code == 413, answer.text
        message = answer.json()["error"]["message"]
        assert f"declares {FORGED} bytes uncompressed" in message, message
        assert_alive(floe, "atk.victim", 3)

    answer = post(floe, "atk.victim", huge_rows(), writer)
    assert answer.status_code == 413, answer.text
    assert f"{HUGE_ROWS} rows" in answer.json()["error"]["message"]

    good = stream(pa.table({"id": pa.array([4], pa.int64())}), "lz4")
    for bad in (b"\x00garbage" * 10, good[:-20], b"\xff\xff\xff\xff\xf0\xff\xff\xff"):
        answer = post(floe, "atk.victim", bad, writer)
        assert answer.status_code == 400, answer.text
        assert "Arrow IPC stream" in answer.json()["error"]["message"]

    # JSON that would fill the table's columns with more nulls than the budget allows
    # (5,000,000 rows x 2 columns x 8 bytes > 64 MiB).
    answer = post(floe, "atk.victim", b"{}\n" * 5_000_000, writer, content_type="application/x-ndjson")
    assert answer.status_code == 413, answer.text

    # Authorization comes before decoding: a principal without write-data, or without
    # create-table for ?create=true, never gets its body decoded (403/404, not 413).
    nobody = floe.token(*make_principal(floe, "nobody", []))
    assert post(floe, "atk.victim", forged_prefix("lz4"), nobody).status_code in (403, 404)
    answer = post(floe, "atk.fresh", forged_prefix("zstd"), writer, create="true")
    assert answer.status_code in (403, 404), answer.text

    assert_alive(floe, "atk.victim", 3)
    assert floe.pyiceberg().load_table("atk.victim").current_snapshot().snapshot_id == snapshot
    # A well-formed compressed stream still goes in.
    answer = post(floe, "atk.victim", good, writer, wait="commit")
    assert answer.status_code == 200, answer.text
    assert_alive(floe, "atk.victim", 4)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n == 0:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def command(name: str, handle: bytes) -> bytes:
    """A Flight SQL command (`CommandPreparedStatementQuery`/`Update`: field 1, the handle) in
    a protobuf `Any`."""
    inner = _bytes_field(1, handle)
    url = f"type.googleapis.com/arrow.flight.protocol.sql.{name}".encode()
    return _bytes_field(1, url) + _bytes_field(2, inner)


def forged_handle(ipc: bytes) -> bytes:
    """A statement handle as Floe issues them (JSON), with a forged stream as its parameters:
    the client holds the handle and may write anything in it."""
    return json.dumps({"sql": "SELECT $1", "params": base64.b64encode(ipc).decode()}).encode()


def refusal(call) -> str:
    with pytest.raises(pa.ArrowException) as caught:
        call()
    return str(caught.value)


def test_forged_ipc_streams_to_flight_sql_are_refused_and_the_server_stays_up(victim):
    floe = victim
    client_id, secret = make_principal(floe, "nobody", [])
    client = flight.FlightClient(f"grpc://127.0.0.1:{floe.flight_port}")
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {floe.token(client_id, secret)}".encode())])
    empty = pa.schema([("x", pa.int64())])

    def do_put(descriptor, batches=(), schema=empty, call_options=options):
        writer, reader = client.do_put(descriptor, schema, options=call_options)
        for batch in batches:
            writer.write_batch(batch)
        writer.done_writing()
        reader.read()
        writer.close()

    for compression in ("lz4", "zstd"):
        handle = forged_handle(forged_prefix(compression))
        update = flight.FlightDescriptor.for_command(command("CommandPreparedStatementUpdate", handle))
        text = refusal(lambda: do_put(update))
        assert "resource exhausted" in text.lower(), text
        assert f"declares {FORGED} bytes uncompressed" in text and "may decode" in text, text
        query = flight.FlightDescriptor.for_command(command("CommandPreparedStatementQuery", handle))
        text = refusal(lambda: client.get_flight_info(query, options))
        assert f"declares {FORGED} bytes uncompressed" in text, text

    # A handle whose parameters are garbage, or hold no row.
    for ipc in (b"\x01\x02\x03", stream(pa.table({"x": pa.array([], pa.int64())}))):
        query = flight.FlightDescriptor.for_command(command("CommandPreparedStatementQuery", forged_handle(ipc)))
        text = refusal(lambda: client.get_flight_info(query, options))
        assert "invalid argument" in text.lower(), text
        assert "bound parameters" in text or "not a statement handle" in text, text

    # The DoPut stream itself: 2^31 rows of nulls, and 16 MB of zeros in a few kilobytes of
    # ZSTD, past the budget of so small a request.
    update = flight.FlightDescriptor.for_command(command("CommandPreparedStatementUpdate", b'{"sql": "SELECT $1"}'))
    huge = nulls(HUGE_ROWS)
    text = refusal(lambda: do_put(update, [huge], huge.schema))
    assert f"{HUGE_ROWS} rows" in text, text
    zeros = pa.record_batch([pa.array([0] * 2_000_000, pa.int64())], names=["x"])
    zstd = flight.FlightCallOptions(headers=options.headers, write_options=pa.ipc.IpcWriteOptions(compression="zstd"))
    text = refusal(lambda: do_put(update, [zeros], zeros.schema, zstd))
    assert "resource exhausted" in text.lower() and "may decode" in text, text
    # Parameter rows beyond the cap: the statement would run once per row.
    many = pa.record_batch([pa.array(range(5000), pa.int64())], names=["x"])
    text = refusal(lambda: do_put(update, [many], many.schema))
    assert "at most 1000" in text, text

    assert_alive(floe, "atk.victim", 3)
    import adbc_driver_flightsql.dbapi as flight_sql

    from conftest import ROOT_ID, ROOT_SECRET

    db_kwargs = {"username": ROOT_ID, "password": ROOT_SECRET}
    with flight_sql.connect(f"grpc://127.0.0.1:{floe.flight_port}", db_kwargs=db_kwargs, autocommit=True) as conn:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {floe.warehouse}.atk.victim")
            assert cursor.fetchone() == (3,)
            # Bound parameters still work.
            cursor.execute(f"SELECT count(*) FROM {floe.warehouse}.atk.victim WHERE id > $1", parameters=(1,))
            assert cursor.fetchone() == (2,)


@pytest.fixture
def slow_commits(tmp_path):
    """Floe committing ingested rows every 8 s, so that a schema can change between a
    request's acknowledgement and its commit."""
    floe = start_floe(tmp_path, extra_args=("--ingest-commit-interval-ms", "8000"))
    floe.pyiceberg().create_namespace("ing")
    yield floe
    stop_floe(floe)


def ndjson(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def test_a_column_renamed_after_the_acknowledgement_keeps_its_values(slow_commits):
    floe = slow_commits
    table = floe.pyiceberg().create_table("ing.renamed", schema=SCHEMA)
    token = floe.token()
    first = post(floe, "ing.renamed", ndjson([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]), token, "application/x-ndjson")
    assert first.status_code == 202 and first.json()["committed"] is False, first.text
    with table.update_schema() as update:
        update.rename_column("name", "label")
    second = post(floe, "ing.renamed", ndjson([{"id": 3, "label": "c"}]), token, "application/x-ndjson", wait="commit")
    assert second.status_code == 200, second.text
    renamed = floe.pyiceberg().load_table("ing.renamed")
    # One snapshot holds both requests: the first was committed after the rename.
    assert len(renamed.snapshots()) == 1
    rows = sorted(renamed.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "label": "a"}, {"id": 2, "label": "b"}, {"id": 3, "label": "c"}]


def test_a_required_column_added_after_the_acknowledgement_does_not_wedge_the_log(slow_commits):
    floe = slow_commits
    table = floe.pyiceberg().create_table("ing.required", schema=SCHEMA)
    token = floe.token()
    first = post(floe, "ing.required", ndjson([{"id": 1, "name": "a"}]), token, "application/x-ndjson")
    assert first.status_code == 202, first.text
    with table.update_schema(allow_incompatible_changes=True) as update:
        update.add_column("tenant", LongType(), required=True)
    second = post(floe, "ing.required", ndjson([{"id": 2, "tenant": 7}]), token, "application/x-ndjson", wait="commit")
    assert second.status_code == 200, second.text
    # The log goes on: the entry it could not write is a dead letter, kept beside the log as
    # acknowledged (for replay) and as rows of ing.required__dead_letters (to read).
    third = post(floe, "ing.required", ndjson([{"id": 3, "tenant": 8}]), token, "application/x-ndjson", wait="commit")
    assert third.status_code == 200, third.text
    rows = sorted(floe.pyiceberg().load_table("ing.required").scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 2, "name": None, "tenant": 7}, {"id": 3, "name": None, "tenant": 8}]

    status = floe.api("GET", "/api/v1/ingest/status").json()["tables"]
    log = [t for t in status if t["table"] == "required"][0]
    assert log["dead-letter-entries"] == 1 and log["pending-entries"] == 0, log
    assert log["last-error"] is None, log
    from pathlib import Path

    letters = Path(log["dead-letter-dir"])
    entry = next(letters.glob("*.arrow"))
    kept = pa.ipc.open_stream(entry.read_bytes()).read_all()
    assert kept.column("id").to_pylist() == [1] and kept.column("name").to_pylist() == ["a"]
    reason = json.loads(entry.with_suffix(".json").read_text())
    assert "tenant" in reason["error"], reason
    metrics = floe.api("GET", "/metrics").text
    assert f'floe_ingest_dead_letters_total{{table="{floe.warehouse}.ing.required"}} 1' in metrics
    # And in the one dead-letter form every door shares: a row per row, queryable.
    deadline = time.time() + 30
    while True:
        answer = floe.api("POST", "/api/v1/sql", json={
            "sql": 'SELECT door, "offset", reason, CAST(record AS VARCHAR) AS record FROM ing.required__dead_letters',
            "warehouse": floe.warehouse})
        if (answer.status_code == 200 and answer.json()["rows"]) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert answer.status_code == 200, answer.text
    [letter] = answer.json()["rows"]
    assert letter["door"] == "http" and letter["offset"] == first.json()["sequence"], letter
    assert "tenant" in letter["reason"] and json.loads(letter["record"]) == {"id": 1, "name": "a"}, letter
