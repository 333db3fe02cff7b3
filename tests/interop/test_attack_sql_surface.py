"""Attacks on the SQL surface through all three doors (HTTP JSON, PostgreSQL wire, Flight SQL):
statements that would write files, read the server's files, change the session or rewrite a
table outside Iceberg commits are refused (406 / SQLSTATE 0A000 / Flight NOT_IMPLEMENTED), no
file appears, the catalog database and the victim stay intact; the statements Floe does run
keep working for a principal allowed to run them."""

from __future__ import annotations

import sqlite3

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import psycopg
import pytest
from attack_helpers import (
    VICTIM_ROWS,
    assert_alive,
    assert_victim_untouched,
    make_sandboxer,
    make_victim,
    sql,
    tables_url,
)
from conftest import ROOT_ID, ROOT_SECRET


def refused_statements(floe, victim, targets) -> list[str]:
    """Statements outside the allow-list; each file they name is one of `targets` (which must
    not exist afterwards)."""
    warehouse_id = floe.api("GET", f"/api/v1/warehouses/{floe.warehouse}").json()["id"]
    victim_data = f"{victim.location}/data/"
    return [
        f"COPY (SELECT 1 AS x) TO '{targets[0]}' STORED AS CSV",
        f"COPY (SELECT * FROM finance.ledger) TO 'floe://wh-{warehouse_id}/finance/stolen.csv' STORED AS CSV",
        f"COPY finance.ledger TO '{targets[1]}' STORED AS PARQUET",
        "CREATE EXTERNAL TABLE pw (line VARCHAR) STORED AS CSV LOCATION '/etc/passwd'",
        f"CREATE EXTERNAL TABLE peek STORED AS PARQUET LOCATION '{victim_data}'",
        "CREATE VIEW sneaky AS SELECT * FROM finance.ledger",
        "DELETE FROM finance.ledger",
        "UPDATE finance.ledger SET cents = 0",
        "TRUNCATE finance.ledger",
        "DROP SCHEMA finance CASCADE",
        f"EXPLAIN COPY (SELECT 1 AS x) TO '{targets[2]}' STORED AS CSV",
        f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{targets[3]}' STORED AS CSV",
        "PREPARE p AS SELECT * FROM finance.ledger",
        "EXECUTE p",
    ]


# `SET` is answered by the PostgreSQL door itself (drivers send it); see the PostgreSQL test.
SET_STATEMENT = "SET datafusion.execution.batch_size = 1"
# Reads of server files by URL: URL tables are off, so they fail as unknown tables.
URL_READS = ["SELECT * FROM '/etc/passwd'", "DESCRIBE '/etc/passwd'", "SELECT * FROM '/etc/hostname'"]


def assert_catalog_intact(floe, victim) -> None:
    """The catalog database is a sound SQLite file and the catalog still lists the victim."""
    db = floe.data_dir / "catalog.db"
    assert db.is_file()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA quick_check").fetchone() == ("ok",)
    listed = floe.api("GET", tables_url(floe, "finance"))
    assert listed.status_code == 200, listed.text
    assert {"namespace": ["finance"], "name": "ledger"} in listed.json()["identifiers"]
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def file_targets(tmp_path, door: str) -> list:
    targets = [tmp_path / f"{door}-copy-{i}.csv" for i in range(4)]
    assert not any(t.exists() for t in targets)
    return targets


def assert_no_files(targets, floe) -> None:
    assert not any(t.exists() for t in targets), [str(t) for t in targets if t.exists()]
    # Nothing was written into the warehouse through the floe:// store either.
    assert not (floe.data_dir / "warehouse" / "finance" / "stolen.csv").exists()


def test_http_refuses_statements_outside_the_allow_list(floe, tmp_path):
    victim = make_victim(floe)
    targets = file_targets(tmp_path, "http")
    for statement in [*refused_statements(floe, victim, targets), SET_STATEMENT]:
        answer = sql(floe, statement)
        assert answer.status_code == 406, (statement, answer.status_code, answer.text)
        assert answer.json()["error"]["type"] == "UnsupportedOperationException", statement
        assert "is not supported" in answer.json()["error"]["message"], statement
    # A second statement cannot ride behind an allowed one.
    answer = sql(floe, f"SELECT 1; COPY (SELECT 1 AS x) TO '{targets[0]}' STORED AS CSV")
    assert answer.status_code == 406, answer.text
    for statement in URL_READS:
        answer = sql(floe, statement)
        assert answer.status_code in (400, 406), (statement, answer.text)
        assert "root:" not in answer.text, statement
        assert "not found" in answer.text or "is not supported" in answer.text, (statement, answer.text)
    assert_no_files(targets, floe)
    assert_catalog_intact(floe, victim)


def pg_connect(floe, user: str = ROOT_ID, password: str = ROOT_SECRET):
    return psycopg.connect(
        host="127.0.0.1", port=floe.pg_port, user=user, password=password, dbname=floe.warehouse,
        connect_timeout=10, autocommit=True,
    )


def test_postgres_wire_refuses_statements_outside_the_allow_list(floe, tmp_path):
    victim = make_victim(floe)
    targets = file_targets(tmp_path, "pg")
    with pg_connect(floe) as conn:
        for statement in refused_statements(floe, victim, targets):
            with pytest.raises(psycopg.Error) as refused:
                conn.execute(statement)
            assert refused.value.sqlstate == "0A000", (statement, refused.value.sqlstate, str(refused.value))
        for statement in URL_READS:
            with pytest.raises(psycopg.Error) as refused:
                conn.execute(statement).fetchall()
            assert "root:" not in str(refused.value), statement
        # The simple protocol runs a query string's statements one after another: the COPY
        # behind the SELECT is refused all the same.
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(f"SELECT 1; COPY (SELECT 1 AS x) TO '{targets[0]}' STORED AS CSV", prepare=False)
        assert refused.value.sqlstate == "0A000"
        # SET is either refused or, answered by the door for drivers' sake, changes nothing.
        before = conn.execute("SHOW datafusion.execution.batch_size").fetchall()
        try:
            conn.execute(SET_STATEMENT)
        except psycopg.Error as e:
            assert e.sqlstate == "0A000", str(e)
        assert conn.execute("SHOW datafusion.execution.batch_size").fetchall() == before
        assert conn.execute("SELECT count(*) FROM finance.ledger").fetchone() == (len(VICTIM_ROWS),)
    assert_no_files(targets, floe)
    assert_catalog_intact(floe, victim)


def test_flight_sql_refuses_statements_outside_the_allow_list(floe, tmp_path):
    victim = make_victim(floe)
    targets = file_targets(tmp_path, "flight")
    db_kwargs = {"username": ROOT_ID, "password": ROOT_SECRET}
    with flight_sql.connect(f"grpc://127.0.0.1:{floe.flight_port}", db_kwargs=db_kwargs, autocommit=True) as conn:
        for statement in [*refused_statements(floe, victim, targets), SET_STATEMENT]:
            with conn.cursor() as cursor:
                with pytest.raises(adbc_driver_manager.Error) as refused:
                    cursor.execute(statement)
                    cursor.fetchall()
            assert isinstance(refused.value, adbc_driver_manager.NotSupportedError), (statement, str(refused.value))
            assert "is not supported" in str(refused.value), statement
        for statement in URL_READS:
            with conn.cursor() as cursor:
                with pytest.raises(adbc_driver_manager.Error) as refused:
                    cursor.execute(statement)
                    cursor.fetchall()
            assert "root:" not in str(refused.value), statement
        with conn.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM finance.ledger")
            assert cursor.fetchone() == (len(VICTIM_ROWS),)
    assert_no_files(targets, floe)
    assert_catalog_intact(floe, victim)


def test_allowed_statements_still_run_for_a_principal_allowed_to(floe):
    victim = make_victim(floe)
    attacker = make_sandboxer(floe)

    def ok(statement: str, token: str | None = None) -> list[dict]:
        answer = sql(floe, statement, token)
        assert answer.status_code == 200, (statement, answer.text)
        return answer.json()["rows"]

    ok("CREATE SCHEMA scratch")
    ok("CREATE TABLE sandbox.mine (id BIGINT, note VARCHAR)", attacker.token)
    ok("INSERT INTO sandbox.mine VALUES (1, 'a'), (2, 'b')", attacker.token)
    ok("CREATE TABLE sandbox.doubled AS SELECT id * 2 AS id FROM sandbox.mine", attacker.token)
    assert ok("SELECT sum(id) AS s FROM sandbox.doubled", attacker.token) == [{"s": 6}]
    plan = ok("EXPLAIN SELECT * FROM sandbox.mine WHERE id > 1", attacker.token)
    assert any("mine" in row["plan"] for row in plan)
    assert ok("SELECT count(*) AS n FROM generate_series(1, 10)", attacker.token) == [{"n": 10}]
    # The sandboxer reaches nothing outside its namespace through SQL either.
    for statement in (
        "SELECT * FROM finance.ledger",
        "CREATE TABLE sandbox.stolen AS SELECT * FROM finance.ledger",
        "INSERT INTO finance.ledger VALUES (99, 'mallory', 1)",
        "INSERT INTO sandbox.mine SELECT id, account FROM finance.ledger",
        "DROP TABLE finance.ledger",
    ):
        answer = sql(floe, statement, attacker.token)
        # Refused, or the table is not even visible to it (planning fails: not found).
        refused = answer.status_code == 403 or (answer.status_code in (400, 404) and ("not found" in answer.text or "does not exist" in answer.text))
        assert refused, (statement, answer.status_code, answer.text)
        assert "umbrella" not in answer.text
    assert floe.api("GET", tables_url(floe, "sandbox", "stolen")).status_code == 404
    ok("DROP TABLE sandbox.doubled")
    assert floe.api("GET", tables_url(floe, "sandbox", "doubled")).status_code == 404
    assert floe.api("HEAD", f"/catalog/v1/{floe.warehouse}/namespaces/scratch").status_code == 204
    assert_victim_untouched(floe, victim)
    assert_alive(floe)
