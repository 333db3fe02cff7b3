"""Upsert tables (issue 39): a table with a key takes rows that replace the rows of their keys
and deletes by key, committed as data files plus position deletes in one snapshot. Floe's SQL,
PyIceberg and DuckDB read the newest row per key; the key index survives a restart and a
compaction (built again from the table); bad requests are refused by name."""

from __future__ import annotations

from conftest import restart_floe
from test_compaction import run_job
from test_ingest import ndjson, post

NDJSON = "application/x-ndjson"


def upsert(floe, table: str, rows: list[dict], **params):
    answer = post(floe, table, ndjson(rows), NDJSON, wait="commit", **params)
    assert answer.status_code == 200, answer.text
    assert answer.json()["committed"] is True, answer.text
    return answer


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
    assert snapshot.summary.operation.value == "overwrite"
    assert snapshot.summary["added-position-deletes"] == "1"

    # A key deleted and written again in one request comes back; one written and deleted
    # is gone.
    upsert(floe, table, [{"id": 1}], op="delete")
    upsert(floe, table, [{"id": 1, "name": "again", "score": 1.5}, {"id": 7, "name": "n7", "score": 7.0}])
    upsert(floe, table, [{"id": 7}], op="delete")
    expected[0] = (1, "again", 1.5)
    assert every_reader(floe, table) == expected

    # The key index lives in memory: after a restart it is built again from the table (its
    # key column less its position deletes), and the next upsert replaces the right rows.
    restart_floe(floe, tmp_path)
    upsert(floe, table, [{"id": 2, "name": "two again", "score": 2.5}])
    expected[1] = (2, "two again", 2.5)
    assert every_reader(floe, table) == expected

    # Compaction folds the deletes into new files; the index follows the new files.
    result = run_job(floe, "up", "users", "compact")
    assert result["groups-committed"] >= 1, result
    assert floe_rows(floe, table) == expected
    upsert(floe, table, [{"id": 3, "name": "after compaction", "score": 3.5}])
    expected[2] = (3, "after compaction", 3.5)
    assert every_reader(floe, table) == expected


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
    assert "not an operation" in refused("up.keyed", [{"id": 1}], op="merge")
    # A key must be given and cannot be null.
    refused("up.keyed", [{"name": "no key"}])
    refused("up.keyed", [{"id": None, "name": "null key"}])
    refused("up.keyed", [{"name": "no key"}], op="delete")
    # A floating-point key is no Iceberg key.
    assert "key" in refused("up.floats", [{"x": 1.5}], create="true", key="x")
    assert "not a column" in refused("up.missing", [{"x": 1}], create="true", key="y")
    # Nothing refused reached the table.
    answer = floe.api("POST", "/api/v1/sql", json={"sql": "SELECT id, name FROM up.keyed", "warehouse": floe.warehouse})
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == [{"id": 1, "name": "a"}]
