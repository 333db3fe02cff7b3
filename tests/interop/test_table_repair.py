"""`floe table check` and `floe table repair` on tables broken on purpose behind the catalog's
back — a deleted data file, a deleted manifest, a truncated metadata file: the check names
the damage, a dry run changes nothing, the repair mends it with a new commit, and PyIceberg and
DuckDB read the table again. A principal without `manage-maintenance` can do neither."""

from __future__ import annotations

import json
import os
import subprocess
from urllib.parse import urlparse

import pyarrow as pa
from conftest import FLOE_BIN, ROOT_ID, ROOT_SECRET
from test_governance import make_principal


def local(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file:") else uri


def make_table(floe, name: str, appends: int):
    catalog = floe.pyiceberg()
    try:
        catalog.create_namespace("fix")
    except Exception:
        pass
    table = catalog.create_table(f"fix.{name}", schema=pa.schema([("id", pa.int64()), ("batch", pa.int64())]))
    for batch in range(appends):
        table.append(pa.table({"id": [batch * 10 + i for i in range(10)], "batch": [batch] * 10}))
    return catalog.load_table(f"fix.{name}")


def call(floe, kind: str, name: str, token: str | None = None, **options) -> dict:
    body = {"warehouse": floe.warehouse, "namespace": ["fix"], "table": name, **options}
    answer = floe.api("POST", f"/api/v1/tables/{kind}", token=token, json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def damages(report: dict) -> set[str]:
    return {f["damage"] for f in report["findings"] if f["damage"] != "unreferenced-file"}


def batches(floe, name: str) -> list[int]:
    table = floe.pyiceberg().load_table(f"fix.{name}")
    return sorted(set(table.scan().to_arrow()["batch"].to_pylist()))


def cli(floe, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLOE_CLIENT_ID=ROOT_ID, FLOE_CLIENT_SECRET=ROOT_SECRET)
    return subprocess.run([FLOE_BIN, "table", *args, "--server", floe.base], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_deleted_data_file_is_found_and_its_reference_dropped(floe):
    table = make_table(floe, "lost_file", appends=3)
    files = table.inspect.files().to_pylist()
    victim = next(f["file_path"] for f in files if f["record_count"] == 10)
    healthy = call(floe, "check", "lost_file", deep=True)
    assert healthy["healthy"], healthy
    assert healthy["files-checked"] == 3
    os.remove(local(victim))

    report = call(floe, "check", "lost_file")
    assert not report["healthy"] and damages(report) == {"missing-file"}, report
    assert [f["path"] for f in report["findings"]] == [victim]
    checked = cli(floe, "check", floe.warehouse, "fix.lost_file")
    assert checked.returncode == 1 and "missing-file" in checked.stdout, checked.stderr

    dry = call(floe, "repair", "lost_file")
    assert dry["dry-run"] and [a["action"] for a in dry["actions"]] == ["drop-missing-files"], dry
    assert not call(floe, "check", "lost_file")["healthy"], "a dry run changes nothing"

    applied = cli(floe, "repair", floe.warehouse, "fix.lost_file", "--apply")
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["after"]["healthy"], applied.stdout
    left = batches(floe, "lost_file")
    assert len(left) == 2 and set(left) < {0, 1, 2}, left
    from test_duckdb import attach

    con = attach(floe)
    assert con.execute("SELECT count(*) FROM floe.fix.lost_file").fetchone()[0] == 20
    # The repair is on the audit trail, with its outcome, and its records say what it was
    # about: the table, whether it was a dry run, and what it changed.
    audit = floe.api("GET", "/api/v1/audit?limit=1000").json()["records"]
    repairs = [r for r in audit if r["resource"].endswith("/api/v1/tables/repair")]
    assert any(r["status"] == 200 for r in repairs), audit[-3:]
    details = [json.loads(r["details"]) for r in repairs]
    assert all(d.get("table") == "fix.lost_file" for d in details), details
    dry_records = [d for d in details if d["dry-run"]]
    assert dry_records and all(a["action"] == "drop-missing-files" for a in dry_records[0]["actions"]), details
    applied_records = [d for d in details if not d["dry-run"]]
    # The record committed with the change, and the one that follows it with what changed.
    assert any("follows-record" not in d for d in applied_records), details
    assert any(
        [a["action"] for a in d.get("actions", [])] == ["drop-missing-files"] and "follows-record" in d
        for d in applied_records
    ), details


def test_a_deleted_manifest_rolls_main_back_to_the_last_readable_snapshot(floe):
    table = make_table(floe, "lost_manifest", appends=3)
    manifests = table.inspect.manifests().to_pylist()
    newest = next(m for m in manifests if m["added_snapshot_id"] == table.current_snapshot().snapshot_id)
    os.remove(local(newest["path"]))

    report = call(floe, "check", "lost_manifest")
    assert damages(report) == {"unreadable-manifest"}, report
    repaired = call(floe, "repair", "lost_manifest", **{"dry-run": False})
    assert [a["action"] for a in repaired["actions"]] == ["roll-back"], repaired
    assert repaired["after"]["healthy"], repaired["after"]
    assert batches(floe, "lost_manifest") == [0, 1]


def test_a_truncated_metadata_file_is_replaced_by_the_last_readable_one(floe):
    table = make_table(floe, "torn_metadata", appends=2)
    current = local(table.metadata_location)
    with open(current, "rb") as f:
        whole = f.read()
    with open(current, "wb") as f:
        f.write(whole[: len(whole) // 2])

    report = call(floe, "check", "torn_metadata")
    assert damages(report) == {"unreadable-metadata"}, report
    assert report["readable-earlier-metadata"], report
    # Once the check has seen it torn, loading the table fails plainly too.
    loaded = floe.api("GET", f"/catalog/v1/{floe.warehouse}/namespaces/fix/tables/torn_metadata")
    assert loaded.status_code >= 400, loaded.text
    repaired = call(floe, "repair", "torn_metadata", **{"dry-run": False})
    assert [a["action"] for a in repaired["actions"]] == ["repoint-metadata"], repaired
    assert repaired["after"]["healthy"], repaired["after"]
    assert batches(floe, "torn_metadata") == [0]
    # The table takes commits again.
    again = floe.pyiceberg().load_table("fix.torn_metadata")
    again.append(pa.table({"id": [99], "batch": [7]}))
    assert batches(floe, "torn_metadata") == [0, 7]


def test_checks_and_repairs_need_manage_maintenance(floe):
    make_table(floe, "guarded", appends=1)
    on = {"type": "table", "warehouse": floe.warehouse, "namespace": ["fix"], "name": "guarded"}
    reader = floe.token(*make_principal(floe, "repair-reader", [("read-data", on)]))
    nobody = floe.token(*make_principal(floe, "repair-nobody", []))
    body = {"warehouse": floe.warehouse, "namespace": ["fix"], "table": "guarded", "dry-run": False}
    assert floe.api("POST", "/api/v1/tables/repair", token=reader, json=body).status_code == 403
    assert floe.api("POST", "/api/v1/tables/repair", token=nobody, json=body).status_code == 404
    check = {k: v for k, v in body.items() if k != "dry-run"}
    assert floe.api("POST", "/api/v1/tables/check", token=nobody, json=check).status_code == 404
    mixed = floe.api("POST", "/api/v1/tables/check", json={**check, "dry-run": True})
    assert mixed.status_code == 400 and "dry-run" in mixed.text
