"""Arrow Flight SQL front door driven by ADBC's Flight SQL driver from PyPI: handshake with
client credentials, queries as Arrow tables, read-data enforced, statements audited."""

from __future__ import annotations

import time

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pyarrow as pa
import pytest
from conftest import ROOT_ID, ROOT_SECRET
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, LongType, NestedField, StringType
from test_governance import make_principal


@pytest.fixture
def flight_floe(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("fs")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "score", DoubleType(), required=False),
    )
    table = catalog.create_table("fs.scores", schema=schema)
    table.append(pa.table({"id": pa.array(range(1000), pa.int64()), "name": [f"n{i % 7}" for i in range(1000)], "score": [i / 2 for i in range(1000)]}))
    return floe


def connect(floe, client_id: str = ROOT_ID, secret: str = ROOT_SECRET, **headers):
    db_kwargs = {"username": client_id, "password": secret}
    for name, value in headers.items():
        db_kwargs[f"adbc.flight.sql.rpc.call_header.{name}"] = value
    return flight_sql.connect(f"grpc://127.0.0.1:{floe.flight_port}", db_kwargs=db_kwargs, autocommit=True)


def test_adbc_runs_queries(flight_floe):
    with connect(flight_floe) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT name, count(*) AS n, sum(score) AS total FROM fs.scores GROUP BY name ORDER BY name")
        result = cursor.fetch_arrow_table()
        assert result.column_names == ["name", "n", "total"]
        assert result.num_rows == 7
        assert sum(result["n"].to_pylist()) == 1000
        assert sum(result["total"].to_pylist()) == sum(i / 2 for i in range(1000))
        cursor.execute("SELECT id FROM fs.scores WHERE id >= 995 ORDER BY id")
        assert cursor.fetchall() == [(995,), (996,), (997,), (998,), (999,)]
    # Headers choose where bare names resolve.
    with connect(flight_floe, **{"x-floe-namespace": "fs"}) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT max(id) FROM scores")
        assert cursor.fetchone() == (999,)


def test_adbc_credentials_and_read_data(flight_floe):
    with pytest.raises(adbc_driver_manager.Error):
        with connect(flight_floe, ROOT_ID, "wrong") as conn, conn.cursor() as cursor:
            cursor.execute("SELECT 1")
    on_scores = {"type": "table", "warehouse": flight_floe.warehouse, "namespace": ["fs"], "name": "scores"}
    looker = make_principal(flight_floe, "flight-looker", [("read-metadata", on_scores)])
    with connect(flight_floe, *looker) as conn, conn.cursor() as cursor:
        with pytest.raises(adbc_driver_manager.Error, match="read-data"):
            cursor.execute("SELECT * FROM fs.scores")
            cursor.fetchall()
    reader = make_principal(flight_floe, "flight-reader", [("read-data", on_scores)])
    with connect(flight_floe, *reader) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM fs.scores")
        assert cursor.fetchone() == (1000,)
    for _ in range(50):
        records = flight_floe.api("GET", "/api/v1/audit?action=SQL%20(Flight%20SQL)&limit=1000").json()["records"]
        if {"flight-looker", "flight-reader"} <= {r["principal"] for r in records}:
            break
        time.sleep(0.1)
    assert any(r["principal"] == "flight-reader" and r["decision"] == "allow" and "count(*)" in r["details"] for r in records)
    # Handshakes are audited too, the refused one as a denial under the client id presented.
    handshakes = flight_floe.api("GET", "/api/v1/audit?action=HANDSHAKE%20(Flight%20SQL)&limit=1000").json()["records"]
    assert any(r["principal"] == f"client:{ROOT_ID}" and r["status"] == 401 and r["decision"] == "deny" for r in handshakes)
    assert any(r["principal"] == "flight-reader" and r["status"] == 200 for r in handshakes)


def test_adbc_writes_run_once(flight_floe):
    # GetFlightInfo plans the statement; only DoGet runs it.
    with connect(flight_floe) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE fs.made (id BIGINT)")
        cursor.fetchall()
        cursor.execute("INSERT INTO fs.made VALUES (1), (2)")
        cursor.fetchall()
        cursor.execute("SELECT count(*) FROM fs.made")
        assert cursor.fetchone() == (2,)
    assert len(flight_floe.pyiceberg().load_table("fs.made").snapshots()) == 1


def test_adbc_executemany_inserts_every_parameter_row(flight_floe):
    """executemany binds many rows of parameters; the statement runs once per row (each
    audited) and the answer counts every row inserted."""
    with connect(flight_floe) as conn, conn.cursor() as cursor:
        cursor.execute("CREATE TABLE fs.many (id BIGINT, name VARCHAR)")
        cursor.fetchall()
        cursor.executemany("INSERT INTO fs.many VALUES ($1, $2)", [(i, f"n{i}") for i in range(5)])
        assert cursor.rowcount in (5, -1)
        cursor.execute("SELECT count(*), sum(id), min(name), max(name) FROM fs.many")
        assert cursor.fetchone() == (5, 10, "n0", "n4")
        # A parameter that cannot be its column's type is refused naming it.
        with pytest.raises(adbc_driver_manager.Error):
            cursor.executemany("INSERT INTO fs.many VALUES ($1, $2)", [("x", 1)])


def test_adbc_lists_catalogs_schemas_and_tables(flight_floe):
    """ADBC's get_objects, get_table_schema and get_table_types use Flight SQL's GetCatalogs,
    GetDbSchemas, GetTables and GetTableTypes; listings show only what the caller may see."""
    wh = flight_floe.warehouse
    with connect(flight_floe) as conn:
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        by_catalog = {o["catalog_name"]: o for o in objects}
        assert wh in by_catalog
        schemas = {s["db_schema_name"]: s for s in by_catalog[wh]["catalog_db_schemas"]}
        assert "fs" in schemas
        assert [t["table_name"] for t in schemas["fs"]["db_schema_tables"]] == ["scores"]
        assert schemas["fs"]["db_schema_tables"][0]["table_type"] == "BASE TABLE"
        schema = conn.adbc_get_table_schema("scores", catalog_filter=wh, db_schema_filter="fs")
        assert schema.names == ["id", "name", "score"]
        assert schema.field("id").type == pa.int64()
        assert schema.field("score").type == pa.float64()
        assert "BASE TABLE" in conn.adbc_get_table_types()
        filtered = conn.adbc_get_objects(depth="tables", table_name_filter="sco%").read_all().to_pylist()
        names = [t["table_name"] for o in filtered for s in o["catalog_db_schemas"] or [] for t in s["db_schema_tables"] or []]
        assert names == ["scores"]

    # A principal granted nothing sees no tables at all.
    nobody = make_principal(flight_floe, "flight-nobody", [])
    with connect(flight_floe, *nobody) as conn:
        objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        tables = [t for o in objects for s in o["catalog_db_schemas"] or [] for t in s["db_schema_tables"] or []]
        assert tables == []


def test_adbc_binds_parameters(flight_floe):
    """Prepared statements with $1, $2 placeholders: ADBC binds the values through DoPut; a
    value that cannot be the placeholder's type is refused naming the parameter."""
    with connect(flight_floe) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT id, name FROM fs.scores WHERE id BETWEEN $1 AND $2 AND name <> $3 ORDER BY id", parameters=(10, 15, "n3"))
        assert cursor.fetchall() == [(11, "n4"), (12, "n5"), (13, "n6"), (14, "n0"), (15, "n1")]
        # The same statement again with other values.
        cursor.execute("SELECT count(*) FROM fs.scores WHERE score > $1", parameters=(499.0,))
        assert cursor.fetchone() == (1,)
        with pytest.raises(adbc_driver_manager.Error, match=r"\$1"):
            cursor.execute("SELECT count(*) FROM fs.scores WHERE id = $1", parameters=("eleven",))
            cursor.fetchall()
