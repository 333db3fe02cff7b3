"""Soft delete, undrop and deletion protection with real clients: PyIceberg drops a table in a
warehouse that keeps dropped tables, it is hidden (404, unlisted, its name free), the management
API lists and undrops it with its own table-uuid and rows (read back by PyIceberg and by Floe's
SQL), a principal holding nothing sees and undrops nothing, a protected table refuses drop and
purge with a 409 naming the flag until an admin clears it, the retention's end purges the files
through the maintenance job, and every step is in the audit trail."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyiceberg.exceptions import NamespaceNotEmptyError, NoSuchTableError, RESTError, TableAlreadyExistsError

from test_governance import make_principal

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "city": pa.array(["oslo", "lima", "pune"])})


def files_under(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()] if directory.exists() else []


def set_retention(floe, seconds: int) -> None:
    answer = floe.api("PUT", f"/api/v1/warehouses/{floe.warehouse}/soft-delete", json={"retention-seconds": seconds})
    assert answer.status_code == 200, answer.text
    assert answer.json()["retention-seconds"] == seconds


def dropped(floe, token: str | None = None, namespace: str | None = None) -> list[dict]:
    query = f"?namespace={namespace}" if namespace else ""
    answer = floe.api("GET", f"/api/v1/warehouses/{floe.warehouse}/dropped{query}", token=token)
    assert answer.status_code == 200, answer.text
    return answer.json()["dropped"]


def protect(floe, on: dict, protected: bool, token: str | None = None):
    return floe.api("PUT", "/api/v1/protection", token=token, json={"on": on, "protected": protected})


def sql_count(floe, table: str) -> int:
    answer = floe.api("POST", "/api/v1/sql", json={"sql": f"SELECT count(*) AS n FROM {table}"})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"][0]["n"]


def audit_records(floe, wanted, at_least: int = 1) -> list[dict]:
    """Records for which `wanted(record)` holds; waits for those the writer appends after the
    response (requests that change nothing)."""
    found: list[dict] = []
    for _ in range(50):
        records = floe.api("GET", "/api/v1/audit?limit=1000").json()["records"]
        found = [r for r in records if wanted(r)]
        if len(found) >= at_least:
            return found
        time.sleep(0.1)
    return found


def test_drop_hides_then_undrop_restores_the_same_table(floe):
    set_retention(floe, 3600)
    catalog = floe.pyiceberg()
    catalog.create_namespace("shop")
    table = catalog.create_table("shop.orders", schema=ROWS.schema)
    table.append(ROWS)
    table_uuid = str(table.metadata.table_uuid)
    location = urlparse(table.metadata.location).path

    catalog.purge_table("shop.orders")
    with pytest.raises(NoSuchTableError):
        catalog.load_table("shop.orders")
    assert ("shop", "orders") not in catalog.list_tables("shop")
    assert files_under(Path(location)), "files stay while the table is kept"
    [entry] = dropped(floe, namespace="shop")
    assert (entry["namespace"], entry["name"], entry["kind"]) == (["shop"], "orders", "table")
    assert entry["purge-requested"] is True and entry["dropped-by"] == "root"

    # A principal holding nothing sees no dropped table and undrops none.
    nobody_id, nobody_secret = make_principal(floe, "nobody", [])
    nobody = floe.token(nobody_id, nobody_secret)
    listing = floe.api("GET", f"/api/v1/warehouses/{floe.warehouse}/dropped", token=nobody)
    assert listing.status_code == 404 or listing.json()["dropped"] == [], listing.text
    refused = floe.api("POST", f"/api/v1/warehouses/{floe.warehouse}/dropped/{entry['id']}/undrop", token=nobody)
    assert refused.status_code == 404, refused.text
    # One that reads the namespace, but may not drop in it, sees nothing either.
    reader_id, reader_secret = make_principal(
        floe, "reader", [("read-data", {"type": "namespace", "warehouse": "default", "namespace": ["shop"]})]
    )
    reader = floe.token(reader_id, reader_secret)
    assert dropped(floe, token=reader) == []
    denied = floe.api("POST", f"/api/v1/warehouses/{floe.warehouse}/dropped/{entry['id']}/undrop", token=reader)
    assert denied.status_code == 403, denied.text

    # The name is free; while a new table holds it, the undrop is refused.
    squatter = catalog.create_table("shop.orders", schema=ROWS.schema)
    assert str(squatter.metadata.table_uuid) != table_uuid
    conflict = floe.api("POST", f"/api/v1/warehouses/{floe.warehouse}/dropped/{entry['id']}/undrop")
    assert conflict.status_code == 409, conflict.text
    assert "exists" in conflict.json()["error"]["message"]
    catalog.drop_table("shop.orders")

    undone = floe.api("POST", f"/api/v1/warehouses/{floe.warehouse}/dropped/{entry['id']}/undrop")
    assert undone.status_code == 200, undone.text
    back = catalog.load_table("shop.orders")
    assert str(back.metadata.table_uuid) == table_uuid
    assert sorted(back.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert sql_count(floe, "default.shop.orders") == 3
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("shop.orders", schema=ROWS.schema)

    undrops = audit_records(floe, lambda r: r["action"].endswith("/dropped/{id}/undrop"), at_least=4)
    outcomes = sorted(r["status"] for r in undrops)
    assert 200 in outcomes and 409 in outcomes and 403 in outcomes, outcomes
    drops = audit_records(floe, lambda r: r["action"].startswith("DELETE ") and "soft-delete" in r["details"])
    assert drops, "the drop's record says it was kept"


def test_protection_refuses_drop_and_purge_until_an_admin_clears_it(floe):
    set_retention(floe, 3600)
    catalog = floe.pyiceberg()
    catalog.create_namespace("fin")
    catalog.create_table("fin.ledger", schema=ROWS.schema).append(ROWS)
    on_table = {"type": "table", "warehouse": "default", "namespace": ["fin"], "name": "ledger"}

    # Only a holder of manage-warehouses sets the flag.
    dropper_id, dropper_secret = make_principal(
        floe, "dropper", [("drop-table", {"type": "namespace", "warehouse": "default", "namespace": ["fin"]})]
    )
    dropper = floe.token(dropper_id, dropper_secret)
    assert protect(floe, on_table, True, token=dropper).status_code == 403
    answer = protect(floe, on_table, True)
    assert answer.status_code == 200 and answer.json()["protected"] is True, answer.text

    for purge in (False, True):
        with pytest.raises(RESTError, match="deletion-protection is set on table fin.ledger"):
            catalog.drop_table("fin.ledger", purge_requested=purge)
    refused = floe.api("DELETE", "/catalog/v1/default/namespaces/fin/tables/ledger?purgeRequested=true", token=dropper)
    assert refused.status_code == 409 and refused.json()["error"]["type"] == "DeletionProtectedException"
    assert sql_count(floe, "default.fin.ledger") == 3

    # A dropped table under a protected namespace: its purge is refused too.
    catalog.create_table("fin.scratch", schema=ROWS.schema)
    catalog.purge_table("fin.scratch")
    [scratch] = dropped(floe, namespace="fin")
    on_namespace = {"type": "namespace", "warehouse": "default", "namespace": ["fin"]}
    assert protect(floe, on_namespace, True).status_code == 200
    purge = floe.api("POST", f"/api/v1/warehouses/{floe.warehouse}/dropped/{scratch['id']}/purge")
    assert purge.status_code == 409, purge.text
    assert "deletion-protection is set on namespace fin" in purge.json()["error"]["message"]
    # PyIceberg names every 409 of a namespace drop NamespaceNotEmptyError; the message says why.
    with pytest.raises(NamespaceNotEmptyError, match="deletion-protection is set on namespace fin"):
        catalog.drop_namespace("fin")

    # Cleared by the admin: the drop and the purge go through.
    assert protect(floe, on_namespace, False).json()["changed"] is True
    assert protect(floe, on_table, False).json()["drops-refused"] is False
    purged = floe.api("POST", f"/api/v1/warehouses/{floe.warehouse}/dropped/{scratch['id']}/purge")
    assert purged.status_code == 200 and purged.json()["files-deleted"] is True, purged.text
    catalog.drop_table("fin.ledger")
    with pytest.raises(NoSuchTableError):
        catalog.load_table("fin.ledger")

    flags = audit_records(floe, lambda r: r["action"] == "PUT /api/v1/protection", at_least=5)
    assert sorted(r["status"] for r in flags) == [200, 200, 200, 200, 403]
    refusals = audit_records(floe, lambda r: r["status"] == 409 and r["action"].startswith("DELETE "), at_least=3)
    assert len(refusals) >= 3


def test_retention_end_purges_files_through_the_maintenance_job(floe):
    set_retention(floe, 1)
    catalog = floe.pyiceberg()
    catalog.create_namespace("tmp")
    table = catalog.create_table("tmp.events", schema=ROWS.schema)
    table.append(ROWS)
    location = Path(urlparse(table.metadata.location).path)
    kept = catalog.create_table("tmp.kept", schema=ROWS.schema)
    kept.append(ROWS)
    kept_location = Path(urlparse(kept.metadata.location).path)

    catalog.purge_table("tmp.events")
    catalog.drop_table("tmp.kept")  # no purge asked: its files stay when it expires
    assert len(dropped(floe)) == 2
    deadline = time.time() + 60
    while dropped(floe) and time.time() < deadline:
        time.sleep(0.5)
    assert dropped(floe) == [], "the purge jobs ended the retention"
    assert not files_under(location), "the purged table's files are gone"
    assert files_under(kept_location), "a drop without purge keeps its files"
    jobs = floe.api("GET", f"/api/v1/jobs?warehouse={floe.warehouse}&kind=purge-dropped").json()["jobs"]
    assert len(jobs) == 2 and all(j["status"] == "succeeded" for j in jobs), jobs

    records = audit_records(floe, lambda r: r["action"] == "JOB purge-dropped", at_least=2)
    assert {r["resource"] for r in records} == {"default/tmp/events", "default/tmp/kept"}
    assert all(r["principal"] == "system" for r in records)
