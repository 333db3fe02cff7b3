"""DuckDB's iceberg extension against Floe: it reads what PyIceberg wrote, and what it
creates and inserts PyIceberg reads back identically."""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import ROOT_ID, ROOT_SECRET
from duckdb_ext import connect
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType


@pytest.fixture(params=["sqlite-local", "postgres-s3"])
def floe_duck(request, tmp_path):
    from conftest import start_floe, stop_floe

    backend, storage = request.param.split("-")
    server = start_floe(tmp_path, backend, storage)
    yield server
    stop_floe(server)


def attach(floe, client_id: str = ROOT_ID, client_secret: str = ROOT_SECRET):
    con = connect()
    if floe.storage == "s3":
        props = floe.client_properties()
        endpoint = props["s3.endpoint"].removeprefix("http://")
        con.execute(
            f"""CREATE SECRET floe_s3 (TYPE s3, KEY_ID '{props["s3.access-key-id"]}',
                SECRET '{props["s3.secret-access-key"]}', ENDPOINT '{endpoint}', URL_STYLE 'path',
                USE_SSL false, REGION 'us-east-1')"""
        )
    props = floe.client_properties(client_id, client_secret)
    cid, secret = props["credential"].split(":", 1)
    con.execute(
        f"""CREATE SECRET floe_auth (TYPE iceberg, CLIENT_ID '{cid}', CLIENT_SECRET '{secret}',
            OAUTH2_SERVER_URI '{floe.token_uri}')"""
    )
    con.execute(f"ATTACH '{floe.warehouse}' AS floe (TYPE iceberg, ENDPOINT '{floe.catalog_uri}', SECRET floe_auth)")
    return con


def test_duckdb_reads_what_pyiceberg_wrote(floe_duck):
    catalog = floe_duck.pyiceberg()
    catalog.create_namespace("shop")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "city", StringType(), required=False),
        NestedField(3, "price", DoubleType(), required=False),
    )
    table = catalog.create_table(
        "shop.orders", schema=schema, partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "city"))
    )
    data = pa.table(
        {
            "id": pa.array(range(100), pa.int64()),
            "city": pa.array(["oslo", "lima", "pune", "rome"] * 25),
            "price": pa.array([i * 1.5 for i in range(100)], pa.float64()),
        }
    )
    table.append(data)
    table.delete(delete_filter="id < 10")
    con = attach(floe_duck)
    count, total = con.execute("SELECT count(*), sum(price) FROM floe.shop.orders").fetchone()
    expected = data.filter(pa.compute.greater_equal(data["id"], 10))
    assert count == expected.num_rows
    assert total == pytest.approx(sum(expected["price"].to_pylist()))
    by_city = con.execute("SELECT city, count(*) FROM floe.shop.orders GROUP BY city ORDER BY city").fetchall()
    assert [c for c, _ in by_city] == ["lima", "oslo", "pune", "rome"]


def test_pyiceberg_reads_what_duckdb_wrote(floe_duck):
    catalog = floe_duck.pyiceberg()
    catalog.create_namespace("duck")
    con = attach(floe_duck)
    con.execute("CREATE TABLE floe.duck.events (id BIGINT, name VARCHAR, score DOUBLE)")
    con.execute("INSERT INTO floe.duck.events SELECT i, 'n' || i::VARCHAR, i / 4 FROM range(50) t(i)")
    con.execute("INSERT INTO floe.duck.events VALUES (1000, 'last', 1.5)")
    duck_rows = con.execute("SELECT id, name, score FROM floe.duck.events ORDER BY id").fetchall()
    table = catalog.load_table("duck.events")
    arrow = table.scan().to_arrow().sort_by("id")
    py_rows = list(zip(arrow["id"].to_pylist(), arrow["name"].to_pylist(), arrow["score"].to_pylist()))
    assert py_rows == duck_rows
    assert len(py_rows) == 51
    assert len(table.snapshots()) >= 2


def cities(rows) -> list[tuple]:
    """(id, name, country, population, area) tuples, by id."""
    keys = ("id", "name", "country", "population", "area")
    return sorted(tuple(r[k] for k in keys) if isinstance(r, dict) else tuple(r) for r in rows)


def floe_sql_rows(floe, where: str = "") -> list[tuple]:
    statement = f"SELECT id, name, country, population, area FROM shop.cities {where} ORDER BY id"
    answer = floe.api("POST", "/api/v1/sql", json={"sql": statement, "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    return cities(answer.json()["rows"])


def test_floe_reads_plans_and_maintains_what_duckdb_wrote(floe_duck):
    """The README's DuckDB tour plus DuckDB's DELETE and UPDATE. DuckDB 1.4 writes the manifest
    entry's own schema into each manifest's `schema` key (no Iceberg schema parser accepts it)
    and labels its delete manifests `content: data`; Floe's SQL, its server-side scan planning,
    compaction, the table check and expiry read the table with the table metadata's schema,
    and every reader sees the rows PyIceberg sees."""
    from pyiceberg.expressions import And, EqualTo, GreaterThan
    from test_compaction import run_job
    from test_scan_planning import plan_url, server_planning

    floe = floe_duck
    # Only requested jobs: no compaction queued by DuckDB's commits.
    quiet = {"on": {"type": "warehouse", "warehouse": floe.warehouse}, "policy": {"small-file-trigger": 1000}}
    assert floe.api("PUT", "/api/v1/maintenance/policies", json=quiet).status_code == 200
    catalog = floe.pyiceberg()
    catalog.create_namespace("shop")
    con = attach(floe)
    con.execute("CREATE TABLE floe.shop.cities (id BIGINT, name VARCHAR, country VARCHAR, population BIGINT, area DOUBLE)")
    countries = ["NO", "PE", "IN", "UA"]
    for start in range(0, 60, 20):
        con.execute(
            f"""INSERT INTO floe.shop.cities SELECT i, 'city ' || i::VARCHAR, ['NO', 'PE', 'IN', 'UA'][i % 4 + 1],
                   1000 * i, i / 8 FROM range({start}, {start + 20}) t(i)"""
        )
    con.execute("DELETE FROM floe.shop.cities WHERE id % 7 = 0")
    con.execute("UPDATE floe.shop.cities SET population = population + 1, name = 'renamed' WHERE country = 'NO' AND id > 30")
    expected = [
        (i, "renamed" if countries[i % 4] == "NO" and i > 30 else f"city {i}", countries[i % 4],
         1000 * i + (1 if countries[i % 4] == "NO" and i > 30 else 0), i / 8)
        for i in range(60) if i % 7 != 0
    ]
    assert cities(con.execute("SELECT id, name, country, population, area FROM floe.shop.cities").fetchall()) == expected

    def pyiceberg_rows(table, row_filter=None):
        scan = table.scan(row_filter=row_filter) if row_filter is not None else table.scan()
        return cities(scan.to_arrow().to_pylist())

    client_planned = catalog.load_table("shop.cities")
    assert pyiceberg_rows(client_planned) == expected
    # Floe's SQL (the 400 "Fail to parse schema in manifest metadata … SchemaEnum" before).
    assert floe_sql_rows(floe) == expected
    filtered = [r for r in expected if r[2] == "PE" and r[3] > 20_000]
    assert floe_sql_rows(floe, "WHERE country = 'PE' AND population > 20000") == filtered
    # The files metadata table reads every live manifest entry, data and delete files alike.
    files = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT count(*) AS n FROM shop.cities$files", "warehouse": floe.warehouse})
    assert files.status_code == 200, files.text
    assert files.json()["rows"] == [{"n": len(client_planned.inspect.files())}], files.text

    # Server-side planning (a 500 before), as PyIceberg drives it and as a plain request.
    server_planned = server_planning(floe).load_table("shop.cities")
    assert pyiceberg_rows(server_planned) == expected
    pe = And(EqualTo("country", "PE"), GreaterThan("population", 20_000))
    assert pyiceberg_rows(server_planned, pe) == pyiceberg_rows(client_planned, pe) == filtered
    planned = floe.api("POST", plan_url(floe, "cities"), json={})
    assert planned.status_code == 200 and planned.json()["status"] == "completed", planned.text
    assert planned.json()["delete-files"], "DuckDB's position deletes are planned"

    # The check reads every manifest of every snapshot. What it finds is true: DuckDB's manifest
    # lists count a delete manifest's rows as deleted rows, where the spec counts the rows of
    # its added entries as added.
    check = {"warehouse": floe.warehouse, "namespace": ["shop"], "table": "cities"}
    report = floe.api("POST", "/api/v1/tables/check", json=check)
    assert report.status_code == 200, report.text
    assert report.json()["snapshots-checked"] == 5 and report.json()["manifests-checked"] == 6, report.text
    assert {f["damage"] for f in report.json()["findings"]} <= {"manifest-count-mismatch"}, report.text

    # Compaction applies DuckDB's deletes and rewrites its files; every reader agrees after.
    result = run_job(floe, "shop", "cities", "compact")
    assert result["rewritten-files"] > 0, result
    compacted = catalog.load_table("shop.cities")
    assert compacted.current_snapshot().summary.operation.value == "replace"
    assert pyiceberg_rows(compacted) == expected
    assert floe_sql_rows(floe) == expected
    assert cities(con.execute("SELECT id, name, country, population, area FROM floe.shop.cities").fetchall()) == expected

    # Expiry reads the manifests of the snapshots it lets go.
    body = {**check, "max-snapshot-age-ms": 0}
    expired = floe.api("POST", "/api/v1/maintenance/expire-snapshots", json=body)
    assert expired.status_code == 200, expired.text
    assert expired.json()["expired-snapshots"] and expired.json()["deleted-files"] > 0, expired.text
    assert pyiceberg_rows(catalog.load_table("shop.cities")) == expected
    assert floe_sql_rows(floe) == expected
