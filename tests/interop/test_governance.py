"""Non-root principals through real clients: what a principal may read, it reads; what it may
not write, it cannot (403)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError


def make_principal(floe, name: str, grants: list[tuple[str, dict]]) -> tuple[str, str]:
    created = floe.api("POST", "/api/v1/principals", json={"name": name, "kind": "service"})
    assert created.status_code == 201, created.text
    credentials = created.json()["credentials"]
    role = f"{name}-role"
    assert floe.api("POST", "/api/v1/roles", json={"name": role}).status_code == 201
    assert floe.api("POST", f"/api/v1/roles/{role}/members", json={"principal": name}).status_code == 204
    for privilege, on in grants:
        answer = floe.api("POST", "/api/v1/grants", json={"role": role, "privilege": privilege, "on": on})
        assert answer.status_code == 204, answer.text
    return credentials["client-id"], credentials["client-secret"]


def test_read_only_principal_reads_but_cannot_commit(floe):
    root = floe.pyiceberg()
    root.create_namespace("sales")
    table = root.create_table("sales.orders", schema=pa.schema([("id", pa.int64()), ("city", pa.string())]))
    table.append(pa.table({"id": [1, 2, 3], "city": ["oslo", "lima", "pune"]}))
    root.create_table("sales.secret", schema=pa.schema([("id", pa.int64())]))

    on_orders = {"type": "table", "warehouse": "default", "namespace": ["sales"], "name": "orders"}
    reader_id, reader_secret = make_principal(floe, "analyst", [("read-data", on_orders)])
    reader = floe.pyiceberg(reader_id, reader_secret)
    orders = reader.load_table("sales.orders")
    assert sorted(orders.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert reader.list_tables("sales") == [("sales", "orders")], "listings show only what it may see"
    with pytest.raises(NoSuchTableError):
        reader.load_table("sales.secret")
    with pytest.raises(ForbiddenError):
        orders.append(pa.table({"id": [4], "city": ["rome"]}))
    assert len(root.load_table("sales.orders").scan().to_arrow()) == 3

    writer_id, writer_secret = make_principal(floe, "loader", [("write-data", on_orders)])
    writer = floe.pyiceberg(writer_id, writer_secret)
    writer.load_table("sales.orders").append(pa.table({"id": [4], "city": ["rome"]}))
    assert len(root.load_table("sales.orders").scan().to_arrow()) == 4

    # DuckDB with the read-only principal's credentials reads the same rows.
    from test_duckdb import attach

    con = attach(floe, reader_id, reader_secret)
    assert con.execute("SELECT count(*) FROM floe.sales.orders").fetchone()[0] == 4
    import duckdb

    def refused_commits(at_least: int) -> int:
        # Audit records of requests that change nothing are written just after the response.
        for _ in range(50):
            records = floe.api("GET", "/api/v1/audit?principal=analyst&decision=deny&limit=1000").json()["records"]
            # PyIceberg commits to the table's path, DuckDB through /transactions/commit.
            refused = [r for r in records if r["status"] == 403 and r["action"].startswith("POST ")]
            if len(refused) >= at_least:
                return len(refused)
            time.sleep(0.1)
        return len(refused)

    by_pyiceberg = refused_commits(1)
    assert by_pyiceberg >= 1
    with pytest.raises(duckdb.Error, match="403|Forbidden|lacks the write-data"):
        con.execute("INSERT INTO floe.sales.orders VALUES (5, 'kyiv')")
    assert len(root.load_table("sales.orders").scan().to_arrow()) == 4
    # The server refused DuckDB's commit itself with a 403.
    assert refused_commits(by_pyiceberg + 1) > by_pyiceberg
