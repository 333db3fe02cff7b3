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
