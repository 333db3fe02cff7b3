"""The PostgreSQL wire protocol front door: psql and psycopg (extended protocol) run SQL over
tables PyIceberg wrote, as Floe principals, with read-data enforced and statements audited."""

from __future__ import annotations

import datetime
import decimal
import os
import shutil
import subprocess

import psycopg
import pyarrow as pa
import pytest
from conftest import ROOT_ID, ROOT_SECRET
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, DateType, DecimalType, DoubleType, LongType, NestedField, StringType, TimestampType
from test_governance import make_principal

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "score", DoubleType(), required=False),
    NestedField(4, "ok", BooleanType(), required=False),
    NestedField(5, "day", DateType(), required=False),
    NestedField(6, "at", TimestampType(), required=False),
    NestedField(7, "price", DecimalType(10, 2), required=False),
)

ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "name": ["ann", None, "cy"],
        "score": [1.5, 2.5, None],
        "ok": [True, False, None],
        "day": pa.array([datetime.date(2026, 1, 1), datetime.date(2026, 1, 2), None], pa.date32()),
        "at": pa.array([datetime.datetime(2026, 1, 1, 8, 30), None, datetime.datetime(2026, 1, 3, 23, 59, 59)], pa.timestamp("us")),
        "price": pa.array([decimal.Decimal("1.10"), decimal.Decimal("20.00"), None], pa.decimal128(10, 2)),
    }
)


@pytest.fixture
def pg_floe(floe):
    catalog = floe.pyiceberg()
    catalog.create_namespace("shop")
    catalog.create_table("shop.items", schema=SCHEMA).append(ROWS)
    return floe


def connect(floe, user: str = ROOT_ID, password: str = ROOT_SECRET, **kwargs):
    return psycopg.connect(
        host="127.0.0.1", port=floe.pg_port, user=user, password=password, dbname=floe.warehouse, connect_timeout=10, **kwargs
    )


def test_psycopg_reads_typed_rows(pg_floe):
    with connect(pg_floe) as conn:
        rows = conn.execute("SELECT id, name, score, ok, day, at, price FROM shop.items ORDER BY id").fetchall()
    assert rows == [
        (1, "ann", 1.5, True, datetime.date(2026, 1, 1), datetime.datetime(2026, 1, 1, 8, 30), decimal.Decimal("1.10")),
        (2, None, 2.5, False, datetime.date(2026, 1, 2), None, decimal.Decimal("20.00")),
        (3, "cy", None, None, None, datetime.datetime(2026, 1, 3, 23, 59, 59), None),
    ]
    # search_path picks the namespace of bare names; transactions are accepted.
    with connect(pg_floe, options="-c search_path=shop") as conn:
        with conn.transaction():
            assert conn.execute("SELECT count(*) AS n FROM items").fetchone() == (3,)
        cursor = conn.execute("SELECT sum(id) AS total, max(name) AS top FROM items")
        assert [c.name for c in cursor.description] == ["total", "top"]
        assert cursor.fetchone() == (6, "cy")


def test_psql_runs_statements(pg_floe):
    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql is not installed (scripts/setup-postgres.sh installs it)")
    env = dict(os.environ, PGPASSWORD=ROOT_SECRET)
    out = subprocess.run(
        [psql, "-h", "127.0.0.1", "-p", str(pg_floe.pg_port), "-U", ROOT_ID,
         "-d", pg_floe.warehouse, "-A", "-t", "-F", ",",
         "-c", "SELECT id, name FROM shop.items WHERE id < 3 ORDER BY id", "-c", "SELECT count(*) FROM shop.items"],
        env=env, capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1,ann", "2,", "3"]
    failed = subprocess.run(
        [psql, "-h", "127.0.0.1", "-p", str(pg_floe.pg_port), "-U", ROOT_ID, "-d", pg_floe.warehouse, "-c", "SELECT * FROM shop.nope"],
        env=env, capture_output=True, text=True, timeout=30,
    )
    assert failed.returncode != 0 and "not found" in failed.stderr


def test_credentials_and_read_data_are_enforced(pg_floe):
    with pytest.raises(psycopg.OperationalError, match="authentication failed"):
        connect(pg_floe, password="wrong")
    on_items = {"type": "table", "warehouse": pg_floe.warehouse, "namespace": ["shop"], "name": "items"}
    looker_id, looker_secret = make_principal(pg_floe, "pg-looker", [("read-metadata", on_items)])
    with connect(pg_floe, looker_id, looker_secret) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="read-data"):
            conn.execute("SELECT * FROM shop.items").fetchall()
    reader_id, reader_secret = make_principal(pg_floe, "pg-reader", [("read-data", on_items)])
    with connect(pg_floe, reader_id, reader_secret) as conn:
        assert conn.execute("SELECT count(*) FROM shop.items").fetchone() == (3,)
    # An access token works as the password too.
    with connect(pg_floe, reader_id, pg_floe.token(reader_id, reader_secret)) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    import time

    for _ in range(50):
        records = pg_floe.api("GET", "/api/v1/audit?action=SQL%20(PostgreSQL%20wire)&limit=1000").json()["records"]
        if {r["principal"] for r in records} >= {"pg-looker", "pg-reader"}:
            break
        time.sleep(0.1)
    looker = [r for r in records if r["principal"] == "pg-looker"]
    assert looker and looker[0]["decision"] == "deny" and "shop.items" in looker[0]["details"]
    # Sign-ins are audited too, the refused one as a denial under the user name presented.
    logins = pg_floe.api("GET", "/api/v1/audit?action=LOGIN%20(PostgreSQL%20wire)&limit=1000").json()["records"]
    assert any(r["principal"] == f"client:{ROOT_ID}" and r["status"] == 401 and r["decision"] == "deny" for r in logins)
    assert any(r["principal"] == "pg-reader" and r["status"] == 200 and r["client"] == "127.0.0.1" for r in logins)


def test_writes_over_the_extended_protocol_run_once(pg_floe):
    # psycopg parses, describes and then executes each statement: describing must not run it.
    with connect(pg_floe) as conn:
        conn.execute("CREATE TABLE shop.made (id BIGINT)")
        conn.execute("INSERT INTO shop.made VALUES (1), (2)")
        assert conn.execute("SELECT count(*) FROM shop.made").fetchone() == (2,)
    assert len(pg_floe.pyiceberg().load_table("shop.made").snapshots()) == 1


def test_statement_parameters(pg_floe):
    """psycopg binds values server-side ($1, $2 in the extended protocol), in text and in
    binary format; a value that does not fit its use is refused with SQLSTATE 22P02."""
    with connect(pg_floe) as conn:
        rows = conn.execute(
            "SELECT id, name FROM shop.items WHERE id >= %s AND name <> %s ORDER BY id", (1, "cy")
        ).fetchall()
        assert rows == [(1, "ann")]
        assert conn.execute("SELECT count(*) FROM shop.items WHERE day = %s", (datetime.date(2026, 1, 2),)).fetchone() == (1,)
        assert conn.execute(
            "SELECT id FROM shop.items WHERE at > %s ORDER BY id", (datetime.datetime(2026, 1, 2),)
        ).fetchall() == [(3,)]
        assert conn.execute("SELECT id FROM shop.items WHERE price = %s", (decimal.Decimal("20.00"),)).fetchall() == [(2,)]
        assert conn.execute("SELECT id FROM shop.items WHERE score > %s ORDER BY id", (2.0,)).fetchall() == [(2,)]
        assert conn.execute("SELECT count(*) FROM shop.items WHERE name = %s", (None,)).fetchone() == (0,)
        # Binary parameters.
        cursor = conn.cursor(binary=True)
        assert cursor.execute("SELECT name FROM shop.items WHERE id = %b", (3,)).fetchall() == [("cy",)]
        # Writes take parameters too.
        conn.execute("CREATE TABLE shop.notes (id BIGINT, body VARCHAR)")
        conn.execute("INSERT INTO shop.notes VALUES (%s, %s), (%s, %s)", (1, "one", 2, "it's two"))
        assert conn.execute("SELECT body FROM shop.notes ORDER BY id").fetchall() == [("one",), ("it's two",)]
    with connect(pg_floe) as conn:
        with pytest.raises(psycopg.errors.InvalidTextRepresentation, match=r"parameter \$1"):
            conn.execute("SELECT count(*) FROM shop.items WHERE id = %s", ("not a number",))
