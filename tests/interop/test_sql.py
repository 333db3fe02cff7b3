"""Floe's SQL engine (POST /api/v1/sql) over tables other engines wrote: the same rows as
PyIceberg and DuckDB read, old files read under the evolved schema by field id, partitions
pruned before any file is opened, and read-data enforced."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import requests
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)
from test_governance import make_principal


@pytest.fixture(params=["sqlite-local", "postgres-s3"])
def floe_sql(request, tmp_path):
    from conftest import start_floe, stop_floe

    backend, storage = request.param.split("-")
    server = start_floe(tmp_path, backend, storage)
    yield server
    stop_floe(server)


def sql(floe, statement: str, token: str | None = None, arrow: bool = False, **options) -> requests.Response:
    headers = {"Accept": "application/vnd.apache.arrow.stream"} if arrow else {}
    return floe.api("POST", "/api/v1/sql", token=token, json={"sql": statement, **options}, headers=headers)


def arrow_rows(floe, statement: str, **options) -> pa.Table:
    response = sql(floe, statement, arrow=True, **options)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/vnd.apache.arrow.stream"
    return pa.ipc.open_stream(response.content).read_all()


SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "small", IntegerType(), required=False),
    NestedField(3, "name", StringType(), required=False),
    NestedField(4, "ratio", DoubleType(), required=False),
    NestedField(5, "approx", FloatType(), required=False),
    NestedField(6, "flag", BooleanType(), required=False),
    NestedField(7, "day", DateType(), required=False),
    NestedField(8, "at", TimestampType(), required=False),
    NestedField(9, "at_tz", TimestamptzType(), required=False),
    NestedField(10, "price", DecimalType(12, 2), required=False),
    NestedField(11, "blob", BinaryType(), required=False),
)


def typed_rows(start: int, count: int, day: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "small": pa.array([i % 1000 if i % 7 else None for i in ids], pa.int32()),
            "name": pa.array([f"name-{i}" if i % 5 else None for i in ids], pa.large_string()),
            "ratio": pa.array([i / 3 for i in ids], pa.float64()),
            "approx": pa.array([float(i) / 8 for i in ids], pa.float32()),
            "flag": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
            "day": pa.array([datetime.date(2026, 1, day)] * count, pa.date32()),
            "at": pa.array([datetime.datetime(2026, 1, day, 0, 0) + datetime.timedelta(seconds=i) for i in ids], pa.timestamp("us")),
            "at_tz": pa.array(
                [datetime.datetime(2026, 1, day, tzinfo=datetime.timezone.utc) + datetime.timedelta(minutes=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "price": pa.array([decimal.Decimal(i) / 100 for i in ids], pa.decimal128(12, 2)),
            "blob": pa.array([str(i).encode() for i in ids], pa.large_binary()),
        }
    )


def normalized(table: pa.Table) -> list[dict]:
    """Rows in id order, with string and binary view types compared by value."""
    return table.sort_by("id").to_pylist()


def test_floe_reads_every_type_as_pyiceberg_and_duckdb_do(floe_sql):
    catalog = floe_sql.pyiceberg()
    catalog.create_namespace("lake")
    spec = PartitionSpec(PartitionField(source_id=7, field_id=1000, transform=DayTransform(), name="day_day"))
    table = catalog.create_table("lake.typed", schema=SCHEMA, partition_spec=spec)
    for day in (1, 2, 3):
        table.append(typed_rows(day * 1000, 400, day))

    floe = arrow_rows(floe_sql, "SELECT * FROM lake.typed", warehouse=floe_sql.warehouse)
    assert floe.num_rows == 1200
    expected = catalog.load_table("lake.typed").scan().to_arrow()
    assert normalized(floe) == normalized(expected)

    # JSON rows answer the same numbers; a DuckDB attach over the same catalog agrees.
    aggregate = "SELECT count(*) AS n, sum(id) AS ids, count(name) AS names, sum(small) AS smalls, min(at) AS first FROM lake.typed"
    answer = sql(floe_sql, aggregate, warehouse=floe_sql.warehouse)
    assert answer.status_code == 200, answer.text
    row = answer.json()["rows"][0]
    assert (row["n"], row["ids"], row["names"]) == (1200, sum(expected["id"].to_pylist()), pc.count(expected["name"]).as_py())
    assert row["smalls"] == pc.sum(expected["small"]).as_py()
    from test_duckdb import attach

    duck = attach(floe_sql).execute(
        "SELECT count(*), sum(id), count(name), sum(small) FROM floe.lake.typed"
    ).fetchone()
    assert duck == (row["n"], row["ids"], row["names"], row["smalls"])


def test_old_files_read_under_the_evolved_schema(floe_sql):
    catalog = floe_sql.pyiceberg()
    catalog.create_namespace("evo")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "city", StringType(), required=False),
        NestedField(3, "n", IntegerType(), required=False),
        NestedField(4, "gone", StringType(), required=False),
    )
    table = catalog.create_table("evo.t", schema=schema)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "city": ["oslo", "lima"], "n": pa.array([10, 20], pa.int32()), "gone": ["x", "y"]}))
    with table.update_schema() as update:
        update.rename_column("city", "town")
        update.update_column("n", LongType())
        update.delete_column("gone")
        update.add_column("note", StringType())
    table = catalog.load_table("evo.t")
    table.append(pa.table({"id": pa.array([3], pa.int64()), "town": ["rome"], "n": pa.array([30], pa.int64()), "note": ["new"]}))

    rows = arrow_rows(floe_sql, "SELECT * FROM evo.t ORDER BY id", warehouse=floe_sql.warehouse)
    assert rows.column_names == ["id", "town", "n", "note"]
    assert rows.schema.field("n").type == pa.int64()
    assert rows.to_pylist() == [
        {"id": 1, "town": "oslo", "n": 10, "note": None},
        {"id": 2, "town": "lima", "n": 20, "note": None},
        {"id": 3, "town": "rome", "n": 30, "note": "new"},
    ]
    # Filters on a renamed column prune and match old files too.
    assert arrow_rows(floe_sql, "SELECT id FROM evo.t WHERE town = 'lima'", warehouse=floe_sql.warehouse)["id"].to_pylist() == [2]


def test_a_day_filter_reads_only_that_days_files(floe_sql):
    catalog = floe_sql.pyiceberg()
    catalog.create_namespace("pr")
    spec = PartitionSpec(PartitionField(source_id=7, field_id=1000, transform=DayTransform(), name="day_day"))
    table = catalog.create_table("pr.events", schema=SCHEMA, partition_spec=spec)
    for day in (1, 2, 3, 4):
        table.append(typed_rows(day * 100, 10, day))
    plan = sql(
        floe_sql,
        "EXPLAIN SELECT count(*) FROM pr.events WHERE day = DATE '2026-01-03'",
        warehouse=floe_sql.warehouse,
    )
    assert plan.status_code == 200, plan.text
    physical = next(r["plan"] for r in plan.json()["rows"] if r["plan_type"] == "physical_plan")
    scanned = [part for part in physical.split() if ".parquet" in part]
    assert len(scanned) == 1 and "day_day=2026-01-03" in scanned[0], physical
    count = sql(floe_sql, "SELECT count(*) AS n FROM pr.events WHERE day = DATE '2026-01-03'", warehouse=floe_sql.warehouse)
    assert count.json()["rows"] == [{"n": 10}]


def test_sql_needs_read_data_and_is_audited_with_its_text(floe_sql):
    catalog = floe_sql.pyiceberg()
    catalog.create_namespace("sec")
    catalog.create_table("sec.t", schema=Schema(NestedField(1, "id", LongType(), required=False))).append(
        pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    )
    on_t = {"type": "table", "warehouse": floe_sql.warehouse, "namespace": ["sec"], "name": "t"}
    statement = "SELECT sum(id) AS s FROM sec.t"

    looker = floe_sql.token(*make_principal(floe_sql, "looker", [("read-metadata", on_t)]))
    refused = sql(floe_sql, statement, token=looker, warehouse=floe_sql.warehouse)
    assert refused.status_code == 403, refused.text
    assert "read-data" in refused.json()["error"]["message"]

    stranger = floe_sql.token(*make_principal(floe_sql, "stranger", []))
    hidden = sql(floe_sql, statement, token=stranger, warehouse=floe_sql.warehouse)
    assert hidden.status_code == 400 and "not found" in hidden.text, hidden.text

    reader = floe_sql.token(*make_principal(floe_sql, "reader", [("read-data", on_t)]))
    allowed = sql(floe_sql, statement, token=reader, warehouse=floe_sql.warehouse)
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["rows"] == [{"s": 6}]

    assert sql(floe_sql, "SELEC 1").status_code == 400
    assert sql(floe_sql, "CREATE VIEW sec.v AS SELECT 1", warehouse=floe_sql.warehouse).status_code in (400, 406)

    import time

    for _ in range(50):
        records = floe_sql.api("GET", "/api/v1/audit?action=POST%20/api/v1/sql&limit=1000").json()["records"]
        mine = [r for r in records if r["principal"] in ("looker", "reader")]
        if len(mine) >= 2:
            break
        time.sleep(0.1)
    assert {(r["principal"], r["decision"], r["status"]) for r in mine} == {("looker", "deny", 403), ("reader", "allow", 200)}
    assert all(statement in r["details"] for r in mine)


def test_floe_sql_command_remote_and_embedded(floe):
    import subprocess

    from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET

    catalog = floe.pyiceberg()
    catalog.create_namespace("cli")
    catalog.create_table("cli.t", schema=Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))).append(
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["a", "b,c", None]})
    )

    def floe_sql(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([FLOE_BIN, "sql", *args], input=stdin, capture_output=True, text=True, timeout=60)

    remote = ["--server", floe.base, "--client-id", ROOT_ID, "--client-secret", ROOT_SECRET]
    csv = floe_sql(*remote, "--format", "csv", "-e", "SELECT id, s FROM cli.t ORDER BY id")
    assert csv.returncode == 0, csv.stderr
    assert csv.stdout.splitlines() == ["id,s", "1,a", '2,"b,c"', "3,"]
    as_json = floe_sql(*remote, "--format", "json", "-e", "SELECT count(*) AS n FROM cli.t")
    assert as_json.stdout.strip() == '{"n":3}'
    table = floe_sql(*remote, "-e", "SELECT max(id) AS top FROM cli.t")
    assert "| top |" in table.stdout and "| 3   |" in table.stdout and "(1 row)" in table.stdout
    missing = floe_sql(*remote, "-e", "SELECT * FROM cli.nope")
    assert missing.returncode != 0 and "not found" in missing.stderr

    # Embedded on the data directory (next to the running server), statements from stdin.
    embedded = floe_sql(
        "--embedded", "--data-dir", str(floe.data_dir), "--format", "csv",
        stdin="SELECT sum(id) AS total FROM cli.t;\nSELECT count(*)\n  AS n FROM cli.t;\n",
    )
    assert embedded.returncode == 0, embedded.stderr
    assert embedded.stdout.splitlines() == ["total", "6", "n", "3"]
    script = floe.data_dir / "script.sql"
    script.write_text("-- two statements\nSELECT 1 AS one; SELECT 'x;y' AS s;\n")
    from_file = floe_sql(*remote, "--format", "csv", "-f", str(script))
    assert from_file.stdout.splitlines() == ["one", "1", "s", "x;y"]


def test_time_travel_and_metadata_tables(floe_sql):
    catalog = floe_sql.pyiceberg()
    catalog.create_namespace("tt")
    table = catalog.create_table("tt.t", schema=Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False)))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "s": ["a", "b"]}))
    first = catalog.load_table("tt.t").current_snapshot()
    table = catalog.load_table("tt.t")
    table.manage_snapshots().create_tag(first.snapshot_id, "v1").commit()
    with table.update_schema() as update:
        update.rename_column("s", "label")
    table = catalog.load_table("tt.t")
    table.append(pa.table({"id": pa.array([3], pa.int64()), "label": ["c"]}))
    w = {"warehouse": floe_sql.warehouse}

    def rows(statement):
        answer = sql(floe_sql, statement, **w)
        assert answer.status_code == 200, answer.text
        return answer.json()["rows"]

    # The snapshot's own schema: `s`, not `label`.
    assert rows(f'SELECT * FROM tt."t@snapshot={first.snapshot_id}" ORDER BY id') == [{"id": 1, "s": "a"}, {"id": 2, "s": "b"}]
    assert rows('SELECT count(*) AS n FROM tt."t@ref=v1"') == [{"n": 2}]
    assert rows(f'SELECT count(*) AS n FROM tt."t@ts={first.timestamp_ms}"') == [{"n": 2}]
    assert rows('SELECT count(*) AS n FROM tt."t@ref=main"') == [{"n": 3}]
    assert rows("SELECT count(*) AS n FROM tt.t") == [{"n": 3}]
    early = sql(floe_sql, 'SELECT * FROM tt."t@ts=2001-01-01"', **w)
    assert early.status_code == 400 and "no snapshot at or before" in early.text

    snapshots = rows('SELECT snapshot_id, operation FROM tt."t$snapshots"')
    assert len(snapshots) == 2 and all(s["operation"] == "append" for s in snapshots)
    history = rows('SELECT snapshot_id, is_current_ancestor FROM tt."t$history" ORDER BY made_current_at')
    assert history[0] == {"snapshot_id": first.snapshot_id, "is_current_ancestor": True}
    assert {(r["name"], r["type"]) for r in rows('SELECT name, type FROM tt."t$refs"')} == {("main", "BRANCH"), ("v1", "TAG")}
    files = rows('SELECT sum(record_count) AS n, count(*) AS files FROM tt."t$files"')
    assert files == [{"n": 3, "files": 2}]
    assert rows('SELECT count(*) AS n FROM tt."t$manifests"')[0]["n"] >= 1
    assert sql(floe_sql, 'SELECT * FROM tt."t$nope"', **w).status_code == 400


def test_floe_writes_tables_pyiceberg_and_duckdb_read(floe_sql):
    w = {"warehouse": floe_sql.warehouse}

    def ok(statement):
        answer = sql(floe_sql, statement, **w)
        assert answer.status_code == 200, f"{statement}: {answer.text}"
        return answer.json()["rows"]

    ok("CREATE SCHEMA mart")
    ok("CREATE SCHEMA IF NOT EXISTS mart")
    ok(
        "CREATE TABLE mart.events (id BIGINT, ts TIMESTAMP, city VARCHAR, amount DOUBLE) "
        "PARTITIONED BY (day(ts), city)"
    )
    inserted = ok(
        "INSERT INTO mart.events VALUES "
        "(1, TIMESTAMP '2026-01-01 10:00:00', 'oslo', 1.5), (2, TIMESTAMP '2026-01-02 11:00:00', 'lima', 2.5), "
        "(3, TIMESTAMP '2026-01-02 12:00:00', 'oslo', NULL), (4, NULL, NULL, 4.5)"
    )
    assert inserted == [{"count": 4}]
    assert ok("INSERT INTO mart.events SELECT id + 10, ts, city, amount FROM mart.events WHERE id <= 2") == [{"count": 2}]
    assert ok("CREATE TABLE mart.by_city AS SELECT city, count(*) AS n, sum(amount) AS total FROM mart.events GROUP BY city") == [
        {"count": 3}
    ]

    catalog = floe_sql.pyiceberg()
    events = catalog.load_table("mart.events")
    assert [(f.name, str(f.transform)) for f in events.spec().fields] == [("ts_day", "day"), ("city", "identity")]
    py = sorted(events.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    floe_rows = ok("SELECT * FROM mart.events ORDER BY id")
    assert [r["id"] for r in py] == [r["id"] for r in floe_rows] == [1, 2, 3, 4, 11, 12]
    assert [r["city"] for r in py] == [r["city"] for r in floe_rows]
    assert [r["amount"] for r in py] == [r["amount"] for r in floe_rows]
    assert len(events.current_snapshot().summary.additional_properties) > 0
    files = events.inspect.files()
    assert files.num_rows >= 4, "one file per partition"

    from test_duckdb import attach

    duck = attach(floe_sql)
    assert duck.execute("SELECT count(*), sum(id), count(city) FROM floe.mart.events").fetchone() == (6, 33, 5)
    assert sorted(duck.execute("SELECT city, n, total FROM floe.mart.by_city").fetchall(), key=str) == sorted(
        [(r["city"], r["n"], r["total"]) for r in ok("SELECT * FROM mart.by_city")], key=str
    )

    ok("DROP TABLE mart.by_city")
    ok("DROP TABLE IF EXISTS mart.by_city")
    assert not catalog.table_exists("mart.by_city")


def test_writes_need_their_privileges(floe_sql):
    catalog = floe_sql.pyiceberg()
    catalog.create_namespace("guarded")
    catalog.create_table("guarded.t", schema=Schema(NestedField(1, "id", LongType(), required=False)))
    on_t = {"type": "table", "warehouse": floe_sql.warehouse, "namespace": ["guarded"], "name": "t"}
    reader = floe_sql.token(*make_principal(floe_sql, "sql-reader", [("read-data", on_t)]))
    refused = sql(floe_sql, "INSERT INTO guarded.t VALUES (1)", token=reader, warehouse=floe_sql.warehouse)
    assert refused.status_code == 403 and "write-data" in refused.text
    assert catalog.load_table("guarded.t").current_snapshot() is None, "nothing committed"
    created = sql(floe_sql, "CREATE TABLE guarded.other (id BIGINT)", token=reader, warehouse=floe_sql.warehouse)
    assert created.status_code == 403, created.text
    dropped = sql(floe_sql, "DROP TABLE guarded.t", token=reader, warehouse=floe_sql.warehouse)
    assert dropped.status_code == 403, dropped.text
    writer = floe_sql.token(*make_principal(floe_sql, "sql-writer", [("read-data", on_t), ("write-data", on_t)]))
    assert sql(floe_sql, "INSERT INTO guarded.t VALUES (1), (2)", token=writer, warehouse=floe_sql.warehouse).status_code == 200
    assert sorted(catalog.load_table("guarded.t").scan().to_arrow()["id"].to_pylist()) == [1, 2]


def make_big_table(floe) -> None:
    """big.t: a million ids with 64-character strings (about 80 MB as DataFusion holds them)."""
    w = {"warehouse": floe.warehouse}
    assert sql(floe, "CREATE SCHEMA big", **w).status_code == 200
    made = sql(
        floe,
        "CREATE TABLE big.t AS SELECT value AS id, md5(CAST(value AS VARCHAR)) || md5(CAST(value * 7 AS VARCHAR)) AS h "
        "FROM generate_series(1, 1000000)",
        **w,
    )
    assert made.status_code == 200, made.text


def test_queries_spill_under_their_memory_limit_and_wait_in_line(tmp_path):
    import time
    from concurrent.futures import ThreadPoolExecutor

    from conftest import start_floe, stop_floe

    floe = start_floe(tmp_path, extra_args=("--query-memory-limit-mb", "64", "--max-concurrent-queries", "1"))
    try:
        w = {"warehouse": floe.warehouse}
        make_big_table(floe)
        # Sorting ~80 MB of strings (as DataFusion holds them) in a 64 MiB budget only works by
        # spilling to disk.
        ordered = arrow_rows(floe, "SELECT h FROM big.t ORDER BY h", **w)
        assert ordered.num_rows == 1000000
        values = ordered["h"].to_pylist()
        assert values == sorted(values)
        # One query at a time: the others wait their turn (as /metrics shows) and all complete.
        with ThreadPoolExecutor(5) as pool:
            heavy = "SELECT count(*) AS n FROM (SELECT h FROM big.t WHERE id % 4 = {} ORDER BY h OFFSET 1)"
            running = [pool.submit(sql, floe, heavy.format(i), **w) for i in range(4)]
            waiting_seen = 0
            while not all(f.done() for f in running):
                waiting_seen = max(waiting_seen, metric(floe, "floe_sql_queries_waiting"))
                time.sleep(0.02)
            answers = [f.result() for f in running]
        assert [a.json()["rows"][0]["n"] for a in answers] == [249999] * 4
        assert waiting_seen >= 2, waiting_seen
        assert metric(floe, "floe_sql_queries_waiting") == 0
    finally:
        stop_floe(floe)


def test_a_join_too_big_for_a_hash_table_runs_again_with_sort_merge_joins(tmp_path):
    from conftest import start_floe, stop_floe

    floe = start_floe(tmp_path, extra_args=("--query-memory-limit-mb", "144"))
    try:
        w = {"warehouse": floe.warehouse}
        make_big_table(floe)
        # The hash table of one side (a million ids with 64-character strings) does not fit in
        # 144 MiB and hash joins cannot spill: the query runs again with sort-merge joins.
        joined = sql(floe, "SELECT count(*) AS n, max(a.h || b.h) AS top FROM big.t a JOIN big.t b ON a.id = b.id", **w)
        assert joined.status_code == 200, joined.text
        assert joined.json()["rows"][0]["n"] == 1000000
        assert "running it again with sort-merge joins" in (tmp_path / "floe.log").read_text()
    finally:
        stop_floe(floe)


def metric(floe, name: str) -> float:
    text = requests.get(f"{floe.base}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_repeated_reads_come_from_the_cache(tmp_path):
    from conftest import start_floe, stop_floe

    # A tiny memory tier: what does not fit moves to the disk tier.
    floe = start_floe(tmp_path, extra_args=("--cache-memory-mb", "1", "--cache-disk-mb", "256"))
    try:
        w = {"warehouse": floe.warehouse}
        assert sql(floe, "CREATE SCHEMA c", **w).status_code == 200
        made = sql(floe, "CREATE TABLE c.t AS SELECT value AS id, md5(CAST(value AS VARCHAR)) AS h FROM generate_series(1, 200000)", **w)
        assert made.status_code == 200, made.text
        query = "SELECT count(*) AS n, max(h) AS top FROM c.t WHERE id % 3 = 0"
        first = sql(floe, query, **w).json()["rows"]
        misses = metric(floe, "floe_sql_cache_misses_total")
        assert misses > 0
        assert sql(floe, query, **w).json()["rows"] == first
        assert metric(floe, "floe_sql_cache_misses_total") == misses, "the second run fetches nothing"
        assert metric(floe, 'floe_sql_cache_hits_total{tier="disk"}') > 0
        assert (tmp_path / "floe-data" / "cache").is_dir()
    finally:
        stop_floe(floe)


def test_slt_over_tables_pyiceberg_wrote(floe_sql):
    """tests/slt/engines/pyiceberg.slt over tables PyIceberg wrote: every primitive type with
    nulls, nested types, each partition transform, schema and partition evolution, a
    copy-on-write delete, time travel and the metadata tables."""
    from pathlib import Path

    from pyiceberg.transforms import (
        BucketTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )
    from pyiceberg.types import FixedType, ListType, MapType, StructType, TimeType, UUIDType
    from slt import run_file

    catalog = floe_sql.pyiceberg()
    catalog.create_namespace("eng")

    # Every primitive type, and a row of nulls.
    types = catalog.create_table(
        "eng.types",
        Schema(
            NestedField(1, "b", BooleanType()),
            NestedField(2, "i", IntegerType()),
            NestedField(3, "l", LongType()),
            NestedField(4, "f", FloatType()),
            NestedField(5, "d", DoubleType()),
            NestedField(6, "dec", DecimalType(12, 2)),
            NestedField(7, "dt", DateType()),
            NestedField(8, "t", TimeType()),
            NestedField(9, "ts", TimestampType()),
            NestedField(10, "tstz", TimestamptzType()),
            NestedField(11, "s", StringType()),
            NestedField(12, "u", UUIDType()),
            NestedField(13, "fx", FixedType(3)),
            NestedField(14, "bin", BinaryType()),
        ),
    )
    import uuid as uuidlib

    types.append(
        pa.Table.from_pylist(
            [
                {
                    "b": True, "i": -7, "l": 1 << 40, "f": 1.5, "d": -2.25,
                    "dec": decimal.Decimal("1234.56"), "dt": datetime.date(2026, 3, 1),
                    "t": datetime.time(12, 30, 1, 5), "ts": datetime.datetime(2026, 3, 1, 4, 5, 6, 7),
                    "tstz": datetime.datetime(2026, 3, 1, 4, 5, 6, tzinfo=datetime.timezone.utc),
                    "s": "héllo", "u": uuidlib.UUID("12345678-1234-5678-1234-567812345678").bytes,
                    "fx": b"abc", "bin": b"\x00\xff",
                },
                {k: None for k in ("b", "i", "l", "f", "d", "dec", "dt", "t", "ts", "tstz", "s", "u", "fx", "bin")},
            ],
            schema=types.schema().as_arrow(),
        )
    )

    # Nested types.
    nested = catalog.create_table(
        "eng.nested",
        Schema(
            NestedField(1, "id", LongType()),
            NestedField(2, "point", StructType(NestedField(3, "x", DoubleType()), NestedField(4, "label", StringType()))),
            NestedField(5, "tags", ListType(6, StringType())),
            NestedField(7, "attrs", MapType(8, StringType(), 9, IntegerType())),
            NestedField(10, "items", ListType(11, StructType(NestedField(12, "sku", StringType()), NestedField(13, "qty", IntegerType())))),
        ),
    )
    nested.append(
        pa.Table.from_pylist(
            [
                {"id": 1, "point": {"x": 1.5, "label": "a"}, "tags": ["red", "blue"], "attrs": [("k", 1)],
                 "items": [{"sku": "s1", "qty": 2}, {"sku": "s2", "qty": None}]},
                {"id": 2, "point": None, "tags": [], "attrs": None, "items": None},
                {"id": 3, "point": {"x": None, "label": None}, "tags": None, "attrs": [], "items": []},
            ],
            schema=nested.schema().as_arrow(),
        )
    )

    # Each partition transform.
    transforms = catalog.create_table(
        "eng.transforms",
        Schema(
            NestedField(1, "id", LongType()),
            NestedField(2, "region", StringType()),
            NestedField(3, "dt", DateType()),
            NestedField(4, "ts", TimestampType()),
            NestedField(5, "tstz", TimestamptzType()),
            NestedField(6, "name", StringType()),
            NestedField(7, "seen", TimestampType()),
        ),
        partition_spec=PartitionSpec(
            PartitionField(2, 1000, IdentityTransform(), "region"),
            PartitionField(3, 1001, YearTransform(), "dt_year"),
            PartitionField(4, 1002, MonthTransform(), "ts_month"),
            PartitionField(5, 1003, DayTransform(), "tstz_day"),
            PartitionField(7, 1004, HourTransform(), "seen_hour"),
            PartitionField(1, 1005, BucketTransform(4), "id_bucket"),
            PartitionField(6, 1006, TruncateTransform(2), "name_trunc"),
        ),
    )
    rows = []
    for n in range(12):
        rows.append(
            {
                "id": n, "region": ["eu", "us", None][n % 3], "dt": datetime.date(2024 + n % 3, 1 + n % 12, 1),
                "ts": datetime.datetime(2026, 1 + n % 2, 1, n, 0),
                "tstz": datetime.datetime(2026, 5, 1 + n % 4, tzinfo=datetime.timezone.utc),
                "name": f"{'abc'[n % 3]}x{n}",
                "seen": datetime.datetime(2026, 7, 1, n % 2, 30),
            }
        )
    transforms.append(pa.Table.from_pylist(rows, schema=transforms.schema().as_arrow()))

    # Schema and partition evolution across three appends.
    evolve = catalog.create_table(
        "eng.evolve",
        Schema(
            NestedField(1, "id", IntegerType()),
            NestedField(2, "name", StringType()),
            NestedField(3, "score", FloatType()),
            NestedField(4, "gone", StringType()),
        ),
    )
    evolve.append(pa.Table.from_pylist(
        [{"id": 1, "name": "one", "score": 0.5, "gone": "x"}, {"id": 2, "name": "two", "score": 1.5, "gone": "y"}],
        schema=evolve.schema().as_arrow(),
    ))
    first_snapshot = evolve.current_snapshot().snapshot_id
    evolve.manage_snapshots().create_tag(first_snapshot, "v1").commit()
    with evolve.update_schema() as update:
        update.rename_column("name", "label")
        update.update_column("id", LongType())
        update.update_column("score", DoubleType())
        update.delete_column("gone")
        update.add_column("region", StringType())
    evolve.append(pa.Table.from_pylist(
        [{"id": 3, "label": "three", "score": 2.5, "region": "eu"}], schema=evolve.schema().as_arrow()
    ))
    with evolve.update_spec() as spec:
        spec.add_identity("region")
    evolve.append(pa.Table.from_pylist(
        [{"id": 4, "label": "four", "score": 3.5, "region": "us"}, {"id": 5, "label": None, "score": None, "region": "eu"}],
        schema=evolve.schema().as_arrow(),
    ))
    # A copy-on-write delete, the kind PyIceberg writes.
    evolve.delete("id = 2")

    # A data file that does not store its identity-partition column (as files added from
    # elsewhere or migrated from Hive often don't): the value comes from the manifest.
    import io

    import pyarrow.parquet as pq
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    added = catalog.create_table(
        "eng.added",
        Schema(NestedField(1, "id", LongType()), NestedField(2, "region", StringType())),
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region")),
    )
    buffer = io.BytesIO()
    ids = pa.table({"id": pa.array([10, 11, 12], pa.int64())})
    ids = ids.cast(pa.schema([pa.field("id", pa.int64(), metadata={"PARQUET:field_id": "1"})]))
    pq.write_table(ids, buffer)
    path = f"{added.location()}/data/region=apac/external.parquet"
    with added.io.new_output(path).create() as out:
        out.write(buffer.getvalue())
    with added.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            append.append_data_file(
                DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=path,
                    file_format=FileFormat.PARQUET,
                    partition=Record("apac"),
                    record_count=3,
                    file_size_in_bytes=len(buffer.getvalue()),
                    _table_format_version=2,
                )
            )
    added.append(pa.Table.from_pylist([{"id": 1, "region": "eu"}], schema=added.schema().as_arrow()))

    ran = run_file(
        floe_sql,
        Path(__file__).parent.parent / "slt" / "engines" / "pyiceberg.slt",
        {"first_snapshot": first_snapshot},
    )
    assert ran > 20
