"""Attacks on sessions and sign-in: a PostgreSQL-wire session outlives neither its principal
being disabled nor its access token expiring; a query string of many statements runs them one
after another without starving others; a rotated signing key keeps honouring the tokens it
signed; a principal that may only list a namespace sees its tables (without columns) through
SQL listings and Flight SQL, and reads none of them."""

from __future__ import annotations

import time

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pytest
from attack_helpers import (
    assert_alive,
    assert_victim_untouched,
    make_victim,
    sql,
    tables_url,
    wait_for,
)
from conftest import start_floe, stop_floe
from test_governance import make_principal


def pg_connect(floe, user: str, password: str):
    return psycopg.connect(
        host="127.0.0.1", port=floe.pg_port, user=user, password=password, dbname=floe.warehouse,
        connect_timeout=10, autocommit=True,
    )


def refused_within(conn, seconds: float) -> psycopg.Error | None:
    """Runs `SELECT 1` on `conn` until a statement fails (returning its error) or `seconds`
    pass (returning None)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error as e:
            return e
        time.sleep(0.2)
    return None


def assert_session_ended(conn, error: psycopg.Error | None) -> None:
    assert error is not None, "the session kept running statements"
    assert error.sqlstate == "28000", (error.sqlstate, str(error))
    # The server closed the connection: nothing more runs on it.
    with pytest.raises(psycopg.Error):
        conn.execute("SELECT 1").fetchone()
    assert conn.closed or conn.broken


def victim_reader(floe, name: str) -> tuple[str, str]:
    on_ledger = {"type": "table", "warehouse": floe.warehouse, "namespace": ["finance"], "name": "ledger"}
    return make_principal(floe, name, [("read-data", on_ledger)])


def test_a_disabled_principals_postgres_session_ends_at_its_next_statement(floe):
    victim = make_victim(floe)
    client_id, secret = victim_reader(floe, "soon-gone")
    bystander = victim_reader(floe, "bystander")
    conn = pg_connect(floe, client_id, secret)
    assert conn.execute("SELECT count(*) FROM finance.ledger").fetchone() == (4,)
    disabled = floe.api("POST", "/api/v1/principals/soon-gone/disable")
    assert disabled.status_code in (200, 204), disabled.text
    assert_session_ended(conn, refused_within(conn, 5))
    with pytest.raises(psycopg.OperationalError):
        pg_connect(floe, client_id, secret)
    # Others are served throughout.
    with pg_connect(floe, *bystander) as other:
        assert other.execute("SELECT count(*) FROM finance.ledger").fetchone() == (4,)
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_a_postgres_session_signed_in_with_a_token_ends_when_the_token_expires(tmp_path):
    floe = start_floe(tmp_path, extra_args=("--token-ttl-secs", "3"))
    try:
        victim = make_victim(floe)
        client_id, secret = victim_reader(floe, "token-user")
        token = floe.token(client_id, secret)
        conn = pg_connect(floe, client_id, token)
        assert conn.execute("SELECT count(*) FROM finance.ledger").fetchone() == (4,)
        # The token lives 3 s; the session is re-checked per statement.
        assert_session_ended(conn, refused_within(conn, 3 + 5))
        with pytest.raises(psycopg.OperationalError):
            pg_connect(floe, client_id, token)
        # The client's secret still signs in.
        with pg_connect(floe, client_id, secret) as fresh:
            assert fresh.execute("SELECT 1").fetchone() == (1,)
        assert_victim_untouched(floe, victim)
        assert_alive(floe)
    finally:
        stop_floe(floe)


def test_many_statements_in_one_query_string_all_answer_and_others_are_served(floe):
    victim = make_victim(floe)
    client_id, secret = victim_reader(floe, "chatty")
    with pg_connect(floe, client_id, secret) as conn, pg_connect(floe, *victim_reader(floe, "quiet")) as other:
        cursor = conn.execute("SELECT 1;" * 9)
        results = [cursor.fetchall()]
        while cursor.nextset():
            results.append(cursor.fetchall())
        assert results == [[(1,)]] * 9
        mixed = conn.execute(
            "SELECT count(*) FROM finance.ledger; SELECT max(id) FROM finance.ledger; SELECT 'done'"
        )
        answers = [mixed.fetchall()]
        while mixed.nextset():
            answers.append(mixed.fetchall())
        assert answers == [[(4,)], [(4,)], [("done",)]]
        assert other.execute("SELECT sum(id) FROM finance.ledger").fetchone() == (10,)
        assert conn.execute("SELECT 2").fetchone() == (2,)
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def test_tokens_survive_a_signing_key_rotation(tmp_path):
    floe = start_floe(tmp_path, extra_args=("--token-ttl-secs", "5"))
    try:
        victim = make_victim(floe)
        client_id, secret = victim_reader(floe, "rotated")
        # The first signing key has been signing for longer than a token lives.
        time.sleep(6)
        token = floe.token(client_id, secret)
        rotated = floe.api("POST", "/api/v1/signing-keys/rotate")
        assert rotated.status_code in (200, 201, 204), rotated.text
        loaded = floe.api("GET", tables_url(floe, "finance", "ledger"), token=token)
        assert loaded.status_code == 200, loaded.text
        answer = sql(floe, "SELECT count(*) AS n FROM finance.ledger", token)
        assert answer.status_code == 200 and answer.json()["rows"] == [{"n": 4}], answer.text
        with pg_connect(floe, client_id, token) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # Tokens signed by the new key work too.
        fresh = floe.token(client_id, secret)
        assert floe.api("GET", tables_url(floe, "finance", "ledger"), token=fresh).status_code == 200
        # The old token still expires.
        expired = wait_for(lambda: floe.api("GET", tables_url(floe, "finance", "ledger"), token=token).status_code == 401, 10)
        assert expired
        assert_victim_untouched(floe, victim)
        assert_alive(floe)
    finally:
        stop_floe(floe)


def test_a_principal_that_may_only_list_sees_tables_but_not_their_columns_or_rows(floe):
    victim = make_victim(floe)
    floe.pyiceberg().create_namespace("hidden")
    floe.pyiceberg().create_table("hidden.plans", schema=victim_schema())
    on_finance = {"type": "namespace", "warehouse": floe.warehouse, "namespace": ["finance"]}
    client_id, secret = make_principal(floe, "lister", [("list-tables", on_finance)])
    token = floe.token(client_id, secret)

    def rows(statement: str) -> list[dict]:
        answer = sql(floe, statement, token)
        assert answer.status_code == 200, (statement, answer.text)
        return answer.json()["rows"]

    shown = {(r["table_schema"], r["table_name"]) for r in rows("SHOW TABLES")}
    assert ("finance", "ledger") in shown and ("hidden", "plans") not in shown, shown
    listed = {(r["table_schema"], r["table_name"])
              for r in rows("SELECT table_schema, table_name FROM information_schema.tables")}
    assert ("finance", "ledger") in listed and ("hidden", "plans") not in listed, listed
    assert rows("SELECT column_name FROM information_schema.columns WHERE table_name IN ('ledger', 'plans')") == []
    for statement in ("SELECT * FROM finance.ledger", "SELECT count(*) FROM finance.ledger", "DESCRIBE finance.ledger"):
        answer = sql(floe, statement, token)
        assert answer.status_code in (400, 403), (statement, answer.text)
        assert "umbrella" not in answer.text and "cents" not in answer.text, answer.text
    with pg_connect(floe, client_id, secret) as conn:
        assert ("default", "finance", "ledger", "BASE TABLE") in conn.execute("SHOW TABLES").fetchall()

    db_kwargs = {"username": client_id, "password": secret}
    with flight_sql.connect(f"grpc://127.0.0.1:{floe.flight_port}", db_kwargs=db_kwargs, autocommit=True) as conn:
        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    tables = {
        (schema["db_schema_name"], table["table_name"]): table
        for catalog in objects
        for schema in catalog["catalog_db_schemas"] or []
        for table in schema["db_schema_tables"] or []
    }
    assert ("finance", "ledger") in tables and ("hidden", "plans") not in tables, tables.keys()
    assert not tables[("finance", "ledger")]["table_columns"], "columns of an unreadable table"
    assert_victim_untouched(floe, victim)
    assert_alive(floe)


def victim_schema():
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("secret_plan", pa.string())])

